"""The three forms of one update rule (`bdl.samplers.base.RuleSampler.rule`).

A rule is written once against `Arithmetic`: elementwise arithmetic on lists of tensors shaped
like the parameters. `IN_PLACE` runs it as ``torch._foreach_*`` operations on the state's own
tensors (the eager default), `LOOP` as the same operations tensor by tensor (its twin, which the
tests hold equal), and `PURE` as ``torch._foreach_*`` operations returning new tensors, which
``torch.compile`` traces into an epoch's program. A rule takes the value each operation returns,
so that one text serves the forms that overwrite their inputs and the one that may not.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor

#: A number: a Python float in the eager forms, a 0-dim tensor in a program.
Number = float | Tensor
#: A factor of `Arithmetic.added`: a number, or one tensor per list entry (elementwise).
Factor = Number | list[Tensor]


class Arithmetic(ABC):
    """Elementwise arithmetic on lists of tensors: ``scaled(xs, a)`` is ``a · xs``,
    ``added(xs, ys, a)`` is ``xs + a · ys`` (``a = 1`` when None) and ``subtracted(xs, ys, a)``
    is ``xs − a · ys`` (a step down a gradient, without negating ``a`` in a program)."""

    @abstractmethod
    def scaled(self, xs: list[Tensor], a: Number) -> list[Tensor]: ...

    @abstractmethod
    def added(
        self, xs: list[Tensor], ys: list[Tensor], a: Factor | None = None
    ) -> list[Tensor]: ...

    @abstractmethod
    def subtracted(self, xs: list[Tensor], ys: list[Tensor], a: Number) -> list[Tensor]: ...


class InPlace(Arithmetic):
    """``torch._foreach_*`` operations that overwrite ``xs`` and return it."""

    def scaled(self, xs: list[Tensor], a: Number) -> list[Tensor]:
        torch._foreach_mul_(xs, a)
        return xs

    def added(self, xs: list[Tensor], ys: list[Tensor], a: Factor | None = None) -> list[Tensor]:
        if isinstance(a, list):
            torch._foreach_addcmul_(xs, ys, a)
        else:
            torch._foreach_add_(xs, ys, alpha=1 if a is None else a)
        return xs

    def subtracted(self, xs: list[Tensor], ys: list[Tensor], a: Number) -> list[Tensor]:
        torch._foreach_add_(xs, ys, alpha=-a)
        return xs


class Loop(Arithmetic):
    """`InPlace`'s operations one tensor at a time."""

    def scaled(self, xs: list[Tensor], a: Number) -> list[Tensor]:
        for x in xs:
            x.mul_(a)
        return xs

    def added(self, xs: list[Tensor], ys: list[Tensor], a: Factor | None = None) -> list[Tensor]:
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            if isinstance(a, list):
                x.addcmul_(y, a[i])
            else:
                x.add_(y, alpha=1 if a is None else a)
        return xs

    def subtracted(self, xs: list[Tensor], ys: list[Tensor], a: Number) -> list[Tensor]:
        for x, y in zip(xs, ys, strict=True):
            x.add_(y, alpha=-a)
        return xs


class Pure(Arithmetic):
    """``torch._foreach_*`` operations returning new tensors; a factor may be a tensor."""

    def scaled(self, xs: list[Tensor], a: Number) -> list[Tensor]:
        return torch._foreach_mul(xs, a)

    def added(self, xs: list[Tensor], ys: list[Tensor], a: Factor | None = None) -> list[Tensor]:
        return torch._foreach_add(xs, ys if a is None else torch._foreach_mul(ys, a))

    def subtracted(self, xs: list[Tensor], ys: list[Tensor], a: Number) -> list[Tensor]:
        return torch._foreach_sub(xs, torch._foreach_mul(ys, a))


IN_PLACE, LOOP, PURE = InPlace(), Loop(), Pure()
