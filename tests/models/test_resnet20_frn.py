import math

import pytest
import torch
import torch.nn.functional as F

from bdl.models import FilterResponseNorm, ResNet20FRN


def test_resnet20_frn_cifar_forward_and_size():
    torch.manual_seed(0)
    model = ResNet20FRN(input_shape=(3, 32, 32), out_features=10)
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()
    # Counted by hand: a 3x3 convolution c -> d has 9cd weights and d biases, an FRN 3d
    # parameters (gamma, beta, tau), a 1x1 projection cd + d. Stem 3 -> 16: 432 + 16 + 48 = 496.
    # Stage 1, three blocks of two 16 -> 16 layers of 2304 + 16 + 48: 6 * 2368 = 14208. Stage 2:
    # 16 -> 32 layer 4736, projection 544, five 32 -> 32 layers of 9344: 52000. Stage 3: 32 -> 64
    # layer 18688, projection 2112, five 64 -> 64 layers of 37120: 206400. Head 64 * 10 + 10 = 650.
    # Total 273754, the ~0.27M of Izmailov et al. (2021); a missing block would be 18688 fewer.
    assert sum(p.numel() for p in model.parameters()) == 496 + 14208 + 52000 + 206400 + 650
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert len(shapes) == 1 * 5 + 9 * 10 + 2 * 2 + 2  # stem, 9 blocks, 2 projections, head
    assert shapes["blocks.3.shortcut.weight"] == (32, 16, 1, 1)
    assert shapes["blocks.6.conv1.conv.weight"] == (64, 32, 3, 3)
    assert shapes["head.weight"] == (10, 64)


def _reference_forward(model: ResNet20FRN, x: torch.Tensor) -> torch.Tensor:
    """bnn_hmc's ``make_resnet20_frn_fn`` written out with torch.nn.functional on the model's
    parameters: stem, then per block ``swish(shortcut(x) + frn(conv(swish(frn(conv(x))))))``
    with a strided 1x1 projection at stage starts, global average pooling, linear head."""
    p = dict(model.named_parameters())

    def swish(z):
        return z / (1 + torch.exp(-z))

    def conv_frn(z, prefix, stride):
        z = F.conv2d(z, p[f"{prefix}.conv.weight"], p[f"{prefix}.conv.bias"], stride, padding=1)
        z = z / torch.sqrt(z.square().mean(dim=(2, 3), keepdim=True) + 1e-6)
        return torch.maximum(
            p[f"{prefix}.norm.gamma"] * z + p[f"{prefix}.norm.beta"], p[f"{prefix}.norm.tau"]
        )

    z = swish(conv_frn(x, "stem", 1))
    for i in range(9):
        stride = 2 if i in (3, 6) else 1
        inner = conv_frn(swish(conv_frn(z, f"blocks.{i}.conv1", stride)), f"blocks.{i}.conv2", 1)
        if i in (3, 6):
            z = F.conv2d(z, p[f"blocks.{i}.shortcut.weight"], p[f"blocks.{i}.shortcut.bias"], 2)
        z = swish(z + inner)
    return F.linear(z.mean(dim=(2, 3)), p["head.weight"], p["head.bias"])


def test_resnet20_frn_matches_a_functional_reference():
    torch.manual_seed(1)
    model = ResNet20FRN(input_shape=(3, 16, 16), out_features=10)
    with torch.no_grad():  # non-trivial FRN parameters, so that each of them matters
        for name, p in model.named_parameters():
            if ".norm." in name:
                p.copy_(0.5 * torch.randn_like(p) + (1.0 if name.endswith("gamma") else 0.0))
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(model(x), _reference_forward(model, x), rtol=1e-4, atol=1e-5)


def test_resnet20_frn_has_no_batch_statistics():
    model = ResNet20FRN(input_shape=(1, 28, 28), out_features=10)
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert list(model.buffers()) == []
    # An example's output must not depend on the rest of its batch.
    x = torch.randn(3, 1, 28, 28)
    torch.testing.assert_close(model(x)[:1], model(x[:1]))
    assert model(x).shape == (3, 10)


def test_resnet20_frn_rejects_flat_inputs():
    with pytest.raises(ValueError, match="image"):
        ResNet20FRN(input_shape=(13,), out_features=1)


def test_frn_normalises_to_unit_mean_square_per_channel():
    frn = FilterResponseNorm(4)
    with torch.no_grad():
        frn.tau.fill_(-float("inf"))
    x = torch.randn(2, 4, 5, 5) * torch.tensor([0.1, 1.0, 10.0, 100.0]).view(1, 4, 1, 1) + 3.0
    mean_square = frn(x).square().mean(dim=(2, 3))
    torch.testing.assert_close(mean_square, torch.ones(2, 4), rtol=1e-4, atol=1e-4)


def test_frn_tlu_thresholds_at_tau():
    frn = FilterResponseNorm(2)
    with torch.no_grad():
        frn.tau.fill_(0.5)
    assert (frn(torch.randn(3, 2, 4, 4)) >= 0.5).all()


def test_resnet20_frn_he_initialisation_has_std_sqrt_2_over_fan_in():
    """He et al. (2015): weights of std √(2/fan_in), drawn from a normal truncated at ±2 std whose
    own std is rescaled back to that value; checked on the 36 864 weights of a 64 → 64 layer
    within 5 standard errors of a sample std (σ/√(2n))."""
    torch.manual_seed(0)
    weight = ResNet20FRN(input_shape=(3, 32, 32), out_features=10).blocks[8].conv2.conv.weight
    target = math.sqrt(2 / (64 * 9))
    assert abs(weight.std().item() - target) < 5 * target / math.sqrt(2 * weight.numel())
    assert weight.abs().max().item() <= 2 * target / 0.87962566103423978 + 1e-6
    assert ResNet20FRN(input_shape=(3, 8, 8), out_features=2, width=1)(
        torch.zeros(1, 3, 8, 8)
    ).shape == (1, 2)
