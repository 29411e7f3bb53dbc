"""HMC: the leapfrog and the test by hand, the cache, partial refresh, adaptation, foreach = loop,
errors, and a Gaussian's variance with one test per chain."""

import math

import pytest
import torch

from bdl.samplers import HMC


def leapfrog(theta, p, eps, steps, grad):
    p = p - eps / 2 * grad(theta)
    for i in range(steps):
        theta = theta + eps * p
        p = p - (eps if i < steps - 1 else eps / 2) * grad(theta)
    return theta, p


def test_one_iteration_by_hand(quadratic):
    params = [torch.tensor([1.0], dtype=torch.float64)]
    sampler = HMC(lr=0.04, num_steps=3, adapt=False, generator=torch.Generator().manual_seed(5))
    state = sampler.init(params)
    replay = torch.Generator().manual_seed(5)
    p0 = torch.randn(1, generator=replay, dtype=torch.float64).item()
    u = torch.rand((), generator=replay, dtype=torch.float64).item()
    theta, p = leapfrog(1.0, p0, 0.2, 3, lambda q: q)
    energy_error = (0.5 * theta**2 + 0.5 * p**2) - (0.5 + 0.5 * p0**2)
    sampler.step(state, quadratic(params))
    accepted = math.log(u) < -energy_error
    assert params[0].item() == pytest.approx(theta if accepted else 1.0, rel=1e-12)
    assert bool(state.info["accepted"]) == accepted
    assert state.info["energy_error"].item() == pytest.approx(energy_error, rel=1e-9)
    assert state.info["accept_prob"].item() == pytest.approx(min(1, math.exp(-energy_error)))


def test_diverged_trajectory_is_rejected_and_the_position_restored(quadratic):
    params = [torch.tensor([1.0, -0.5])]
    sampler = HMC(lr=100.0, num_steps=5, adapt=False, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    sampler.step(state, quadratic(params, limit=50.0))
    assert not state.info["accepted"] and state.info["accept_prob"] == 0
    torch.testing.assert_close(params[0], torch.tensor([1.0, -0.5]))
    assert math.isfinite(state.info["potential"].item())


def test_closure_is_called_once_per_leapfrog_step_after_the_first_iteration(quadratic, counting):
    params = [torch.randn(4)]
    sampler = HMC(lr=0.01, num_steps=7, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    closure = counting(quadratic(params))
    sampler.step(state, closure)
    assert closure.calls == 8  # the start's gradient, then one per step
    sampler.step(state, closure)
    assert closure.calls == 15 and state.grad_evals == 15
    state.buffers.pop("grad")  # what the runner does after a Gibbs step changes U
    sampler.step(state, closure)
    assert closure.calls == 23


def test_trajectory_length_sets_the_number_of_steps(quadratic, counting):
    params = [torch.randn(3)]
    sampler = HMC(lr=0.01, num_steps=None, trajectory_length=0.35, adapt=False)
    state = sampler.init(params)
    closure = counting(quadratic(params))
    sampler.step(state, closure)
    assert closure.calls == 1 + math.ceil(0.35 / 0.1)


def test_partial_refresh_on_a_flat_potential_by_hand():
    """U = 0: every proposal is accepted and the momentum is carried over, eq. (41)."""
    params = [torch.zeros(3, dtype=torch.float64)]

    def flat():
        return torch.zeros((), dtype=torch.float64), [torch.zeros_like(params[0])]

    alpha, eps, steps = 0.6, 0.1, 4
    sampler = HMC(
        eps**2, steps, refresh=alpha, adapt=False, generator=torch.Generator().manual_seed(1)
    )
    state = sampler.init(params)
    replay = torch.Generator().manual_seed(1)
    p = torch.zeros(3, dtype=torch.float64)
    theta = torch.zeros(3, dtype=torch.float64)
    for _ in range(3):
        r = torch.randn(3, generator=replay, dtype=torch.float64)
        torch.rand((), generator=replay, dtype=torch.float64)
        p = alpha * p + math.sqrt(1 - alpha**2) * r
        theta = theta + eps * steps * p
        sampler.step(state, flat)
        assert state.info["accepted"]
    torch.testing.assert_close(params[0], theta)
    torch.testing.assert_close(state.buffers["momentum"][0], p)


def test_partial_refresh_negates_the_momentum_on_rejection(quadratic):
    params = [torch.tensor([0.5, 0.5], dtype=torch.float64)]
    sampler = HMC(100.0, 3, refresh=0.5, adapt=False, generator=torch.Generator().manual_seed(2))
    state = sampler.init(params)
    replay = torch.Generator().manual_seed(2)
    refreshed = math.sqrt(1 - 0.25) * torch.randn(2, generator=replay, dtype=torch.float64)
    sampler.step(state, quadratic(params, limit=10.0))
    assert not state.info["accepted"]
    torch.testing.assert_close(state.buffers["momentum"][0], -refreshed)


def test_dual_averaging_reaches_the_target_and_only_while_tuning(quadratic):
    params = [torch.zeros(500, 20, dtype=torch.float64)]

    def per_chain():
        theta = params[0]
        return 0.5 * theta.square().sum(-1), [theta.clone()]

    sampler = HMC(
        lr=1.0, num_steps=5, target_accept=0.8, generator=torch.Generator().manual_seed(0)
    )
    state = sampler.init(params)
    for _ in range(150):
        sampler.step(state, per_chain, tune=True)
    rates, step_sizes = [], set()
    for _ in range(50):
        sampler.step(state, per_chain)
        rates.append(state.info["accept_prob"].mean().item())
        step_sizes.add(state.info["step_size"].item())
    assert len(step_sizes) == 1  # the averaged iterate, fixed once burn-in is over
    assert sum(rates) / len(rates) == pytest.approx(0.8, abs=0.08)
    assert state.adaptation.count == 150


@pytest.mark.parametrize(("refresh", "mass"), [(0.0, "unit"), (0.7, "unit"), (0.7, "diagonal")])
def test_foreach_equals_loop(assert_foreach_matches_loop, quadratic, refresh, mass):
    def make(foreach):
        sampler = HMC(
            0.01,
            4,
            refresh=refresh,
            mass=mass,
            foreach=foreach,
            generator=torch.Generator().manual_seed(3),
        )
        sampler.plan_burn_in(20)  # a slow window over iterations 3 to 17
        return sampler

    assert_foreach_matches_loop(make, quadratic, steps=24, step_options=lambda t: {"tune": t < 20})


def test_samples_a_gaussian_per_chain():
    """2,000 independent chains on U = ½θ²/σ² recover σ² (independent tests per chain)."""
    sigma2 = 4.0
    params = [torch.zeros(2000, dtype=torch.float64)]

    def closure():
        theta = params[0]
        return 0.5 * theta.square() / sigma2, [theta / sigma2]

    sampler = HMC(0.5, 5, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    for t in range(120):
        sampler.step(state, closure, tune=t < 40)
    assert state.info["accepted"].shape == (2000,)
    assert params[0].var().item() == pytest.approx(sigma2, rel=0.1)
    assert params[0].mean().item() == pytest.approx(0.0, abs=0.15)


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"num_steps": 0}, "sampler.num_steps"),
        ({"num_steps": 10, "trajectory_length": 1.0}, "sampler.trajectory_length"),
        ({"num_steps": None}, "sampler.num_steps"),
        ({"num_steps": None, "trajectory_length": -1.0}, "sampler.trajectory_length"),
        ({"refresh": 1.0}, "sampler.refresh"),
        ({"target_accept": 1.0}, "sampler.target_accept"),
        ({"lr": 0.0}, "sampler.lr"),
    ],
)
def test_bad_hyperparameters_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        HMC(**{"lr": 0.01, **kwargs})
