r"""Samplers' stationary distributions on a Gaussian target, against closed forms, with
thresholds from the Monte Carlo error.

On $U(\theta) = (\theta - \mu)^2 / (2\sigma^2)$ every update here is a linear recursion
$x' = A x + w$ with Gaussian $w \sim \mathcal N(0, Q)$, whose stationary covariance
solves the discrete Lyapunov equation $\Sigma = A \Sigma A^\top + Q$ (solved here with
``numpy.kron``, not with the code under test). $C$ independent chains started from a
Gaussian give, after the transient has decayed, $C$ independent Gaussian draws: the sample
mean has standard error $\sqrt{\Sigma/C}$ and the sample variance $\Sigma\sqrt{2/(C-1)}$
(40 runs, SGLD and SGHMC over 20 seeds: the standardised mean and variance spread 0.97 and
0.96 of these). Chains start in the stationary distribution itself, so a
wrong update moves them away within a few relaxation times. Each test allows 5 standard errors, so
that a 10% error in an injected noise variance (≥ 20 standard errors at C = 100 000), SGHMC
without its gradient-noise correction (≥ 50) or a mean bias of half a posterior standard
deviation (> 150) fails, while a correct sampler fails once in ~3.5 million runs.
"""

import math

import numpy as np
import pytest
import torch

from bdl.samplers import MALA, SGHMC, SGLD, AdaptiveSGHMC, NaiveSGHMC

MU, SIGMA2, CHAINS = 1.0, 2.0, 100_000
TOLERANCE = 5.0  # standard errors


def _stationary(a: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Σ = A Σ Aᵀ + Q, as vec(Σ) = (I − A ⊗ A)⁻¹ vec(Q)."""
    n = a.shape[0]
    return np.linalg.solve(np.eye(n * n) - np.kron(a, a), q.reshape(-1)).reshape(n, n)


def _closure(theta: torch.Tensor, grad_std: float = 0.0, generator=None):
    """U and ∇U of the Gaussian target per chain, the gradient plus N(0, grad_std²) noise."""

    def closure():
        u = (theta.double() - MU).square() / (2 * SIGMA2)
        grad = (theta - MU) / SIGMA2
        if grad_std:
            grad = grad + grad_std * torch.randn(theta.shape, generator=generator)
        return u, [grad]

    return closure


def _assert_gaussian(draws: torch.Tensor, mean: float, variance: float) -> None:
    draws = draws.double()
    mean_error = math.sqrt(variance / draws.numel())
    variance_error = variance * math.sqrt(2 / (draws.numel() - 1))
    assert abs(draws.mean().item() - mean) < TOLERANCE * mean_error
    assert abs(draws.var().item() - variance) < TOLERANCE * variance_error


def _start(seed: int, covariance: np.ndarray) -> list[torch.Tensor]:
    """Draws of x = (θ − μ, …) from N(0, covariance), shifted to θ; one tensor per coordinate."""
    generator = torch.Generator().manual_seed(seed)
    root = torch.linalg.cholesky(torch.tensor(covariance, dtype=torch.float64))
    x = torch.randn(CHAINS, root.shape[0], generator=generator, dtype=torch.float64) @ root.T
    return [MU + x[:, 0].float(), *(x[:, i].float() for i in range(1, root.shape[0]))]


@pytest.mark.parametrize("seed", [0, 1])
def test_sgld_stationary_variance_is_that_of_its_ar1_recursion(seed):
    """θ' − μ = (1 − ε/(2σ²))(θ − μ) + N(0, ε) (Welling & Teh 2011's update on this U), so the
    stationary variance is ε / (1 − a²), a = 1 − ε/(2σ²): not σ², SGLD's discretisation bias."""
    lr = 0.4
    a = 1 - lr / (2 * SIGMA2)
    variance = lr / (1 - a * a)
    (theta,) = _start(seed, np.array([[variance]]))
    sampler = SGLD(lr, generator=torch.Generator().manual_seed(seed + 10))
    state = sampler.init([theta])
    for _ in range(100):  # a wrong variance shows by a fraction 1 − a^200 = 1 − 7e-10 of it
        sampler.step(state, _closure(theta))
    _assert_gaussian(theta, MU, variance)


@pytest.mark.parametrize("grad_var", [0.0, 4.0])
def test_sghmc_stationary_variance_with_gradient_noise_and_its_correction(grad_var):
    """Chen et al. (2014), eq. 15: v' = (1 − α)v − η(∇U + ξ) + N(0, 2(α − β̂)η), θ' = θ + v',
    ξ ~ N(0, V), β̂ = ηV/2, so the total noise on v has variance η²V + 2(α − ηV/2)η = 2αη
    whatever V. On x = (θ − μ, v): A = [[1 − η/σ², 1 − α], [−η/σ², 1 − α]] and Q = 2αη·11ᵀ.
    Without the correction the noise would be 2αη + η²V: a third more at these settings."""
    lr, alpha = 0.05, 0.3
    k = lr / SIGMA2
    a = np.array([[1 - k, 1 - alpha], [-k, 1 - alpha]])
    sigma = _stationary(a, 2 * alpha * lr * np.ones((2, 2)))
    theta, v = _start(1, sigma)
    noise = torch.Generator().manual_seed(3)
    sampler = SGHMC(lr, alpha=alpha, grad_var=grad_var, generator=torch.Generator().manual_seed(2))
    state = sampler.init([theta])
    state.buffers["momentum"][0].copy_(v)
    closure = _closure(theta, math.sqrt(grad_var), noise)
    for _ in range(150):  # A's spectral radius is 0.875: 0.875^300 = 4e-18 of a wrong start left
        sampler.step(state, closure)
    _assert_gaussian(theta, MU, sigma[0, 0])
    _assert_gaussian(state.buffers["momentum"][0], 0.0, sigma[1, 1])


def test_mala_leaves_the_exact_target_invariant():
    """Chains started exactly in N(μ, σ²) stay there under an exact Metropolis test (Roberts &
    Tweedie 1996), even at a step where the unadjusted Langevin chain would be 25% too wide."""
    (theta,) = _start(4, np.array([[SIGMA2]]))
    sampler = MALA(2.0, adapt=False, generator=torch.Generator().manual_seed(5))
    state = sampler.init([theta])
    for _ in range(50):
        sampler.step(state, _closure(theta))
    _assert_gaussian(theta, MU, SIGMA2)


def test_naive_sghmc_with_mh_leaves_the_exact_target_invariant():
    """Each trajectory of L = 5 leapfrog steps from a fresh momentum, tested on its energy error
    (Neal 2011), is HMC: chains started in N(μ, σ²) stay there. By hand, a trajectory evaluates
    ∇U at its start, at each of the L − 1 interior kicks and at its end: L + 1 evaluations."""
    (theta,) = _start(6, np.array([[SIGMA2]]))
    sampler = NaiveSGHMC(1.5, resample_every=5, mh=True, generator=torch.Generator().manual_seed(7))
    state = sampler.init([theta])
    for _ in range(10 * 5):
        sampler.step(state, _closure(theta))
    assert state.grad_evals == 10 * (5 + 1)
    _assert_gaussian(theta, MU, SIGMA2)


def test_adaptive_sghmc_stationary_variance_with_its_mass_fixed():
    """Springenberg et al. (2016), eq. 10, after burn-in: SGHMC with η = ε² M̂⁻¹, M̂⁻¹ = 1/(λ +
    √V̂). With gradient noise of variance V = V̂ the noise on v is η²V from the gradient plus the
    injected 2αη − ε⁴, so 2αη up to the damping λ's share: the Lyapunov solution of Chen et
    al.'s SGHMC test above with that η and that Q."""
    lr, alpha, grad_var, damping = 0.1, 0.3, 4.0, 1e-5
    eta = lr / (damping + math.sqrt(grad_var))
    k = eta / SIGMA2
    a = np.array([[1 - k, 1 - alpha], [-k, 1 - alpha]])
    q = eta**2 * grad_var + 2 * alpha * eta - lr**2
    sigma = _stationary(a, q * np.ones((2, 2)))
    theta, v = _start(8, sigma)
    sampler = AdaptiveSGHMC(
        lr, alpha=alpha, damping=damping, generator=torch.Generator().manual_seed(9)
    )
    state = sampler.init([theta])
    state.buffers["momentum"][0].copy_(v)
    # the mass as burn-in would have left it, had it seen gradients of second moment V
    for key, value in (("window", 1.0), ("grad_mean", 0.0), ("grad_sq", grad_var)):
        state.buffers[key] = [torch.full_like(theta, value)]
    closure = _closure(theta, math.sqrt(grad_var), torch.Generator().manual_seed(10))
    for _ in range(150):
        sampler.step(state, closure)
    _assert_gaussian(theta, MU, sigma[0, 0])
    _assert_gaussian(state.buffers["momentum"][0], 0.0, sigma[1, 1])
