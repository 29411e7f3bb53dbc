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
