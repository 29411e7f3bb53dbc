"""ChEES: the Halton jitter by hand, the learnt length at the closed-form optimum of a Gaussian,
the step's adaptation beside it, the length carried over a change of mass, and the refusal of a
single chain."""

import math

import pytest
import torch

from bdl.samplers import HMC
from bdl.samplers.chees import ChEES, halton


def test_the_jitter_is_the_base_two_halton_sequence():
    assert [halton(n) for n in range(1, 8)] == [0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875]


def chees_optimum() -> float:
    """For N(0, I) and exact dynamics, θ' = θ cos t + p sin t gives ChEES(t) ∝ sin²t; jittered
    over t = uT, u ~ U(0, 1), its mean ½ − sin 2T / 4T peaks first where tan 2T = 2T, found by
    bisection for T in (π/2, 3π/4), where tan 2T − 2T changes sign once."""
    low, high = math.pi / 2 + 1e-9, 3 * math.pi / 4
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if math.tan(2 * middle) < 2 * middle else (low, middle)
    return low


def standard_normal(params):
    def closure():
        theta = params[0]
        return 0.5 * theta.square().sum(-1), [theta.clone()]

    return closure


@pytest.mark.parametrize("seed", [0, 1])
def test_the_learnt_length_is_the_optimum_of_a_gaussian(seed):
    """64 chains on N(0, I₅₀), leapfrog step 0.1 (nearly exact), from T = 0.3: the averaged
    length lands within 0.2 of 2.2467 (measured over seeds 0-4: 2.13-2.23, the step's
    discretisation and 64 chains' estimate of the mean pulling it a few percent short)."""
    assert chees_optimum() == pytest.approx(2.2467, abs=1e-4)
    start = torch.Generator().manual_seed(seed + 10)
    params = [torch.randn(64, 50, generator=start, dtype=torch.float64)]
    sampler = HMC(
        0.01,
        num_steps=None,
        trajectory_length=0.3,
        adapt=False,
        adapt_length=True,
        generator=torch.Generator().manual_seed(seed),
    )
    state = sampler.init(params)
    for _ in range(400):
        sampler.step(state, standard_normal(params), tune=True)
    sampler.step(state, standard_normal(params))
    assert state.info["trajectory_length"].item() == pytest.approx(chees_optimum(), abs=0.2)
    assert state.length.iterations == 401


@pytest.mark.parametrize("target", [0.65, 0.8])
def test_the_adapted_step_reaches_the_configured_acceptance_while_the_length_is_learnt(
    assert_adapts_to, target
):
    """The step is dual-averaged while the length moves under it: after 150 iterations the
    acceptance at 0.65 is 0.704 ± 0.006, after 300 0.671, after 600 0.659 ± 0.004 (seeds 0-19)."""

    def make(target_accept, generator):
        return HMC(
            0.1,
            None,
            trajectory_length=2.0,
            adapt_length=True,
            target_accept=target_accept,
            generator=generator,
        )

    assert_adapts_to(make, target, burn_in=600)


def test_a_change_of_mass_keeps_the_dominant_directions_period():
    """T learnt under M⁻¹ = I on scales σ up to 10 sits at ≈ 2.25·σ_max; once M⁻¹ = σ², the
    whitened target's optimum is ≈ 2.25: T is divided by σ_max's factor, ~10."""
    sigma2 = torch.tensor([0.01, 1.0, 100.0], dtype=torch.float64)
    factor = math.sqrt((sigma2**3).sum() / (sigma2**2).sum())
    for restart in (True, False):
        length = ChEES(
            log_length=math.log(22.5),
            log_length_avg=math.log(20.0),
            squared_gradient=0.3,
            updates=7,
        )
        length.remeasure([torch.ones(3, dtype=torch.float64)], [sigma2], restart=restart)
        assert math.exp(length.log_length) == pytest.approx(22.5 / factor)
        assert math.exp(length.log_length) == pytest.approx(2.25, rel=0.01)
        if restart:  # time enough left in burn-in: a new average, a new gradient scale
            assert (length.updates, length.squared_gradient) == (0, 0.0)
        else:  # the average moves with T, by the same factor, and its weights go on
            assert math.exp(length.log_length_avg) == pytest.approx(20.0 / factor)
            assert (length.updates, length.squared_gradient) == (7, 0.3)


@pytest.mark.parametrize(("burn_in", "restarted"), [(100, False), (300, True)])
def test_the_length_average_restarts_at_a_new_mass_only_with_time_left_to_average(
    burn_in, restarted
):
    """Stan's terminal interval (50 iterations) left after the last window: a new average, as
    the step size's restart; the 10 a burn-in of 100 leaves: the average carried."""
    sigma = torch.tensor([0.1, 1.0, 10.0], dtype=torch.float64)
    params = [torch.randn(8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))]

    def closure():
        return 0.5 * (params[0] / sigma).square().sum(-1), [params[0] / sigma**2]

    sampler = HMC(
        0.01,
        None,
        trajectory_length=1.0,
        mass="diagonal",
        adapt_length=True,
        generator=torch.Generator().manual_seed(1),
    )
    sampler.plan_burn_in(burn_in)
    state = sampler.init(params)
    last_window_end = sampler.windows[-1][1]
    assert burn_in - last_window_end == (50 if restarted else 10)
    for _ in range(last_window_end):
        sampler.step(state, closure, tune=True)
    # the last window closed after this iteration's update of T
    assert state.length.updates == (0 if restarted else last_window_end)


def test_one_chain_is_refused_with_the_fix():
    params = [torch.zeros(3, dtype=torch.float64)]
    sampler = HMC(0.01, 5, adapt_length=True)
    state = sampler.init(params)

    def closure():
        return 0.5 * params[0].square().sum(), [params[0].clone()]

    with pytest.raises(ValueError, match="chains=2 or more"):
        sampler.step(state, closure, tune=True)
