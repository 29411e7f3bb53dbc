r"""HMC's trajectory length learnt across stacked chains by ChEES (Hoffman, Radul & Sountsov 2021).

Each iteration integrates for a jittered time $t = u_n T$, with $u_n$ the base-2
Halton (van der Corput) sequence, so that no single length resonates with the posterior's
periods. During burn-in $T$ climbs the Change in the Estimator of the Expected Square,

$$
\mathrm{ChEES}(T) = \tfrac14\,\mathbb E\big[(\lVert\theta' - \mathbb E\theta\rVert^2
    - \lVert\theta - \mathbb E\theta\rVert^2)^2\big],
$$

whose gradient in $T$ needs only the proposal $\theta'$ and its velocity
$v' = M^{-1}p'$ at the end of the trajectory, per chain $k$,

$$
g_k = u_n\,(\lVert\theta'_k - \bar\theta'\rVert^2 - \lVert\theta_k - \bar\theta\rVert^2)\,
    (\theta'_k - \bar\theta')\cdot v'_k,
$$

with the expectation $\mathbb E\theta$ replaced by the mean over the chains (the proposals'
weighted by their acceptance probabilities $a_k$), and averaged over the chains with weights
$a_k$. Norms are taken in the coordinates the mass matrix whitens,
$\lVert x\rVert^2_{M} = x^\top M x$, so that a learnt diagonal mass makes every direction
count alike (with $M = I$ this is the paper's criterion). $\log T$ then takes an
RMSProp step clipped to $\pm 0.35$, and the iterates are averaged with weights
$n^{-1/2}$; the average is the length used after burn-in. The constants are those of
TensorFlow Probability's ``GradientBasedTrajectoryLengthAdaptation``, by the same authors.

The criterion's expectations are over chains, so it needs two or more chains stacked as one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

#: RMSProp's learning rate on log T, the decay of its squared-gradient average, and the clip
LEARNING_RATE, SQUARED_GRADIENT_DECAY, LOG_STEP_CLIP = 0.025, 0.95, 0.35
#: the longest trajectory, in leapfrog steps
MAX_LEAPFROG_STEPS = 1000


def halton(n: int) -> float:
    """The ``n``-th point (from 1) of the base-2 Halton sequence in (0, 1): ``n``'s binary digits
    mirrored about the point (1 → 0.5, 2 → 0.25, 3 → 0.75, …)."""
    value, weight = 0.0, 0.5
    while n:
        value += weight * (n & 1)
        n, weight = n >> 1, weight / 2
    return value


@dataclass
class ChEES:
    """The learnt length (plain numbers, so that a checkpoint's JSON header holds it)."""

    log_length: float | None = None  # log T; None until the first iteration sets it from L·ε
    log_length_avg: float = 0.0
    squared_gradient: float = 0.0
    iterations: int = 0  # iterations so far, also the Halton index of the next one
    updates: int = 0  # updates since the average last restarted

    def jitter(self) -> float:
        return halton(self.iterations + 1)

    def length(self, tune: bool) -> float:
        """$T$ while adapting, the averaged $\\bar T$ afterwards ($T$ itself
        if it was never adapted)."""
        return math.exp(self.log_length if tune or not self.updates else self.log_length_avg)

    def update(self, gradient: float, step_size: float) -> None:
        """One RMSProp step of $\\log T$ up the criterion's ``gradient``, then the
        average; $T$ kept within `MAX_LEAPFROG_STEPS` steps of ``step_size``."""
        self.updates += 1
        decay = SQUARED_GRADIENT_DECAY
        self.squared_gradient = decay * self.squared_gradient + (1 - decay) * gradient**2
        unbiased = self.squared_gradient / (1 - decay**self.updates)
        step = LEARNING_RATE / math.sqrt(unbiased + 1e-20) * gradient
        log_length = self.log_length + max(-LOG_STEP_CLIP, min(LOG_STEP_CLIP, step))
        self.log_length = min(log_length, math.log(MAX_LEAPFROG_STEPS * step_size))
        weight = self.updates**-0.5
        self.log_length_avg = weight * self.log_length + (1 - weight) * self.log_length_avg

    def remeasure(
        self, old_inverse_mass: list[Tensor], inverse_mass: list[Tensor], restart: bool
    ) -> None:
        r"""Carry $T$ over a change of the mass matrix, which changes what a unit of time
        means; ``restart``: restart its running average and the gradient's scale, else carry the
        average too.

        Under $M^{-1} = v$ a direction of variance $\sigma_i^2$ turns with period
        $\propto \sigma_i / \sqrt{v_i}$; with $\sigma_i^2 \approx v_i'$, the new
        estimate, the periods shrink by $\sqrt{r_i}$, $r_i = v_i'/v_i$. The
        criterion is dominated by the directions of largest $\mathbb E\lVert x\rVert^4$,
        weight $r_i^2$ under the old metric, so $T$ is divided by
        $(\sum r_i^3 / \sum r_i^2)^{1/2}$, the dominant directions' factor; a posterior
        whose scales span $10^2$ then keeps its $T$ at the optimum found before.

        The average restarts, as the step size's adaptation does, where burn-in has Stan's
        terminal interval left to average over; after a shorter one's last window it moves by
        the same factor instead. An average of the 10 jittered iterates a burn-in of 100 leaves
        froze lengths that cost yacht's slowest test point two thirds of its ESS (174 against
        520, seed 2 of `scripts/bench_peers.py`'s ``bdl 16 fisher adapted``); with 50 left, on
        the hard posterior of `scripts/bench_hmc_adaptation.py`, restarting gave the slowest
        point twice the ESS per gradient of carrying (1.32 against 0.63 per thousand with the
        variances' mass, seeds 0-2).
        """
        ratios = [
            a.double() / b.double() for a, b in zip(inverse_mass, old_inverse_mass, strict=True)
        ]
        cubes = sum(r.pow(3).sum() for r in ratios)
        squares = sum(r.square().sum() for r in ratios)
        shift = 0.5 * math.log((cubes / squares).item())  # one synchronisation
        self.log_length -= shift
        if restart:
            self.log_length_avg, self.squared_gradient, self.updates = 0.0, 0.0, 0
        else:
            self.log_length_avg -= shift


def gradient(
    start: list[Tensor],
    proposal: list[Tensor],
    momenta: list[Tensor],
    accept_prob: Tensor,
    inverse_mass: list[Tensor] | None,
    jitter: float,
) -> float:
    """The chains' ChEES gradient in $T$ (above), for chains along the leading dimensions
    of every tensor, as many as ``accept_prob`` has."""
    chains = accept_prob.numel()
    if chains < 2:
        raise ValueError(
            "sampler.adapt_length (ChEES) learns the length across chains: run chains=2 or more "
            "stacked (vectorise=true), or set sampler.adapt_length=false"
        )
    weights = accept_prob.double().reshape(chains, 1)
    proposal_sq = start_sq = dot = torch.zeros(chains, dtype=torch.float64)
    scales = inverse_mass or [None] * len(start)
    for before, after, p, v in zip(start, proposal, momenta, scales, strict=True):
        before, after = before.double().reshape(chains, -1), after.double().reshape(chains, -1)
        finite = torch.isfinite(after).all(1, keepdim=True)
        after = torch.where(finite, after, 0.0)
        weight = torch.where(finite, weights, 0.0)
        after_c = after - (weight * after).sum(0) / (weight.sum() + 1e-20)
        before_c = before - before.mean(0)
        metric = 1.0 if v is None else 1 / v.double().reshape(chains, -1)
        proposal_sq = proposal_sq + (after_c.square() * metric).sum(1)
        start_sq = start_sq + (before_c.square() * metric).sum(1)
        dot = dot + (after_c * p.double().reshape(chains, -1)).sum(1)
    per_chain = jitter * (proposal_sq - start_sq) * dot
    a = weights.reshape(-1)
    usable = (a > 1e-4) & torch.isfinite(per_chain)
    per_chain, a = torch.where(usable, per_chain, 0.0), torch.where(usable, a, 0.0)
    return ((per_chain * a).sum() / (a.sum() + 1e-20)).item()
