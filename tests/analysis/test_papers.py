"""bdl-report --paper: bdl's runs beside the published numbers, checked against values worked out
by hand from the runs the tests write."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bdl.analysis import papers
from bdl.analysis.report import main
from bdl.analysis.sweeps import load_runs


def _write_run(directory: Path, choices: dict[str, str], metrics: dict, curve: list | None = None):
    (directory / ".hydra").mkdir(parents=True)
    (directory / ".hydra" / "config.yaml").write_text(f"seed: {metrics.pop('seed', 0)}\n")
    listed = "".join(f"      {k}: {v}\n" for k, v in choices.items())
    (directory / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  runtime:\n    choices:\n{listed}")
    (directory / "metrics.json").write_text(json.dumps({"status": "completed", **metrics}))
    if curve is not None:
        rows = "".join(f"{e},1.0,{a}\n" for e, a in curve)
        (directory / "curve.csv").write_text("epoch,potential,test_metric\n" + rows)


@pytest.fixture
def uci_runs(tmp_path) -> Path:
    results = {  # (test_rmse, test_ll) of splits 0 and 1
        "boston": [(2.0, -2.5), (2.4, -2.3)],
        "concrete": [(6.0, -3.2), (6.2, -3.3)],
        "naval": [(0.0012, 4.0), (0.0014, 4.2)],
    }
    for dataset, splits in results.items():
        for split, (rmse, ll) in enumerate(splits):
            _write_run(
                tmp_path / "sweep" / f"{dataset}_{split}",
                {"dataset": dataset, "sampler": "sghmc_uci"},
                {"test_rmse": rmse, "test_ll": ll, "wall_time_s": 1800.0},
            )
    return tmp_path / "sweep"


def test_uci_table_against_hand_computed_cells(uci_runs):
    table = papers.uci(load_runs([uci_runs]))
    assert table.figures["uci"].get_suptitle().endswith("boston, concrete, naval, sweep sweep")
    cells = table.cells.set_index("Dataset")
    # boston: mean 2.2, standard error sd/sqrt(2) = 0.2828/1.414 = 0.2; best of the row
    assert cells.loc["boston", "RMSE bdl sghmc_uci"] == "**2.2 ± 0.2**"
    # LL mean -2.4 ± 0.1 beats deep ensembles' -2.41
    assert cells.loc["boston", "LL bdl sghmc_uci"] == "**-2.40 ± 0.10**"
    assert cells.loc["boston", "LL Deep ensembles"] == "-2.41"
    # concrete: 6.1 is worse than MC dropout's 5.23, which is bold
    assert cells.loc["concrete", "RMSE bdl sghmc_uci"] == "6.10 ± 0.10"
    assert cells.loc["concrete", "RMSE MC dropout"] == "**5.23**"
    # naval: 0.0013 is 0.00 at the papers' two decimals, tied with deep ensembles' printed 0.00
    assert cells.loc["naval", "RMSE bdl sghmc_uci"] == "**0.00130 ± 0.00010**"
    assert cells.loc["naval", "RMSE Deep ensembles"] == "**0.00**"
    assert cells.loc["naval", "RMSE PBP"] == "0.01"
    assert "RMSE below PBP's on 2 of 3 sets, test LL above PBP's on 2 of 3" in table.notes[1]
    numbers = table.numbers.set_index("dataset")
    assert numbers.loc["boston", "test_rmse bdl sghmc_uci"] == pytest.approx(2.2)
    assert numbers.loc["concrete", "test_ll PBP"] == -3.16
    assert list(table.figures) == ["uci"]


def test_uci_published_values_are_complete():
    for method, table in papers.UCI_PUBLISHED.items():
        assert set(table) == set(papers.UCI_SETS), method
        # a log-likelihood is printed as a negative log-likelihood in the papers: kin8nm's and
        # naval's are positive, every other set's negative
        for dataset, (rmse, ll) in table.items():
            assert rmse >= 0
            assert (ll > 0) == (dataset in ("kin8nm", "naval")), (method, dataset)


def test_report_paper_writes_every_file(uci_runs, tmp_path, capsys):
    out = tmp_path / "table"
    assert main([str(uci_runs), "--paper", "uci", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| boston" in printed and "6 runs, 3.00 h of run time" in printed
    assert {p.name for p in out.iterdir()} == {"uci.md", "uci.tex", "uci.csv", "uci.png", "uci.pdf"}
    tex = (out / "uci.tex").read_text()
    assert r"\textbf{2.2 $\pm$ 0.2}" in tex
    assert r"RMSE bdl sghmc\_uci" in tex and "sghmc_uci" not in tex  # escaped for LaTeX
    assert len(pd.read_csv(out / "uci.csv")) == 3


def test_report_paper_refuses_runs_of_another_benchmark(tmp_path, capsys):
    _write_run(tmp_path / "r", {"dataset": "mnist", "sampler": "sghmc"}, {"test_accuracy": 0.9})
    assert main([str(tmp_path / "r"), "--paper", "uci"]) == 2
    assert "no run on a UCI set" in capsys.readouterr().err


def _chen_runs(root: Path, errors: dict[str, tuple[float, float]]) -> Path:
    for sampler, per_seed in errors.items():
        for seed, error in enumerate(per_seed):
            _write_run(
                root / f"{sampler}_{seed}",
                {"sampler": sampler, "prior": "gaussian", "dataset": "mnist"},
                {"test_accuracy": 1 - error, "grad_evals": 300, "epochs": 3, "seed": seed},
                curve=[(1, ""), (2, 1 - 2 * error), (3, 1 - error)],
            )
    return root


def test_chen_table_and_order(tmp_path):
    root = _chen_runs(
        tmp_path / "kept", {"sgd": (0.021, 0.023), "sgld": (0.019, 0.019), "sghmc": (0.018, 0.017)}
    )
    table = papers.chen2014(load_runs([root]))
    cells = table.cells.set_index("Sampler")
    # sgd: errors 2.1% and 2.3%: mean 2.2, sd 0.1414
    assert cells.loc["sgd", "Test error (%)"] == "2.20 ± 0.14"
    assert cells.loc["sgld", "Test error (%)"] == "1.9 ± 0"
    assert cells.loc["sghmc", "Chen et al. Fig. 3 (≈)"] == "1.8"
    assert table.notes[1] == (
        "Order of the means under gaussian (sghmc < sgld < sgd in the paper): kept "
        "(sghmc 1.75%, sgld 1.90%, sgd 2.20%)."
    )
    assert list(table.figures) == ["chen2014"]
    assert table.figures["chen2014"].get_suptitle().endswith("Fig. 3, mnist, sweep kept")
    assert r"1.75\%" in table.latex() and "1.75%" not in table.latex()
    # the CSV's plain numbers: one row per (sampler, prior), the mean and sd in percent
    numbers = table.numbers.set_index("sampler")
    assert numbers.loc["sgd", "test_error_%"] == pytest.approx(2.2)
    assert numbers.loc["sgd", "std"] == pytest.approx(0.1414, abs=1e-4)
    assert numbers.loc["sghmc", "seeds"] == 2 and set(numbers["prior"]) == {"gaussian"}

    swapped = _chen_runs(tmp_path / "swapped", {"sgld": (0.017, 0.017), "sghmc": (0.018, 0.018)})
    notes = papers.chen2014(load_runs([swapped])).notes
    assert notes[1].endswith("NOT kept (sghmc 1.80%, sgld 1.70%).")
