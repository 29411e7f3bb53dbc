"""bdl-report must find every run of a sweep, group by what was swept and average over seeds."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import write_run

from bdl.analysis.report import compare, main
from bdl.analysis.sweeps import find_runs, load_runs
from bdl.analysis.tables import summarize


def _unfinish(run: Path, status: str | None) -> None:
    """A run that stopped: metrics.json with ``status``, or none at all, and a curve to epoch 3."""
    (run / "curve.csv").write_text("epoch,potential\n1,5.0\n2,4.0\n3,nan\n")
    if status is None:
        (run / "metrics.json").unlink()
    else:
        metrics = json.loads((run / "metrics.json").read_text())
        (run / "metrics.json").write_text(json.dumps({**metrics, "status": status}))


def test_unfinished_runs_are_listed_not_averaged(sweep, capsys):
    jobs = sweep / "2024-01-01" / "12-00-00"
    _unfinish(jobs / "1", "diverged")
    _unfinish(jobs / "3", None)
    (jobs / "3" / "curve.csv").unlink()  # killed before its first epoch
    completed = jobs / "0" / "metrics.json"
    completed.write_text(json.dumps({**json.loads(completed.read_text()), "status": "completed"}))
    df = load_runs([sweep])
    assert list(df["seed"]) == [0, 0]  # the two seed-0 runs, one of them marked completed
    assert "status" not in df.columns
    assert df.attrs["unfinished"] == [
        {"run_dir": str(jobs / "1"), "status": "diverged", "epoch": 3},
        {
            "run_dir": str(jobs / "3"),
            "status": "no metrics.json (killed, or still running)",
            "epoch": None,
        },
    ]
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    table, below = out.split("Not in the table (2 runs):")
    assert "0.9 " in table and "0.92" not in table  # seed 1's sghmc accuracy is not averaged
    assert f"- {jobs / '1'}: diverged, epoch 3" in below
    assert f"- {jobs / '3'}: no metrics.json (killed, or still running)\n" in below
    assert "Not in the table" in (sweep / "report.md").read_text()


def test_only_unfinished_runs(tmp_path, capsys):
    write_run(tmp_path / "0", "sgld", 0)
    _unfinish(tmp_path / "0", "interrupted")
    assert main([str(tmp_path)]) == 0
    assert "interrupted, epoch 3" in capsys.readouterr().out


def test_main_writes_csvs(sweep, capsys):
    assert main([str(sweep)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("| sampler")
    assert "0.910 ± 0.014" in out
    runs = pd.read_csv(sweep / "report.csv")
    summary = pd.read_csv(sweep / "report_summary.csv")
    assert len(runs) == 4 and "run_dir" in runs.columns
    assert list(summary["sampler"]) == ["sghmc", "sgld"]
    assert summary.loc[0, "test_accuracy_sem"] == pytest.approx(0.01)
    assert (sweep / "report.md").read_text() == out
    assert r"\begin{tabular}" in (sweep / "report.tex").read_text()
    assert "report.csv" in err


def test_main_options(sweep, tmp_path, capsys):
    out_dir = tmp_path / "out" / "tables"
    args = ["--by", "sampler", "seed", "--metrics", "test_nll", "--error", "sem"]
    assert main([str(sweep), *args, "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "test_accuracy" not in out and "seed" in out and "standard error" in out
    names = ["report.csv", "report.md", "report.tex", "report_summary.csv"]
    assert sorted(p.name for p in out_dir.iterdir()) == names
    assert len(pd.read_csv(out_dir / "report_summary.csv")) == 4
    assert not list(sweep.glob("report*"))  # --out places every file


def test_main_by_config_key_named_like_a_metric(sweep, capsys):
    assert main([str(sweep), "--by", "epochs"]) == 0
    assert capsys.readouterr().out.startswith("| config.epochs   |   n_runs |")


def test_main_unknown_by_key(sweep, capsys):
    assert main([str(sweep), "--by", "optimizer"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bdl-report: unknown --by key(s) optimizer; available keys: sampler, ")
    assert "sampler.lr" in err.split("available keys: ")[1] and len(err.splitlines()) == 1
    assert main([str(sweep), "--pruning"]) == 2
    assert capsys.readouterr().err == (
        f"bdl-report: no pruning.csv under {sweep}: run bdl-run with pruning=true\n"
    )


def test_main_unknown_metric(sweep, capsys):
    assert main([str(sweep), "--metrics", "test_rmse"]) == 2
    assert capsys.readouterr().err == (
        "bdl-report: unknown metric(s) test_rmse; available: test_accuracy, test_nll, "
        "num_samples, epochs, wall_time_s\n"
    )


def test_main_no_runs(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"bdl-report: no run directories found under {tmp_path}; a run directory contains "
        ".hydra/config.yaml (written when `bdl-run` starts) and metrics.json (written when it "
        "ends); pass a run directory or a directory above runs, e.g. outputs/ or multirun/\n"
    )
    assert not (tmp_path / "report.csv").exists()


def test_main_usage_error_returns_code(capsys):
    assert main([]) == 2
    assert "usage" in capsys.readouterr().err


@pytest.mark.parametrize("hydra_interpolation", [False, True])
def test_environment_is_never_resolved(tmp_path, monkeypatch, capsys, hydra_interpolation):
    """A secret in the environment of whoever runs bdl-report appears nowhere in its output."""
    secret = "s3cr3t-token-value"
    monkeypatch.setenv("BDL_TEST_SECRET", secret)
    root = tmp_path / "sweep"
    for seed in (0, 1):
        run = root / str(seed)
        (run / ".hydra").mkdir(parents=True)
        config = (
            "dataset:\n"
            "  root: ${oc.env:BDL_TEST_SECRET,null}\n"
            f"  split: {seed}\n"
            "copy: ${dataset.root}\n"
            "nested: x${oc.decode:${oc.env:BDL_TEST_SECRET}}\n"
            "legacy: ${env:BDL_TEST_SECRET}\n"
            f"seed: {seed}\n"
        )
        if hydra_interpolation:  # takes the key-by-key resolution path
            config += "out: ${hydra:runtime.output_dir}\n"
        (run / ".hydra" / "config.yaml").write_text(config)
        (run / "metrics.json").write_text(json.dumps({"test_rmse": 1.0 + seed}))
    assert main([str(root), "--by", "dataset.root", "copy"]) == 0
    assert main([str(root)]) == 0
    out = capsys.readouterr()
    written = [p.read_text() for p in (root / "report.csv", root / "report_summary.csv")]
    assert secret not in out.out + out.err + "".join(written)
    df = load_runs([root])
    assert set(df["dataset.root"]) == {"${oc.env:BDL_TEST_SECRET,null}"}
    assert set(df["copy"]) == {"${oc.env:BDL_TEST_SECRET,null}"}
    assert set(df["dataset.split"]) == {0, 1}  # everything else still resolves


def test_a_stray_file_is_no_run(tmp_path, capsys):
    stray = tmp_path / "notes.txt"
    stray.write_text("not a run\n")
    assert main([str(stray)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"bdl-report: error: {stray} is a file, not a run directory or a sweep")
    assert find_runs([stray]) == []


@pytest.mark.parametrize(
    "text",
    [
        "fraction_removed,weights_kept\n0.0,10\n",  # no metric column
        "fraction_removed,weights_kept,test_error\nhalf,10,0.1\n",  # not a number
        "",  # empty
        "a,b,c\n1,2,3\n",  # other columns
    ],
)
def test_a_malformed_pruning_curve_is_one_line(tmp_path, capsys, text):
    (tmp_path / "run").mkdir()
    path = tmp_path / "run" / "pruning.csv"
    path.write_text(text)
    assert main([str(tmp_path), "--pruning"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"bdl-report: error: {path} is not a pruning curve (")
    assert line.endswith("bdl-run pruning=true writes it: run that again, or remove the file")


def test_runs_with_warnings_are_counted_and_named_and_unsound_ones_left_out(sweep, capsys):
    jobs = sweep / "2024-01-01" / "12-00-00"
    warned = jobs / "0" / "metrics.json"
    metrics = json.loads(warned.read_text())
    warning = "the predictive density is worse than ignoring the inputs: test_ll -3 (-2.8)"
    warned.write_text(json.dumps({**metrics, "warnings": [warning], "trivial": {"x": 1}}))
    _unfinish(jobs / "1", "unsound")
    df = load_runs([sweep])
    summary = summarize(df, by=["sampler"], metrics=["test_accuracy"]).set_index("sampler")
    assert summary.loc["sghmc", "n_runs"] == 1 and summary.loc["sghmc", "n_warned"] == 1
    assert summary.loc["sgld", "n_warned"] == 0
    assert not any(c.startswith("trivial") for c in df.columns)
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "n_warned" in out.splitlines()[0]
    assert f"- {jobs / '0'}: {warning}" in out.split("with warnings")[1]
    assert f"- {jobs / '1'}: unsound, epoch 3" in out.split("Not in the table")[1]


def test_the_help_names_what_each_option_takes_and_writes():
    from bdl.analysis.report import _parser

    usage = " ".join(_parser().format_help().split())
    assert "--out DIR" in usage and "PATH [PATH ...]" in usage
    assert "R-hat histograms (PNG and PDF) in PATH/plots/" in usage


def test_unconverged_runs_are_counted_and_named_per_row_and_notes_never_count(sweep, capsys):
    """A run whose chains have not converged is averaged in, counted in its row's
    ``n_unconverged`` and named with its reasons; a converged run's notes (one chain) count as
    nothing, neither a warning nor an unconverged run."""
    jobs = sweep / "2024-01-01" / "12-00-00"
    note = "one chain: R-hat compares its two halves"
    reason = "R-hat of potential 1.046 > 1.01 (Vehtari et al. 2021)"
    for job, converged in (("0", False), ("2", True)):
        path = jobs / job / "metrics.json"
        metrics = json.loads(path.read_text())
        verdict = {
            "converged": converged,
            "reasons": [] if converged else [reason],
            "notes": [note],
        }
        path.write_text(json.dumps({**metrics, **verdict, "warnings": []}))
    df = load_runs([sweep])
    summary = summarize(df, by=["sampler"], metrics=["test_accuracy"]).set_index("sampler")
    assert summary["n_unconverged"].to_dict() == {"sghmc": 1, "sgld": 0}
    assert "n_warned" not in summary.columns  # the notes are no warnings
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert "n_unconverged" in header and "| unconverged" not in header  # counted, not a key
    named = out.split("without converging (n_unconverged; 1 runs):")[1]
    assert named.strip().splitlines()[0] == f"- {jobs / '0'}: {reason}"


def test_a_run_that_cannot_be_compared_is_skipped_by_name(tmp_path):
    """``bdl-report --compare`` names each run it leaves out and why (here: no run there)."""
    import pandas as pd

    from bdl.analysis.report import compare

    gone = tmp_path / "gone"
    skipped: list[str] = []
    assert compare(pd.DataFrame([{"run_dir": str(gone)}]), skipped.append).empty
    assert skipped == [f"{gone} not compared: {gone} is not a bdl run directory " + NO_CONFIG]


#: why a folder without bdl-run's config is no run (`bdl.analysis.posterior`)
NO_CONFIG = (
    "(it has no .hydra/config.yaml): pass the directory bdl-run wrote, e.g. "
    "outputs/<dataset>/<sampler>/<date>"
)


def _log_likelihood(level: float, outlier: bool = False) -> np.ndarray:
    """Pointwise log-likelihoods of 2 chains x 100 draws x 30 training points near ``level``,
    with (``outlier``) one point that a single draw of the 200 fits far worse than the others:
    its importance ratio dwarfs theirs, and the point's Pareto k is far above 0.7."""
    rng = np.random.default_rng(int(-10 * level))
    values = level + 0.1 * rng.standard_normal((2, 100, 30))
    if outlier:
        values[:, :, 0] = level
        values[0, 7, 0] = -20.0
    return values


def test_compare_ranks_by_psis_loo_best_first_and_counts_unreliable_points(
    sweep, monkeypatch, capsys
):
    """Three runs of the sweep with log-likelihoods of known levels (arviz computes the PSIS-LOO
    beside, on the same draws), one without samples: best first, the Pareto-k warnings counted,
    the choice that varies and the test metrics beside, the run without samples named."""
    import arviz as az

    import bdl.analysis.posterior

    runs = [str(run) for run in find_runs([sweep])]
    levels = {runs[0]: (-2.0, False), runs[1]: (-0.2, True), runs[2]: (-1.0, False)}
    data = {run: _log_likelihood(*level) for run, level in levels.items()}

    def idata(values):
        return az.from_dict(
            posterior={"theta": np.zeros((2, 100))},
            log_likelihood={"y_train": values},
            dims={"y_train": ["train_point"]},
        )

    class Posterior:
        def __init__(self, run_dir):
            if run_dir not in data:
                raise bdl.analysis.posterior.RunError(f"{run_dir} holds no samples\nmore")
            self.run_dir = run_dir

        def to_inferencedata(self, train):
            assert train  # the points the posterior was conditioned on
            return idata(data[self.run_dir])

    monkeypatch.setattr(bdl.analysis.posterior, "Posterior", Posterior)
    skipped: list[str] = []
    table = compare(load_runs([sweep]), skipped.append)
    assert skipped == [f"{runs[3]} not compared: {runs[3]} holds no samples"]
    assert table.columns.tolist() == [
        "elpd_loo",
        "se",
        "p_loo",
        "pareto_k_warnings",
        "sampler",
        "test_accuracy",
        "test_nll",
        "run_dir",
    ]
    expected = {}
    for run, values in data.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loo = az.loo(idata(values), pointwise=True)
        expected[run] = loo
    order = sorted(expected, key=lambda run: -expected[run]["elpd_loo"])
    assert table["run_dir"].tolist() == order
    assert order[-1] == runs[0]  # the lowest level is last
    for _, row in table.iterrows():
        loo = expected[row["run_dir"]]
        assert row["elpd_loo"] == pytest.approx(loo["elpd_loo"])
        assert row["se"] == pytest.approx(loo["se"])
        assert row["p_loo"] == pytest.approx(loo["p_loo"])
    assert table.set_index("run_dir")["pareto_k_warnings"].to_dict() == {
        runs[0]: 0,
        runs[1]: 1,
        runs[2]: 0,
    }
    records = load_runs([sweep]).set_index("run_dir")
    for _, row in table.iterrows():
        assert row["sampler"] == records.loc[row["run_dir"], "sampler"]
        assert row["test_accuracy"] == records.loc[row["run_dir"], "test_accuracy"]
    # bdl-report --compare prints that table, and names the run it leaves out
    capsys.readouterr()
    assert main([str(sweep), "--compare"]) == 0
    out, err = capsys.readouterr()
    header = [cell.strip() for cell in out.splitlines()[0].strip("|").split("|")]
    assert header == table.columns.tolist()  # the table's columns alone, no row index
    assert [line.split("|")[-2].strip() for line in out.splitlines()[2:]] == order
    assert err == f"bdl-report: warning: {runs[3]} not compared: {runs[3]} holds no samples\n"
    data.clear()
    assert main([str(sweep), "--compare"]) == 2
    *skipped_lines, last = capsys.readouterr().err.splitlines()
    assert len(skipped_lines) == 4  # every run named as it is left out
    assert last == "bdl-report: no run holds posterior samples to compare"


def test_the_summary_files_hold_each_groups_numbers_in_the_order_asked(sweep, capsys):
    """--metrics in the order given, --error sem: the printed table, report.md, and the CSVs'
    numbers (sghmc's test_nll 0.5 and 1.5: mean 1, sd 0.7071, error 0.5)."""
    assert main([str(sweep), "--metrics", "test_nll", "test_accuracy", "--error", "sem"]) == 0
    out = capsys.readouterr().out
    header = [c.strip() for c in out.splitlines()[0].strip("|").split("|")]
    assert header == ["sampler", "test_nll", "test_accuracy"]
    assert "| sghmc     |  1.0 ± 0.5 |   0.910 ± 0.010 |" in out.splitlines()
    assert (sweep / "report.md").read_text() == out
    summary = pd.read_csv(sweep / "report_summary.csv").set_index("sampler")
    assert summary.columns.tolist()[:4] == [
        "n_runs",
        "test_nll_mean",
        "test_nll_std",
        "test_nll_sem",
    ]
    assert summary.loc["sghmc", "test_nll_std"] == pytest.approx(0.5**0.5)
    assert summary.loc["sghmc", "test_nll_sem"] == pytest.approx(0.5)
    assert summary.loc["sgld", "test_accuracy_mean"] == pytest.approx(0.82)
    runs = pd.read_csv(sweep / "report.csv").sort_values(["sampler", "seed"])
    assert runs["test_accuracy"].tolist() == [0.90, 0.92, 0.80, 0.84]
    assert r"sghmc & 1.0 $\pm$ 0.5 & 0.910 $\pm$ 0.010 \\" in (sweep / "report.tex").read_text()


def test_pruning_prints_every_readable_curve_in_natural_order(tmp_path, capsys):
    for name, removed in (("run10", 0.9), ("run2", 0.5), ("run1", 0.1)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "pruning.csv").write_text(
            f"fraction_removed,weights_kept,test_rmse\n{removed},50000,0.25\n"
        )
    (tmp_path / "run1" / "pruning.csv").write_text("not,a\ncurve\n")
    assert main([str(tmp_path), "--pruning"]) == 2
    out, err = capsys.readouterr()
    assert [line for line in out.splitlines() if line.startswith(str(tmp_path))] == [
        str(tmp_path / "run2"),
        str(tmp_path / "run10"),
    ]
    assert "| 50%" in out.split(str(tmp_path / "run10"))[0] and "| 90%" in out
    assert err.startswith(f"bdl-report: error: {tmp_path / 'run1' / 'pruning.csv'} is not a")


def test_plots_group_the_runs_as_the_table_does(sweep, tmp_path, monkeypatch, capsys):
    import bdl.analysis.plots

    calls = []
    monkeypatch.setattr(
        bdl.analysis.plots,
        "draw",
        lambda runs, by, out: calls.append((sorted(runs["seed"]), by, out)) or [],
    )
    assert main([str(sweep), "--plot"]) == 0
    assert calls.pop() == ([0, 0, 1, 1], ["sampler"], sweep / "plots")
    out = tmp_path / "elsewhere"
    assert main([str(sweep), "--plot", "--by", "sampler", "seed", "--out", str(out)]) == 0
    assert calls.pop() == ([0, 0, 1, 1], ["sampler", "seed"], out / "plots")
    assert "no curve.csv to plot" in capsys.readouterr().err


def _many_metrics(sweep: Path) -> list[str]:
    """The sweep's runs given the 25 metrics of a real MNIST run's metrics.json (each varying
    between runs, so that none is dropped as constant), and a reason with a ``<`` for one."""
    names = [  # in the table's order: bdl.analysis.sweeps.KNOWN_METRICS first
        "test_accuracy", "test_nll", "test_ece", "test_brier", "num_samples", "epochs",
        "grad_evals", "wall_time_s", "val_accuracy", "val_nll", "val_ece", "val_brier",
        "step_scale", "rise_max", "points_constant", "rhat_max", "rhat_p95", "rhat_median",
        "weight_rhat_max", "ess_bulk_min", "ess_bulk_p5", "ess_bulk_median", "ess_tail_min",
        "ood_auroc_entropy", "ood_aupr_entropy",
    ]  # fmt: skip
    for k, path in enumerate(sorted(sweep.rglob("metrics.json"))):
        metrics = {name: 0.123456 * (k + 1) + i for i, name in enumerate(names)}
        verdict = {"converged": k != 0, "reasons": ["bulk ESS 2909.0 < 12800"] if k == 0 else []}
        path.write_text(json.dumps({**metrics, **verdict, "notes": []}))
    return names


def _table_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("|")]


def test_the_printed_table_keeps_to_120_characters_and_names_the_rest(sweep, capsys):
    """25 metrics would print some 400 characters a row: the terminal gets the first metrics
    (in their order of importance) that fit, the others named under the table and shown with
    --wide; report.md holds them all; no HTML entity on the terminal, where ``<`` is a
    comparison, while report.md keeps its ``&lt;`` (inert for a Markdown renderer)."""
    names = _many_metrics(sweep)
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    lines = _table_lines(out)
    assert lines and max(map(len, lines)) <= 120
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    shown = [name for name in names if name in header]
    assert shown == names[: len(shown)] and 0 < len(shown) < len(names)
    hidden = names[len(shown) :]
    assert f"{len(hidden)} more columns with --wide: {', '.join(hidden)}." in out
    assert "bulk ESS 2909.0 < 12800" in out and "&lt;" not in out
    written = (sweep / "report.md").read_text()
    assert all(name in written.splitlines()[0] for name in names)
    assert "bulk ESS 2909.0 &lt; 12800" in written
    # one more column would not have fitted
    assert main([str(sweep), "--metrics", *names[: len(shown) + 1]]) == 0
    assert max(map(len, _table_lines(capsys.readouterr().out))) > 120
    assert main([str(sweep), "--wide"]) == 0
    wide = capsys.readouterr().out
    assert all(name in _table_lines(wide)[0] for name in names) and "--wide:" not in wide
