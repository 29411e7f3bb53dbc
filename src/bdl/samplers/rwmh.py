r"""Random-walk Metropolis (Metropolis et al. 1953).

Bühler, §3.1, and the Metropolis optimiser of the SG-MCMC tutorial, 2020: propose
$\theta^* \sim \mathcal N(\theta, \sigma^2 I)$ and accept with probability
$\min[1, \exp(U(\theta) - U(\theta^*))]$ (eq. 11; the Gaussian proposal is symmetric, so no
Hastings correction). ``lr`` is the proposal variance $\sigma^2$, the variance of SGLD's and
MALA's noise at the same ``lr`` (`bdl.samplers.metropolis`); the SG-MCMC tutorial (2020)'s
``alpha = 0.02`` is a proposal standard deviation, ``lr = 4e-4``.

The gradient the closure returns is not used (the runner's closures always compute it, so on a
network each proposal costs a forward and a backward pass). ``approximate=True`` tests on the
minibatch estimate of ``U`` instead (Ambrogioni; biased).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bdl.closures import Closure
from bdl.noise import Generator
from bdl.samplers.base import Declaration, SamplerState
from bdl.samplers.metropolis import (
    DIVERGENCE_THRESHOLD,
    MetropolisSampler,
    MetropolisState,
    metropolis_test,
    select_,
)


class RWMH(MetropolisSampler):
    """Gaussian random-walk Metropolis with proposal variance ``lr``.

    The default ``target_accept`` 0.234 is the optimal acceptance rate in high dimension (Roberts,
    Gelman & Gilks 1997); in one dimension it is about 0.44. A proposal whose rise
    $U(\\theta^*) - U(\\theta)$ exceeds ``divergence_threshold`` (or is not finite) is
    counted as a divergent transition, as HMC's energy error is.
    """

    declaration = Declaration(step_unit="per datum", full_batch=True, vectorisable=True)

    def __init__(
        self,
        lr: float,
        approximate: bool = False,
        adapt: bool = True,
        target_accept: float = 0.234,
        divergence_threshold: float = DIVERGENCE_THRESHOLD,
        *,
        foreach: bool = True,
        generator: Generator = None,
    ) -> None:
        super().__init__(
            lr, adapt, target_accept, divergence_threshold, foreach=foreach, generator=generator
        )
        self._on_minibatches(approximate)

    @torch.no_grad()
    def step(
        self,
        state: MetropolisState,
        closure: Closure,
        lr_scale: float = 1.0,
        noise: bool = True,
        tune: bool = False,
    ) -> MetropolisState:
        sigma = self._scale(state, lr_scale, tune)
        start = self._current(state, closure)
        start_params = [q.clone() for q in state.params]
        update = self._update_foreach if self.foreach else self._update_loop
        update(state, [], sigma**2, noise)
        end = closure()
        state.grad_evals += 1
        log_ratio = start[0].double() - end[0].double()
        accept = metropolis_test(state, log_ratio, self.generator, self.divergence_threshold)
        select_(accept, state.params, start_params)
        self._finish(state, accept, start, end, tune)
        state.info["step_size"] = torch.tensor(sigma)
        return state

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        """The proposal: ``θ += N(0, step_size)``."""
        torch._foreach_add_(
            state.params, self.gaussian_like(state.params), alpha=math.sqrt(step_size)
        )

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        for q, z in zip(state.params, self.gaussian_like(state.params), strict=True):
            q.add_(z, alpha=math.sqrt(step_size))
