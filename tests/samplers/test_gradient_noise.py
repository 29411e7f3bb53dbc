"""The online gradient-noise estimate: Finch's exponentially weighted moments, foreach = loop."""

import pytest
import torch

from bdl.samplers.base import SamplerState
from bdl.samplers.gradient_noise import DECAY, observe_, observing


def test_weighted_moments_by_hand():
    draws = [torch.tensor([1.0]), torch.tensor([3.0]), torch.tensor([-2.0])]
    state = SamplerState(params=[])
    for g in draws:
        observe_(state, [g], foreach=True)
    mean, var = 1.0, 0.0
    for g in (3.0, -2.0):
        delta = g - mean
        mean += (1 - DECAY) * delta
        var = DECAY * (var + (1 - DECAY) * delta**2)
    assert state.buffers["grad_mean"][0].item() == pytest.approx(mean)
    assert state.buffers["grad_var"][0].item() == pytest.approx(var)


def test_converges_to_the_variance_of_iid_draws_and_loop_equals_foreach():
    generator = torch.Generator().manual_seed(0)
    fast, slow = SamplerState(params=[]), SamplerState(params=[])
    for _ in range(3000):
        g = [3.0 + 2.0 * torch.randn(400, generator=generator, dtype=torch.float64)]
        observe_(fast, g, foreach=True)
        observe_(slow, g, foreach=False)
    torch.testing.assert_close(fast.buffers["grad_var"], slow.buffers["grad_var"])
    assert fast.buffers["grad_var"][0].mean().item() == pytest.approx(4.0, rel=0.03)
    assert fast.buffers["grad_mean"][0].mean().item() == pytest.approx(3.0, abs=0.05)


def test_observing_passes_the_closure_through():
    state = SamplerState(params=[])
    closure = observing(state, lambda: (torch.tensor(1.5), [torch.ones(2)]), foreach=True)
    value, grads = closure()
    assert value.item() == 1.5 and "grad_mean" in state.buffers
