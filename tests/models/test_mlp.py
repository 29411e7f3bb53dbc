import pytest
import torch
from omegaconf import OmegaConf

from bdl.models import MLP
from bdl.models.convnet import ConvNet
from bdl.models.resnet20_frn import ResNet20FRN


@pytest.mark.parametrize(
    ("input_shape", "out_features"), [((1, 28, 28), 10), ((13,), 1), ((13,), 2)]
)
def test_mlp_output_shape(input_shape, out_features):
    model = MLP(input_shape=input_shape, out_features=out_features)
    assert model(torch.randn(5, *input_shape)).shape == (5, out_features)


def test_mlp_parameter_names_are_stable_and_readable():
    model = MLP(input_shape=(13,), out_features=1, hidden=[50, 20], activation="relu")
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert shapes == {
        "layers.0.weight": (50, 13),
        "layers.0.bias": (50,),
        "layers.2.weight": (20, 50),
        "layers.2.bias": (20,),
        "layers.4.weight": (1, 20),
        "layers.4.bias": (1,),
    }


def test_mlp_accepts_hydra_listconfig_and_empty_hidden():
    hidden = OmegaConf.create({"hidden": [7, 3]}).hidden
    model = MLP(input_shape=(4,), out_features=2, hidden=hidden, activation="tanh")
    assert [m.out_features for m in model.layers if isinstance(m, torch.nn.Linear)] == [7, 3, 2]
    linear = MLP(input_shape=(4,), out_features=2, hidden=[])
    assert len(linear.layers) == 1


# Each activation written from its definition, not with torch's own function.
DEFINITIONS = {
    "sigmoid": lambda z: 1 / (1 + torch.exp(-z)),
    "relu": lambda z: torch.where(z > 0, z, torch.zeros_like(z)),
    "tanh": lambda z: (torch.exp(z) - torch.exp(-z)) / (torch.exp(z) + torch.exp(-z)),
    "swish": lambda z: z / (1 + torch.exp(-z)),  # Ramachandran et al. (2017): z·σ(z)
}


@pytest.mark.parametrize("activation", sorted(DEFINITIONS))
def test_mlp_forward_is_affine_activation_affine(activation):
    torch.manual_seed(0)
    model = MLP(input_shape=(1, 2, 3), out_features=2, hidden=[5, 4], activation=activation)
    x = 2 * torch.randn(7, 1, 2, 3)
    h = x.reshape(7, 6).double()
    w = {name: p.detach().double() for name, p in model.named_parameters()}
    f = DEFINITIONS[activation]
    h = f(h @ w["layers.0.weight"].T + w["layers.0.bias"])
    h = f(h @ w["layers.2.weight"].T + w["layers.2.bias"])
    expected = h @ w["layers.4.weight"].T + w["layers.4.bias"]
    torch.testing.assert_close(model(x).double(), expected, rtol=1e-5, atol=1e-6)


def test_mlp_bad_activation_names_config_key_and_choices():
    with pytest.raises(ValueError, match=r"model\.activation .*\{relu, sigmoid, swish, tanh\}"):
        MLP(input_shape=(3,), out_features=2, activation="elu")


def test_mlp_init_std_draws_gaussian_weights_and_zero_biases():
    torch.manual_seed(0)
    model = MLP(input_shape=(784,), out_features=10, hidden=[300], init_std=0.01)
    weights = torch.cat([m.weight.flatten() for m in model.layers if hasattr(m, "weight")])
    assert weights.std().item() == pytest.approx(0.01, rel=0.02)
    assert weights.mean().abs().item() < 1e-3
    assert all(m.bias.abs().max() == 0 for m in model.layers if hasattr(m, "bias"))
    with pytest.raises(ValueError, match=r"model\.init_std"):
        MLP(input_shape=(3,), out_features=2, init_std=0.0)


@pytest.mark.parametrize("inputs", [(2, 3), (3,)], ids=["narrowing", "widening"])
@pytest.mark.parametrize("shared", [True, False])
def test_chain_forward_is_each_chains_forward(shared, inputs):
    """With K stacked parameter sets, chain_forward gives each chain's own forward pass and its
    gradients, on one input for all chains or one per chain; a shared input into a first layer
    that widens it takes the one product for all chains."""
    torch.manual_seed(0)
    mlp = MLP(input_shape=inputs, out_features=4, hidden=[5, 7], activation="tanh")
    chains = 3
    stacked = {
        name: torch.randn(chains, *p.shape, requires_grad=True)
        for name, p in mlp.named_parameters()
    }
    x = torch.randn(6, *inputs) if shared else torch.randn(chains, 6, *inputs)
    out = mlp.chain_forward(stacked, x, shared)
    weights = torch.randn(out.shape)
    grads = torch.autograd.grad((out * weights).sum(), list(stacked.values()))
    for k in range(chains):
        alone = {name: value[k].detach().requires_grad_() for name, value in stacked.items()}
        expected = torch.func.functional_call(mlp, alone, (x if shared else x[k],))
        torch.testing.assert_close(out[k], expected)
        expected_grads = torch.autograd.grad((expected * weights[k]).sum(), list(alone.values()))
        for grad, expected_grad in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(grad[k], expected_grad)


@pytest.mark.parametrize(
    "make, line",
    [
        (
            lambda: MLP((3,), 1, hidden=[0]),
            "model.hidden widths must be positive integers, got [0]",
        ),
        (
            lambda: MLP((3,), 1, activation="nope"),
            "model.activation must be one of {relu, sigmoid, swish, tanh}, got 'nope'",
        ),
        (
            lambda: MLP((3,), 1, init_std=0),
            "model.init_std must be positive and finite (or null), got 0",
        ),
        (
            lambda: ConvNet((13,), 1),
            "model=convnet takes images (channels x height x width), but the inputs have shape "
            "(13,): use model=mlp",
        ),
        (
            lambda: ConvNet((1, 8, 8), 10, channels=(8, 0)),
            "model.channels must be two positive widths and model.hidden positive, got [8, 0] "
            "and 64",
        ),
        (
            lambda: ResNet20FRN((13,), 10),
            "ResNet20FRN needs image inputs (C, H, W) or (H, W), got shape (13,)",
        ),
        (
            lambda: ResNet20FRN((3, 8, 8), 10, width=0),
            "model.width must be a positive integer, got 0",
        ),
    ],
)
def test_a_network_that_cannot_be_built_is_one_line_naming_the_key(make, line):
    with pytest.raises(ValueError) as error:
        make()
    assert str(error.value) == line
