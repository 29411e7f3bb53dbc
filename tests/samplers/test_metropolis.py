"""The shared Metropolis pieces: per-chain energies and selection, the test's edge cases, and
dual averaging."""

import math

import pytest
import torch

from bdl.samplers.base import SamplerState
from bdl.samplers.metropolis import DualAveraging, kinetic_energy, metropolis_test, select_


def test_kinetic_energy_per_chain_and_in_float64():
    momenta = [torch.ones(3, 2), torch.full((3,), 2.0)]
    energy = kinetic_energy(momenta, torch.Size([3]))
    assert energy.dtype == torch.float64
    torch.testing.assert_close(energy, torch.full((3,), 0.5 * (2 + 4), dtype=torch.float64))
    assert kinetic_energy(momenta, torch.Size([])).item() == pytest.approx(0.5 * (6 + 12))


def test_select_restores_rejected_chains_only():
    current, previous = [torch.ones(3, 2)], [torch.zeros(3, 2)]
    select_(torch.tensor([True, False, True]), current, previous)
    torch.testing.assert_close(current[0], torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]))


def test_nan_and_minus_infinity_are_rejections():
    state = SamplerState(params=[])
    log_ratio = torch.tensor([math.nan, -math.inf, 0.0, 5.0], dtype=torch.float64)
    accept = metropolis_test(state, log_ratio, torch.Generator().manual_seed(0))
    assert accept.tolist() == [False, False, True, True]
    assert state.info["accept_prob"].tolist() == [0.0, 0.0, 1.0, 1.0]


def test_dual_averaging_moves_the_step_against_the_acceptance_gap():
    low = DualAveraging(target=0.8)
    high = DualAveraging(target=0.8)
    for _ in range(20):
        low.update(0.2)
        high.update(1.0)
    assert low.multiplier(tune=True) < 1 < high.multiplier(tune=True)
    assert low.multiplier(tune=False) < 1 < high.multiplier(tune=False)


def test_dual_averaging_is_hoffman_and_gelmans_recursion():
    """Hoffman & Gelman (2014), Alg. 5 (their constants: gamma 0.05, t0 10, kappa 0.75, and
    mu = log 10), written out for acceptance probabilities that straddle the target."""
    accepts = [0.3, 0.95, 0.6, 1.0, 0.0, 0.85, 0.7]
    adaptation = DualAveraging(target=0.65)
    h_bar = log_x_avg = 0.0
    for m, accept in enumerate(accepts, start=1):
        adaptation.update(accept)
        h_bar = (1 - 1 / (m + 10)) * h_bar + (0.65 - accept) / (m + 10)
        log_x = math.log(10) - math.sqrt(m) / 0.05 * h_bar
        log_x_avg = m**-0.75 * log_x + (1 - m**-0.75) * log_x_avg
        assert adaptation.multiplier(tune=True) == pytest.approx(math.exp(log_x), rel=1e-12)
        assert adaptation.multiplier(tune=False) == pytest.approx(math.exp(log_x_avg), rel=1e-12)


@pytest.mark.parametrize(
    "inverse_mass, q_end, p_end",
    [
        # by hand, q ← q + ε M⁻¹ p then p ← p − ε q (U = ½ q²), ε = 0.1, twice:
        # M⁻¹ = 2: q 1 → 1.1 → 1.178, p 0.5 → 0.39 → 0.2722;
        # M⁻¹ = ½: q 2 → 1.95 → 1.89025, p -1 → -1.195 → -1.384025
        ([2.0, 0.5], [1.178, 1.89025], [0.2722, -1.384025]),
        # unit mass: q 1 → 1.05 → 1.0895, p 0.5 → 0.395 → 0.28605; q 2 → 1.9 → 1.781,
        # p -1 → -1.19 → -1.3681
        (None, [1.0895, 1.781], [0.28605, -1.3681]),
    ],
)
def test_the_leapfrog_program_drifts_through_the_inverse_mass(inverse_mass, q_end, p_end):
    from bdl.samplers.metropolis import leapfrog_program

    def evaluate(q):
        return 0.5 * sum(x.square().sum() for x in q), [x.clone() for x in q]

    q = [torch.tensor([1.0, 2.0], dtype=torch.float64)]
    p = [torch.tensor([0.5, -1.0], dtype=torch.float64)]
    mass = None if inverse_mass is None else [torch.tensor(inverse_mass, dtype=torch.float64)]
    step = torch.tensor(0.1, dtype=torch.float64)
    positions, momenta, value, grads = leapfrog_program(
        evaluate, q, p, evaluate(q), step, torch.tensor(2), mass
    )
    expected_q = torch.tensor(q_end, dtype=torch.float64)
    torch.testing.assert_close(positions[0], expected_q)
    torch.testing.assert_close(momenta[0], torch.tensor(p_end, dtype=torch.float64))
    torch.testing.assert_close(value, 0.5 * expected_q.square().sum())
    torch.testing.assert_close(grads[0], expected_q)
