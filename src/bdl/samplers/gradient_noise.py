r"""An online estimate of the minibatch gradient's noise, $\hat V \approx
\mathrm{Var}[\nabla\tilde U]$ elementwise, used by ``sghmc`` (Chen et al.'s $\hat B$) and
``csgd`` (Mandt et al.'s $BB^\top$).

Consecutive minibatch gradients are treated as draws of $\nabla\tilde U$; their
exponentially weighted mean and variance (the incremental form of Finch 2009, "Incremental
calculation of weighted mean and variance"),

$$
\delta = g - m,\qquad m \leftarrow m + (1 - \beta)\,\delta,\qquad
\hat V \leftarrow \beta\,\big(\hat V + (1 - \beta)\,\delta^2\big),
$$

forget the transient of early burn-in after about $1/(1 - \beta)$ steps. The parameters move
between draws, so $\hat V$ also holds the variation of the true gradient along the chain;
near stationarity that is a fraction of order $n/N$ of the minibatch noise (the posterior
spread of $\nabla U$ is its curvature, the minibatch noise $N/n$ times the
per-example Fisher information, which is of the same order), small for the usual $n \ll N$.
Samplers observe gradients only while ``tune=True`` (burn-in) and then keep $\hat V$ fixed,
so that the chain they sample with is a fixed Markov kernel.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bdl.closures import Closure
from bdl.samplers.base import SamplerState

DECAY = 0.99


def observe_(state: SamplerState, grads: list[Tensor], foreach: bool, decay: float = DECAY) -> None:
    """Fold one minibatch gradient into ``state.buffers["grad_mean"]`` and ``["grad_var"]``."""
    if "grad_mean" not in state.buffers:
        state.buffers["grad_mean"] = [g.clone() for g in grads]
        state.buffers["grad_var"] = [torch.zeros_like(g) for g in grads]
        return
    mean, var = state.buffers["grad_mean"], state.buffers["grad_var"]
    if foreach:
        delta = torch._foreach_sub(grads, mean)
        torch._foreach_add_(mean, delta, alpha=1 - decay)
        torch._foreach_addcmul_(var, delta, delta, value=1 - decay)
        torch._foreach_mul_(var, decay)
    else:
        for m, v, g in zip(mean, var, grads, strict=True):
            delta = g - m
            m.add_(delta, alpha=1 - decay)
            v.addcmul_(delta, delta, value=1 - decay).mul_(decay)


def observing(state: SamplerState, closure: Closure, foreach: bool) -> Closure:
    """``closure``, folding each gradient it returns into the estimate held by ``state``."""

    def evaluate() -> tuple[Tensor, list[Tensor]]:
        value, grads = closure()
        observe_(state, grads, foreach)
        return value, grads

    return evaluate
