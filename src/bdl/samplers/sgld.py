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
from collections.abc import Sequence

from torch import Tensor

from bdl.samplers.arithmetic import Arithmetic
from bdl.samplers.base import Declaration, RuleSampler


class SGLD(RuleSampler):
    """SGLD with step size ``lr`` ($\\epsilon$)."""

    declaration = Declaration(
        step_unit="per datum", vectorisable=True, backs_off=True, epoch_program=True
    )

    def coefficients(self, step_size: float) -> list[float]:
        return [step_size / 2, math.sqrt(step_size)]

    def rule(
        self,
        arithmetic: Arithmetic,
        params: list[Tensor],
        buffers: dict[str, list[Tensor]],
        grads: list[Tensor],
        coefficients: Sequence[float | Tensor],
        draws: list[Tensor] | None,
    ) -> tuple[list[Tensor], dict[str, list[Tensor]]]:
        half_step, noise_std = coefficients
        theta = arithmetic.added(params, grads, -half_step)
        if draws is not None:
            theta = arithmetic.added(theta, draws, noise_std)
        return theta, buffers
