"""A chain's curve kept column by column (`bdl.runner.curve`): the rows it is given, exactly, in
a tenth of the memory of dicts."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from bdl.runner.curve import Curve


def long_curve(epochs: int) -> list[dict]:
    """Rows as the runner writes them: ints, floats, a subnormal, 2^999, and both blanks."""
    return [
        {
            "chain": 3,
            "epoch": epoch + 1,
            "potential": None if epoch % 7 == 0 else -0.1 * epoch / 3,
            "lr_scale": 1.0 / (epoch + 1),
            "num_samples": epoch // 20,
            "test_metric": "" if epoch < 100 else 1 / 3 + epoch * 1e-12,
            "accept_rate": "",
            "divergences": epoch % 2,
            "noise_precision": 5e-324 if epoch == 5 else 2.0**epoch if epoch < 1000 else 0.5,
        }
        for epoch in range(epochs)
    ]


def test_the_rows_come_back_exactly():
    rows = long_curve(2_000)
    curve = Curve.of(rows)
    assert len(curve) == 2_000 and curve.fields == list(rows[0])
    assert list(curve) == rows
    assert [[type(v) for v in row.values()] for row in curve] == [
        [type(v) for v in row.values()] for row in rows
    ]
    assert curve[-1] == rows[-1] and curve[0] == rows[0] and curve[1234] == rows[1234]
    with pytest.raises(IndexError):
        curve[2_000]
    values, kinds = curve.tensors()
    assert values.shape == kinds.shape == (2_000, len(rows[0]))
    assert list(Curve.from_tensors(curve.fields, values, kinds)) == rows
    curve.append(rows[0])  # the arrays grow on after their tensors were taken
    assert len(curve) == 2_001 and curve[-1] == rows[0]


def test_an_empty_curve():
    curve = Curve()
    assert len(curve) == 0 and list(curve) == [] and curve.fields is None
    values, kinds = curve.tensors()
    assert values.shape == kinds.shape == (0, 0)
    assert len(Curve.from_tensors([], values, kinds)) == 0


def test_numpy_numbers_come_back_as_pythons_and_other_cells_are_refused():
    """NumPy's numbers, which the JSON of the checkpoints before took as Python's, come back as
    Python's of the same value; a bool, a string other than the blank and a row of other
    fields are refused by name."""
    curve = Curve.of(
        [{"epoch": np.int64(7), "potential": np.float64(0.1), "rate": np.float32(0.5)}]
    )
    assert curve[0] == {"epoch": 7, "potential": 0.1, "rate": 0.5}
    assert [type(v) for v in curve[0].values()] == [int, float, float]
    with pytest.raises(TypeError, match="a curve cell holds a bool: True"):
        Curve.of([{"epoch": 1, "converged": True}])
    with pytest.raises(TypeError, match="a curve cell holds a str: 'n/a'"):
        Curve.of([{"epoch": 1, "test_metric": "n/a"}])
    with pytest.raises(ValueError, match=r"a curve row of fields \['epoch', 'chain'\]"):
        Curve.of([{"epoch": 1}, {"epoch": 2, "chain": 0}])


def test_a_row_costs_nine_bytes_a_field():
    """100 000 rows of 9 fields hold 8.1 MB (a float64 and a byte a cell), where a run held
    them as dicts in about 86 MB (860 bytes a row, `bdl.runner.curve`)."""
    rows = long_curve(100_000)
    tracemalloc.start()
    try:
        curve = Curve.of(rows)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(curve) == 100_000
    assert held < 100_000 * 9 * 9 * 1.2  # an array grows by a sixteenth or so at a time
