"""``bdl-check``: the short version end to end, the verdicts, and (slow)
the thresholds on the full runs — target 1 (Chen et al.'s double well, 80,000 samples) and
target 3 (Bayesian linear regression) — read from the one table ``bdl-check`` prints them from."""

import csv
import math
import os

import pytest
import torch

from bdl.checks import check_targets
from bdl.checks.check import THRESHOLDS, judge, main, to_markdown
from bdl.checks.check_targets import Row, double_well, linear_regression
from bdl.checks.targets import LinearRegression
from bdl.samplers import SGHMC


def test_quick_check_prints_the_table_and_writes_the_csv_and_figures(tmp_path, capsys):
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("|")]
    rows = list(csv.DictReader((tmp_path / "check.csv").open()))
    assert len(table) == 2 + len(rows)
    targets = {row["target"] for row in rows}
    assert targets == {"double_well", "gaussian_2d", "linear_regression", "toy_regression"}
    assert (tmp_path / "double_well.png").stat().st_size > 10_000
    assert (tmp_path / "gaussian_2d.png").stat().st_size > 10_000
    hmc = next(r for r in rows if r["target"] == "double_well" and r["sampler"] == "hmc")
    assert float(hmc["accept_rate"]) > 0.9 and float(hmc["tv"]) < 0.2
    # A smoke test: no verdict, and the double well's 8 draws per chain give no ESS at all.
    assert {row["check"] for row in rows} == {"smoke"}
    assert "PASS" not in out and "FAIL" not in out and "smoke test" in out
    assert all(r["ess_per_grad"] == "" for r in rows if r["target"] == "double_well")
    # Target 2: 50 draws per chain are enough for arviz to measure something; 10 (the samplers
    # thinned to one draw per 50-step trajectory) are not.
    measured = {r["sampler"]: r["ess_per_grad"] for r in rows if r["target"] == "gaussian_2d"}
    ten_draws = {"hmc, no MH", "naive_sghmc, MH", "naive_sghmc"}
    assert all(measured[s] == "" for s in ten_draws)
    assert all(float(v) > 0 for s, v in measured.items() if s not in ten_draws)


def _row(target: str, sampler: str, **errors: float) -> Row:
    return Row(target, sampler, errors, math.nan, None, 1, 1, 0.0)


def test_judge_against_the_thresholds():
    rows = [
        _row("double_well", "hmc", tv=0.009),
        _row("double_well", "mala", tv=0.014),
        _row("double_well", "sghmc", tv=0.012),
        _row("double_well", "naive_sghmc", tv=0.03),  # 2.5 x sghmc's
        _row("double_well", "sgld", tv=0.5),  # no threshold
        _row("linear_regression", "sgld", mean_error=0.001, cov_error=0.07),
    ]
    assert judge(rows) == ["PASS", "FAIL", "PASS", "PASS", "", "FAIL"]
    # naive SGHMC must be at least twice as far off as SGHMC: 0.02 < 2 x 0.012.
    assert judge([rows[2], _row("double_well", "naive_sghmc", tv=0.02)]) == ["PASS", "FAIL"]
    # Without SGHMC's row the relative bound cannot be judged.
    assert judge([_row("double_well", "naive_sghmc", tv=0.03)]) == [""]
    table = to_markdown(rows)
    assert "| FAIL " in table and "| PASS " in table
    assert "smoke" in to_markdown(rows, quick=True) and "PASS" not in to_markdown(rows, True)


def _samplers(target: str) -> list[str]:
    return [sampler for t, sampler in THRESHOLDS if t == target]


@pytest.mark.slow
def test_double_well_thresholds(tmp_path):
    rows = double_well(False, 0, tmp_path, _samplers("double_well"))
    assert len(rows) == 5 and all(row.samples == 80_000 for row in rows)
    assert judge(rows) == ["PASS"] * len(rows), to_markdown(rows)


@pytest.mark.slow
def test_linear_regression_thresholds(tmp_path):
    rows = linear_regression(False, 0, tmp_path, _samplers("linear_regression"))
    assert len(rows) == 5
    assert judge(rows) == ["PASS"] * len(rows), to_markdown(rows)


def _perturbed(temperature: float = 1.0, shift_sds: float = 0.0) -> type[LinearRegression]:
    """Target 3 with the posterior a wrong sampler would sample, scored against the right one:
    ``(U - gᵀw) / T`` is Gaussian with covariance ``T Σ`` (a noise variance ``T`` times too large)
    and mean ``μ + Σ g``, here ``shift_sds`` posterior standard deviations along ``w₀``."""

    class Perturbed(LinearRegression):
        def __init__(self) -> None:
            super().__init__()
            shift = torch.zeros_like(self.mean)
            shift[0] = shift_sds * self.covariance[0, 0].sqrt()
            self.pull = torch.linalg.solve(self.covariance, shift)

        def _evaluate(self, w, x, y):
            value, (grad,) = super()._evaluate(w, x, y)
            return (value - w @ self.pull) / temperature, [(grad - self.pull) / temperature]

    return Perturbed


@pytest.mark.slow
@pytest.mark.parametrize(
    ("temperature", "shift_sds"),
    [(1.1, 0.0), (1.0, 0.5)],
    ids=["noise variance 10% too large", "mean off by half a posterior sd"],
)
def test_linear_regression_thresholds_fail_a_wrong_posterior(
    tmp_path, monkeypatch, temperature, shift_sds
):
    monkeypatch.setattr(check_targets, "LinearRegression", _perturbed(temperature, shift_sds))
    rows = linear_regression(False, 0, tmp_path, _samplers("linear_regression"))
    assert judge(rows) == ["FAIL"] * len(rows), to_markdown(rows)


@pytest.mark.slow
def test_double_well_threshold_fails_sghmc_without_its_noise_correction(tmp_path, monkeypatch):
    """Chen et al.'s friction term C - B̂ with B̂ = 0: the gradient noise left uncorrected."""

    def uncorrected(lr, alpha, grad_var, generator):
        return SGHMC(lr, alpha=alpha, grad_var=0.0, generator=generator)

    monkeypatch.setattr(check_targets, "SGHMC", uncorrected)
    rows = double_well(False, 0, tmp_path, ["sghmc"])
    assert judge(rows) == ["FAIL"], to_markdown(rows)


@pytest.mark.parametrize("place", ["a file", "below a file", "read-only"])
def test_an_out_that_cannot_be_written_is_one_line(tmp_path, capsys, place):
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = {"a file": blocker, "below a file": blocker / "check", "read-only": tmp_path / "ro"}
    if place == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        out[place].mkdir(mode=0o500)
    assert main(["--quick", "--out", str(out[place])]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("bdl-check: error: ") and str(out[place]) in line
    assert line.endswith("--out DIR")
