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

from bdl.samplers.arithmetic import Arithmetic
from bdl.samplers.base import Declaration, RuleInputs, RuleSampler, Update


class SGLD(RuleSampler):
    """SGLD with step size ``lr`` ($\\epsilon$)."""

    declaration = Declaration(
        step_unit="per datum", vectorisable=True, backs_off=True, epoch_program=True
    )

    def coefficients(self, step_size: float) -> list[float]:
        return [step_size / 2, math.sqrt(step_size)]

    def rule(self, arithmetic: Arithmetic, step: RuleInputs) -> Update:
        half_step, noise_std = step.coefficients
        theta = arithmetic.subtracted(step.params, step.grads, half_step)
        if step.draws is not None:
            theta = arithmetic.added(theta, step.draws, noise_std)
        return theta, step.buffers
