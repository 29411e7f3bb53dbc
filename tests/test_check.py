"""``bdl-check``: the short version end to end, and (slow) the thresholds of issue 3 on the full
runs — target 1 (Chen et al.'s double well, 80,000 samples) and target 3 (Bayesian linear
regression)."""

import csv

import pytest

from bdl.check import double_well, linear_regression, main


def test_quick_check_prints_the_table_and_writes_the_csv_and_figures(tmp_path, capsys):
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    rows = list(csv.DictReader((tmp_path / "check.csv").open()))
    assert len(table) == 2 + len(rows)
    targets = {row["target"] for row in rows}
    assert targets == {"double_well", "gaussian_2d", "linear_regression", "seed003_regression"}
    assert (tmp_path / "double_well.png").stat().st_size > 10_000
    assert (tmp_path / "gaussian_2d.png").stat().st_size > 10_000
    hmc = next(r for r in rows if r["target"] == "double_well" and r["sampler"] == "hmc")
    assert float(hmc["accept_rate"]) > 0.9 and float(hmc["tv"]) < 0.2


@pytest.mark.slow
def test_double_well_thresholds(tmp_path):
    rows = double_well(False, 0, tmp_path, ["hmc", "mala", "sghmc", "naive_sghmc"])
    tv = {row.sampler: row.errors["tv"] for row in rows}
    assert all(row.samples == 80_000 for row in rows)
    assert tv["hmc"] <= 0.01 and tv["mala"] <= 0.01
    assert tv["sghmc"] <= 0.03
    assert tv["naive_sghmc"] >= 2 * tv["sghmc"]


@pytest.mark.slow
def test_linear_regression_thresholds(tmp_path):
    rows = linear_regression(False, 0, tmp_path, ["hmc", "mala", "sgld", "sghmc"])
    assert len(rows) == 4
    for row in rows:
        assert row.errors["mean_error"] <= 0.02, row
        assert row.errors["cov_error"] <= 0.10, row
