"""Runs must be grouped by what was swept, averaged over seeds and rounded to their spread."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import REPORT_SAMPLERS, write_run

from bdl.analysis.sweeps import find_runs, load_runs
from bdl.analysis.tables import (
    choice_columns,
    csv_safe,
    format_table,
    mean_pm,
    metric_columns,
    pruning_table,
    summarize,
    to_latex,
    to_markdown,
    varying_keys,
)


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
        write_run(tmp_path / str(job), sampler, seed, hydra_yaml=False)
    df = load_runs([tmp_path])
    assert "sampler" not in df.columns
    summary = summarize(df)
    assert list(summary.columns[:2]) == ["sampler._target_", "n_runs"]
    assert set(summary["sampler._target_"]) == {t for t, _, _ in REPORT_SAMPLERS.values()}


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
        # identical runs: the mean at four significant digits, not rounded to an error of 0
        (3.14159, 0.0, "3.142 ± 0"),
        (2.5, 1.0, "2.5 ± 1.0"),  # an error of exactly 1 keeps its two digits
        (1.0, math.inf, "1 ± inf"),  # no decimal place to round an infinite error to
        (math.inf, 0.1, "inf ± 0.1"),
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
    with pytest.raises(ValueError) as error:
        format_table(summarize(load_runs([sweep])), error="var")
    assert str(error.value) == "error must be one of std, sem, not 'var'"


def test_summarize_names_an_unknown_column_and_the_columns_it_has():
    runs = pd.DataFrame({"sampler": ["sgld", "sghmc"], "test_rmse": [1.0, 2.0]})
    with pytest.raises(ValueError) as error:
        summarize(runs, by=["samplr"], metrics=["test_rmse", "test_ll"])
    assert str(error.value) == (
        "unknown column(s) ['samplr', 'test_ll']; available: ['sampler', 'test_rmse']"
    )


def test_summarize_is_each_groups_mean_std_and_sem_computed_by_hand():
    """Groups of three, two and one runs over two keys, one run lacking the metric: each row's
    mean and ddof=1 spread over the runs that report it, its error std/sqrt(count), n_runs
    counting every run, rows in the keys' order."""
    runs = pd.DataFrame(
        {
            "sampler": ["sgld", "sghmc", "sgld", "sghmc", "sgld", "sgld"],
            "lr": [0.1, 0.1, 0.1, 0.1, 0.1, 0.01],
            "test_rmse": [1.0, 4.0, 2.0, 8.0, math.nan, 5.0],
        }
    )
    summary = summarize(runs, by=["sampler", "lr"], metrics=["test_rmse"])
    assert summary[["sampler", "lr"]].values.tolist() == [
        ["sghmc", 0.1],
        ["sgld", 0.01],
        ["sgld", 0.1],
    ]
    assert summary["n_runs"].tolist() == [2, 1, 3]
    # sghmc: 4, 8 -> mean 6, std sqrt(8); sgld lr 0.1: 1, 2 (one NaN) -> 1.5, sqrt(0.5) over 2
    np.testing.assert_allclose(summary["test_rmse_mean"], [6.0, 5.0, 1.5])
    np.testing.assert_allclose(summary["test_rmse_std"], [math.sqrt(8), math.nan, math.sqrt(0.5)])
    np.testing.assert_allclose(summary["test_rmse_sem"], [2.0, math.nan, 0.5])


def test_summarize_by_a_key_never_averages_runs_of_two_data_sets():
    """``--by sampler`` over a sweep on MNIST and one on yacht: a row a sampler and data set,
    each mean its own runs' (a choice column, as `load_runs` gives it beside its keys)."""
    runs = pd.DataFrame(
        {
            "sampler": ["sghmc", "sghmc", "sgld", "sghmc"],
            "dataset": ["mnist", "mnist", "mnist", "yacht"],
            "dataset.name": ["mnist", "mnist", "mnist", "yacht"],
            "test_ll": [-0.2, -0.4, -0.3, -1.5],
        }
    )
    summary = summarize(runs, by=["sampler"], metrics=["test_ll"])
    assert summary[["sampler", "dataset", "n_runs"]].values.tolist() == [
        ["sghmc", "mnist", 2],
        ["sghmc", "yacht", 1],
        ["sgld", "mnist", 1],
    ]
    np.testing.assert_allclose(summary["test_ll_mean"], [-0.3, -1.5, -0.3])
    # one data set: the keys asked for, alone
    one = summarize(runs[runs["dataset"] == "mnist"], by=["sampler"], metrics=["test_ll"])
    assert list(one.columns[:2]) == ["sampler", "n_runs"]


def test_keys_of_mixed_types_keep_their_first_seen_order():
    runs = pd.DataFrame({"width": [64, "wide", 64], "test_ll": [-1.0, -3.0, -2.0]})
    summary = summarize(runs, by=["width"], metrics=["test_ll"])
    assert summary["width"].tolist() == [64, "wide"]
    assert summary["test_ll_mean"].tolist() == [-1.5, -3.0]


def _write_config_run(directory, seed, lr, metric, sampler="sghmc"):
    (directory / ".hydra").mkdir(parents=True)
    (directory / ".hydra" / "config.yaml").write_text(
        f"seed: {seed}\nsampler:\n  _target_: bdl.samplers.{sampler}\n  lr: {lr}\n"
    )
    (directory / ".hydra" / "hydra.yaml").write_text(
        f"hydra:\n  runtime:\n    choices:\n      sampler: {sampler}\n"
    )
    (directory / "metrics.json").write_text(json.dumps({"test_accuracy": metric}))


def test_a_key_swept_within_a_sampler_splits_its_rows(tmp_path):
    """lr swept at two values for sghmc, each over seeds 0 and 1: it is a group key beside the
    sampler (sgld's single lr differs too but only restates its choice)."""
    values = {(0.1, 0): 0.90, (0.1, 1): 0.94, (0.2, 0): 0.80, (0.2, 1): 0.70}
    for (lr, seed), accuracy in values.items():
        _write_config_run(tmp_path / f"sghmc-{lr}-{seed}", seed, lr, accuracy)
    for seed, accuracy in enumerate((0.5, 0.6)):
        _write_config_run(tmp_path / f"sgld-{seed}", seed, 0.3, accuracy, sampler="sgld")
    summary = summarize(load_runs([tmp_path]))
    assert summary.attrs["by"] == ["sampler", "sampler.lr"]
    rows = summary.set_index(["sampler", "sampler.lr"])
    assert rows.loc[("sghmc", 0.1), "test_accuracy_mean"] == pytest.approx(0.92)
    assert rows.loc[("sghmc", 0.2), "test_accuracy_mean"] == pytest.approx(0.75)
    assert rows.loc[("sgld", 0.3), "test_accuracy_std"] == pytest.approx(math.sqrt(0.005))
    assert rows["n_runs"].tolist() == [2, 2, 2]


@pytest.mark.parametrize(
    "value, text",
    [
        (123456.0, "123500"),
        (-123456.0, "-123500"),
        (12346.0, "12350"),
        (1234.6, "1235"),
        (0.000123456, "0.0001235"),
        (2.5e15, "2.5e+15"),
        (0.0, "0"),
        (math.inf, "inf"),
    ],
)
def test_a_constant_column_is_written_at_four_significant_digits(value, text):
    summary = pd.DataFrame(
        {"k": ["a", "b"], "n_runs": [1, 2], "x_mean": [value, value], "x_std": [math.nan, 0.0]}
    )
    assert format_table(summary).attrs["constant"]["x"] == text


@pytest.mark.parametrize(
    "value, label",
    [
        (3.0, "3"),
        (0.1, "0.1"),
        (1 / 3, "0.3333"),
        (1e16, "1e+16"),
        (None, ""),
        ("a\nb\rc", "a b c"),
    ],
)
def test_a_group_key_is_labelled_as_a_reader_writes_it(value, label):
    summary = pd.DataFrame(
        {"k": [value, "other"], "n_runs": [1, 1], "x_mean": [1.0, 2.0], "x_std": [0.1, 0.1]}
    )
    assert format_table(summary)["k"].tolist() == [label, "other"]


def test_format_table_keeps_what_differs_and_counts_a_reader_must_see():
    summary = pd.DataFrame(
        {
            "sampler": ["a", "b"],
            "n_runs": [2, 2],
            "n_unconverged": [0, 0],
            "same_mean_other_spread_mean": [1.0, 1.0],
            "same_mean_other_spread_std": [0.0, 0.2],
            "missing_mean": [math.nan, math.nan],
            "missing_std": [math.nan, math.nan],
        }
    )
    summary.attrs["metrics"] = ["same_mean_other_spread", "missing"]
    table = format_table(summary)
    assert table.columns.tolist() == ["sampler", "n_unconverged", "same_mean_other_spread"]
    assert table["n_unconverged"].tolist() == ["0", "0"]
    assert table["same_mean_other_spread"].tolist() == ["1 ± 0", "1.0 ± 0.2"]
    assert table.attrs["constant"] == {"n_runs": "2", "missing": "n/a"}
    # one row drops nothing: its values are the result, not a repetition
    assert format_table(summary.iloc[:1]).columns.tolist()[:3] == [
        "sampler",
        "n_runs",
        "n_unconverged",
    ]


@pytest.mark.parametrize("prefix", ["=", "+", "-", "@", "\t", "\r"])
def test_csv_safe_quotes_every_formula_prefix_and_leaves_numbers(prefix):
    frame = pd.DataFrame({f"{prefix}col": [f"{prefix}SUM(A1)", "plain"], "x": [-1.5, 2.0]})
    frame.attrs["by"] = ["x"]
    safe = csv_safe(frame)
    assert safe.columns.tolist() == [f"'{prefix}col", "x"]
    assert safe[f"'{prefix}col"].tolist() == [f"'{prefix}SUM(A1)", "plain"]
    assert safe["x"].tolist() == [-1.5, 2.0]
    assert safe.attrs["by"] == ["x"]


def test_latex_notes_and_layout_escape_what_latex_reads(sweep):
    text = to_latex(summarize(load_runs([sweep])), error="sem")
    # the labels left, the numbers right; the notes' underscores escaped, ± as math
    assert r"\begin{tabular}{lrr}" in text
    assert r"Same in every row: n\_runs = 2, num\_samples = 10, epochs = 10" in text
    assert r"mean $\pm$ standard error of the mean over each row's n\_runs runs." in text
    assert r"sghmc & 0.910 $\pm$ 0.010 & 1.0 $\pm$ 0.5 \\" in text.splitlines()


def test_pruning_table_in_blundells_layout(tmp_path):
    (tmp_path / "error").mkdir()
    (tmp_path / "error" / "pruning.csv").write_text(
        "fraction_removed,weights_kept,test_error\n"
        "0.0,2400000,0.0123\n0.5,600000,0.0125\n0.98,48000,0.02\n0.999,9999,0.5\n"
    )
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in pruning_table(tmp_path / "error").splitlines()
    ]
    assert rows[0] == ["Proportion removed", "# Weights", "Test Error"]
    assert rows[2:] == [
        ["0%", "2.4m", "1.23%"],
        ["50%", "600k", "1.25%"],
        ["98%", "48k", "2.00%"],
        ["99.9%", "9999", "50.00%"],
    ]
    (tmp_path / "rmse").mkdir()
    (tmp_path / "rmse" / "pruning.csv").write_text(
        "fraction_removed,weights_kept,test_rmse\n0.1,1000000,0.123456\n"
    )
    lines = pruning_table(tmp_path / "rmse").splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")][2] == "Test RMSE"
    assert [c.strip() for c in lines[2].strip("|").split("|")] == ["10%", "1.0m", "0.1235"]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "pruning.csv").write_text(
        "fraction_removed,weights,test_error\n0.1,9,0.2\n"
    )
    with pytest.raises(ValueError) as error:
        pruning_table(tmp_path / "bad")
    assert str(error.value) == (
        f"{tmp_path / 'bad' / 'pruning.csv'} is not a pruning curve (KeyError: 'weights_kept'); "
        "bdl-run pruning=true writes it: run that again, or remove the file"
    )


def test_metric_and_choice_columns_are_guessed_when_pandas_drops_the_attrs(sweep):
    df = load_runs([sweep])
    plain = pd.DataFrame(df.to_dict("records"))  # no attrs
    assert plain.attrs == {}
    assert metric_columns(plain) == [
        "test_accuracy",
        "test_nll",
        "num_samples",
        "epochs",
        "wall_time_s",
    ]
    assert choice_columns(plain) == ["sampler", "dataset"]
    summary = summarize(plain, by=["sampler"])
    assert summary.set_index("sampler").loc["sgld", "test_accuracy_mean"] == pytest.approx(0.82)


def test_where_and_how_a_run_happened_is_no_axis():
    """Every pattern of DEFAULT_EXCLUDE on a key that differs between two runs: only the
    sampler is an axis; the implementation keys go too when a choice names the sampler."""
    where = {
        "seed": [0, 1],
        "run_dir": ["a", "b"],
        "hydra": ["x", "y"],
        "hydra.job.name": ["x", "y"],
        "root": ["/a", "/b"],
        "dataset.root": ["/a", "/b"],
        "save_dir": ["/a", "/b"],
        "cache.dir": ["/a", "/b"],
        "ckpt_path": ["/a", "/b"],
        "data.path": ["/a", "/b"],
        "device": ["cpu", "cuda"],
        "model.device": ["cpu", "cuda"],
        "num_workers": [0, 2],
        "loader.num_workers": [0, 2],
        "wandb.project": ["p", "q"],
        "logger.level": ["info", "debug"],
        "log_every": [1, 10],
    }
    runs = pd.DataFrame({"sampler": ["sghmc", "sgld"], **where, "test_nll": [1.0, 2.0]})
    assert varying_keys(runs) == ["sampler"]
    # a run's directory is where it is, whatever the patterns
    assert varying_keys(runs, exclude=()) == ["sampler", *(k for k in where if k != "run_dir")]
    implementation = {"sampler._target_": ["A", "B"], "sampler._partial_": [True, False]}
    named = runs.assign(**implementation, **{"sampler.lr": [0.1, 0.2]})
    assert varying_keys(named) == ["sampler", "sampler.lr"]  # a choice names the sampler
    unnamed = pd.DataFrame({**implementation, "test_nll": [1.0, 2.0]})
    assert varying_keys(unnamed) == ["sampler._target_", "sampler._partial_"]


def test_metric_columns_are_guessed_by_name_and_number():
    runs = pd.DataFrame(
        {
            "val_loss": [1.0],
            "train_note": ["fine"],
            "epochs": [3],
            "sampler": ["sgld"],
            "grad_norm": [2.0],
            "test_ll": [-1.0],
        }
    )
    assert metric_columns(runs) == ["val_loss", "epochs", "test_ll"]


def test_counts_of_flagged_runs_come_after_n_runs_and_only_when_a_run_is_flagged():
    runs = pd.DataFrame(
        {
            "k": ["a", "a", "b"],
            "warnings": ["w", "", None],
            "unconverged": ["", "R-hat 1.2", ""],
            "x": [1.0, 2.0, 3.0],
        }
    )
    summary = summarize(runs, by=["k"], metrics=["x"])
    assert summary.columns.tolist()[:4] == ["k", "n_runs", "n_unconverged", "n_warned"]
    assert summary[["n_runs", "n_unconverged", "n_warned"]].values.tolist() == [
        [2, 1, 1],
        [1, 0, 0],
    ]
    quiet = summarize(runs.assign(warnings="", unconverged=None), by=["k"], metrics=["x"])
    assert quiet.columns.tolist() == ["k", "n_runs", "x_mean", "x_std", "x_sem"]


def test_a_summary_read_back_from_csv_is_formatted_as_the_original(sweep, tmp_path):
    """report_summary.csv has no attrs: its groups (the columns before n_runs) and metrics (a
    mean beside a std) are read from the column names."""
    summary = summarize(load_runs([sweep]))
    summary.to_csv(tmp_path / "summary.csv", index=False)
    again = pd.read_csv(tmp_path / "summary.csv")
    assert again.attrs == {}
    text = to_markdown(again)
    assert text == to_markdown(summary)
    assert text.endswith(
        "Cells: mean ± standard deviation over each row's n_runs runs. Same in every row: "
        "n_runs = 2, num_samples = 10, epochs = 10, wall_time_s = 123500."
    )
