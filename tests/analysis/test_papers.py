"""bdl-report --paper: bdl's runs beside the published numbers, checked against values worked out
by hand from the runs the tests write."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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
    assert table.figures["chen2014"].get_suptitle() == (
        "test error of the model average — Chen et al. (2014)'s Fig. 3, mnist, sweep kept"
    )
    assert r"1.75\%" in table.latex() and "1.75%" not in table.latex()
    # the CSV's plain numbers: one row per (sampler, prior), the mean and sd in percent
    numbers = table.numbers.set_index("sampler")
    assert numbers.loc["sgd", "test_error_%"] == pytest.approx(2.2)
    assert numbers.loc["sgd", "std"] == pytest.approx(0.1414, abs=1e-4)
    assert numbers.loc["sghmc", "seeds"] == 2 and set(numbers["prior"]) == {"gaussian"}

    swapped = _chen_runs(tmp_path / "swapped", {"sgld": (0.017, 0.017), "sghmc": (0.018, 0.018)})
    notes = papers.chen2014(load_runs([swapped])).notes
    assert notes[1].endswith("NOT kept (sghmc 1.80%, sgld 1.70%).")


def test_uci_rows_follow_the_papers_order_and_a_missing_cell_is_no_number(tmp_path):
    """Two samplers, sgld with one boston split and no yacht run: sets in the papers' order
    (yacht written first), sgld's lone split shown without an error, its missing set n/a and
    counted as no win; the figure holds each method's RMSE over PBP's and LL minus PBP's."""
    results = {  # (sampler, dataset): (test_rmse, test_ll) per split
        ("sghmc", "yacht"): [(0.5, -1.0), (0.7, -1.2)],
        ("sghmc", "boston"): [(2.0, -2.5), (2.4, -2.3)],
        ("sgld", "boston"): [(3.5, -2.6)],
    }
    for (sampler, dataset), splits in results.items():
        for split, (rmse, ll) in enumerate(splits):
            _write_run(
                tmp_path / "sweep" / f"{sampler}_{dataset}_{split}",
                {"dataset": dataset, "sampler": sampler},
                {"test_rmse": rmse, "test_ll": ll},
            )
    table = papers.uci(load_runs([tmp_path / "sweep"]))
    cells = table.cells.set_index("Dataset")
    assert cells.index.tolist() == ["boston", "yacht"]
    assert cells.columns.tolist()[:2] == ["RMSE bdl sghmc", "RMSE bdl sgld"]
    assert cells.loc["boston", "RMSE bdl sgld"] == "3.5"
    assert cells.loc["boston", "LL bdl sgld"] == "-2.6"
    assert cells.loc["yacht", "RMSE bdl sgld"] == "n/a"
    # yacht: 0.6 ± 0.1 below every published RMSE; -1.1 ± 0.1 above every published LL
    assert cells.loc["yacht", "RMSE bdl sghmc"] == "**0.60 ± 0.10**"
    assert cells.loc["yacht", "LL bdl sghmc"] == "**-1.10 ± 0.10**"
    assert cells.loc["yacht", "RMSE PBP"] == "1.02" and cells.loc["yacht", "LL PBP"] == "-1.63"
    assert table.notes[1:] == [
        "bdl sghmc: RMSE below PBP's on 2 of 2 sets, test LL above PBP's on 2 of 2; splits per "
        "set: boston 2, yacht 2.",
        "bdl sgld: RMSE below PBP's on 0 of 2 sets, test LL above PBP's on 0 of 2; splits per "
        "set: boston 1, yacht 0.",
    ]
    numbers = table.numbers.set_index("dataset")
    assert numbers.loc["yacht", "splits bdl sgld"] == 0
    assert numbers.loc["yacht", "test_rmse bdl sghmc sem"] == pytest.approx(0.1)

    ratio, diff = table.figures["uci"].axes
    assert ratio.get_yscale() == "log" and diff.get_yscale() == "linear"
    assert ratio.get_shared_x_axes().joined(ratio, diff)
    methods = ["bdl sghmc", "bdl sgld", "PBP", "MC dropout", "Deep ensembles"]
    for ax in (ratio, diff):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["boston", "yacht"]
        points = [line for line in ax.lines if line.get_label() in methods]
        assert [line.get_label() for line in points] == methods
        for line in points:  # each method's points beside its set's tick, unjoined: the sets
            np.testing.assert_array_equal(np.round(line.get_xdata()), [0, 1])  # are no series
            assert (line.get_marker(), line.get_linestyle()) == ("o", "None"), line.get_label()
    by_method = {line.get_label(): line.get_ydata() for line in ratio.lines}
    np.testing.assert_allclose(by_method["bdl sghmc"], [2.2 / 3.01, 0.6 / 1.02])
    np.testing.assert_allclose(by_method["bdl sgld"], [3.5 / 3.01, np.nan])
    np.testing.assert_allclose(by_method["Deep ensembles"], [3.28 / 3.01, 1.58 / 1.02])
    by_method = {line.get_label(): line.get_ydata() for line in diff.lines}
    np.testing.assert_allclose(by_method["bdl sghmc"], [-2.4 + 2.57, -1.1 + 1.63])
    np.testing.assert_allclose(by_method["PBP"], [0.0, 0.0])
    np.testing.assert_allclose(by_method["MC dropout"], [-2.46 + 2.57, -1.55 + 1.63])


def test_chen_without_a_prior_its_curves_and_a_sampler_the_paper_lacks(tmp_path):
    """No prior choice: one row per sampler and the order of the samplers present; the figure's
    lines are the seeds' mean test error per epoch and per gradient evaluation."""
    errors = {"sgd": (0.021, 0.023), "sghmc": (0.018, 0.017), "hmc": (0.03,)}
    for sampler, per_seed in errors.items():
        for seed, error in enumerate(per_seed):
            _write_run(
                tmp_path / "runs" / f"{sampler}_{seed}",
                {"sampler": sampler, "dataset": "mnist"},
                {"test_accuracy": 1 - error, "grad_evals": 300, "epochs": 3, "seed": seed},
                curve=[(1, ""), (2, 1 - 2 * error), (3, 1 - error)],
            )
    table = papers.chen2014(load_runs([tmp_path / "runs"]))
    cells = table.cells.set_index("Sampler")
    assert cells.index.tolist() == ["hmc", "sgd", "sghmc"]
    assert cells["Prior"].tolist() == ["", "", ""]
    assert cells["Seeds"].tolist() == ["1", "2", "2"]
    assert cells.loc["hmc", "Test error (%)"] == "3"
    assert cells.loc["hmc", "Chen et al. Fig. 3 (≈)"] == ""
    assert cells.loc["sgd", "Chen et al. Fig. 3 (≈)"] == "2.1"
    assert table.notes[1:] == [
        "Order of the means (sghmc < sgd in the paper): kept (sghmc 1.75%, sgd 2.20%)."
    ]
    assert r"\begin{tabular}{llrrr}" in table.latex()
    by_epoch, by_grads = table.figures["chen2014"].axes
    lines = {line.get_label(): line for line in by_epoch.lines if line.get_label() in errors}
    assert sorted(lines) == ["hmc", "sgd", "sghmc"]
    np.testing.assert_allclose(lines["sgd"].get_xdata(), [2, 3])
    np.testing.assert_allclose(lines["sgd"].get_ydata(), [0.044, 0.022])
    np.testing.assert_allclose(lines["sghmc"].get_ydata(), [0.035, 0.0175])
    grads = {line.get_label(): line for line in by_grads.lines if line.get_label() in errors}
    np.testing.assert_allclose(grads["hmc"].get_xdata(), [200, 300])
    np.testing.assert_allclose(grads["hmc"].get_ydata(), [0.06, 0.03])


def test_chen_keeps_one_row_per_sampler_and_prior(tmp_path):
    for prior, errors in {"gaussian": (0.02, 0.03), "laplace": (0.04, 0.01)}.items():
        for sampler, error in zip(("sghmc", "sgld"), errors, strict=True):
            _write_run(
                tmp_path / "runs" / f"{sampler}_{prior}",
                {"sampler": sampler, "prior": prior, "dataset": "mnist"},
                {"test_accuracy": 1 - error, "grad_evals": 300, "epochs": 3},
                curve=[(1, 1 - error)],
            )
    table = papers.chen2014(load_runs([tmp_path / "runs"]))
    assert table.numbers[["sampler", "prior"]].values.tolist() == [
        ["sghmc", "gaussian"],
        ["sghmc", "laplace"],
        ["sgld", "gaussian"],
        ["sgld", "laplace"],
    ]
    numbers = table.numbers.set_index(["sampler", "prior"])["test_error_%"]
    assert numbers.to_dict() == pytest.approx(
        {
            ("sghmc", "gaussian"): 2.0,
            ("sgld", "gaussian"): 3.0,
            ("sghmc", "laplace"): 4.0,
            ("sgld", "laplace"): 1.0,
        }
    )
    assert table.notes[1:] == [
        "Order of the means under gaussian (sghmc < sgld in the paper): kept "
        "(sghmc 2.00%, sgld 3.00%).",
        "Order of the means under laplace (sghmc < sgld in the paper): NOT kept "
        "(sghmc 4.00%, sgld 1.00%).",
    ]
    labels = [line.get_label() for line in table.figures["chen2014"].axes[0].lines]
    assert {"sghmc, gaussian", "sgld, laplace"} <= set(labels)


def test_paper_notes_count_the_hours_and_name_what_the_table_averaged_or_left_out(
    uci_runs, capsys, monkeypatch
):
    monkeypatch.setattr(papers, "save", lambda figure, stem: [])  # the table's files, no figure
    boston = uci_runs / "boston_0" / "metrics.json"
    metrics = json.loads(boston.read_text())
    reason = "R-hat of potential 1.2 > 1.01"
    boston.write_text(json.dumps({**metrics, "converged": False, "reasons": [reason]}))
    concrete = uci_runs / "concrete_1" / "metrics.json"
    warning = "test_ll below the trivial predictor's"
    metrics = json.loads(concrete.read_text())
    concrete.write_text(json.dumps({**metrics, "warnings": [warning]}))
    naval = uci_runs / "naval_1" / "metrics.json"
    naval.write_text(json.dumps({**json.loads(naval.read_text()), "status": "diverged"}))
    assert main([str(uci_runs), "--paper", "uci"]) == 0
    out = capsys.readouterr().out
    # five runs of 1800 s: 2.5 h; naval's second split is not in the table
    assert "5 runs, 2.50 h of run time in all (their wall_time_s)." in out
    assert f"(n_unconverged; 1 runs):\n- {uci_runs / 'boston_0'}: {reason}" in out
    assert f"with warnings (1 runs):\n- {uci_runs / 'concrete_1'}: {warning}" in out
    assert f"Not in the table (1 runs):\n- {uci_runs / 'naval_1'}: diverged" in out
    numbers = pd.read_csv(uci_runs / "uci.csv")
    assert numbers.columns[0] == "dataset"  # a row's set first, no index column before it
    numbers = numbers.set_index("dataset")
    assert numbers.loc["naval", "splits bdl sghmc_uci"] == 1
    assert numbers.loc["naval", "test_rmse bdl sghmc_uci"] == pytest.approx(0.0012)


def test_uci_figure_puts_each_method_beside_pbp_per_set(uci_runs):
    """Left: each method's RMSE over PBP's on a log axis (PBP itself on the line at 1); right:
    its test LL minus PBP's (PBP on the line at 0); one tick per set, named; one point per set
    and method, the methods side by side."""
    figure = papers.uci(load_runs([uci_runs])).figures["uci"]
    ratio_ax, diff_ax = figure.axes
    assert ratio_ax.get_shared_x_axes().joined(ratio_ax, diff_ax)  # the sets line up
    assert (ratio_ax.get_yscale(), ratio_ax.get_ylabel(), ratio_ax.get_title()) == (
        "log",
        "test RMSE / PBP's",
        "RMSE (lower is better)",
    )
    assert (diff_ax.get_ylabel(), diff_ax.get_title()) == (
        "test LL − PBP's",
        "log-likelihood (higher is better)",
    )
    methods = ["bdl sghmc_uci", "PBP", "MC dropout", "Deep ensembles"]
    sets = ["boston", "concrete", "naval"]
    for ax in (ratio_ax, diff_ax):
        assert [t.get_text() for t in ax.get_xticklabels()] == sets
        assert list(ax.get_xticks()) == [0, 1, 2]
    assert [t.get_text() for t in ratio_ax.get_legend().get_texts()] == methods
    *points, line = ratio_ax.get_lines()
    assert list(line.get_ydata()) == [1.0, 1.0] and line.get_color() == "black"
    assert list(diff_ax.get_lines()[-1].get_ydata()) == [0.0, 0.0]
    assert [p.get_label() for p in points] == methods
    assert all(p.get_marker() == "o" and p.get_linestyle() == "None" for p in points)
    # bdl's means (boston 2.2, concrete 6.1, naval 0.0013) over PBP's published RMSE
    pbp = papers.UCI_PUBLISHED["PBP"]
    np.testing.assert_allclose(
        points[0].get_ydata(), [2.2 / pbp["boston"][0], 6.1 / pbp["concrete"][0], 0.0013 / 0.01]
    )
    np.testing.assert_allclose(points[1].get_ydata(), [1.0, 1.0, 1.0])
    bdl_ll = diff_ax.get_lines()[0].get_ydata()
    np.testing.assert_allclose(
        bdl_ll, [-2.4 - pbp["boston"][1], -3.25 - pbp["concrete"][1], 4.1 - pbp["naval"][1]]
    )
    # four methods side by side, 0.12 apart, centred on their set's tick
    np.testing.assert_allclose(
        [p.get_xdata()[0] for p in points], [-0.18, -0.06, 0.06, 0.18], atol=1e-12
    )
    assert figure.get_suptitle() == (
        "UCI benchmarks beside PBP (Hernández-Lobato and Adams 2015) — boston, concrete, naval, "
        "sweep sweep"
    )


def test_runs_of_no_paper_are_refused_naming_what_it_needs(tmp_path):
    with pytest.raises(ValueError) as error:
        papers.uci(pd.DataFrame({"test_rmse": [1.0]}))
    assert str(error.value) == (
        "no run has dataset= and sampler= choices: pass bdl-run's directories"
    )
    with pytest.raises(ValueError) as error:
        papers.uci(pd.DataFrame({"dataset": ["mnist"], "sampler": ["sghmc"]}))
    assert str(error.value) == (
        "no run on a UCI set (boston, concrete, energy, kin8nm, naval, power, protein, wine, yacht)"
    )
    with pytest.raises(ValueError) as error:
        papers.chen2014(pd.DataFrame({"dataset": ["boston"], "test_rmse": [1.0]}))
    assert str(error.value) == "no classification run with a sampler= choice: pass MNIST runs"


def test_paper_markdown_shows_a_run_s_html_as_text(uci_runs, capsys, monkeypatch):
    """A handed-over run's warning, error or sampler name holding HTML is shown in ``uci.md``,
    never rendered: no tag opens; the terminal shows it as written."""
    monkeypatch.setattr(papers, "save", lambda figure, stem: [])
    html = "<img src=x onerror=alert(1)>"
    concrete = uci_runs / "concrete_1" / "metrics.json"
    concrete.write_text(json.dumps({**json.loads(concrete.read_text()), "warnings": [html]}))
    naval = uci_runs / "naval_1" / "metrics.json"
    naval.write_text(json.dumps({"status": "failed", "error": html}))
    _write_run(
        uci_runs / "boston_2",
        {"dataset": "boston", "sampler": html},
        {"test_rmse": 2.1, "test_ll": -2.4, "wall_time_s": 1.0},
    )
    assert main([str(uci_runs), "--paper", "uci"]) == 0
    markdown = (uci_runs / "uci.md").read_text()
    assert "<img" not in markdown
    assert markdown.count("&lt;img src=x onerror=alert(1)>") >= 4  # warning, error, column, note
    # a terminal renders nothing: it shows the text as the run wrote it, without entities
    printed = capsys.readouterr().out
    assert "&lt;" not in printed and printed.count(html) >= 4
