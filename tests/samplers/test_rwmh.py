"""Random-walk Metropolis: one step by hand, foreach = loop, errors, a Gaussian's variance."""

import math

import pytest
import torch

from bdl.samplers import RWMH


def test_one_step_by_hand(quadratic):
    params = [torch.tensor([0.4, -0.1], dtype=torch.float64)]
    sampler = RWMH(lr=0.25, adapt=False, generator=torch.Generator().manual_seed(11))
    state = sampler.init(params)
    replay = torch.Generator().manual_seed(11)
    z = torch.randn(2, generator=replay, dtype=torch.float64)
    u = torch.rand((), generator=replay, dtype=torch.float64).item()
    start = torch.tensor([0.4, -0.1], dtype=torch.float64)
    proposal = start + 0.5 * z
    log_ratio = 0.5 * start.square().sum() - 0.5 * proposal.square().sum()
    sampler.step(state, quadratic(params))
    expected = proposal if math.log(u) < log_ratio else start
    torch.testing.assert_close(params[0], expected)
    assert state.info["energy_error"].item() == pytest.approx(-log_ratio.item())


def test_foreach_equals_loop(assert_foreach_matches_loop, quadratic):
    assert_foreach_matches_loop(
        lambda foreach: RWMH(0.01, foreach=foreach, generator=torch.Generator().manual_seed(1)),
        quadratic,
        steps=8,
        step_options=lambda t: {"tune": t < 4},
    )


def test_samples_a_gaussian_and_adapts_to_the_target_rate():
    params = [torch.zeros(3000, dtype=torch.float64)]

    def closure():
        return 0.5 * params[0].square() / 9.0, [params[0] / 9.0]

    sampler = RWMH(1.0, target_accept=0.44, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    rates = []
    for t in range(400):
        sampler.step(state, closure, tune=t < 100)
        if t >= 100:
            rates.append(state.info["accepted"].double().mean().item())
    assert sum(rates) / len(rates) == pytest.approx(0.44, abs=0.06)
    assert params[0].var().item() == pytest.approx(9.0, rel=0.1)


@pytest.mark.parametrize("target", [0.65, 0.8])
def test_the_adapted_step_reaches_the_configured_acceptance(assert_adapts_to, target):
    assert_adapts_to(lambda a, generator: RWMH(0.1, target_accept=a, generator=generator), target)


@pytest.mark.parametrize(
    "kwargs, key", [({"lr": 0.0}, "sampler.lr"), ({"target_accept": 1.5}, "target_accept")]
)
def test_bad_hyperparameters_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        RWMH(**{"lr": 0.01, **kwargs})


def test_is_full_batch_unless_approximate(quadratic, counting):
    assert RWMH(0.01).declaration.full_batch
    sampler = RWMH(0.01, approximate=True, generator=torch.Generator().manual_seed(0))
    assert not sampler.declaration.full_batch and RWMH.declaration.full_batch
    params = [torch.randn(5)]
    state = sampler.init(params)
    for calls in (2, 4):  # no cached U: each minibatch is evaluated at both ends
        closure = counting(quadratic(params))
        sampler.step(state, closure)
        assert closure.calls == 2 and state.grad_evals == calls
