"""``bdl-eval`` (`bdl.analysis.evaluate`): what cannot go together is refused in one line before
any run is read; the evaluation set is the points of a file standardised as the run's were,
shifted as asked and named for it; the metrics written are the model average's on it; a sweep,
or ``shift.severity=all``, is a row per run (and severity), each evaluation written where its
options say."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file, save_file

from bdl.analysis import evaluate as evaluate_module
from bdl.analysis.evaluate import _parse, evaluate_sweep, evaluation_set, main, severity_table
from bdl.analysis.posterior import Posterior, RunError
from bdl.data import DataError, Dataset
from bdl.data.shift import corrupt, rotate


@pytest.mark.parametrize(
    "other", ["split=validation", "dataset=boston", "dataset.split=1", "+dataset.extra=1"]
)
def test_a_file_of_data_replaces_the_dataset_and_its_split(other, tmp_path, capsys):
    run_dir = tmp_path / "no-run-needed"
    assert main([str(run_dir), "data=points.safetensors", other]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "bdl-eval: error: data=FILE replaces dataset= and split=: give one or the other"
    ]


def test_options_keep_hydras_types_for_the_dataset_and_text_for_the_rest():
    run_dir, options, trusted = _parse(
        ["runs/a", "dataset=boston", "dataset.split=3", "+dataset.extra=[1,2]", "shift.rotate=30"]
        + ["shift.corrupt=blur", "shift.severity=all", "ood=noise", "device=cpu", "out=o"]
    )
    assert run_dir == Path("runs/a")
    assert options == {
        "dataset": "boston",
        "dataset.split": 3,
        "+dataset.extra": [1, 2],
        "shift.rotate": "30",
        "shift.corrupt": "blur",
        "shift.severity": "all",
        "ood": "noise",
        "device": "cpu",
        "out": "o",
    }


@pytest.mark.parametrize(
    "option, message",
    [
        ("dataset=boston,yacht", "'dataset=boston,yacht': give each option one value (KEY=VALUE)"),
        ("~dataset", "'~dataset': give each option one value (KEY=VALUE)"),
        ("split=null", "'split=null': give each option one value (KEY=VALUE)"),
        ("splt=test", "splt=test is not an option of bdl-eval: did you mean split=test?"),
        ("+split=test", "+split=test is not an option of bdl-eval: did you mean split=test?"),
        ("seed=1", "seed=1 is not an option of bdl-eval: use KEY=VALUE with KEY in"),
    ],
)
def test_an_option_that_is_not_one_value_of_a_known_key_is_refused(option, message, capsys):
    assert main(["run", option]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"bdl-eval: error: {message}")


def _posterior(task: str, tmp_path: Path) -> SimpleNamespace:
    """What `evaluation_set` reads of a posterior: its run's dataset (standardised targets of
    mean 1 and sd 2, or three classes) and directory."""
    x = torch.zeros(2, 1, 6, 6)
    y = torch.zeros(2) if task == "regression" else torch.zeros(2, dtype=torch.long)
    data = Dataset("tiny", task, x, y, x, y, num_classes=3, target_mean=1.0, target_std=2.0)
    return SimpleNamespace(data=data, directory=tmp_path / "run")


def _points(tmp_path: Path, y: torch.Tensor, shape=(3, 1, 6, 6)) -> Path:
    path = tmp_path / "points.safetensors"
    x = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape) / 100
    save_file({"x": x, "y": y}, path)
    return path


def test_a_file_of_regression_targets_is_standardised_as_the_run_was(tmp_path):
    path = _points(tmp_path, torch.tensor([3.0, 5.0, -1.0], dtype=torch.float64))
    label, task, x, y = evaluation_set(_posterior("regression", tmp_path), {"data": str(path)})
    assert (label, task, x.dtype) == ("points", "regression", torch.float32)
    torch.testing.assert_close(y, torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64))


def test_a_shifted_file_is_the_shift_of_its_images_and_says_so(tmp_path):
    path = _points(tmp_path, torch.tensor([0, 2, 1]))
    posterior = _posterior("classification", tmp_path)
    _, _, plain, labels = evaluation_set(posterior, {"data": str(path)})
    assert labels.tolist() == [0, 2, 1]
    label, _, x, _ = evaluation_set(posterior, {"data": str(path), "shift.rotate": "12.5"})
    assert label == "points-rotate12.5"
    torch.testing.assert_close(x, rotate(plain, 12.5))
    label, _, x, _ = evaluation_set(posterior, {"data": str(path), "shift.corrupt": "blur"})
    assert label == "points-blur3"  # severity 3 unless given
    torch.testing.assert_close(x, corrupt(plain, "blur", 3))
    options = {"data": str(path), "shift.corrupt": "translate", "shift.severity": "5"}
    label, _, x, _ = evaluation_set(posterior, options)
    assert label == "points-translate5"
    torch.testing.assert_close(x, corrupt(plain, "translate", 5))


@pytest.mark.parametrize(
    "task, y, shape, options, message",
    [
        (
            "classification",
            [0, 3, 1],
            (3, 1, 6, 6),
            {},
            "data={path} has labels in [0, 3], but the run classifies into 3 classes",
        ),
        (
            "regression",
            [0, 3, 1],
            (3, 1, 6, 6),
            {},
            "{run} was trained for regression, but the targets of points are integer labels",
        ),
        (
            "classification",
            [0.5] * 3,
            (3, 1, 6, 6),
            {},
            "{run} was trained for classification into 3 classes, but the targets of points are "
            "real numbers",
        ),
        (
            "classification",
            [0, 1, 1],
            (3, 1, 5, 6),
            {},
            "{run} holds a network for inputs of shape (1, 6, 6) (tiny), but points has inputs of "
            "shape (1, 5, 6): evaluate it on data of the same shape",
        ),
        (
            "classification",
            [0] * 3,
            (3, 1, 6, 6),
            {"shift.severity": "2"},
            "shift.severity grades a corruption: give shift.corrupt=NAME with it",
        ),
        (
            "classification",
            [0] * 3,
            (3, 1, 6, 6),
            {"shift.corrupt": "blur", "shift.severity": "high"},
            "shift.severity=high is not a severity: choose 1, 2, 3, 4 or 5",
        ),
    ],
)
def test_a_file_the_run_cannot_read_is_refused(task, y, shape, options, message, tmp_path):
    path = _points(tmp_path, torch.tensor(y), shape)
    with pytest.raises((DataError, ValueError)) as error:
        evaluation_set(_posterior(task, tmp_path), {"data": str(path), **options})
    assert str(error.value) == message.format(path=path, run=tmp_path / "run")


def test_a_file_without_inputs_and_targets_says_which_tensors_it_needs(tmp_path):
    path = tmp_path / "points.safetensors"
    save_file({"x": torch.zeros(2, 1, 6, 6), "labels": torch.zeros(2)}, path)
    posterior = _posterior("classification", tmp_path)
    with pytest.raises(DataError) as error:
        evaluation_set(posterior, {"data": str(path)})
    assert str(error.value) == (
        f"data={path} holds the tensors ['labels', 'x']; it needs 'x' (inputs) and 'y' (labels "
        "or targets)"
    )
    path.write_bytes(b"not safetensors")
    with pytest.raises(DataError) as error:
        evaluation_set(posterior, {"data": str(path)})
    text = str(error.value)
    assert text.startswith(f"data={path} cannot be read as safetensors (") and text.endswith(")")


@pytest.fixture
def evaluated(monkeypatch, tmp_path):
    """`evaluate` replaced by one that records what it was asked and fails for run ``b/1``."""
    calls = []

    def evaluate(run_dir, options):
        calls.append((run_dir.name, dict(options)))
        if run_dir.name == "1":
            raise RunError(f"{run_dir} has no samples\nsecond line")
        severity = int(options.get("shift.severity", 0))
        return {"test_accuracy": 0.9 - severity / 100, "at": run_dir.parent.name}, tmp_path

    monkeypatch.setattr(evaluate_module, "evaluate", evaluate)
    return calls


def test_a_sweep_is_a_row_per_run_each_written_below_out(tmp_path, evaluated):
    sweep = tmp_path.resolve()
    runs = [sweep / "a" / "0", sweep / "b" / "1", sweep / "b" / "2"]
    table, failures = evaluate_sweep(sweep, runs, {"out": "o", "split": "test"})
    assert table.to_dict("records") == [
        {"run": "a/0", "test_accuracy": 0.9, "at": "a"},
        {"run": "b/2", "test_accuracy": 0.9, "at": "b"},
    ]
    assert failures == [f"b/1: {sweep / 'b' / '1'} has no samples"]
    assert [options["out"] for _, options in evaluated] == ["o/a/0", "o/b/1", "o/b/2"]
    assert all(options["split"] == "test" for _, options in evaluated)


def test_severity_all_is_a_row_per_run_and_severity(tmp_path, evaluated):
    run = tmp_path / "run"
    options = {"shift.corrupt": "blur", "shift.severity": "all", "out": "o"}
    table, failures = severity_table(run, [], options)
    assert failures == []
    assert table.columns.tolist()[:2] == ["run", "severity"]
    assert table["severity"].tolist() == [1, 2, 3, 4, 5]
    np.testing.assert_allclose(table["test_accuracy"], [0.89, 0.88, 0.87, 0.86, 0.85])
    assert [o["out"] for _, o in evaluated] == [f"o/severity{s}" for s in range(1, 6)]
    assert [o["shift.severity"] for _, o in evaluated] == ["1", "2", "3", "4", "5"]

    evaluated.clear()
    sweep = tmp_path.resolve()
    runs = [sweep / "b" / "0", sweep / "a" / "0", sweep / "b" / "1"]
    table, failures = severity_table(sweep, runs, {"shift.corrupt": "blur"})
    # sorted by run, then severity; the run that fails once per severity
    assert table[["run", "severity"]].values.tolist() == [
        [r, s] for r in ("a/0", "b/0") for s in range(1, 6)
    ]
    assert failures == [f"b/1: {sweep / 'b' / '1'} has no samples"] * 5
    with pytest.raises(ValueError, match="give shift.corrupt=NAME with it"):
        severity_table(sweep, runs, {"shift.severity": "all"})


def test_bdl_eval_prints_a_row_per_severity_or_per_run_and_names_each_failure(
    tmp_path, evaluated, capsys
):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
    assert main([str(run), "shift.corrupt=blur", "shift.severity=all"]) == 0
    rows = [r.strip("|").split("|") for r in capsys.readouterr().out.splitlines()[2:]]
    assert [(r[0].strip(), int(r[1]), float(r[2])) for r in rows] == [
        ("run", s, pytest.approx(0.9 - s / 100)) for s in range(1, 6)
    ]
    sweep = tmp_path / "sweep"
    for name in ("0", "1"):
        (sweep / name / ".hydra").mkdir(parents=True)
        (sweep / name / ".hydra" / "config.yaml").write_text("seed: 0\n")
        (sweep / name / "metrics.json").write_text("{}")
    assert main([str(sweep)]) == 2
    out, err = capsys.readouterr()
    assert [r.split("|")[1].strip() for r in out.splitlines()[2:]] == ["0"]
    assert err == f"bdl-eval: error: 1: {(sweep / '1').resolve()} has no samples\n"
    assert main([str(sweep), "shift.corrupt=blur", "shift.severity=all"]) == 2
    out, err = capsys.readouterr()
    assert [r.split("|")[2].strip() for r in out.splitlines()[2:]] == ["1", "2", "3", "4", "5"]
    assert err == f"bdl-eval: error: 1: {(sweep / '1').resolve()} has no samples\n" * 5


#: Two posterior samples' class probabilities for two points: their average is
#: [[0.4, 0.5, 0.1], [0.2, 0.2, 0.6]].
SAMPLES = (
    torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]], dtype=torch.float64),
    torch.tensor([[0.2, 0.7, 0.1], [0.2, 0.2, 0.6]], dtype=torch.float64),
)


class _Posterior:
    """A run of three classes whose samples predict `SAMPLES`, averaged by the real
    `Posterior.average`."""

    average = Posterior.average

    def __init__(self, run_dir):
        x, y = torch.zeros(2, 1, 6, 6), torch.zeros(2, dtype=torch.long)
        self.directory, self.data = run_dir, Dataset("tiny", "classification", x, y, x, y, 3)
        self.config = OmegaConf.create({"device": {"value": "cpu"}})
        self.verdict = {"converged": False, "reasons": ["R-hat 1.2 > 1.01"], "notes": []}

    def predictions(self, x, device=None, chain=None):
        yield from ((None, probs) for probs in SAMPLES)


def test_the_metrics_written_are_the_model_averages_on_the_evaluation_set(tmp_path, monkeypatch):
    """Labels 0 and 2: the average's top classes 1 and 2 make an accuracy of 1/2 and an NLL of
    -(log 0.4 + log 0.6) / 2, written with the set's name and the run's verdict beside."""
    monkeypatch.setattr(evaluate_module, "Posterior", _Posterior)
    run = tmp_path / "run"
    run.mkdir()
    path = tmp_path / "points.safetensors"
    save_file({"x": torch.zeros(2, 1, 6, 6), "y": torch.tensor([0, 2])}, path)
    for _ in range(2):  # a second evaluation replaces the first
        metrics, out = evaluate_module.evaluate(run, {"data": str(path)})
    assert out == run / "eval" / "points"
    assert json.loads((out / "metrics.json").read_text()) == metrics
    assert metrics["test_accuracy"] == pytest.approx(0.5)
    assert metrics["test_nll"] == pytest.approx(-(math.log(0.4) + math.log(0.6)) / 2)
    assert metrics["num_samples"] == 2 and metrics["evaluated_on"] == "points"
    assert metrics["converged"] is False and metrics["reasons"] == ["R-hat 1.2 > 1.01"]
    saved = load_file(out / "predictive.safetensors")
    torch.testing.assert_close(saved["predictive"], (SAMPLES[0] + SAMPLES[1]) / 2)
    assert saved["targets"].tolist() == [0, 2]
    _, elsewhere = evaluate_module.evaluate(run, {"data": str(path), "out": str(tmp_path / "o")})
    assert elsewhere == tmp_path / "o" and (elsewhere / "metrics.json").is_file()


@pytest.fixture
def files_run(tmp_path) -> Path:
    """A run directory on ``dataset=files`` (a regression of y on u, v), written by hand: its
    config and one sample; enough for what `evaluation_set` reads of it."""
    from hydra import compose, initialize_config_module

    from bdl.storage.store import SampleStore

    for name, rows in (("points", range(12)), ("points_test", range(12, 16))):
        text = "u,v,y\n" + "".join(f"{i},{i % 3},{0.5 * i}\n" for i in rows)
        (tmp_path / f"{name}.csv").write_text(text)
    for name, rows in (("labels", range(12)), ("labels_test", range(12, 16))):
        text = "u,v,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in rows)
        (tmp_path / f"{name}.csv").write_text(text)
    points, test = str(tmp_path / "points.csv"), str(tmp_path / "points_test.csv")
    overrides = ["dataset=files", f"dataset.train={points}", f"dataset.test={test}"]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", overrides)
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    SampleStore(run / "samples").add({"w": torch.zeros(1)}, epoch=0)
    return run


def test_a_split_or_a_dataset_the_run_cannot_be_evaluated_on_is_one_line(files_run):
    posterior = Posterior(files_run)
    with pytest.raises(ValueError) as error:
        evaluation_set(posterior, {"split": "train"})
    assert str(error.value) == "split=train is unknown: use split=test or split=validation"
    with pytest.raises(DataError) as error:
        evaluation_set(posterior, {"split": "validation"})
    assert str(error.value) == (
        "points has no validation split here (MNIST holds out dataset.validation training "
        "images; it is 0 or the dataset has none)"
    )
    labels, test = (str(files_run.parent / f"{n}.csv") for n in ("labels", "labels_test"))
    other = {"dataset.train": labels, "dataset.test": test, "dataset.task": "classification"}
    with pytest.raises(DataError) as error:
        evaluation_set(posterior, other)
    assert str(error.value) == (
        f"{files_run} was trained for regression on points, but labels is classification into "
        "2 classes: evaluate it on a dataset of the same task"
    )
    with pytest.raises(DataError) as error:
        evaluate_module.evaluate(files_run, {"ood": "noise", "device": "cpu"})
    assert str(error.value) == "ood=noise: out-of-distribution detection needs a classifier"
