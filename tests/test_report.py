"""bdl-report must find every run of a sweep, group by what was swept and average over seeds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from bdl.report import (
    RunSkippedWarning,
    find_runs,
    format_table,
    load_runs,
    main,
    mean_pm,
    summarize,
    to_latex,
    to_markdown,
    varying_keys,
)

SAMPLERS = {
    "sghmc": ("bdl.samplers.sghmc.SGHMC", 0.1, {0: 0.90, 1: 0.92}),
    "sgld": ("bdl.samplers.sgld.SGLD", 0.01, {0: 0.80, 1: 0.84}),
}

CONFIG = """\
sampler:
  _target_: {target}
  _partial_: true
  lr: {lr}
dataset:
  name: mnist
  root: {root}
model:
  hidden: [64, 64]
seed: {seed}
epochs: 10
out: ${{hydra:runtime.output_dir}}
tag: ${{dataset.name}}-{seed}
"""

HYDRA = """\
hydra:
  run:
    dir: outputs/${{now:%Y-%m-%d}}
  job:
    name: run
  output_subdir: .hydra
  runtime:
    output_dir: {out}
    choices:
      sampler: {sampler}
      dataset: mnist
      hydra/env: default
      hydra/callbacks: null
"""


def _write_run(directory: Path, sampler: str, seed: int, hydra_yaml: bool = True) -> None:
    target, lr, accs = SAMPLERS[sampler]
    (directory / ".hydra").mkdir(parents=True)
    (directory / ".hydra" / "config.yaml").write_text(
        CONFIG.format(target=target, lr=lr, root=directory / "data", seed=seed)
    )
    if hydra_yaml:
        (directory / ".hydra" / "hydra.yaml").write_text(
            HYDRA.format(out=directory, sampler=sampler)
        )
    metrics = {
        "test_accuracy": accs[seed],
        "test_nll": 0.5 + seed,
        "num_samples": 10,
        "epochs": 10,
        "wall_time_s": 123456.0,
    }
    (directory / "metrics.json").write_text(json.dumps(metrics))


@pytest.fixture
def sweep(tmp_path) -> Path:
    """A Hydra multirun tree: 2 samplers x 2 seeds, jobs 0..3 one level below the date dirs."""
    root = tmp_path / "multirun"
    job = 0
    for sampler in SAMPLERS:
        for seed in (0, 1):
            _write_run(root / "2024-01-01" / "12-00-00" / str(job), sampler, seed)
            job += 1
    (root / "2024-01-01" / "12-00-00" / "multirun.yaml").write_text("{}\n")
    return root


def test_find_runs(sweep, tmp_path):
    runs = find_runs([sweep])
    assert [r.name for r in runs] == ["0", "1", "2", "3"]
    assert all(r.is_absolute() for r in runs)
    # Overlapping inputs are deduplicated; a metrics.json file stands for its run.
    job0 = sweep / "2024-01-01" / "12-00-00" / "0"
    assert find_runs([sweep, job0, job0 / "metrics.json", tmp_path / "missing"]) == runs


def test_find_runs_sorts_numerically(tmp_path):
    for job in (10, 2, 1):
        _write_run(tmp_path / str(job), "sgld", 0)
    assert [r.name for r in find_runs([tmp_path])] == ["1", "2", "10"]


def test_load_runs(sweep):
    df = load_runs([sweep])
    assert len(df) == 4
    assert df.columns[-1] == "run_dir"
    assert list(df["sampler"]) == ["sghmc", "sghmc", "sgld", "sgld"]
    assert list(df["dataset"]) == ["mnist"] * 4
    assert "hydra/env" not in df.columns
    assert df.loc[0, "sampler._target_"] == "bdl.samplers.sghmc.SGHMC"
    assert df.loc[2, "sampler.lr"] == 0.01
    assert df.loc[1, "seed"] == 1
    assert df.loc[0, "model.hidden"] == "[64, 64]"
    assert df.loc[1, "tag"] == "mnist-1"  # resolvable interpolations are resolved...
    assert df.loc[0, "out"] == "${hydra:runtime.output_dir}"  # ...Hydra-only ones kept as text
    assert df.loc[3, "test_accuracy"] == 0.84
    assert df.loc[0, "epochs"] == 10 and df.loc[0, "config.epochs"] == 10  # no name clash


def test_varying_keys(sweep):
    df = load_runs([sweep])
    keys = varying_keys(df)
    # seed, dataset.root, out (its text is identical), _target_/_partial_ and metrics are no axes.
    assert keys == ["sampler", "sampler.lr", "tag"]
    assert "seed" in varying_keys(df, exclude=())


def test_summarize(sweep):
    summary = summarize(load_runs([sweep]))
    # sampler.lr and tag are implied by the sampler choice or by the seed: not extra groups.
    assert list(summary.columns[:2]) == ["sampler", "n_runs"]
    summary = summary.set_index("sampler")
    assert summary.loc["sghmc", "n_runs"] == 2
    assert summary.loc["sghmc", "test_accuracy_mean"] == pytest.approx(0.91)
    assert summary.loc["sghmc", "test_accuracy_std"] == pytest.approx(0.02 / math.sqrt(2))
    assert summary.loc["sgld", "test_accuracy_mean"] == pytest.approx(0.82)
    assert summary.loc["sgld", "test_nll_std"] == pytest.approx(math.sqrt(0.5))


def test_summarize_explicit_groups(sweep):
    df = load_runs([sweep])
    per_run = summarize(df, by=["sampler", "seed"], metrics=["test_accuracy"])
    assert len(per_run) == 4 and (per_run["n_runs"] == 1).all()
    assert per_run["test_accuracy_std"].isna().all()
    assert "test_nll_mean" not in per_run.columns
    everything = summarize(df, by=[])
    assert len(everything) == 1 and everything.loc[0, "n_runs"] == 4
    with pytest.raises(ValueError, match="nope"):
        summarize(df, by=["nope"])


def test_a_metric_one_group_lacks_has_no_value_there(sweep):
    """R-hat exists only for runs of several chains: a group without it gets NaN, not an error."""
    run = find_runs([sweep])[0]  # job 0: sghmc, seed 0
    metrics = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**metrics, "rhat_max": 1.02}))
    summary = summarize(load_runs([sweep]), by=["sampler"], metrics=["rhat_max"]).set_index(
        "sampler"
    )
    assert summary.loc["sghmc", "rhat_max_mean"] == 1.02
    assert summary.loc["sgld", ["rhat_max_mean", "rhat_max_std", "rhat_max_sem"]].isna().all()


def test_target_grouping_without_hydra_choices(tmp_path):
    for job, (sampler, seed) in enumerate([("sghmc", 0), ("sghmc", 1), ("sgld", 0)]):
        _write_run(tmp_path / str(job), sampler, seed, hydra_yaml=False)
    df = load_runs([tmp_path])
    assert "sampler" not in df.columns
    summary = summarize(df)
    assert list(summary.columns[:2]) == ["sampler._target_", "n_runs"]
    assert set(summary["sampler._target_"]) == {t for t, _, _ in SAMPLERS.values()}


@pytest.mark.parametrize(
    "mean, error, text",
    [
        # One significant digit of the error, the mean to the same decimal place.
        (1.2345, 0.0678, "1.23 ± 0.07"),
        (0.91, 0.2, "0.9 ± 0.2"),
        (0.5, 0.3, "0.5 ± 0.3"),  # 0.3's leading digit is 3, though 0.3/0.1 = 2.999...
        # Two when that digit is a 1: 0.0149 -> 0.015 rather than 0.01.
        (0.9, 0.0149, "0.900 ± 0.015"),
        (0.91, 0.1, "0.91 ± 0.10"),
        (12.345, 1.95, "12.3 ± 1.9"),
        # Rounding up into the next decade: 0.096 -> 0.10.
        (3.14159, 0.096, "3.14 ± 0.10"),
        # Errors above 1 round to tens, hundreds: 123456 ± 1234 -> 123500 ± 1200.
        (123456.0, 1234.0, "123500 ± 1200"),
        (123456.0, 5678.0, "123000 ± 6000"),
        (-0.001, 0.04, "0.00 ± 0.04"),  # no "-0.00"
        (0.9, math.nan, "0.9"),  # a single run: the mean alone, four significant digits
        (10.0, 0.0, "10 ± 0"),
        (math.nan, math.nan, "n/a"),
    ],
)
def test_mean_pm_rounding(mean, error, text):
    assert mean_pm(mean, error) == text


def test_markdown(sweep):
    df = load_runs([sweep])
    text = to_markdown(summarize(df))
    lines = text.splitlines()
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 4
    # num_samples, epochs and wall_time_s are equal in every run: no column, one line below.
    assert [c.strip() for c in table[0].strip("|").split("|")] == [
        "sampler",
        "test_accuracy",
        "test_nll",
    ]
    assert set(table[1]) <= set("|-: ")
    # sghmc: 0.90, 0.92 -> std 0.01414; sgld: 0.80, 0.84 -> 0.02828; nll 0.5, 1.5 -> 0.7071.
    assert "| sghmc     |   0.910 ± 0.014 |  1.0 ± 0.7 |" in table
    assert "| sgld      |     0.82 ± 0.03 |  1.0 ± 0.7 |" in table
    assert "n_runs = 2" in text and "epochs = 10" in text and "wall_time_s = 123500" in text
    assert "e+" not in text
    # The standard error instead: 0.01414 / sqrt(2) = 0.01, 0.02828 / sqrt(2) = 0.02.
    sem = to_markdown(summarize(df), error="sem")
    # (0.01 prints as 0.00999..., leading digit 1 after rounding: two digits) and 0.7071 / sqrt(2).
    assert "0.910 ± 0.010" in sem and "0.82 ± 0.02" in sem and "1.0 ± 0.5" in sem
    assert "standard error" in sem
    # A group of one run shows its value alone; a single row drops nothing.
    single = to_markdown(summarize(df, by=["sampler", "seed"], metrics=["test_accuracy"]))
    assert "|             0.9 |" in single and "±" not in single.split("\n\n")[0]
    one = to_markdown(summarize(df, by=[], metrics=["epochs"])).splitlines()[0]
    assert [c.strip() for c in one.strip("|").split("|")] == ["n_runs", "epochs"]


def test_markdown_escapes_pipes():
    summary = pd.DataFrame({"name": ["a|b"], "n_runs": [1], "x_mean": [1.0], "x_std": [math.nan]})
    text = to_markdown(summary).splitlines()[0]
    assert r"a\|b" in to_markdown(summary) and text.count("|") - text.count(r"\|") == 4


def test_latex(sweep):
    text = to_latex(summarize(load_runs([sweep])))
    lines = text.splitlines()
    assert r"\begin{tabular}{lrr}" in lines
    # whole lines: no index column before the sampler
    assert r"sampler & test\_accuracy & test\_nll \\" in lines
    assert r"sghmc & 0.910 $\pm$ 0.014 & 1.0 $\pm$ 0.7 \\" in lines
    assert r"n\_runs = 2" in text and "±" not in text


def test_format_table_rejects_unknown_error(sweep):
    with pytest.raises(ValueError, match="std, sem"):
        format_table(summarize(load_runs([sweep])), error="var")


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
    _write_run(tmp_path / "0", "sgld", 0)
    _unfinish(tmp_path / "0", "interrupted")
    assert main([str(tmp_path)]) == 0
    assert "interrupted, epoch 3" in capsys.readouterr().out


def test_broken_run_is_skipped(sweep):
    (sweep / "2024-01-01" / "12-00-00" / "1" / "metrics.json").write_text("{trunc")
    with pytest.warns(RunSkippedWarning, match="12-00-00/1"):
        df = load_runs([sweep])
    assert len(df) == 3


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


def test_sample_directories_are_not_searched(sweep):
    job0 = sweep / "2024-01-01" / "12-00-00" / "0"
    _write_run(job0 / "samples" / "decoy", "sgld", 0)
    assert len(find_runs([sweep])) == 4


def test_main_unknown_by_key(sweep, capsys):
    assert main([str(sweep), "--by", "optimizer"]) == 2
    err = capsys.readouterr().err
    assert "optimizer" in err and "sampler.lr" in err and "Traceback" not in err


def test_main_unknown_metric(sweep, capsys):
    assert main([str(sweep), "--metrics", "test_rmse"]) == 2
    assert "test_accuracy" in capsys.readouterr().err


def test_main_no_runs(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert str(tmp_path) in err and "metrics.json" in err and ".hydra/config.yaml" in err
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
    warning = "R-hat needs chains>=2: one chain cannot show that it has converged (chains=4)"
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
