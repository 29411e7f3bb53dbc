"""A chain's curve: one row per epoch (`bdl.runner.sampling` writes it to ``curve.csv`` and reads
the verdict's potential and hyperparameters from it), kept column by column in two flat arrays, a
float64 value and a one-byte kind per cell, rather than as a dict per row.

Held as dicts, a row cost about 860 bytes: the peak resident memory of ``bdl-run sampler=sghmc
dataset=yacht chains=4 burn_in=1000 thin=100`` grew by 62 MB from ``epochs=2000`` to
``epochs=20000``, so 340 MB at 100 000 epochs and four chains; and every checkpoint wrote them into
its JSON header, which safetensors caps at 100 MB. Kept so, a row costs 9 bytes a field, and a
checkpoint writes the curve as two tensors (`Curve.tensors`) with no Python per cell.
Every value comes back as it went in: floats and integers exactly (float64 holds both), and the
curve's two blanks, ``""`` (a column with no value in an epoch) and ``None`` (a value not finite).
"""

from __future__ import annotations

import numbers
from array import array
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor

#: a cell's kind: a number, an integer, and the two blanks
FLOAT, INT, EMPTY, NONE = range(4)
_KINDS = {float: FLOAT, int: INT, str: EMPTY, type(None): NONE}
_DECODE = (float, int, lambda _: "", lambda _: None)


def _kind(value: Any) -> int:
    kind = _KINDS.get(type(value))
    if kind is None and not isinstance(value, bool):  # a NumPy number, as JSON took them
        kind = INT if isinstance(value, numbers.Integral) else None
        kind = FLOAT if kind is None and isinstance(value, numbers.Real) else kind
    if kind is None or (kind == EMPTY and value != ""):
        raise TypeError(f"a curve cell holds a {type(value).__name__}: {value!r}")
    return kind


class Curve:
    """A chain's curve rows, each a dict of the same ``fields`` in the same order: appended,
    counted, indexed and iterated as the list of dicts it stands for."""

    def __init__(self, fields: list[str] | None = None) -> None:
        #: the rows' fields, in order; None until the first row
        self.fields = fields
        self._values = array("d")
        self._kinds = array("B")

    @classmethod
    def of(cls, rows: Iterable[dict[str, Any]]) -> Curve:
        curve = cls()
        for row in rows:
            curve.append(row)
        return curve

    @classmethod
    def from_tensors(cls, fields: list[str], values: Tensor, kinds: Tensor) -> Curve:
        """The curve whose `tensors` these are."""
        curve = cls(fields or None)
        curve._values.frombytes(values.to(torch.float64).contiguous().numpy().tobytes())
        curve._kinds.frombytes(kinds.to(torch.uint8).contiguous().numpy().tobytes())
        return curve

    def tensors(self) -> tuple[Tensor, Tensor]:
        """Every cell's value (float64) and kind (uint8), one row per epoch: copies."""
        shape = (len(self), len(self.fields or ()))
        if not self._kinds:
            return torch.zeros(shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.uint8)
        # copied at once: the arrays cannot grow while a tensor views them
        values = torch.frombuffer(self._values, dtype=torch.float64).clone()
        kinds = torch.frombuffer(self._kinds, dtype=torch.uint8).clone()
        return values.reshape(shape), kinds.reshape(shape)

    def append(self, row: dict[str, Any]) -> None:
        if self.fields is None:
            self.fields = list(row)
        elif list(row) != self.fields:
            raise ValueError(f"a curve row of fields {list(row)} among rows of {self.fields}")
        kinds = [_kind(value) for value in row.values()]
        self._values.extend(
            float(value) if kind <= INT else 0.0
            for value, kind in zip(row.values(), kinds, strict=True)
        )
        self._kinds.extend(kinds)

    def __len__(self) -> int:
        return len(self._kinds) // len(self.fields) if self.fields else 0

    def __getitem__(self, index: int) -> dict[str, Any]:
        rows = len(self)
        if not -rows <= index < rows:
            raise IndexError(f"curve row {index} of {rows}")
        width = len(self.fields)
        start = (index % rows) * width
        values, kinds = self._values[start : start + width], self._kinds[start : start + width]
        return {
            field: _DECODE[kind](value)
            for field, value, kind in zip(self.fields, values, kinds, strict=True)
        }

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))
