r"""Elementwise functions in the forms that are fast on a CPU, for the passes over every weight
that variational inference makes at each step (`bdl.samplers.bbb`, `bdl.variational`,
the scale-mixture prior of `bdl.priors`).

At torch 2.14 the CPU kernels of ``log1p``, and with it of ``softplus``, ``logaddexp`` and
``logsigmoid``, take some 10-15 ns an element, against about 1 for ``exp`` and ``log``: on Blundell
et al. (2015)'s 784-1200-1200-10 network one ``softplus`` over the weights' $\rho$ cost more
than a step's matrix products. `softplus` takes the same function in a few vectorised passes,
within a few units in the last place. Fresh tensors of a network's size cost the allocator page
faults at every step, which took longer than the arithmetic in them: `Buffer` keeps one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def softplus(x: Tensor, out: Tensor | None = None, scratch: Tensor | None = None) -> Tensor:
    r"""$\log(1 + e^x)$, differentiable (its derivative $1/(1 + e^{-x})$) where it
    allocates its result; ``out`` and ``scratch``, shaped like ``x``, take the result and the
    intermediate values instead of fresh memory (not differentiable then).

    As $\max(x, 0) + \log(1 + u)$ with $u = e^{-|x|} \le 1$, and
    $\log(1 + u) = \log w - ((w - 1) - u)/w$ for $w = 1 + u$ rounded: $(w - 1)
    - u$ is the rounding error of $w$, exact in floating point, and the correction restores
    what $\log w$ lost of a small $u$ (Goldberg, "What every computer scientist should
    know about floating-point arithmetic", 1991, theorem 4's idea), to within a few units in the
    last place. $u$ stops at $e^2$ times the smallest normal number ($8.7 \cdot
    10^{-38}$ in float32): near and below that number the CPU's ``exp`` takes ten to fifty times
    as long; the result there is off by less than that, and never 0.
    Other devices than the CPU take ``torch.nn.functional.softplus``, one kernel there.
    """
    if x.device.type != "cpu":
        result = F.softplus(x)
        return result if out is None else out.copy_(result)
    if out is None:
        return _Softplus.apply(x)
    return _softplus_into(x, out, torch.empty_like(x) if scratch is None else scratch)


def _softplus_into(x: Tensor, out: Tensor, scratch: Tensor) -> Tensor:
    u = torch.abs(x, out=scratch).neg_().clamp_(min=math.log(torch.finfo(x.dtype).tiny) + 2).exp_()
    w_minus_1 = torch.add(u, 1, out=out).sub_(1)  # exact: w is in [1, 2]
    error = u.sub_(w_minus_1)  # u - (w - 1), exact
    w = w_minus_1.add_(1)
    error.div_(w)
    log1p = w.log_().add_(error)
    return log1p.add_(torch.clamp(x, min=0, out=scratch))


class _Softplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return _softplus_into(x, torch.empty_like(x), torch.empty_like(x))

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)


class Buffer:
    """Memory shaped like a list of tensors, kept from call to call: one flat tensor, reallocated
    only when the total size, dtype or device changes, handed out as views. Each call hands out the
    same memory as the previous one."""

    def __init__(self) -> None:
        self._flat: Tensor | None = None

    def flat(self, tensors: list[Tensor]) -> Tensor:
        """The flat tensor, as long as ``tensors`` together, of the first one's dtype and device."""
        total, first = sum(t.numel() for t in tensors), tensors[0]
        flat = self._flat
        if (
            flat is None
            or flat.numel() != total
            or flat.device != first.device
            or flat.dtype != first.dtype
        ):
            flat = self._flat = torch.empty(total, device=first.device, dtype=first.dtype)
        return flat

    def like(self, tensors: list[Tensor]) -> list[Tensor]:
        """Views of the flat tensor shaped like ``tensors``, end to end."""
        if not tensors:
            return []
        parts = self.flat(tensors).split([t.numel() for t in tensors])
        return [z.view_as(t) for z, t in zip(parts, tensors, strict=True)]
