r"""Preconditioned SGLD with an RMSprop preconditioner (Li, Chen, Carlson & Carin, AAAI 2016).

Li et al.'s Algorithm 1, on the gradient $g = \nabla\tilde U(\theta)$ of our potential:

$$
\begin{aligned}
V &\leftarrow \beta V + (1 - \beta)\, g \odot g, \qquad
G = \mathrm{diag}\Big(\frac{1}{\lambda + \sqrt{V}}\Big), \\
\theta &\leftarrow \theta - \frac{\epsilon}{2}\, G\, g + \mathcal N(0, \epsilon G).
\end{aligned}
$$

$G$ rescales every coordinate by the inverse root-mean-square of its recent gradients, so
flat directions take large steps and steep ones small steps — the "CLR-Prec" row of Izmailov et
al. (2021) under ``schedule=cyclical``. ``beta`` is Li et al.'s $\alpha$ (0.99) and
``damping`` their $\lambda$; $V$ starts at the first $g \odot g$, so that the
first step is not $1/\lambda$ times too large.

**Dropped term.** The exact preconditioned Langevin update also drifts by
$\tfrac{\epsilon}{2}\Gamma(\theta)$, $\Gamma_i = \sum_j \partial G_{ij}/\partial
\theta_j$, the correction for $G$ depending on $\theta$. Like Li et al. in their
experiments (and every common implementation) it is dropped: $G$ here is a running average
over the chain's past, not a function of $\theta$, and Li et al. show the resulting bias
vanishes as $\beta \to 1$ and $\epsilon \to 0$.

**Units.** $G g$ is invariant to the scale of $g$, and so is this kernel's mixing:
with minibatch noise dominating $V$ ($\sqrt V \approx N\sqrt{c/n}$ for a per-example
gradient variance $c$), a mode of curvature $Na$ relaxes at a rate
$\tfrac12\epsilon a\sqrt{n/c}$ per step, free of $N$. So ``lr`` is $\epsilon$ on
the scale of ``U`` itself, not a per-datum rate divided by $N$ (``step_unit="potential"``,
as for Adam-based variational inference). Li et al. accumulate $V$ from the per-datum mean
gradient, $N$ times smaller, so their $\epsilon$ is ours divided by $N$.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bdl.noise import Generator
from bdl.samplers.base import Declaration, Sampler, SamplerState


class PSGLD(Sampler):
    """pSGLD with step ``lr`` ($\\epsilon$), RMSprop decay ``beta``, ``damping``
    $\\lambda$."""

    declaration = Declaration(step_unit="potential", vectorisable=True, backs_off=True)

    def __init__(
        self,
        lr: float,
        beta: float = 0.99,
        damping: float = 1e-5,
        *,
        foreach: bool = True,
        generator: Generator = None,
    ) -> None:
        super().__init__(lr, foreach=foreach, generator=generator)
        if not 0 <= beta < 1:
            raise ValueError(f"sampler.beta must be in [0, 1), got {beta}")
        if not 0 < damping < math.inf:
            raise ValueError(f"sampler.damping must be positive and finite, got {damping}")
        self.beta = beta
        self.damping = damping

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        if "square_avg" not in state.buffers:
            state.buffers["square_avg"] = torch._foreach_mul(grads, grads)
        else:
            square_avg = state.buffers["square_avg"]
            torch._foreach_mul_(square_avg, self.beta)
            torch._foreach_addcmul_(square_avg, grads, grads, value=1 - self.beta)
        preconditioner = torch._foreach_sqrt(state.buffers["square_avg"])
        torch._foreach_add_(preconditioner, self.damping)
        torch._foreach_reciprocal_(preconditioner)
        torch._foreach_addcmul_(state.params, preconditioner, grads, value=-step_size / 2)
        if noise:
            torch._foreach_sqrt_(preconditioner)
            draws = self.gaussian_like(state.params)
            torch._foreach_addcmul_(state.params, draws, preconditioner, value=math.sqrt(step_size))

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        first = "square_avg" not in state.buffers
        if first:
            state.buffers["square_avg"] = [torch.zeros_like(g) for g in grads]
        draws = self.gaussian_like(state.params) if noise else [None] * len(grads)
        for theta, v, g, z in zip(
            state.params, state.buffers["square_avg"], grads, draws, strict=True
        ):
            if first:
                v.copy_(g * g)
            else:
                v.mul_(self.beta).addcmul_(g, g, value=1 - self.beta)
            preconditioner = v.sqrt().add_(self.damping).reciprocal_()
            theta.addcmul_(preconditioner, g, value=-step_size / 2)
            if z is not None:
                theta.addcmul_(z, preconditioner.sqrt_(), value=math.sqrt(step_size))
