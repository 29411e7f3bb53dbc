"""Run directories must all be found, however a sweep nests them, and read into one table."""

import pytest
from conftest import write_run

from bdl.analysis.sweeps import RunSkippedWarning, find_runs, load_runs


def test_find_runs(sweep, tmp_path):
    runs = find_runs([sweep])
    assert [r.name for r in runs] == ["0", "1", "2", "3"]
    assert all(r.is_absolute() for r in runs)
    # Overlapping inputs are deduplicated; a metrics.json file stands for its run.
    job0 = sweep / "2024-01-01" / "12-00-00" / "0"
    assert find_runs([sweep, job0, job0 / "metrics.json", tmp_path / "missing"]) == runs


def test_find_runs_sorts_numerically(tmp_path):
    for job in (10, 2, 1):
        write_run(tmp_path / str(job), "sgld", 0)
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


def test_broken_run_is_skipped(sweep):
    (sweep / "2024-01-01" / "12-00-00" / "1" / "metrics.json").write_text("{trunc")
    with pytest.warns(RunSkippedWarning, match="12-00-00/1"):
        df = load_runs([sweep])
    assert len(df) == 3


def test_sample_directories_are_not_searched(sweep):
    job0 = sweep / "2024-01-01" / "12-00-00" / "0"
    write_run(job0 / "samples" / "decoy", "sgld", 0)
    assert len(find_runs([sweep])) == 4


@pytest.mark.parametrize(
    "text, why",
    [
        ("[1, 2]", "ValueError: metrics.json is not a JSON object"),
        (
            '{"status": "completed", "test_rmse": NaN}',
            "metrics.json holds test_rmse=nan, not a finite number: a mean over it would be nan",
        ),
        (
            '{"status": "completed", "test_ll": -Infinity}',
            "metrics.json holds test_ll=-inf, not a finite number: a mean over it would be -inf",
        ),
        (
            '{"status": "completed", "test_rmse": 1e200}',
            "metrics.json holds test_rmse=1e+200, beyond ±1e+150: its mean or spread would "
            "overflow",
        ),
    ],
)
def test_a_run_a_table_cannot_average_is_skipped_saying_why(sweep, text, why):
    run = sweep / "2024-01-01" / "12-00-00" / "1"
    (run / "metrics.json").write_text(text)
    with pytest.warns(RunSkippedWarning) as caught:
        df = load_runs([sweep])
    assert [str(w.message) for w in caught] == [f"skipped {run}: {why}"]
    assert len(df) == 3 and str(run) not in set(df["run_dir"])
