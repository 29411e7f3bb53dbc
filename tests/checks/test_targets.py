"""The toy targets' closed forms against autograd of their own potentials: the posterior of the
linear regression is Gaussian, so its mean is where the potential's gradient vanishes and its
precision is the potential's Hessian (Bishop 2006, section 3.3), at a noise scale and a prior
scale that differ from 1 and from each other, so that a misplaced or dropped term shows."""

from __future__ import annotations

import pytest
import torch
from torch.autograd.functional import hessian

from bdl.checks.targets import LinearRegression, ToyRegression


@pytest.fixture(scope="module")
def target() -> LinearRegression:
    # prior variance 0.04 against 300 points of noise variance 6.25: the prior's precision 25 is
    # of the order of the likelihood's (about 300 / 6.25 = 48 per coordinate)
    return LinearRegression(num_data=300, dim=4, noise_std=2.5, prior_var=0.04, seed=1)


def full_potential(target: LinearRegression, w: torch.Tensor) -> torch.Tensor:
    """``U`` at one ``w`` on every point, from the closures the samplers call."""
    chain = w.unsqueeze(0)
    (value, _) = target.closures([chain], noisy=False, generator=torch.Generator())()()
    return value.squeeze(0)


def test_potential_gradient_vanishes_at_the_closed_form_mean(target):
    w = target.mean.clone().requires_grad_()
    (grad,) = torch.autograd.grad(full_potential(target, w), w)
    assert grad.abs().max() < 1e-9
    # and not elsewhere: the same check one posterior sd away fails by far
    away = (target.mean + target.covariance.diagonal().sqrt()).requires_grad_()
    (grad,) = torch.autograd.grad(full_potential(target, away), away)
    assert grad.abs().max() > 1


def test_inverse_covariance_is_the_potentials_hessian(target):
    precision = hessian(lambda w: full_potential(target, w), target.mean)
    torch.testing.assert_close(torch.linalg.inv(target.covariance), precision, rtol=1e-9, atol=0)


def test_closure_gradient_is_autograds_on_every_point_and_on_minibatches(target):
    """The closures' hand-written gradient is that of the value they return, for the full data
    and for each chain's minibatch."""
    w = torch.randn(3, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for noisy in (False, True):
        leaf = w.clone().requires_grad_()
        closure = target.closures([leaf], noisy, torch.Generator().manual_seed(3))()
        value, (grad,) = closure()
        (expected,) = torch.autograd.grad(value.sum(), leaf)
        torch.testing.assert_close(grad, expected)


def test_toy_regression_observables_fold_the_noise_scale_alone():
    """The potential depends on σ through |σ| alone (the post's likelihood), so σ and -σ are
    one draw: (β₀, β, σ) -> (β₀, β, |σ|)."""
    draws = torch.tensor([[[-1.0, 2.0, -0.5], [0.5, -3.0, 0.25]]])
    expected = torch.tensor([[[-1.0, 2.0, 0.5], [0.5, -3.0, 0.25]]])
    torch.testing.assert_close(ToyRegression.observables(draws), expected)
