"""Runs must be grouped by what was swept, averaged over seeds and rounded to their spread."""

import json
import math

import pandas as pd
import pytest
from conftest import REPORT_SAMPLERS, write_run

from bdl.analysis.sweeps import find_runs, load_runs
from bdl.analysis.tables import (
    format_table,
    mean_pm,
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
