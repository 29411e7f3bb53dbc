"""The closures through which every sampler sees its target, as protocols.

A sampler never sees a network: it sees a *closure* that evaluates the potential ``U`` (and its
gradient) at the parameters' current values, following ``torch.optim``'s closure protocol. The
potential (`bdl.potential.Potential`) and the toy targets (`bdl.checks.targets`) make them;
the samplers (`bdl.samplers`) call them. This module names their shapes, and makes
autograd's gradients meet the contract (`writable_gradients`); it depends on nothing in
bdl, so a sampler can be read, and written, without the potential.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor

#: ``U`` and its gradients, one tensor per parameter, aligned with the parameters.
Evaluation = tuple[Tensor, list[Tensor]]

Q = TypeVar("Q", contravariant=True)
R = TypeVar("R")


class Closure(Protocol):
    """``closure() -> (U, [∇U])`` at the parameters' current values.

    ``U`` is a scalar tensor, or one value per chain, shape ``(K,)``, for ``K`` chains stacked
    along the parameters' first dimension. The gradients are aligned with the parameters and
    are the caller's: each its own memory, which the caller may change in place. A closure may be
    called many times per step (Metropolis-corrected kernels evaluate proposals with it).
    """

    def __call__(self) -> Evaluation: ...


class Program(Protocol):
    """``program(fn, params, *args)``: ``fn(evaluate, params, *args)`` run as one compiled
    program, where ``params`` are values of the closure's parameters and ``evaluate(q) -> (U,
    [∇U])`` is the closure's potential at values ``q`` instead of the parameters' own, a pure
    function that ``torch.compile`` traces into ``fn``; ``fn`` returns new tensors. Returns None
    where the program could not be compiled (after one warning): the caller then computes step
    by step through the closure.

    A full-data closure of a run with ``compile=true`` offers one as its attribute ``program``
    where its potential can be traced whole (`bdl.potential.Potential.full_closure`), so
    that a kernel runs a whole trajectory without Python between its steps (HMC's leapfrog,
    `bdl.samplers.metropolis.leapfrog_program`); other closures have none.
    """

    def __call__(self, fn: Callable[..., R], params: list[Tensor], /, *args: Any) -> R | None: ...


class VariationalClosure(Protocol[Q]):
    """``closure(q) -> (F, [∇F])``: a Monte Carlo estimate of the negative evidence lower bound
    ``F`` of the variational distribution ``q`` (for `bdl.variational.MeanField`: the
    gradients in ``q.mean`` followed by those in ``q.std``). The potential's minibatch closure is
    both a `Closure` and one of these."""

    def __call__(self, q: Q, /) -> Evaluation: ...


class ClosureFactory(Protocol):
    """``closures() -> Closure``: a fresh closure for each step (a new minibatch, or new gradient
    noise), as the toy targets of `bdl.checks.targets` hand them out."""

    def __call__(self) -> Closure: ...


def writable_gradients(grads: tuple[Tensor, ...]) -> list[Tensor]:
    """Autograd's gradients made a closure's: each its own memory, writable in place.

    Autograd may hand back one tensor for several inputs (both terms of ``a + b``) or a broadcast
    view (the gradient of a sum); those are copied, so that adding a prior's gradient to one
    parameter's cannot change another's. Other views (a matrix product's transposed result, or
    disjoint parts of one buffer) are kept: copying every gradient cost a small MLP's step 2%.
    """
    spans: dict[int, list[tuple[int, int]]] = {}  # the memory handed out, by storage
    own = []
    for grad in grads:
        storage, start = grad.untyped_storage().data_ptr(), grad.storage_offset()
        end = start + grad.numel()
        if not grad.is_contiguous() or any(
            start < other_end and other_start < end
            for other_start, other_end in spans.get(storage, ())
        ):
            grad = grad.clone(memory_format=torch.contiguous_format)
            storage, start, end = grad.untyped_storage().data_ptr(), 0, grad.numel()
        spans.setdefault(storage, []).append((start, end))
        own.append(grad)
    return own
