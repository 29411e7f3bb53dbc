r"""Stochastic gradient Langevin dynamics (Welling & Teh, ICML 2011).

Bühler, eq. (39):

$$
\Delta\theta_t = -\frac{\epsilon_t}{2}\,\nabla \tilde U(\theta_t) + \eta_t,
\qquad \eta_t \sim \mathcal{N}(0, \epsilon_t I),
$$

with $\epsilon_t$ from the schedule (``schedule=polynomial`` is Welling & Teh's
$a(b+t)^{-\gamma}$). It is SGHMC with full friction ($\alpha = 1$) at
$\eta = \epsilon/2$.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bdl.samplers.base import Declaration, Sampler, SamplerState


class SGLD(Sampler):
    """SGLD with step size ``lr`` ($\\epsilon$)."""

    declaration = Declaration(
        step_unit="per datum", vectorisable=True, backs_off=True, epoch_program=True
    )

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        torch._foreach_add_(state.params, grads, alpha=-step_size / 2)
        if noise:
            draws = self.gaussian_like(state.params)
            torch._foreach_add_(state.params, draws, alpha=math.sqrt(step_size))

    def coefficients(self, step_size: float) -> list[float]:
        return [step_size / 2, math.sqrt(step_size)]

    def update_values(
        self,
        params: list[Tensor],
        buffers: dict[str, list[Tensor]],
        grads: list[Tensor],
        coefficients: Tensor,
        draws: list[Tensor],
    ) -> tuple[list[Tensor], dict[str, list[Tensor]]]:
        half_step, noise_std = coefficients[0], coefficients[1]
        moved = torch._foreach_sub(params, torch._foreach_mul(grads, half_step))
        return torch._foreach_add(moved, torch._foreach_mul(draws, noise_std)), buffers

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        draws = self.gaussian_like(state.params) if noise else [None] * len(grads)
        for theta, g, z in zip(state.params, grads, draws, strict=True):
            theta.add_(g, alpha=-step_size / 2)
            if z is not None:
                theta.add_(z, alpha=math.sqrt(step_size))
