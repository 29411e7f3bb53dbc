r"""Scale-adapted SGHMC (Springenberg, Klein, Falkner & Hutter, NeurIPS 2016).

SGHMC (Chen et al. 2014) with a diagonal mass matrix $\hat M$ fitted to the gradients
during burn-in, Springenberg et al.'s eq. (10) on the gradient $g = \nabla\tilde U(\theta)$
of our potential:

$$
\begin{aligned}
v &\leftarrow v - \epsilon^2 \hat M^{-1} g - \alpha\, v
      + \mathcal N\big(0,\; 2\epsilon^2\alpha\,\hat M^{-1} - \epsilon^4 I\big), \qquad
\hat M^{-1} = \mathrm{diag}\Big(\frac{1}{\lambda + \sqrt{\hat V}}\Big) \\
\theta &\leftarrow \theta + v
\end{aligned}
$$

$\alpha = \epsilon\hat M^{-1}C$ is the friction ("mdecay"), and $\epsilon^4$ the part
of the required noise that the minibatch gradient brings: its noise in $v$,
$\epsilon^4\hat M^{-1}V\hat M^{-1}$, is $\epsilon^4$ where $\hat V$ estimates
$V$ (where the difference is negative, no noise is injected). Per coordinate this is
`bdl.samplers.sghmc.SGHMC` with the learning rate $\eta_i = \epsilon^2/\sqrt{\hat
V_i}$ and $\hat\beta_i = \tfrac12\eta_i\hat V_i$.

**Burn-in** (``tune=True``) updates, per coordinate, a running mean $\bar g$ and second
moment $\hat V$ of the gradient over a window $\tau$ that grows by one a step while
the gradient is noise about a small mean (a long average) and falls back towards 1 where its
mean dominates (a gradient still changing as the chain travels; eqs. 8-9, after Schaul et al.
2013), each with $r = 1/(\tau + 1)$ of the step's start:

$$
\tau \leftarrow \tau\,\big(1 - \bar g^2 / (\hat V + \lambda)\big) + 1, \qquad
\bar g \leftarrow (1 - r)\,\bar g + r\, g, \qquad
\hat V \leftarrow (1 - r)\,\hat V + r\, g^2.
$$

After burn-in $\hat M$ is fixed, so the chain that is sampled is SGHMC with a constant
mass matrix. The estimates start at 1 ($\tau = \bar g = \hat V = 1$), as in Springenberg
et al.'s code: a first gradient would be a worse start, since a coordinate whose first gradient
vanishes (a bias at 0 in a unit that no input activates) would get the mass $\lambda$ and
a step far past stability. The first burn-in step already halves their weight; a run without
burn-in is SGHMC with $\eta = \epsilon^2$ and no scale adaptation.

**Units.** $\epsilon^2\hat M^{-1} g$ is invariant to the scale of $g$, so ``lr`` is
$\epsilon^2$ on the scale of ``U`` itself, not a per-datum rate divided by $N$
(``step_unit="potential"``); a schedule's multiplier scales $\epsilon^2$, as it scales
SGHMC's $\eta$. Springenberg et al.'s $\epsilon = 10^{-2}$ is ``lr=1e-4``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bdl.noise import Generator
from bdl.samplers.base import Declaration, Sampler, SamplerState


class AdaptiveSGHMC(Sampler):
    """Scale-adapted SGHMC with ``lr`` $\\epsilon^2$, friction ``alpha``
    ($\\alpha$) and ``damping`` $\\lambda$ of the mass estimate."""

    declaration = Declaration(step_unit="potential", vectorisable=True, backs_off=True)

    def __init__(
        self,
        lr: float,
        alpha: float = 0.05,
        damping: float = 1e-5,
        *,
        foreach: bool = True,
        generator: Generator = None,
    ) -> None:
        super().__init__(lr, foreach=foreach, generator=generator)
        if not 0 < alpha <= 1:
            raise ValueError(f"sampler.alpha (friction) must be in (0, 1], got {alpha}")
        if not 0 < damping < math.inf:
            raise ValueError(f"sampler.damping must be positive and finite, got {damping}")
        self.alpha = alpha
        self.damping = damping
        # (grad_sq list, step size, inverse mass, noise std): see _mass_and_noise
        self._cached: tuple[list[Tensor], float, list[Tensor], list[Tensor]] | None = None

    def init(self, params: list[Tensor]) -> SamplerState:
        state = super().init(params)
        state.buffers["momentum"] = [torch.zeros_like(p) for p in params]
        for key in ("window", "grad_mean", "grad_sq"):
            state.buffers[key] = [torch.ones_like(p) for p in params]
        return state

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        buffers = state.buffers
        if self.tuning:
            window, mean, square = buffers["window"], buffers["grad_mean"], buffers["grad_sq"]
            rate = torch._foreach_add(window, 1.0)
            torch._foreach_reciprocal_(rate)
            shrink = torch._foreach_mul(mean, mean)
            torch._foreach_div_(shrink, torch._foreach_add(square, self.damping))
            torch._foreach_mul_(shrink, window)  # τ ḡ² / (V̂ + λ)
            torch._foreach_sub_(window, shrink)
            torch._foreach_add_(window, 1.0)
            torch._foreach_addcmul_(mean, rate, torch._foreach_sub(grads, mean))
            torch._foreach_addcmul_(
                square, rate, torch._foreach_sub(torch._foreach_mul(grads, grads), square)
            )
        inverse_mass, std = self._mass_and_noise(buffers["grad_sq"], step_size)
        v = buffers["momentum"]
        torch._foreach_mul_(v, 1 - self.alpha)
        torch._foreach_addcmul_(v, inverse_mass, grads, value=-step_size)
        if noise:
            torch._foreach_addcmul_(v, self.gaussian_like(v), std)
        torch._foreach_add_(state.params, v)

    def _mass_and_noise(
        self, grad_sq: list[Tensor], step_size: float
    ) -> tuple[list[Tensor], list[Tensor]]:
        r"""$\hat M^{-1}$ and the injected noise's standard deviation. After burn-in both
        are fixed for a given step, so they are kept and reused (recomputing them takes seven more
        passes over the parameters a step, about a tenth of a UCI network's step time) until
        a burn-in step, another step size or another ``grad_sq`` list (a restored checkpoint)
        come."""
        cached = self._cached
        # buffers are replaced as whole lists (a restored checkpoint), never element by element
        kept = cached is not None and cached[0] is grad_sq and cached[1] == step_size
        if self.tuning or not kept:
            inverse_mass = torch._foreach_sqrt(grad_sq)
            torch._foreach_add_(inverse_mass, self.damping)
            torch._foreach_reciprocal_(inverse_mass)
            std = torch._foreach_mul(inverse_mass, 2 * step_size * self.alpha)
            torch._foreach_add_(std, -(step_size**2))
            torch._foreach_clamp_min_(std, 0.0)
            torch._foreach_sqrt_(std)
            cached = self._cached = (grad_sq, step_size, inverse_mass, std)
        return cached[2], cached[3]

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        buffers = state.buffers
        draws = self.gaussian_like(state.params) if noise else [None] * len(grads)
        for theta, v, g, z, window, mean, square in zip(
            state.params,
            buffers["momentum"],
            grads,
            draws,
            buffers["window"],
            buffers["grad_mean"],
            buffers["grad_sq"],
            strict=True,
        ):
            if self.tuning:
                rate = 1 / (window + 1)
                window.mul_(1 - mean * mean / (square + self.damping)).add_(1)
                mean.add_(rate * (g - mean))
                square.add_(rate * (g * g - square))
            inverse_mass = 1 / (square.sqrt() + self.damping)
            v.mul_(1 - self.alpha).addcmul_(inverse_mass, g, value=-step_size)
            if z is not None:
                variance = 2 * step_size * self.alpha * inverse_mass - step_size**2
                v.addcmul_(z, variance.clamp_(min=0).sqrt_())
            theta.add_(v)
