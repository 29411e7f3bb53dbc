r"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin, ICML 2014).

Second-order Langevin dynamics with friction (seed 000, eq. 46), discretised as in Chen et al.'s
eq. (15) with :math:`v = \eta\, p`:

.. math::

    v &\leftarrow (1 - \alpha)\, v - \eta\, \nabla \tilde U(\theta)
          + \mathcal{N}\big(0,\; 2(\alpha - \hat\beta)\,\eta\big) \\
    \theta &\leftarrow \theta + v

:math:`\eta` is the learning rate (step size squared, :math:`\epsilon^2`, in Hamiltonian
units), :math:`\alpha = \epsilon C` the friction ("momentum decay" in Chen et al.'s code) and
:math:`\hat\beta = \epsilon \hat B / 2` the estimate of the gradient-noise contribution (taken as
0 here, Chen et al.'s recommendation for small :math:`\eta`).

**Mapping onto SGD with momentum.** Without its injected noise the update is exactly PyTorch's
heavy-ball SGD, ``torch.optim.SGD(lr=η, momentum=1 − α)``: :math:`v` is ``-lr * buf``. Chen et
al.'s MNIST setting, learning rate 0.1 per datum (:math:`\eta = 0.1/N`) and :math:`\alpha = 0.01`,
is SGD with momentum 0.99.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bdl.samplers.base import Sampler, SamplerState


class SGHMC(Sampler):
    """SGHMC with learning rate ``lr`` (:math:`\\eta`) and friction ``alpha`` (:math:`\\alpha`)."""

    def __init__(
        self,
        lr: float,
        alpha: float = 0.01,
        *,
        foreach: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(lr, foreach=foreach, generator=generator)
        if not 0 < alpha <= 1:
            raise ValueError(f"sampler.alpha (friction) must be in (0, 1], got {alpha}")
        self.alpha = alpha

    def init(self, params: list[Tensor]) -> SamplerState:
        state = super().init(params)
        state.buffers["momentum"] = [torch.zeros_like(p) for p in params]
        return state

    def _noise_std(self, eta: float) -> float:
        return math.sqrt(2 * self.alpha * eta)

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        v = state.buffers["momentum"]
        torch._foreach_mul_(v, 1 - self.alpha)
        torch._foreach_add_(v, grads, alpha=-step_size)
        if noise:
            torch._foreach_add_(v, self.gaussian_like(v), alpha=self._noise_std(step_size))
        torch._foreach_add_(state.params, v)

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        v = state.buffers["momentum"]
        draws = self.gaussian_like(v) if noise else [None] * len(v)
        for theta, v_i, g, z in zip(state.params, v, grads, draws, strict=True):
            v_i.mul_(1 - self.alpha).add_(g, alpha=-step_size)
            if z is not None:
                v_i.add_(z, alpha=self._noise_std(step_size))
            theta.add_(v_i)
