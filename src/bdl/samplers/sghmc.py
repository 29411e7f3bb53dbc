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
from bdl.samplers.base import Declaration, Sampler, SamplerState
from bdl.samplers.gradient_noise import observing


class SGHMC(Sampler):
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

    def closure_for(self, state: SamplerState, closure: Closure) -> Closure:
        if self.tuning and self.online:
            return observing(state, closure, self.foreach)
        return closure

    @property
    def _friction(self) -> float:
        """This step's friction: ``burn_in_alpha`` while tuning, else ``alpha``."""
        return self.burn_in_alpha if self.tuning else self.alpha

    def _noise_std(self, eta: float) -> float:
        return math.sqrt(2 * eta * max(self._friction - 0.5 * eta * self.grad_var, 0.0))

    def _online_noise_std(self, state: SamplerState, eta: float) -> list[Tensor] | None:
        """Elementwise $\\sqrt{2\\eta\\,\\max(\\alpha - \\hat\\beta, 0)}$, or None
        without an online estimate (yet)."""
        if not self.online or "grad_var" not in state.buffers:
            return None
        std = torch._foreach_mul(state.buffers["grad_var"], -0.5 * eta)
        torch._foreach_add_(std, self._friction)
        torch._foreach_clamp_min_(std, 0.0)
        torch._foreach_mul_(std, 2 * eta)
        torch._foreach_sqrt_(std)
        return std

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        v = state.buffers["momentum"]
        torch._foreach_mul_(v, 1 - self._friction)
        torch._foreach_add_(v, grads, alpha=-step_size)
        if noise:
            std = self._online_noise_std(state, step_size)
            if std is None:
                torch._foreach_add_(v, self.gaussian_like(v), alpha=self._noise_std(step_size))
            else:
                torch._foreach_addcmul_(v, self.gaussian_like(v), std)
        torch._foreach_add_(state.params, v)

    def coefficients(self, step_size: float) -> list[float] | None:
        if self.tuning and self.online:  # the gradients are watched step by step
            return None
        friction = self._friction
        # 1 - α apart from α: rounded from double, as the foreach update's decay is
        return [1 - friction, step_size, self._noise_std(step_size), friction]

    def update_values(
        self,
        params: list[Tensor],
        buffers: dict[str, list[Tensor]],
        grads: list[Tensor],
        coefficients: Tensor,
        draws: list[Tensor],
    ) -> tuple[list[Tensor], dict[str, list[Tensor]]]:
        decay, eta, noise_std, friction = coefficients.unbind()
        v = torch._foreach_mul(buffers["momentum"], decay)
        v = torch._foreach_sub(v, torch._foreach_mul(grads, eta))
        if self.online and "grad_var" in buffers:  # elementwise, as `_online_noise_std`
            # per tensor: a foreach sum with a tensor's value is read out of it, which a program
            # may not do
            std = [
                (friction - 0.5 * eta * variance).clamp(min=0).mul(2 * eta).sqrt()
                for variance in buffers["grad_var"]
            ]
            v = torch._foreach_add(v, torch._foreach_mul(draws, std))
        else:
            v = torch._foreach_add(v, torch._foreach_mul(draws, noise_std))
        return torch._foreach_add(params, v), {**buffers, "momentum": v}

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        v = state.buffers["momentum"]
        draws = self.gaussian_like(v) if noise else [None] * len(v)
        variances = state.buffers.get("grad_var") if self.online else None
        for i, (theta, v_i, g, z) in enumerate(zip(state.params, v, grads, draws, strict=True)):
            v_i.mul_(1 - self._friction).add_(g, alpha=-step_size)
            if z is not None and variances is not None:
                beta = 0.5 * step_size * variances[i]
                v_i.addcmul_(z, (self._friction - beta).clamp_(min=0).mul_(2 * step_size).sqrt_())
            elif z is not None:
                v_i.add_(z, alpha=self._noise_std(step_size))
            theta.add_(v_i)
