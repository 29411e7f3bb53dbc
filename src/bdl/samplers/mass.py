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


def init_buffers(params: list[Tensor]) -> dict[str, list[Tensor]]:
    """$M^{-1} = I$ and an empty window's running mean and sum of squared deviations."""
    return {
        "inverse_mass": [torch.ones_like(p) for p in params],
        "window_mean": [torch.zeros_like(p) for p in params],
        "window_m2": [torch.zeros_like(p) for p in params],
    }


def add_draw(buffers: dict[str, list[Tensor]], params: list[Tensor], draws: int) -> None:
    """Welford's update of the window's mean and squared deviations by the ``draws``-th draw."""
    means, squares = buffers["window_mean"], buffers["window_m2"]
    deltas = torch._foreach_sub(params, means)
    torch._foreach_add_(means, deltas, alpha=1 / draws)
    torch._foreach_addcmul_(squares, deltas, torch._foreach_sub(params, means))


def close_window(buffers: dict[str, list[Tensor]], draws: int, chain_dims: int) -> None:
    """Set $M^{-1}$ to the shrunk variance of the window's draws, pooled over the leading
    ``chain_dims`` dimensions (stacked chains), and empty the window."""
    for inverse_mass, mean, m2 in zip(
        buffers["inverse_mass"], buffers["window_mean"], buffers["window_m2"], strict=True
    ):
        dims = tuple(range(chain_dims))
        chains = math.prod(mean.shape[:chain_dims])
        pooled_mean = mean.mean(dims, keepdim=True) if dims else mean
        # the chains' sums of squares plus their means' spread: all K·n draws as one sample
        total_m2 = m2 + draws * (mean - pooled_mean).square()
        total_m2 = total_m2.sum(dims, keepdim=True) if dims else total_m2
        n = chains * draws
        variance = total_m2 / (n - 1)
        inverse_mass.copy_((n / (n + 5.0)) * variance + 1e-3 * (5.0 / (n + 5.0)))
        mean.zero_()
        m2.zero_()
