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
        flat = self._buffer.flat(tensors)
        fill_normal(flat, generator)
        return split_like(flat, tensors, len(generator) if isinstance(generator, list) else None)


def fill_normal(flat: Tensor, generator: Generator) -> None:
    """Fill ``flat``, one draw for every number of a list of tensors, from ``generator`` as
    `StandardNormal.like` does: for the generators of ``K`` stacked chains, one row per chain,
    laid out as that chain's own flat draw."""
    if not isinstance(generator, list):
        flat.normal_(generator=generator)
        return
    for row, chain_generator in zip(flat.view(len(generator), -1), generator, strict=True):
        row.normal_(generator=chain_generator)


def split_like(flat: Tensor, tensors: list[Tensor], chains: int | None) -> list[Tensor]:
    """Views of ``flat``, filled by `fill_normal`, shaped like ``tensors``: for ``chains``
    stacked chains (None: one chain), each chain's row split into its part of each tensor."""
    if chains is None:
        parts = flat.split([t.numel() for t in tensors])
        return [z.view_as(t) for z, t in zip(parts, tensors, strict=True)]
    rows = flat.view(chains, -1)
    per_chain = [t.numel() // chains for t in tensors]
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
