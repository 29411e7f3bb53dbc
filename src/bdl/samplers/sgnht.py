r"""Stochastic gradient Nosé-Hoover thermostat, SGNHT (Ding, Fang, Babbush, Chen, Skeel & Neven,
NeurIPS 2014).

SGHMC with a friction that adapts itself: a thermostat $\xi$ rises while the momenta carry
more kinetic energy than the target temperature allows (the unknown noise of minibatch gradients
heats them) and falls while they carry less, so no estimate of the gradient noise is needed.
Ding et al.'s Algorithm 1, with $v = h\,p$, $\eta = h^2$ and $\zeta = h\,\xi$
(as Chen et al. 2014 rewrite SGHMC, eq. 15), and $n$ the number of parameters:

$$
\begin{aligned}
v &\leftarrow (1 - \zeta)\, v - \eta\, \nabla \tilde U(\theta) + \mathcal{N}(0,\; 2 a \eta) \\
\theta &\leftarrow \theta + v \\
\zeta &\leftarrow \zeta + \tfrac{1}{n}\, v^\top v - \eta
\end{aligned}
$$

with $\zeta$ starting at $a$ (Ding et al.'s $\xi_0 = A$, $a = hA$). At
stationarity $v \sim \mathcal N(0, \eta I)$, so the thermostat's drift
$\tfrac1n v^\top v - \eta$ vanishes on average. ``lr`` is $\eta$ per datum, as
SGHMC's; ``a`` plays SGHMC's ``alpha``. With ``noise=False`` (a cyclical schedule's exploration)
the update is heavy-ball SGD at the thermostat's current friction, which stays where it is.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bdl.noise import Generator
from bdl.samplers.base import Declaration, Sampler, SamplerState


class SGNHT(Sampler):
    """SGNHT with learning rate ``lr`` ($\\eta$) and injected-noise friction ``a``."""

    declaration = Declaration(step_unit="per datum", backs_off=True)

    def __init__(
        self, lr: float, a: float = 0.01, *, foreach: bool = True, generator: Generator = None
    ) -> None:
        super().__init__(lr, foreach=foreach, generator=generator)
        if not 0 < a <= 1:
            raise ValueError(f"sampler.a (the noise's friction) must be in (0, 1], got {a}")
        self.a = a

    def init(self, params: list[Tensor]) -> SamplerState:
        state = super().init(params)
        state.buffers["momentum"] = [torch.zeros_like(p) for p in params]
        state.buffers["thermostat"] = [self._initial_thermostat(params[0])]
        return state

    def restart(self, state: SamplerState) -> None:
        """At rest, and the thermostat at its start: its friction was tuned to the old step."""
        super().restart(state)
        state.buffers["thermostat"][0].fill_(self.a)

    def _initial_thermostat(self, like: Tensor) -> Tensor:
        return torch.tensor(self.a, dtype=torch.float64, device=like.device)

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        v, (zeta,) = state.buffers["momentum"], state.buffers["thermostat"]
        torch._foreach_mul_(v, (1 - zeta).to(v[0].dtype))
        torch._foreach_add_(v, grads, alpha=-step_size)
        if noise:
            torch._foreach_add_(v, self.gaussian_like(v), alpha=math.sqrt(2 * self.a * step_size))
            _heat(zeta, v, torch._foreach_norm(v), step_size)
        torch._foreach_add_(state.params, v)

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        v, (zeta,) = state.buffers["momentum"], state.buffers["thermostat"]
        draws = self.gaussian_like(v) if noise else [None] * len(v)
        for theta, v_i, g, z in zip(state.params, v, grads, draws, strict=True):
            v_i.mul_((1 - zeta).to(v_i.dtype)).add_(g, alpha=-step_size)
            if z is not None:
                v_i.add_(z, alpha=math.sqrt(2 * self.a * step_size))
            theta.add_(v_i)
        if noise:
            _heat(zeta, v, [torch.linalg.vector_norm(v_i) for v_i in v], step_size)


def _heat(zeta: Tensor, v: list[Tensor], norms: list[Tensor], eta: float) -> None:
    r"""The thermostat's step, $\zeta \leftarrow \zeta + v^\top v / n - \eta$, from the
    norms of the momenta ``v``'s tensors (in double precision: n is in the millions)."""
    kinetic = torch.stack(norms).double().square().sum()
    zeta.add_(kinetic / sum(v_i.numel() for v_i in v) - eta)
