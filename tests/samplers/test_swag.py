"""SWAG (Maddox et al. 2019): the moments of the collected iterates, and draws whose covariance is
the closed form 1/2 diag + D D^T / (2(K-1)) of those iterates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bdl.samplers.swag import SWAG

ITERATES = np.array(
    [[0.0, 1.0, 2.0], [1.0, 0.5, 2.5], [0.5, 2.0, 1.0], [2.0, 1.5, 0.0], [1.5, 0.0, 1.5]]
)


def swag_after(iterates: np.ndarray, rank: int) -> tuple[SWAG, object]:
    """A SWAG state that collected ``iterates`` (rows), one parameter tensor of 3 entries."""
    swag = SWAG(lr=0.1, rank=rank, num_samples=1, generator=torch.Generator().manual_seed(0))
    state = swag.init([torch.zeros(3, dtype=torch.float64)])
    for theta in iterates:
        state.params[0].copy_(torch.from_numpy(theta))
        swag.collect(state)
    return swag, state


def closed_form(iterates: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """The mean and covariance Maddox et al.'s Algorithm 1 defines, computed from the iterates:
    the deviation of iterate i from the mean of the first i, the last ``rank`` of them kept."""
    means = np.cumsum(iterates, 0) / np.arange(1, len(iterates) + 1)[:, None]
    mean = means[-1]
    diagonal = np.diag((iterates**2).mean(0) - mean**2)
    deviations = (iterates - means)[-rank:]
    k = len(deviations)
    return mean, diagonal / 2 + deviations.T @ deviations / (2 * (k - 1))


@pytest.mark.parametrize("rank", [3, 10])  # the ring overwritten, and not yet full
def test_draws_have_the_closed_form_covariance(rank):
    swag, state = swag_after(ITERATES, rank)
    mean, covariance = closed_form(ITERATES, rank)
    swag.num_samples = 8000
    draws = []
    for _ in swag.final_samples(state):
        draws.append(state.params[0].clone().numpy())
    draws = np.array(draws)
    # five Monte Carlo standard errors of each entry: Var(x_i x_j) = S_ii S_jj + S_ij^2 over n
    n = len(draws)
    se_mean = np.sqrt(np.diag(covariance) / n)
    np.testing.assert_array_less(np.abs(draws.mean(0) - mean), 5 * se_mean + 1e-12)
    se_cov = np.sqrt((np.outer(np.diag(covariance), np.diag(covariance)) + covariance**2) / n)
    np.testing.assert_array_less(np.abs(np.cov(draws.T) - covariance), 5 * se_cov + 1e-12)
    # the network is given back SWA's mean after the draws
    np.testing.assert_allclose(state.params[0].numpy(), mean)
    _, std = swag.posterior_moments(state)
    np.testing.assert_allclose(std[0].numpy(), np.sqrt(np.diag(covariance)))


def test_iterates_are_collected_after_burn_in_every_collect_every_steps():
    """On U = ½|θ|² (gradient θ), SGD at step 0.5 halves θ each step: collecting every second
    step after two steps of burn-in takes θ0 / 2^4 and θ0 / 2^6."""
    swag = SWAG(lr=0.5, rank=2, collect_every=2)
    state = swag.init([torch.ones(2, dtype=torch.float64)])
    closure = lambda: (0.5 * state.params[0].square().sum(), [state.params[0].clone()])  # noqa: E731
    for step in range(6):
        swag.step(state, closure, tune=step < 2)
    assert state.buffers["swag_count"][0].item() == 2
    np.testing.assert_allclose(state.buffers["swag_mean"][0].numpy(), (2**-4 + 2**-6) / 2)


def test_hyperparameters_are_checked():
    for bad, match in [({"rank": 1}, "rank"), ({"collect_every": 0}, "collect_every")]:
        with pytest.raises(ValueError, match=match):
            SWAG(lr=0.1, **bad)
