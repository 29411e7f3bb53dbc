r"""SWA-Gaussian, SWAG (Maddox, Izmailov, Garipov, Vetrov & Wilson, NeurIPS 2019).

SGD at a constant learning rate wanders about a mode; SWAG fits a Gaussian to the iterates it
visits after burn-in, one every ``collect_every`` steps ($c$, once an epoch in the paper),
and draws the run's samples from it. With $\theta_1, \dots, \theta_n$ collected, the
running moments are

$$
\bar\theta = \tfrac1n \textstyle\sum_i \theta_i, \qquad
\overline{\theta^2} = \tfrac1n \textstyle\sum_i \theta_i^2, \qquad
\Sigma_\mathrm{diag} = \mathrm{diag}\big(\overline{\theta^2} - \bar\theta^2\big),
$$

and the deviation matrix $\hat D$ holds the last $K$ deviations
$D_i = \theta_i - \bar\theta_i$ (each from the running mean after $\theta_i$,
Maddox et al.'s Algorithm 1), $K$ being ``rank``. The approximate posterior is
$\mathcal N\big(\bar\theta, \tfrac12 \Sigma_\mathrm{diag} + \tfrac{1}{2(K-1)}\hat D
\hat D^\top\big)$, sampled as

$$
\tilde\theta = \bar\theta + \tfrac{1}{\sqrt2}\,\Sigma_\mathrm{diag}^{1/2} z_1
    + \tfrac{1}{\sqrt{2(K-1)}}\,\hat D z_2, \qquad
z_1 \sim \mathcal N(0, I_d),\ z_2 \sim \mathcal N(0, I_K),
$$

with $K$ the number of deviations held while fewer than ``rank`` were collected. The
iterates are plain SGD's (`bdl.samplers.sgd.SGD`, ``lr`` per datum); ``num_samples`` draws
are the run's samples, written like any sampler's so that every metric and diagnostic applies.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator

import torch
from torch import Tensor

from bdl.noise import Generator
from bdl.samplers.base import Declaration, SamplerState
from bdl.samplers.sgd import SGD

log = logging.getLogger("bdl")


class SWAG(SGD):
    """SWAG over SGD's iterates: learning rate ``lr``, heavy-ball ``momentum``, one iterate
    collected every ``collect_every`` steps after burn-in, the last ``rank`` deviations
    ($K$) kept, ``num_samples`` draws at the end."""

    declaration = Declaration(step_unit="per datum", injects_noise=False, backs_off=True)

    def __init__(
        self,
        lr: float,
        momentum: float = 0.0,
        rank: int = 20,
        collect_every: int = 100,
        num_samples: int = 30,
        *,
        foreach: bool = True,
        generator: Generator = None,
    ) -> None:
        super().__init__(lr, momentum, foreach=foreach, generator=generator)
        if rank < 2:
            raise ValueError(f"sampler.rank (SWAG's K deviations) must be 2 or more, got {rank}")
        if collect_every < 1:
            raise ValueError(f"sampler.collect_every must be 1 step or more, got {collect_every}")
        if num_samples < 1:
            raise ValueError(f"sampler.num_samples must be 1 or more, got {num_samples}")
        self.rank = rank
        self.collect_every = collect_every
        self.num_samples = num_samples

    def init(self, params: list[Tensor]) -> SamplerState:
        state = super().init(params)
        state.buffers["swag_mean"] = [torch.zeros_like(p) for p in params]
        state.buffers["swag_sq_mean"] = [torch.zeros_like(p) for p in params]
        state.buffers["swag_deviations"] = [p.new_zeros((self.rank, *p.shape)) for p in params]
        state.buffers["swag_count"] = [
            torch.zeros((), dtype=torch.float64, device=params[0].device)
        ]
        return state

    def after_step(self, state: SamplerState) -> None:
        if not self.tuning and state.step % self.collect_every == 0:
            self.collect(state)

    @torch.no_grad()
    def collect(self, state: SamplerState) -> None:
        """Add the current parameters to the running moments and the deviations (a ring of
        ``rank`` slots, the oldest overwritten)."""
        count = state.buffers["swag_count"][0]
        n = int(count.item())
        mean, sq_mean = state.buffers["swag_mean"], state.buffers["swag_sq_mean"]
        for theta, m, s, d in zip(
            state.params, mean, sq_mean, state.buffers["swag_deviations"], strict=True
        ):
            m.mul_(n / (n + 1)).add_(theta, alpha=1 / (n + 1))
            s.mul_(n / (n + 1)).addcmul_(theta, theta, value=1 / (n + 1))
            d[n % self.rank].copy_(theta - m)
        count.add_(1)

    def _moments(self, state: SamplerState) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        """The mean, the diagonal variance and the deviations held (``(K, *shape)`` each)."""
        n = int(state.buffers["swag_count"][0].item())
        mean = state.buffers["swag_mean"]
        variance = [
            (s - m.square()).clamp_min(0)
            for m, s in zip(mean, state.buffers["swag_sq_mean"], strict=True)
        ]
        held = min(n, self.rank)
        deviations = [d[:held] for d in state.buffers["swag_deviations"]]
        return mean, variance, deviations

    def posterior_moments(self, state: SamplerState) -> tuple[list[Tensor], list[Tensor]] | None:
        """The Gaussian's mean and marginal standard deviations,
        $\\sqrt{\\Sigma_{\\mathrm{diag}}/2 + \\sum_k D_k^2 / (2(K-1))}$."""
        if state.buffers["swag_count"][0].item() < 2:
            return None
        mean, variance, deviations = self._moments(state)
        k = deviations[0].shape[0]
        std = [
            (v / 2 + d.square().sum(0) / (2 * (k - 1))).sqrt()
            for v, d in zip(variance, deviations, strict=True)
        ]
        return list(mean), std

    def final_samples(self, state: SamplerState) -> Iterator[None]:
        n = int(state.buffers["swag_count"][0].item())
        if n < 2:
            log.warning(
                "SWAG collected %d iterate(s) after burn-in, too few for a covariance: its sample "
                "is SGD's last point. Collect more: a smaller sampler.collect_every (steps; one "
                "epoch is the training set over batch_size) or more epochs",
                n,
            )
            yield
            return
        mean, variance, deviations = self._moments(state)
        k = deviations[0].shape[0]
        scale = 1 / math.sqrt(2 * (k - 1))
        try:
            for _ in range(self.num_samples):
                self._draw(state.params, mean, variance, deviations, scale)
                yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_(state.params, mean)

    @torch.no_grad()
    def _draw(
        self,
        params: list[Tensor],
        mean: list[Tensor],
        variance: list[Tensor],
        deviations: list[Tensor],
        scale: float,
    ) -> None:
        """One draw of the Gaussian written into ``params``."""
        z1 = [z.clone() for z in self.gaussian_like(mean)]
        (z2,) = self.gaussian_like([mean[0].new_empty(deviations[0].shape[0])])
        for p, m, v, d, z in zip(params, mean, variance, deviations, z1, strict=True):
            p.copy_(m + (v / 2).sqrt() * z + scale * torch.tensordot(z2, d, dims=1))
