"""Naive SGHMC: the frictionless leapfrog by hand, resampling, the end-of-trajectory test,
foreach = loop, errors."""

import math

import pytest
import torch

from bdl.samplers import NaiveSGHMC


def test_two_trajectories_by_hand(quadratic):
    """L = 2: half kick, drift, kick, drift; then a fresh momentum."""
    eps = 0.3
    params = [torch.tensor([1.5], dtype=torch.float64)]
    sampler = NaiveSGHMC(eps**2, resample_every=2, generator=torch.Generator().manual_seed(2))
    state = sampler.init(params)
    replay = torch.Generator().manual_seed(2)
    theta = 1.5
    for _ in range(2):
        p = torch.randn(1, generator=replay, dtype=torch.float64).item()
        p -= eps / 2 * theta
        theta += eps * p
        p -= eps * theta
        theta += eps * p
        for _ in range(2):
            sampler.step(state, quadratic(params))
        assert params[0].item() == pytest.approx(theta, rel=1e-12)
    assert "accepted" not in state.info


def test_metropolis_test_at_each_trajectory_end_only(quadratic, counting):
    params = [torch.tensor([0.2, 0.1], dtype=torch.float64)]
    sampler = NaiveSGHMC(
        0.01, resample_every=3, mh=True, generator=torch.Generator().manual_seed(0)
    )
    state = sampler.init(params)
    closure = counting(quadratic(params))
    tested = []
    for _ in range(6):
        sampler.step(state, closure)
        tested.append("accepted" in state.info)
    assert tested == [False, False, True, False, False, True]
    assert closure.calls == 8  # one per step, plus the end of each trajectory


def test_rejected_trajectory_restores_its_start(quadratic):
    params = [torch.tensor([0.5, 0.5])]
    sampler = NaiveSGHMC(
        25.0, resample_every=2, mh=True, generator=torch.Generator().manual_seed(0)
    )
    state = sampler.init(params)
    closure = quadratic(params, limit=20.0)
    sampler.step(state, closure)
    assert params[0].abs().max() > 1  # mid-trajectory
    sampler.step(state, closure)
    assert not state.info["accepted"]
    torch.testing.assert_close(params[0], torch.tensor([0.5, 0.5]))
    assert math.isfinite(state.info["potential"].item())


@pytest.mark.parametrize("mh", [False, True])
def test_foreach_equals_loop(assert_foreach_matches_loop, quadratic, mh):
    assert_foreach_matches_loop(
        lambda foreach: NaiveSGHMC(
            0.01, 3, mh=mh, foreach=foreach, generator=torch.Generator().manual_seed(5)
        ),
        quadratic,
        steps=7,
    )


@pytest.mark.parametrize(
    "kwargs, key", [({"resample_every": 0}, "resample_every"), ({"lr": 0}, "lr")]
)
def test_bad_hyperparameters_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=f"sampler.{key}"):
        NaiveSGHMC(**{"lr": 0.01, **kwargs})


def test_the_metropolis_decisions_come_from_the_samplers_generator(quadratic):
    """The same seed gives the same chain whatever else draws from torch's global generator
    between its steps: the end-of-trajectory test draws its uniforms from the sampler's own
    generator, as the momenta are drawn (a run's chains and a resumed run rely on it)."""

    def chain(disturb: bool) -> tuple[torch.Tensor, list[bool]]:
        params = [torch.tensor([1.0, -0.5, 0.3], dtype=torch.float64)]
        sampler = NaiveSGHMC(
            1.2, resample_every=2, mh=True, generator=torch.Generator().manual_seed(3)
        )
        state = sampler.init(params)
        decisions = []
        for step in range(60):
            if disturb:
                torch.manual_seed(step)
            sampler.step(state, quadratic(params))
            if "accepted" in state.info:
                decisions.append(bool(state.info["accepted"]))
        return params[0], decisions

    quiet, decisions = chain(disturb=False)
    disturbed, again = chain(disturb=True)
    assert set(decisions) == {True, False}  # the uniform decides some of them
    assert again == decisions
    torch.testing.assert_close(disturbed, quiet, rtol=0, atol=0)
