"""``bdl-check``: the short version end to end (one run, whose rows must stay within their
spread over seeds and count what its sizes say), the verdicts, the CSV and the table, and (slow)
the thresholds on the full runs — target 1 (Chen et al.'s double well, 80,000 samples) and
target 3 (Bayesian linear regression) — read from the one table ``bdl-check`` prints them from."""

import contextlib
import csv
import io
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from bdl.checks import check_targets
from bdl.checks.check import THRESHOLDS, judge, main, to_markdown, write_csv
from bdl.checks.check_targets import Row, double_well, linear_regression
from bdl.checks.targets import LinearRegression
from bdl.samplers import SGHMC

ERRORS = ("tv", "cov_abs_error", "mean_error", "cov_error")


@dataclass
class Quick:
    code: int
    printed: str
    out: Path
    rows: list[dict[str, str]]  # check.csv
    figures: dict[str, Figure]  # by file name, as saved


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> Quick:
    """``bdl-check --quick`` run once for the tests that read it."""
    out = tmp_path_factory.mktemp("check")
    printed = io.StringIO()
    figures: dict[str, Figure] = {}
    save = Figure.savefig

    def saved(figure: Figure, path, **options):
        figures[Path(path).name] = figure
        save(figure, path, **options)

    with contextlib.redirect_stdout(printed), pytest.MonkeyPatch.context() as patch:
        patch.setattr(Figure, "savefig", saved)
        code = main(["--quick", "--out", str(out)])
    with (out / "check.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    return Quick(code, printed.getvalue(), out, rows, figures)


def test_quick_check_prints_the_table_and_writes_the_csv_and_figures(quick):
    from matplotlib.image import imread

    assert quick.code == 0
    table = [line for line in quick.printed.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(quick.rows)
    runs = list(dict.fromkeys((target, sampler) for target, sampler, _ in QUICK_ERRORS))
    assert [(row["target"], row["sampler"]) for row in quick.rows] == runs
    for name in ("double_well.png", "gaussian_2d.png"):  # written, and not blank
        image = imread(quick.out / name)
        assert image[..., :3].std() > 0.05, name
        width, height = quick.figures[name].get_size_inches() * 120  # at 120 dots per inch
        assert image.shape[:2] == (round(height), round(width)), name
    (well,) = quick.figures["double_well.png"].axes  # Chen et al.'s axes
    assert (well.get_xlabel(), well.get_ylabel()) == (r"$\theta$", "density")
    # A smoke test: no verdict, and the double well's 8 draws per chain give no ESS at all.
    assert {row["check"] for row in quick.rows} == {"smoke"}
    assert "PASS" not in quick.printed and "FAIL" not in quick.printed
    last = quick.printed.splitlines()[-1]
    summary = "--quick: a smoke test, too few samples for the thresholds (run without --quick)"
    assert re.fullmatch(
        rf"{re.escape(summary)}\. {len(quick.rows)} runs in \d+ s; CSV and figures in {quick.out}",
        last,
    )
    assert all(r["ess_per_grad"] == "" for r in quick.rows if r["target"] == "double_well")
    # Target 2: 50 draws per chain are enough for arviz to measure something; 10 (the samplers
    # thinned to one draw per 50-step trajectory) are not.
    measured = {r["sampler"]: r["ess_per_grad"] for r in quick.rows if r["target"] == "gaussian_2d"}
    ten_draws = {"hmc, no MH", "naive_sghmc, MH", "naive_sghmc"}
    assert all(measured[s] == "" for s in ten_draws)
    assert all(float(v) > 0 for s, v in measured.items() if s not in ten_draws)


#: The errors each ``--quick`` row stays under: too few samples for `THRESHOLDS`, and for some
#: samplers too few steps to forget the start, yet a wrong step size, a broken sampler or a wrong
#: closed form lands far above. Each bound is the error's mean plus 4 standard deviations over
#: seeds 0-9 (``bdl-check --quick --seed S --out DIR/sS``, the columns of ``check.csv``), rounded
#: up to two digits; the mean ± sd is in the comment.
QUICK_ERRORS: dict[tuple[str, str, str], float] = {
    ("double_well", "hmc", "tv"): 0.18,  # 0.095 ± 0.02
    ("double_well", "hmc, no MH", "tv"): 0.17,  # 0.1 ± 0.015
    ("double_well", "naive_sghmc, MH", "tv"): 0.22,  # 0.11 ± 0.025
    ("double_well", "naive_sghmc", "tv"): 0.27,  # 0.17 ± 0.024
    ("double_well", "sghmc", "tv"): 0.15,  # 0.078 ± 0.016
    ("double_well", "sghmc_adaptive", "tv"): 0.16,  # 0.086 ± 0.018
    ("double_well", "sgld", "tv"): 0.14,  # 0.084 ± 0.013
    ("double_well", "psgld", "tv"): 0.24,  # 0.11 ± 0.03
    ("double_well", "psgld, beta 0.9999", "tv"): 0.16,  # 0.089 ± 0.016
    ("double_well", "mala", "tv"): 0.15,  # 0.078 ± 0.017
    ("double_well", "rwmh", "tv"): 0.16,  # 0.079 ± 0.019
    ("gaussian_2d", "hmc", "cov_abs_error"): 0.3,  # 0.057 ± 0.059
    ("gaussian_2d", "hmc, no MH", "cov_abs_error"): 0.55,  # 0.23 ± 0.079
    ("gaussian_2d", "naive_sghmc, MH", "cov_abs_error"): 0.54,  # 0.18 ± 0.09
    ("gaussian_2d", "naive_sghmc", "cov_abs_error"): 1.6,  # 0.56 ± 0.24
    ("gaussian_2d", "sghmc", "cov_abs_error"): 0.19,  # 0.035 ± 0.037
    ("gaussian_2d", "sgld", "cov_abs_error"): 0.2,  # 0.051 ± 0.036
    ("gaussian_2d", "psgld", "cov_abs_error"): 3.6,  # 0.33 ± 0.81
    ("gaussian_2d", "mala", "cov_abs_error"): 0.12,  # 0.028 ± 0.021
    ("gaussian_2d", "rwmh", "cov_abs_error"): 0.12,  # 0.031 ± 0.022
    ("linear_regression", "hmc", "mean_error"): 0.0092,  # 0.0025 ± 0.0016
    ("linear_regression", "hmc", "cov_error"): 0.28,  # 0.15 ± 0.031
    ("linear_regression", "mala", "mean_error"): 0.0035,  # 0.0015 ± 0.00051
    ("linear_regression", "mala", "cov_error"): 0.12,  # 0.066 ± 0.011
    ("linear_regression", "rwmh", "mean_error"): 0.0064,  # 0.0027 ± 0.0009
    ("linear_regression", "rwmh", "cov_error"): 0.18,  # 0.099 ± 0.02
    ("linear_regression", "sgld", "mean_error"): 0.11,  # 0.099 ± 0.0019
    ("linear_regression", "sgld", "cov_error"): 5.4,  # 4.8 ± 0.15
    ("linear_regression", "sghmc", "mean_error"): 0.006,  # 0.0024 ± 0.00089
    ("linear_regression", "sghmc", "cov_error"): 0.58,  # 0.52 ± 0.013
    ("linear_regression", "psgld", "mean_error"): 0.68,  # 0.66 ± 0.0025
    ("linear_regression", "psgld", "cov_error"): 9.5,  # 8.9 ± 0.14
    ("linear_regression", "sghmc_adaptive", "mean_error"): 0.47,  # 0.45 ± 0.0039
    ("linear_regression", "sghmc_adaptive", "cov_error"): 15,  # 13 ± 0.44
    ("linear_regression", "naive_sghmc", "mean_error"): 0.0096,  # 0.0062 ± 0.00084
    ("linear_regression", "naive_sghmc", "cov_error"): 34,  # 28 ± 1.2
    ("linear_regression", "csgd", "mean_error"): 0.003,  # 0.001 ± 0.00049
    ("linear_regression", "csgd", "cov_error"): 0.9,  # 0.86 ± 0.0072
    ("linear_regression", "csgd, diagonal", "mean_error"): 0.0035,  # 0.0012 ± 0.00056
    ("linear_regression", "csgd, diagonal", "cov_error"): 0.67,  # 0.64 ± 0.0061
    ("toy_regression", "hmc", "mean_error"): 0.025,  # 0.0087 ± 0.004
    ("toy_regression", "hmc", "cov_error"): 0.2,  # 0.085 ± 0.028
    ("toy_regression", "rwmh (post: std 0.02)", "mean_error"): 0.66,  # 0.59 ± 0.018
    ("toy_regression", "rwmh (post: std 0.02)", "cov_error"): 5.1,  # 3.3 ± 0.44
    ("toy_regression", "rwmh", "mean_error"): 0.016,  # 0.0043 ± 0.0029
    ("toy_regression", "rwmh", "cov_error"): 0.16,  # 0.042 ± 0.028
    ("toy_regression", "sgld", "mean_error"): 0.19,  # 0.13 ± 0.014
    ("toy_regression", "sgld", "cov_error"): 3.2,  # 2.2 ± 0.24
    ("toy_regression", "mala", "mean_error"): 0.0099,  # 0.003 ± 0.0017
    ("toy_regression", "mala", "cov_error"): 0.099,  # 0.042 ± 0.014
    ("toy_regression", "sghmc", "mean_error"): 0.0073,  # 0.0021 ± 0.0013
    ("toy_regression", "sghmc", "cov_error"): 0.14,  # 0.047 ± 0.021
    ("toy_regression", "psgld", "mean_error"): 0.21,  # 0.15 ± 0.015
    ("toy_regression", "psgld", "cov_error"): 4.2,  # 3.1 ± 0.26
}

#: The Metropolis-tested rows' acceptance rates, mean ± 4 sd over the same seeds (rounded outwards):
#: MALA and RWMH adapt towards their targets 0.574 and 0.234 (0.44 on the double well), HMC's
#: and naive SGHMC's fixed steps set theirs.
QUICK_ACCEPT: dict[tuple[str, str], tuple[float, float]] = {
    ("double_well", "hmc"): (0.98, 1),  # 0.997 ± 0.002
    ("double_well", "naive_sghmc, MH"): (0.42, 0.73),  # 0.576 ± 0.037
    ("double_well", "mala"): (0.53, 0.62),  # 0.574 ± 0.010
    ("double_well", "rwmh"): (0.4, 0.5),  # 0.446 ± 0.011
    ("gaussian_2d", "hmc"): (0.72, 1),  # 0.924 ± 0.050
    ("gaussian_2d", "naive_sghmc, MH"): (0.53, 0.77),  # 0.647 ± 0.029
    ("gaussian_2d", "mala"): (0.56, 0.61),  # 0.583 ± 0.005
    ("gaussian_2d", "rwmh"): (0.19, 0.26),  # 0.227 ± 0.008
    ("linear_regression", "hmc"): (0.71, 0.89),  # 0.803 ± 0.021
    ("linear_regression", "mala"): (0.55, 0.61),  # 0.582 ± 0.007
    ("linear_regression", "rwmh"): (0.19, 0.25),  # 0.219 ± 0.005
    ("toy_regression", "hmc"): (0.79, 0.94),  # 0.865 ± 0.019
    ("toy_regression", "rwmh (post: std 0.02)"): (0.88, 0.91),  # 0.891 ± 0.003
    ("toy_regression", "rwmh"): (0.19, 0.27),  # 0.233 ± 0.009
    ("toy_regression", "mala"): (0.54, 0.62),  # 0.577 ± 0.009
}


def _value(row: dict[str, str], key: str) -> float:
    return float(row[key]) if row[key] else math.nan


def test_quick_rows_errors_and_acceptance_within_their_spread_over_seeds(quick):
    for row in quick.rows:
        key = (row["target"], row["sampler"])
        errors = {name: float(row[name]) for name in ERRORS if row[name]}
        assert errors.keys() == {name for *run, name in QUICK_ERRORS if tuple(run) == key}, key
        for name, value in errors.items():
            assert value <= QUICK_ERRORS[(*key, name)], (key, name, value)
        if key in QUICK_ACCEPT:
            low, high = QUICK_ACCEPT[key]
            assert low <= float(row["accept_rate"]) <= high, (key, row["accept_rate"])
        else:
            assert row["accept_rate"] == "", key


#: The ``--quick`` sizes of `bdl.checks.check_targets`, by hand: samples = chains x draws kept
#: per chain, gradient evaluations = chains x sampler steps x closure calls per step x cost.
#: Naive SGHMC with MH closes each 50-step trajectory with one more call for its test; a
#: full-data gradient of target 3 costs N / n = 500 / 50 = 10 minibatch gradients.
QUICK_SIZES: dict[str, dict[str, tuple[int, int]]] = {
    # 50 chains of 8 draws, one per 50 leapfrog steps (HMC: 8 trajectories of 50)
    "double_well": {"*": (50 * 8, 50 * 8 * 50), "naive_sghmc, MH": (50 * 8, 50 * 8 * 51)},
    # 50 chains, 500 steps thinned by 10 (HMC: 50 trajectories of 10, not thinned); one draw
    # per 50-step trajectory for the naive samplers
    "gaussian_2d": {
        "*": (50 * 50, 50 * 500),
        "hmc": (50 * 50, 50 * 50 * 10),
        "hmc, no MH": (50 * 10, 50 * 500),
        "naive_sghmc, MH": (50 * 10, 50 * 500 * 51 // 50),
        "naive_sghmc": (50 * 10, 50 * 500),
    },
    # 50 chains; minibatch samplers 500 steps thinned by 10; full-data ones: HMC 12 trajectories
    # of 10, MALA and RWMH 125 steps thinned by 5
    "linear_regression": {
        "*": (50 * 50, 50 * 500),
        "hmc": (50 * 12, 50 * 12 * 10 * 10),
        "mala": (50 * 25, 50 * 125 * 10),
        "rwmh": (50 * 25, 50 * 125 * 10),
    },
    # 50 chains of 500 steps thinned by 5 (HMC: 25 trajectories of 20), all on the 30 points
    "toy_regression": {"*": (50 * 100, 50 * 500), "hmc": (50 * 25, 50 * 25 * 20)},
}


def test_quick_rows_count_their_samples_and_gradient_evaluations(quick):
    for row in quick.rows:
        sizes = QUICK_SIZES[row["target"]]
        expected = sizes.get(row["sampler"], sizes["*"])
        assert (int(row["samples"]), int(row["grad_evals"])) == expected, row


def _number(cell: str) -> float:
    return math.nan if not cell else float(cell.replace(",", "").rstrip("%"))


def _table(markdown: str) -> list[list[str]]:
    """The header and the rows' cells of the markdown table in ``markdown``."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[:1] + lines[2:]]


def test_quick_table_shows_the_csvs_values(quick):
    """Each printed cell is its CSV value to the digits shown: errors by name, in percent for
    targets 3 and 4; ESS to three digits, acceptance to three decimals, counts in full."""
    names = {"TV": "tv", "cov abs err": "cov_abs_error", "mean": "mean_error", "cov": "cov_error"}
    header, *table = _table(quick.printed)
    for cells, row in zip(
        (dict(zip(header, c, strict=True)) for c in table), quick.rows, strict=True
    ):
        assert [cells["target"], cells["sampler"], cells["check"]] == [
            row["target"],
            row["sampler"],
            "smoke",
        ]
        shown = dict(part.rsplit(" ", 1) for part in cells["error"].split(", "))
        assert {names[name] for name in shown} == {key for key in ERRORS if row[key]}
        for name, text in shown.items():
            scale = 100 if text.endswith("%") else 1
            half_digit = 0.5 * 10.0 ** -len(text.rstrip("%").split(".")[1])
            value = scale * float(row[names[name]])
            assert _number(text) == pytest.approx(value, abs=half_digit * 1.001), (name, text)
        ess = pytest.approx(_value(row, "ess_per_grad"), rel=0.006, nan_ok=True)
        assert _number(cells["ESS / grad eval"]) == ess
        accept = pytest.approx(_value(row, "accept_rate"), abs=0.0005, nan_ok=True)
        assert _number(cells["accept"]) == accept
        assert _number(cells["samples"]) == int(row["samples"])
        assert _number(cells["grad evals"]) == int(row["grad_evals"])


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
    # A limit is inclusive: an error at it passes, as does naive SGHMC at exactly twice SGHMC's.
    hmc_limit = THRESHOLDS["double_well", "hmc"][0].limit
    assert judge([_row("double_well", "hmc", tv=hmc_limit)]) == ["PASS"]
    assert judge([_row("double_well", "hmc", tv=1.01 * hmc_limit)]) == ["FAIL"]
    assert judge([rows[2], _row("double_well", "naive_sghmc", tv=0.024)]) == ["PASS", "PASS"]
    # Every bound of a row must hold: the mean alone off fails too.
    both = [_row("linear_regression", "sgld", mean_error=e, cov_error=0.05) for e in (0.001, 0.01)]
    assert judge(both) == ["PASS", "FAIL"]


def test_csv_and_table_hold_each_rows_values(tmp_path):
    """Judged rows (not --quick): the CSV has one column per error (blank where a target has
    none), the verdict, blanks for an unmeasured ESS and for no Metropolis test, and the
    seconds to two decimals; the table shows the same values rounded for reading."""
    rows = [
        Row("double_well", "hmc", {"tv": 0.0123}, math.nan, 0.987654, 400, 20_000, 1.234),
        Row(
            "linear_regression",
            "sgld",
            {"mean_error": 0.001, "cov_error": 0.07},
            0.00321,
            None,
            2_500,
            25_000,
            0.5,
        ),
    ]
    write_csv(rows, tmp_path / "check.csv")
    with (tmp_path / "check.csv").open() as handle:
        written = list(csv.DictReader(handle))
    common = {"target": "double_well", "sampler": "hmc", "cov_error": "", "mean_error": ""}
    assert written[0] == common | {
        "tv": "0.0123",
        "check": "PASS",
        "ess_per_grad": "",
        "accept_rate": "0.987654",
        "samples": "400",
        "grad_evals": "20000",
        "seconds": "1.23",
    }
    assert written[1] == {
        "target": "linear_regression",
        "sampler": "sgld",
        "cov_error": "0.07",
        "mean_error": "0.001",
        "tv": "",
        "check": "FAIL",
        "ess_per_grad": "0.00321",
        "accept_rate": "",
        "samples": "2500",
        "grad_evals": "25000",
        "seconds": "0.5",
    }
    write_csv(rows, tmp_path / "quick.csv", quick=True)
    with (tmp_path / "quick.csv").open() as handle:
        assert [row["check"] for row in csv.DictReader(handle)] == ["smoke", "smoke"]
    header, *cells = _table(to_markdown(rows))
    assert header == [
        "target",
        "sampler",
        "error",
        "check",
        "ESS / grad eval",
        "accept",
        "samples",
        "grad evals",
    ]
    assert cells == [
        ["double_well", "hmc", "TV 0.0123", "PASS", "", "0.988", "400", "20,000"],
        [
            "linear_regression",
            "sgld",
            "mean 0.10%, cov 7.00%",
            "FAIL",
            "3.21e-03",
            "",
            "2,500",
            "25,000",
        ],
    ]


def test_main_runs_the_chosen_targets_with_the_seed_and_fails_on_a_fail(
    tmp_path, monkeypatch, capsys
):
    """The command line hands its seed, mode and folder to each chosen target, prints the
    verdicts' count and exits 1 when one fails (0 when none does)."""
    calls = []

    def double_well(quick, seed, out):
        calls.append((quick, seed, out))
        return [_row("double_well", "hmc", tv=0.5), _row("double_well", "mala", tv=0.001)]

    monkeypatch.setitem(check_targets.TARGETS, "double_well", double_well)
    assert main(["--seed", "7", "--out", str(tmp_path), "--targets", "double_well"]) == 1
    assert calls == [(False, 7, tmp_path)]
    last = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(rf"1 PASS, 1 FAIL\. 2 runs in \d+ s; CSV and figures in {tmp_path}", last)
    with (tmp_path / "check.csv").open() as handle:
        assert [row["check"] for row in csv.DictReader(handle)] == ["FAIL", "PASS"]
    assert main(["--quick", "--seed", "3", "--out", str(tmp_path), "--targets", "double_well"]) == 0
    assert calls[1] == (True, 3, tmp_path)


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
    expected = {
        "a file": f"--out {blocker} is a file, not a folder: choose a folder with --out DIR",
        "below a file": f"cannot create --out {blocker / 'check'} (Not a directory): choose a "
        "writable --out DIR",
        "read-only": f"--out {out[place]} is read-only: choose a writable folder with --out DIR",
    }
    assert line == f"bdl-check: error: {expected[place]}"


def test_double_well_figure_redraws_chen_et_als_fig_1(quick):
    """Chen et al. (2014)'s Fig. 1 as they drew it: the true density in a solid blue line, each of
    their five samplers' histogram (density per unit θ, 44 bins over [-2.2, 2.2]) dash-dotted in
    their colour and marker and named as in their legend; the title says the run's sizes."""
    (well,) = quick.figures["double_well.png"].axes
    true, *samplers = well.get_lines()
    assert (true.get_label(), true.get_color(), true.get_linestyle()) == (
        "True distribution",
        "b",
        "-",
    )
    theta = true.get_xdata()
    assert (theta[0], theta[-1], len(theta)) == (-2.2, 2.2, 441)
    unnormalised = np.exp(2 * theta**2 - theta**4)
    density = unnormalised / np.trapezoid(unnormalised, theta)
    np.testing.assert_allclose(true.get_ydata(), density, rtol=1e-4)
    expected = [
        ("Standard HMC (with MH)", "c", "v"),
        ("Standard HMC (no MH)", "r", "None"),
        ("Naive stochastic gradient HMC (with MH)", "m", "x"),
        ("Naive stochastic gradient HMC (no MH)", "k", "None"),
        ("SGHMC", "g", "None"),
    ]
    assert [(s.get_label(), s.get_color(), s.get_marker()) for s in samplers] == expected
    for line in samplers:
        assert line.get_linestyle() == "-." and len(line.get_xdata()) == 44
        np.testing.assert_allclose(line.get_xdata(), np.linspace(-2.15, 2.15, 44), atol=1e-12)
        # 400 draws, almost all within ±2.2 (mass outside below 1e-4): a density sums to 1
        assert 0.99 <= line.get_ydata().sum() * 0.1 <= 1 + 1e-9
    assert [t.get_text() for t in well.get_legend().get_texts()] == [
        "True distribution",
        *(name for name, _, _ in expected),
    ]
    assert (well.get_xlim(), well.get_ylim()) == ((-2.2, 2.2), (0, 0.9))
    assert well.get_title() == (
        "double well (Chen et al. 2014, Fig. 1): 50 chains × 8 samples\n"
        "after 2 samples' worth of burn-in each, seed 0 (--quick)"
    )


def test_gaussian_figure_redraws_chen_et_als_fig_3a(quick):
    """Chen et al.'s Fig. 3a: SGLD (blue crosses) and SGHMC (red circles), joined, one point per
    step size, covariance error against autocorrelation time; the title says the sweep's
    sizes (--quick: two step sizes, 20 chains of 500 steps)."""
    (ax,) = quick.figures["gaussian_2d.png"].axes
    lines = ax.get_lines()
    styles = [(li.get_label(), li.get_color(), li.get_marker(), li.get_linestyle()) for li in lines]
    assert styles == [("SGLD", "b", "x", "-"), ("SGHMC", "r", "o", "-")]
    assert all(len(li.get_xdata()) == 2 for li in lines)
    times = np.concatenate([li.get_xdata() for li in lines])
    errors = np.concatenate([li.get_ydata() for li in lines])
    # an autocorrelation time is at least one step, and both errors are of a covariance whose
    # entries are at most 1 in size
    assert (times >= 1).all() and ((errors > 0) & (errors < 1)).all()
    expected_scale = "log" if times.max() > 20 * times.min() else "linear"
    assert ax.get_xscale() == expected_scale
    assert (ax.get_xlabel(), ax.get_ylabel()) == (
        "autocorrelation time (steps)",
        "average absolute error of covariance",
    )
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["SGLD", "SGHMC"]
    assert ax.get_title() == (
        "correlated 2-D Gaussian over 2 step sizes\n20 chains × 500 steps "
        "after 50 of burn-in, seed 0 (--quick)"
    )
