r"""A diagonal mass matrix for HMC, learnt during burn-in in Stan's windows, pooled over chains.

HMC with kinetic energy $K(p) = \tfrac12 p^\top M^{-1} p$ moves as if the target were
rescaled by $M^{-1/2}$: with $M^{-1}$ the posterior's variances, every direction has
unit scale and one step size fits them all (Neal 2011, §4.1). The variances are estimated from
the chain itself during burn-in, in the windows of Stan's warm-up (Stan Development Team,
*Reference Manual*, "Automatic parameter tuning"; Carpenter et al. 2017):

- an initial fast interval (``init``, 75 iterations) adapts only the step size, while the chain
  travels to the typical set;
- slow windows of 25, 50, 100, … iterations follow, each estimating the variances
  $\hat\sigma^2$ of the draws it saw; the last one stretches to the terminal interval;
  after each, $M^{-1} \leftarrow \tfrac{n}{n+5}\hat\sigma^2 + 10^{-3}\tfrac{5}{n+5}$
  (Stan's shrinkage towards a small constant) and the step-size adaptation restarts at the
  current step (Hoffman & Gelman 2014's $\mu = \log 10\epsilon$);
- a terminal fast interval (``term``, 50 iterations) adapts the step size to the final mass.
  Where it is shorter (a short burn-in), the last restart shrinks towards the current step,
  $\mu = \log\epsilon$: the ten-times-larger first proposals of Stan's restart need
  tens of iterations to average away, and a step frozen after a few of them was accepted
  almost never.

**The estimate.** ``diagonal`` sets $M^{-1}$ to the draws' variances, Stan's and PyMC's
estimate. On a posterior whose narrowest directions are not along the axes (a network's, where
weights trade off against each other) that can condition the target worse than the identity
(Hird & Livingstone 2023): the step the narrowest direction allows, now in units of each
parameter's posterior scale, is then the same for every parameter, and those of small variance
that the identity moved several times faster slow down. ``fisher`` sets
$M^{-1}_{ii} = (\hat\sigma^2_{q_i} / \hat\sigma^2_{g_i})^{1/2}$, the draws' variance over
that of the potential's gradient $g = \nabla U$ at them, the diagonal that minimises the sample
Fisher divergence from the rescaled target to a standard normal (Seyboldt, Carlson & Carpenter
2026). On a Gaussian with independent coordinates it is the variance, to rounding whatever the
draws ($\hat\sigma^2_g = \hat\sigma^2_q / \sigma^4$); where the two disagree it lies between
the variance and the inverse curvature. It needs no shrinkage; ratios beyond $10^{\pm 20}$
(a parameter the potential ignores) are clipped.

A burn-in shorter than 150 iterations is split as Stan splits it, 15% / 75% / 10%, in one slow
window; under 20 iterations the mass stays the identity. Chains stacked as one (a potential with
one value per chain) pool their draws: the window's variance is that of all chains' draws
together, so ``K`` chains estimate one mass matrix from ``K`` times the draws and share it, as
they share the step size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

#: Stan's default warm-up intervals: initial fast, first slow window, terminal fast
INIT_BUFFER, BASE_WINDOW, TERM_BUFFER = 75, 25, 50
#: fewer burn-in iterations leave Stan's mass matrix the identity
SHORTEST_BURN_IN = 20


def slow_windows(burn_in: int) -> list[tuple[int, int]]:
    """The slow windows ``[start, end)`` of a warm-up of ``burn_in`` iterations, as Stan's
    ``windowed_adaptation`` places them."""
    if burn_in < SHORTEST_BURN_IN:
        return []
    init, base, term = INIT_BUFFER, BASE_WINDOW, TERM_BUFFER
    if init + base + term > burn_in:
        init, term = int(0.15 * burn_in), int(0.1 * burn_in)
        base = burn_in - init - term
    last = burn_in - term
    windows, start, size = [], init, base
    end = start + size
    while True:
        windows.append((start, end))
        if end >= last:
            return windows
        start, size = end, 2 * size
        end = start + size
        if end - 1 + 2 * size >= last:  # the window after would not fit: this one stretches
            end = last


@dataclass
class MassWindows:
    """Where the adaptation stands (plain numbers, so that a checkpoint's JSON header holds it):
    burn-in iterations seen and draws in the current window, per chain."""

    tune_steps: int = 0
    draws: int = 0


#: the estimates of $M^{-1}$ (module docstring)
ESTIMATES = ("diagonal", "fisher")
#: the window's running statistics: of the draws, and for ``fisher`` of the gradients at them
DRAWS, GRADIENTS = ("window_mean", "window_m2"), ("window_grad_mean", "window_grad_m2")
#: the largest ratio ``fisher`` lets $M^{-1}$ reach either way
FISHER_CLIP = 1e20


def init_buffers(params: list[Tensor], estimate: str = "diagonal") -> dict[str, list[Tensor]]:
    """$M^{-1} = I$ and an empty window's running means and sums of squared deviations (of the
    draws; for ``fisher`` of the gradients too)."""
    windows = DRAWS + (GRADIENTS if estimate == "fisher" else ())
    return {
        "inverse_mass": [torch.ones_like(p) for p in params],
        **{name: [torch.zeros_like(p) for p in params] for name in windows},
    }


def add_draw(
    buffers: dict[str, list[Tensor]],
    params: list[Tensor],
    draws: int,
    grads: list[Tensor] | None = None,
) -> None:
    """Welford's update of the window's means and squared deviations by the ``draws``-th draw
    (and, for ``fisher``, the gradient ``grads`` of the potential there)."""
    for names, values in ((DRAWS, params), (GRADIENTS, grads)):
        if names[0] not in buffers:
            continue
        means, squares = buffers[names[0]], buffers[names[1]]
        deltas = torch._foreach_sub(values, means)
        torch._foreach_add_(means, deltas, alpha=1 / draws)
        torch._foreach_addcmul_(squares, deltas, torch._foreach_sub(values, means))


def _pooled_variance(mean: Tensor, m2: Tensor, draws: int, chain_dims: int) -> tuple[Tensor, int]:
    """The window's variance over the leading ``chain_dims`` dimensions (stacked chains) pooled,
    and the number of draws it is of; the window emptied."""
    dims = tuple(range(chain_dims))
    chains = math.prod(mean.shape[:chain_dims])
    pooled_mean = mean.mean(dims, keepdim=True) if dims else mean
    # the chains' sums of squares plus their means' spread: all K·n draws as one sample
    total_m2 = m2 + draws * (mean - pooled_mean).square()
    total_m2 = total_m2.sum(dims, keepdim=True) if dims else total_m2
    n = chains * draws
    mean.zero_()
    m2.zero_()
    return total_m2 / (n - 1), n


def close_window(buffers: dict[str, list[Tensor]], draws: int, chain_dims: int) -> None:
    """Set $M^{-1}$ from the window's draws, pooled over the leading ``chain_dims`` dimensions
    (stacked chains): their shrunk variance, or for ``fisher`` (the buffers hold the gradients'
    window) the root of its ratio to the gradients' variance; empty the window."""
    for k, inverse_mass in enumerate(buffers["inverse_mass"]):
        mean, m2 = buffers[DRAWS[0]][k], buffers[DRAWS[1]][k]
        variance, n = _pooled_variance(mean, m2, draws, chain_dims)
        if GRADIENTS[0] in buffers:
            curvature, _ = _pooled_variance(
                buffers[GRADIENTS[0]][k], buffers[GRADIENTS[1]][k], draws, chain_dims
            )
            ratio = (variance / curvature).nan_to_num(nan=1.0)  # 0/0: a parameter that never moved
            inverse_mass.copy_(ratio.clamp(1 / FISHER_CLIP, FISHER_CLIP).sqrt())
        else:
            inverse_mass.copy_((n / (n + 5.0)) * variance + 1e-3 * (5.0 / (n + 5.0)))
