"""MC dropout (Gal & Ghahramani 2016): each step is SGD through a fresh dropout mask on the hidden
units, and the samples are masked copies of the trained weights that differ from one another and
average, in the network's linear output, to the network without dropout."""

from __future__ import annotations

import pytest
import torch

from bdl.likelihoods import Categorical
from bdl.models.mlp import MLP
from bdl.potential import Potential
from bdl.priors import Gaussian
from bdl.samplers.mc_dropout import MCDropout


def test_a_step_is_sgd_through_the_mask():
    """U = ½|W1 − A|² on a weight whose 4 columns are hidden units: the gradient at the dropped
    out W1·diag(s) is W1·diag(s) − A, and the chain rule multiplies it by s again."""
    p, lr = 0.5, 0.1
    w0, w1 = torch.randn(4, 3, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    target = torch.randn(2, 4, dtype=torch.float64)
    sampler = MCDropout(lr=lr, p=p, generator=torch.Generator().manual_seed(1))
    sampler.masked = [1]
    state = sampler.init([w0, w1])
    start = w1.clone()

    def closure():
        return 0.5 * (w1 - target).square().sum(), [torch.zeros_like(w0), w1 - target]

    sampler.step(state, closure)
    kept = torch.rand(4, generator=torch.Generator().manual_seed(1)) >= p
    s = kept.double() / (1 - p)
    assert 0 < kept.sum() < 4  # this seed drops some columns and keeps others
    torch.testing.assert_close(w1, start - lr * (start * s - target) * s)
    # the potential recorded is the weights' own, not the dropped out weights'
    assert state.info["potential"].item() == pytest.approx(
        0.5 * (start - target).square().sum().item()
    )


def test_the_recorded_potential_is_the_weights_not_the_masks():
    """The runner's yardstick reads each step's recorded U (bdl.runner.stability). At a step too
    small to move the weights, U at the weights is the same at every step and equals the
    potential's own, while U at the masked weights spreads with the masks: the spread that
    burn-in read as the chain heating."""
    torch.manual_seed(0)
    model = MLP(input_shape=(5,), out_features=3, hidden=[16], activation="tanh").double()
    potential = Potential(model, Categorical(), Gaussian(), 100)
    x, y = torch.randn(100, 5, dtype=torch.float64), torch.randint(0, 3, (100,))
    expected = potential.closure(x, y)()[0].item()
    sampler = MCDropout(lr=1e-300, generator=torch.Generator().manual_seed(1))
    sampler.attach(potential, lambda: iter(()))
    state = sampler.init(potential.params)
    recorded = []
    for _ in range(20):
        sampler.step(state, potential.closure(x, y))
        recorded.append(state.info["potential"].item())
    assert recorded == pytest.approx([expected] * 20, rel=1e-12)
    masked, weight, generator = [], model.layers[2].weight, torch.Generator().manual_seed(2)
    for _ in range(20):
        kept = weight.detach().clone()
        with torch.no_grad():
            weight.mul_((torch.rand(16, generator=generator) >= 0.5).double() / 0.5)
        masked.append(potential.closure(x, y)()[0].item())
        with torch.no_grad():
            weight.copy_(kept)
    assert torch.tensor(masked).std().item() > 1.0


def test_samples_differ_and_average_to_the_network_without_dropout():
    torch.manual_seed(0)
    model = MLP(input_shape=(5,), out_features=3, hidden=[8], activation="tanh").double()
    potential = Potential(model, Categorical(), Gaussian(), 100)
    sampler = MCDropout(lr=0.1, p=0.3, num_samples=4000, generator=torch.Generator().manual_seed(1))
    sampler.attach(potential, lambda: iter(()))
    state = sampler.init(potential.params)
    x = torch.randn(6, 5, dtype=torch.float64)
    with torch.no_grad():
        exact = model(x)
    outputs, dropped = [], []
    for _ in sampler.final_samples(state):
        with torch.no_grad():
            outputs.append(model(x))
        dropped.append((model.layers[2].weight == 0).all(0).double().mean().item())
    outputs = torch.stack(outputs)
    assert not torch.equal(outputs[0], outputs[1])  # every sample its own mask
    # the fraction of hidden units dropped is p, within 5 standard errors
    rate = torch.tensor(dropped).mean().item()
    assert rate == pytest.approx(0.3, abs=5 * (0.3 * 0.7 / (8 * 4000)) ** 0.5)
    # E[W diag(s)] = W, and the output is linear in the last weights: E[f] is the plain network's
    error = outputs.std(0) / len(outputs) ** 0.5
    assert ((outputs.mean(0) - exact).abs() < 5 * error).all()
    with torch.no_grad():
        torch.testing.assert_close(model(x), exact)  # the trained weights given back


def test_a_network_without_hidden_units_is_refused():
    model = MLP(input_shape=(5,), out_features=3, hidden=[])
    potential = Potential(model, Categorical(), Gaussian(), 100)
    with pytest.raises(ValueError, match="fully connected network: use model=mlp"):
        MCDropout(lr=0.1).attach(potential, lambda: iter(()))
    with pytest.raises(ValueError, match="sampler.p"):
        MCDropout(lr=0.1, p=1.0)
