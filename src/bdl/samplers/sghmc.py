r"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin, ICML 2014).

Second-order Langevin dynamics with friction (Bühler, eq. 46), discretised as in Chen et al.'s
eq. (15) with $v = \eta\, p$:

$$
\begin{aligned}
v &\leftarrow (1 - \alpha)\, v - \eta\, \nabla \tilde U(\theta)
      + \mathcal{N}\big(0,\; 2(\alpha - \hat\beta)\,\eta\big) \\
\theta &\leftarrow \theta + v
\end{aligned}
$$

$\eta$ is the learning rate (step size squared, $\epsilon^2$, in Hamiltonian
units), $\alpha = \epsilon C$ the friction ("momentum decay" in Chen et al.'s code) and
$\hat\beta = \tfrac12\eta\hat V$ the part of the required noise that the minibatch
gradients already bring, $\hat V$ being an estimate of $\mathrm{Var}[\nabla\tilde U]$
(Chen et al.'s code: ``beta = V * eta * 0.5``; their $\hat B = \tfrac12\epsilon\hat V$ in
Hamiltonian units). ``grad_var`` sets $\hat V$: a number (Chen et al.'s toy: the known
$V = 4$), ``"online"`` for an elementwise estimate from the minibatch gradients of burn-in
(`bdl.samplers.gradient_noise`, frozen afterwards), or 0 (the default), Chen et al.'s
recommendation for small $\eta$. Where $\hat\beta > \alpha$ the gradient noise alone
exceeds what the friction dissipates and no noise is injected (the chain is then too hot: lower
``lr`` or raise ``alpha``).

``burn_in_alpha`` sets another friction for burn-in (``tune=True``) alone: its samples are not
kept, so any dynamics that reach the typical set will do, and a low friction reaches it in fewer
steps than the higher one that keeps the minibatch gradient noise's heating small
(``sampler=sghmc_uci``).

Cyclical SGHMC (cSGHMC, Zhang et al. 2020) is this update under ``schedule=cyclical``.

**Mapping onto SGD with momentum.** Without its injected noise the update is exactly PyTorch's
heavy-ball SGD, ``torch.optim.SGD(lr=η, momentum=1 − α)``: $v$ is ``-lr * buf``. Chen et
al.'s MNIST setting, learning rate 0.1 per datum ($\eta = 0.1/N$) and $\alpha = 0.01$,
is SGD with momentum 0.99.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bdl.closures import Closure
from bdl.noise import Generator
from bdl.samplers.arithmetic import Arithmetic
from bdl.samplers.base import Declaration, RuleInputs, RuleSampler, SamplerState, Update
from bdl.samplers.gradient_noise import observing


class SGHMC(RuleSampler):
    """SGHMC with learning rate ``lr`` ($\\eta$) and friction ``alpha`` ($\\alpha$)."""

    declaration = Declaration(
        step_unit="per datum", vectorisable=True, backs_off=True, epoch_program=True
    )

    def __init__(
        self,
        lr: float,
        alpha: float = 0.01,
        grad_var: float | str = 0.0,
        burn_in_alpha: float | None = None,
        *,
        foreach: bool = True,
        generator: Generator = None,
    ) -> None:
        super().__init__(lr, foreach=foreach, generator=generator)
        for key, value in (("alpha", alpha), ("burn_in_alpha", burn_in_alpha)):
            if value is not None and not 0 < value <= 1:
                raise ValueError(f"sampler.{key} (friction) must be in (0, 1], got {value}")
        self.online = grad_var == "online"
        if not self.online and not (isinstance(grad_var, int | float) and 0 <= grad_var < math.inf):
            raise ValueError(
                f"sampler.grad_var must be a finite variance ≥ 0 or 'online', got {grad_var}"
            )
        self.alpha = alpha
        self.burn_in_alpha = alpha if burn_in_alpha is None else burn_in_alpha
        self.grad_var = 0.0 if self.online else float(grad_var)

    def init(self, params: list[Tensor]) -> SamplerState:
        state = super().init(params)
        state.buffers["momentum"] = [torch.zeros_like(p) for p in params]
        return state

    def watches_gradients(self) -> bool:
        return self.tuning and self.online

    def closure_for(self, state: SamplerState, closure: Closure) -> Closure:
        if self.watches_gradients():
            return observing(state, closure, self.foreach)
        return closure

    def coefficients(self, step_size: float) -> list[float]:
        # this step's friction: ``burn_in_alpha`` while tuning, else ``alpha``; 1 - α apart from
        # α, rounded from double in every form
        friction = self.burn_in_alpha if self.tuning else self.alpha
        return [1 - friction, step_size, noise_std(friction, step_size, self.grad_var), friction]

    def rule(self, arithmetic: Arithmetic, step: RuleInputs) -> Update:
        decay, eta, std, friction = step.coefficients
        v = arithmetic.scaled(step.buffers["momentum"], decay)
        v = arithmetic.subtracted(v, step.grads, eta)
        if step.draws is not None:
            if self.online and "grad_var" in step.buffers:  # elementwise: the frozen estimate
                std = [noise_std(friction, eta, variance) for variance in step.buffers["grad_var"]]
            v = arithmetic.added(v, step.draws, std)
        return arithmetic.added(step.params, v), {**step.buffers, "momentum": v}


def noise_std(alpha: float | Tensor, eta: float | Tensor, V: float | Tensor) -> float | Tensor:
    r"""The injected noise's standard deviation $\sqrt{2\eta\,\max(\alpha - \hat\beta, 0)}$,
    $\hat\beta = \tfrac12\eta\hat V$: a number, or elementwise where ``V`` ($\hat V$)
    is a tensor (an online estimate) or the coefficients are (a program's)."""
    excess = alpha - 0.5 * eta * V
    excess = excess.clamp(min=0) if isinstance(excess, Tensor) else max(excess, 0.0)
    return (2 * eta * excess) ** 0.5
