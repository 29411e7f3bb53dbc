r"""Toy targets whose posterior is known, for ``bdl-check`` (`bdl.checks.check_targets`).

Each target hands the samplers closures exactly like the runner's: ``closure()`` returns
``(U, [∇U])`` at the parameters' current values. Parameters carry a leading chain dimension
(``C`` independent chains in one tensor) and ``U`` has shape ``(C,)``, so one closure call
advances every chain and each chain gets its own Metropolis test. Minibatch gradient noise is
modelled as in Chen et al. (2014): "true gradient + $\mathcal N(0, V)$" for the synthetic
targets, a random minibatch with the $N/n$ scaling of `bdl.potential` for the
regressions. The value ``U`` a noisy closure returns is exact, as in Chen et al.'s code, where
the Metropolis tests of their Fig. 1 use the exact potential.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from bdl.closures import Closure, ClosureFactory


def _chains(chains: int, *shape: int) -> Tensor:
    return torch.zeros(chains, *shape, dtype=torch.float64)


class DoubleWell:
    r"""Chen et al. (2014), Fig. 1: $U(\theta) = -2\theta^2 + \theta^4$, gradient noise
    $\mathcal N(0, V = 4)$."""

    name = "double_well"
    grad_var = 4.0

    def init(self, chains: int) -> list[Tensor]:
        return [_chains(chains)]

    @staticmethod
    def potential(theta: Tensor) -> Tensor:
        return -2 * theta**2 + theta**4

    def closures(
        self, params: list[Tensor], noisy: bool, generator: torch.Generator
    ) -> ClosureFactory:
        (theta,) = params

        def evaluate() -> tuple[Tensor, list[Tensor]]:
            grad = -4 * theta + 4 * theta**3
            if noisy:
                noise = torch.randn(theta.shape, generator=generator, dtype=theta.dtype)
                grad = grad + math.sqrt(self.grad_var) * noise
            return self.potential(theta), [grad]

        return lambda: evaluate

    def __init__(self) -> None:
        # The mass beyond ±4 is below e^-120: quadrature on [-4, 4] is exact to float64.
        self.grid = torch.linspace(-4.0, 4.0, 800_001, dtype=torch.float64)
        unnormalised = torch.exp(-self.potential(self.grid))
        cdf = torch.cumulative_trapezoid(unnormalised, self.grid)
        self.normaliser = cdf[-1]
        self.cdf = torch.cat([cdf.new_zeros(1), cdf]) / self.normaliser

    def bin_masses(self, edges: Tensor) -> Tensor:
        """The exact probability of each bin ``[edges[i], edges[i+1])``; the first and last
        edges may be infinite."""
        inside = np.interp(edges.clamp(-4, 4).numpy(), self.grid.numpy(), self.cdf.numpy())
        return torch.from_numpy(inside).diff()

    def density(self, x: Tensor) -> Tensor:
        return torch.exp(-self.potential(x)) / self.normaliser


class CorrelatedGaussian:
    r"""Chen et al. (2014), Fig. 3: $\mathcal N(0, \Sigma)$, $\Sigma_{11} =
    \Sigma_{22} = 1$, $\Sigma_{12} = \rho = 0.9$; gradient noise $\mathcal N(0, I)$
    (their code: ``gradUNoise = invS * x + randn(2, 1)``, ``V = 1``)."""

    name = "gaussian_2d"
    grad_var = 1.0

    def __init__(self, rho: float = 0.9) -> None:
        self.covariance = torch.tensor([[1.0, rho], [rho, 1.0]], dtype=torch.float64)
        self.precision = torch.linalg.inv(self.covariance)
        self.mean = torch.zeros(2, dtype=torch.float64)

    def init(self, chains: int) -> list[Tensor]:
        return [_chains(chains, 2)]

    def closures(
        self, params: list[Tensor], noisy: bool, generator: torch.Generator
    ) -> ClosureFactory:
        (theta,) = params

        def evaluate() -> tuple[Tensor, list[Tensor]]:
            grad = theta @ self.precision
            value = 0.5 * (grad * theta).sum(-1)
            if noisy:
                noise = torch.randn(theta.shape, generator=generator, dtype=theta.dtype)
                grad = grad + math.sqrt(self.grad_var) * noise
            return value, [grad]

        return lambda: evaluate


class LinearRegression:
    r"""Bayesian linear regression with known noise (Ambrogioni): $y = Xw + \mathcal N(0,
    \sigma^2)$, prior $w \sim \mathcal N(0, \lambda I)$; the posterior is
    $\mathcal N(\mu, \Sigma)$ with $\Sigma = (X^\top X/\sigma^2 + I/\lambda)^{-1}$,
    $\mu = \Sigma X^\top y/\sigma^2$.

    ``U`` is our potential, $\frac{N}{n}\sum_{i\in\mathcal B}\frac{(y_i - x_i^\top
    w)^2}{2\sigma^2} + \frac{\lVert w\rVert^2}{2\lambda}$ (constants dropped), on a random
    minibatch of size ``batch_size`` drawn per chain and per step, or on all $N$ points.
    """

    name = "linear_regression"

    def __init__(
        self,
        num_data: int = 500,
        dim: int = 5,
        batch_size: int = 50,
        noise_std: float = 1.0,
        prior_var: float = 1.0,
        seed: int = 0,
    ) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(num_data, dim, generator=generator, dtype=torch.float64)
        self.w_true = torch.randn(dim, generator=generator, dtype=torch.float64)
        noise = torch.randn(num_data, generator=generator, dtype=torch.float64)
        self.y = self.x @ self.w_true + noise_std * noise
        self.batch_size = batch_size
        self.noise_var = noise_std**2
        self.prior_var = prior_var
        eye = torch.eye(dim, dtype=torch.float64)
        self.covariance = torch.linalg.inv(self.x.T @ self.x / self.noise_var + eye / prior_var)
        self.mean = self.covariance @ self.x.T @ self.y / self.noise_var

    @property
    def num_data(self) -> int:
        return self.x.shape[0]

    def init(self, chains: int) -> list[Tensor]:
        return [_chains(chains, self.x.shape[1])]

    def _evaluate(self, w: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, list[Tensor]]:
        """``U`` and its gradient on ``x`` (``(N, D)``, shared) or ``(C, n, D)`` (a minibatch per
        chain) and ``y``, the likelihood scaled to ``N`` points."""
        scale = self.num_data / x.shape[-2]
        residual = y - (x @ w.unsqueeze(-1)).squeeze(-1)
        value = scale * residual.square().sum(-1) / (2 * self.noise_var)
        grad = (residual.unsqueeze(-2) @ x).squeeze(-2) * (-scale / self.noise_var)
        return value + w.square().sum(-1) / (2 * self.prior_var), [grad + w / self.prior_var]

    def closures(
        self, params: list[Tensor], noisy: bool, generator: torch.Generator
    ) -> ClosureFactory:
        (w,) = params
        if not noisy:
            return lambda: lambda: self._evaluate(w, self.x, self.y)
        data = torch.cat([self.x, self.y.unsqueeze(-1)], -1)

        def minibatch() -> Closure:
            # Drawn with replacement: as unbiased as a permutation, and cheap for many chains.
            index = torch.randint(
                self.num_data, (w.shape[0] * self.batch_size,), generator=generator
            )
            batch = data.index_select(0, index).view(w.shape[0], self.batch_size, -1)
            x, y = batch[..., :-1], batch[..., -1]
            return lambda: self._evaluate(w, x, y)

        return minibatch


class ToyRegression:
    r"""The SG-MCMC tutorial (2020)'s "very simple neural net": $y_n = \beta_0 + \beta x_n +
    \mathcal N(0, \sigma^2)$, $x_n \sim U(-1, 1)$, $N = 30$, $\beta_0 = -1$,
    $\beta = 2$, $\sigma = 0.5$ (the post's code), a flat prior and $\sigma$
    unconstrained with $|\sigma|$ in the likelihood, as in the post. Its posterior has no
    closed form (the reference is a long HMC run); $\sigma$ is compared through
    $|\sigma|$.
    """

    name = "toy_regression"

    def __init__(self, num_data: int = 30, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = 2 * torch.rand(num_data, generator=generator, dtype=torch.float64) - 1
        noise = torch.randn(num_data, generator=generator, dtype=torch.float64)
        self.y = -1.0 + 2.0 * self.x + 0.5 * noise

    def init(self, chains: int) -> list[Tensor]:
        """β₀ = β = 0 and σ = 1 (the post starts σ at 1)."""
        return [_chains(chains), _chains(chains), torch.ones(chains, dtype=torch.float64)]

    def closures(
        self, params: list[Tensor], noisy: bool, generator: torch.Generator
    ) -> ClosureFactory:
        beta0, beta, sigma = params
        n = self.x.shape[0]

        def evaluate() -> tuple[Tensor, list[Tensor]]:
            residual = self.y - beta0.unsqueeze(-1) - beta.unsqueeze(-1) * self.x
            squares = residual.square().sum(-1)
            value = n * sigma.abs().log() + squares / (2 * sigma**2)
            grads = [
                -residual.sum(-1) / sigma**2,
                -(residual * self.x).sum(-1) / sigma**2,
                n / sigma - squares / sigma**3,
            ]
            return value, grads

        return lambda: evaluate

    @staticmethod
    def observables(draws: Tensor) -> Tensor:
        """(β₀, β, |σ|) from draws of (β₀, β, σ) along the last dimension."""
        return torch.cat([draws[..., :2], draws[..., 2:].abs()], -1)
