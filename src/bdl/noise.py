"""Standard normal draws for lists of tensors, the noise of every sampler and of the variational
reparameterisation."""

from __future__ import annotations

import torch
from torch import Tensor


class StandardNormal:
    """Draws shaped like a list of tensors, from one call to a generator into one flat buffer.

    One flat draw split into views costs a single kernel launch however many tensors there are,
    and gives a foreach update and its loop twin the very same noise. The buffer is kept across
    calls: a fresh allocation of a network's size costs the allocator page faults that took
    longer than drawing the numbers. Each call overwrites the previous call's draws.
    """

    def __init__(self) -> None:
        self._buffer: Tensor | None = None

    def like(self, tensors: list[Tensor], generator: torch.Generator | None) -> list[Tensor]:
        numels = [t.numel() for t in tensors]
        total, first = sum(numels), tensors[0]
        buffer = self._buffer
        if (
            buffer is None
            or buffer.numel() != total
            or buffer.device != first.device
            or buffer.dtype != first.dtype
        ):
            buffer = self._buffer = torch.empty(total, device=first.device, dtype=first.dtype)
        buffer.normal_(generator=generator)
        return [z.view_as(t) for z, t in zip(buffer.split(numels), tensors, strict=True)]
