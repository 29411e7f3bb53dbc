"""scripts/bench_scaling.py, run as a user runs it: a row a cell, each run a whole run_model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_scaling.py"
NUMBER = r"(-?\d+\.\d+)"
#: chains, training rows, test points, then the fixed seconds, ms a draw (wall, CPU), ms a
#: chain's draw, and the check's measured / predicted seconds
ROW = r"\s*(\d+)\s+(\d+)\s+(\d+)\s+" + r"\s+".join([NUMBER] * 5) + r"\s+/\s+" + NUMBER + r"\s*"


@pytest.mark.slow
def test_quick_run_prints_a_row_a_cell_whose_columns_agree():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        cwd=SCRIPT.parent,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    rows = [re.fullmatch(ROW, line) for line in result.stdout.splitlines()]
    rows = [row for row in rows if row]
    assert [tuple(map(int, row.groups()[:3])) for row in rows] == [(1, 300, 31), (4, 300, 31)]
    for row in rows:
        chains = int(row.group(1))
        per_draw, per_chain_draw = float(row.group(5)), float(row.group(7))
        # the per-chain column is the per-draw one shared among the chains (both rounded)
        assert per_chain_draw == pytest.approx(per_draw / chains, abs=1e-3 + 0.01 / chains)
        assert float(row.group(8)) > 0  # the check run's wall seconds
