"""The toy targets' closed forms against autograd of their own potentials: the posterior of the
linear regression is Gaussian, so its mean is where the potential's gradient vanishes and its
precision is the potential's Hessian (Bishop 2006, section 3.3), at a noise scale and a prior
scale that differ from 1 and from each other, so that a misplaced or dropped term shows."""

from __future__ import annotations

import math

import pytest
import torch
from torch.autograd.functional import hessian
from torch.distributions import MultivariateNormal, Normal

from bdl.checks.targets import CorrelatedGaussian, DoubleWell, LinearRegression, ToyRegression


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


def _exact(target, params: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    return target.closures(params, noisy=False, generator=torch.Generator())()()


def test_double_well_and_gaussian_potentials_are_their_densities_negative_logs():
    """Chen et al.'s ``U = -2θ² + θ⁴`` and ``½ θᵀΣ⁻¹θ`` (``-log N(θ; 0, Σ)`` up to its value at
    0, by torch.distributions), each gradient autograd's of the value."""
    generator = torch.Generator().manual_seed(0)
    theta = 1.5 * torch.randn(6, generator=generator, dtype=torch.float64)
    leaf = theta.clone().requires_grad_()
    value, (grad,) = _exact(DoubleWell(), [leaf])
    torch.testing.assert_close(value, -2 * theta**2 + theta**4)
    torch.testing.assert_close(grad, torch.autograd.grad(value.sum(), leaf)[0])

    target = CorrelatedGaussian(rho=0.6)
    normal = MultivariateNormal(torch.zeros(2, dtype=torch.float64), target.covariance)
    torch.testing.assert_close(target.covariance, torch.tensor([[1, 0.6], [0.6, 1.0]]).double())
    leaf = torch.randn(6, 2, generator=generator, dtype=torch.float64).requires_grad_()
    value, (grad,) = _exact(target, [leaf])
    expected = normal.log_prob(torch.zeros(2, dtype=torch.float64)) - normal.log_prob(leaf)
    torch.testing.assert_close(value, expected)
    torch.testing.assert_close(grad, torch.autograd.grad(expected.sum(), leaf)[0])


@pytest.mark.parametrize("kind", [DoubleWell, CorrelatedGaussian], ids=lambda kind: kind.name)
def test_synthetic_gradient_noise_is_centred_with_the_stated_variance(kind):
    """Chen et al.'s noisy gradient: the exact one plus independent N(0, V) per coordinate (V = 4
    and 1), with the exact ``U``; mean and variance over 40,000 chains within 5 standard errors
    (V/√n and V√(2/n))."""
    target, chains = kind(), 40_000
    params = [0.7 * torch.ones_like(p) for p in target.init(chains)]
    value, (exact,) = _exact(target, params)
    noisy_value, (noisy,) = target.closures(params, True, torch.Generator().manual_seed(1))()()
    torch.testing.assert_close(noisy_value, value)
    noise = (noisy - exact).reshape(chains, -1)
    variance = target.grad_var
    assert (noise.mean(0).abs() < 5 * math.sqrt(variance / chains)).all()
    covariance = torch.atleast_2d(torch.cov(noise.T))
    expected = variance * torch.eye(noise.shape[1], dtype=torch.float64)
    assert ((covariance - expected).abs() < 5 * variance * math.sqrt(2 / chains)).all()


def test_minibatch_potential_and_gradient_are_unbiased_and_drawn_per_chain_and_step():
    """``N/n`` times a minibatch's sum, drawn with replacement: its mean over minibatches is the
    full data's ``U`` and ``∇U`` (within 5 standard errors over 4,000 chains at one ``w``)."""
    target = LinearRegression()
    assert (target.num_data, target.batch_size, target.x.shape[1]) == (500, 50, 5)
    chains = 4_000
    w = torch.randn(5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    params = [w.expand(chains, 5).clone()]
    value, (grad,) = _exact(target, params)
    factory = target.closures(params, True, torch.Generator().manual_seed(5))
    batch_value, (batch_grad,) = factory()()
    for estimate, exact in ((batch_value, value[0]), (batch_grad, grad[0])):
        error = estimate.mean(0) - exact
        assert (error.abs() < 5 * estimate.std(0) / math.sqrt(chains)).all()
        assert (estimate.std(0) > 1e-3 * exact.abs()).all()  # each chain its own minibatch
    again, _ = factory()()
    assert not torch.equal(again, batch_value)  # a new minibatch each step


def test_data_follow_their_stated_generative_models():
    """Least squares on the tutorial's 30 points recovers β₀ = -1, β = 2 within 4 standard
    errors and a noise scale near σ = 0.5 (the sample sd of 30 residuals has sd σ/√56 ≈ 0.067);
    target 3's noise, y - X w_true, has sd 1 (within 4 x 1/√1000)."""
    toy = ToyRegression()
    assert toy.x.shape == (30,) and (toy.x.abs() < 1).all()
    design = torch.stack([torch.ones_like(toy.x), toy.x], 1)
    fit = torch.linalg.lstsq(design, toy.y.unsqueeze(-1)).solution.squeeze(-1)
    residual = toy.y - design @ fit
    scale = residual.square().sum().div(28).sqrt()
    standard_errors = scale * torch.linalg.inv(design.T @ design).diagonal().sqrt()
    truth = torch.tensor([-1.0, 2.0], dtype=torch.float64)
    assert ((fit - truth).abs() < 4 * standard_errors).all()
    assert abs(scale - 0.5) < 4 * 0.5 / math.sqrt(56)
    beta0, beta, sigma = toy.init(3)
    assert beta0.eq(0).all() and beta.eq(0).all() and sigma.eq(1).all()  # the post's start

    linear = LinearRegression()
    noise = linear.y - linear.x @ linear.w_true
    assert abs(noise.std() - 1) < 4 / math.sqrt(1000) and abs(noise.mean()) < 4 / math.sqrt(500)
    # the closed form is the normal equations' solution (Bishop 2006, eq. 3.53-3.54)
    precision = linear.x.T @ linear.x + torch.eye(5, dtype=torch.float64)
    torch.testing.assert_close(linear.mean, torch.linalg.solve(precision, linear.x.T @ linear.y))
    torch.testing.assert_close(linear.covariance, torch.linalg.inv(precision))


def test_toy_regression_potential_is_the_posts_negative_log_likelihood():
    """``U = -Σ log N(y_n; β₀ + β x_n, |σ|)`` up to ``n/2 log 2π``, by torch.distributions, at
    negative σ too; the gradients autograd's."""
    target = ToyRegression()
    generator = torch.Generator().manual_seed(6)
    beta0, beta = torch.randn(2, 4, generator=generator, dtype=torch.float64)
    sigma = torch.tensor([0.3, -0.7, 1.5, -2.0], dtype=torch.float64)
    leaves = [p.clone().requires_grad_() for p in (beta0, beta, sigma)]
    value, grads = _exact(target, leaves)
    mean = leaves[0].unsqueeze(-1) + leaves[1].unsqueeze(-1) * target.x
    log_likelihood = Normal(mean, leaves[2].abs().unsqueeze(-1)).log_prob(target.y).sum(-1)
    torch.testing.assert_close(value, -log_likelihood - 15 * math.log(2 * math.pi))
    expected = torch.autograd.grad(value.sum(), leaves)
    for grad, autograd in zip(grads, expected, strict=True):
        torch.testing.assert_close(grad, autograd)


def test_data_and_gradient_noise_come_from_the_given_seeds_alone():
    """A check is reproducible from its seed: the targets' data and their closures' noise are
    drawn from the generators they are given, whatever the global generator's state."""

    def draw() -> list[torch.Tensor]:
        drawn = []
        for target in (LinearRegression(), ToyRegression(), CorrelatedGaussian(), DoubleWell()):
            params = [torch.ones_like(p) for p in target.init(3)]
            _, grads = target.closures(params, True, torch.Generator().manual_seed(3))()()
            drawn += [
                *grads,
                *(getattr(target, name) for name in ("x", "y") if name in vars(target)),
            ]
        return drawn

    with torch.random.fork_rng():
        torch.manual_seed(1)
        first = draw()
        torch.manual_seed(2)
        second = draw()
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
