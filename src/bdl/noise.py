"""Standard normal and uniform draws for lists of tensors, the noise of every sampler and of the
variational reparameterisation.

A *generator* here is a ``torch.Generator``, or a list of them, one per chain, for tensors that
stack ``K`` chains along their first dimension (`bdl.runner.steppers`): chain ``k``'s slice is then
drawn from generator ``k`` exactly as a run of that chain alone draws it, so that stacking the
chains does not change any chain's random numbers.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bdl.numerics import Buffer

Generator = torch.Generator | list[torch.Generator] | None


class StandardNormal:
    """Draws shaped like a list of tensors, from one call to a generator into one flat buffer.

    One flat draw split into views costs a single kernel launch however many tensors there are,
    and gives a foreach update and its loop twin the very same noise. The buffer is kept across
    calls (`bdl.numerics.Buffer`: a fresh allocation of a network's size costs the
    allocator page faults that took longer than drawing the numbers). Each call overwrites the
    previous call's draws.
    """

    def __init__(self) -> None:
        self._buffer = Buffer()

    def like(self, tensors: list[Tensor], generator: Generator) -> list[Tensor]:
        if not isinstance(generator, list):
            self._buffer.flat(tensors).normal_(generator=generator)
            return self._buffer.like(tensors)
        # one row per chain, laid out as that chain's own flat draw
        rows = self._buffer.flat(tensors).view(len(generator), -1)
        for row, chain_generator in zip(rows, generator, strict=True):
            row.normal_(generator=chain_generator)
        per_chain = [t.numel() // len(generator) for t in tensors]
        return [z.view_as(t) for z, t in zip(rows.split(per_chain, dim=1), tensors, strict=True)]


def uniform(shape: torch.Size, generator: Generator, device: torch.device) -> Tensor:
    """Uniform draws on [0, 1) in float64 of ``shape`` (with a list of generators: one per chain,
    ``shape`` its chains)."""
    if not isinstance(generator, list):
        return torch.rand(shape, generator=generator, device=device, dtype=torch.float64)
    draws = [torch.rand((), generator=g, device=device, dtype=torch.float64) for g in generator]
    return torch.stack(draws).reshape(shape)


def chain_shape(generator: Generator) -> tuple[int, ...]:
    """The shape of a value per chain (a potential, a Metropolis decision): ``(K,)`` for the
    generators of ``K`` stacked chains, ``()`` for one chain's."""
    return (len(generator),) if isinstance(generator, list) else ()
