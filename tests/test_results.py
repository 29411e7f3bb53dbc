"""The end of a run (``bdl.results``): the verdict on its metrics against the trivial predictor,
and the files beside ``metrics.json``."""

import csv
import json

import pytest
from test_resume import config, write_tiny_uci

from bdl.experiment import build
from bdl.results import judge
from bdl.run import run


@pytest.fixture(scope="module")
def uci_root(tmp_path_factory):
    return write_tiny_uci(tmp_path_factory.mktemp("data"))


def test_a_posterior_worse_than_ignoring_the_inputs_is_unsound(uci_root):
    experiment = build(config(uci_root))
    trivial = experiment.task.trivial_metrics()
    worse = {"test_rmse": trivial["test_rmse"] * 1.5, "test_ll": trivial["test_ll"] + 1.0}
    judge(worse, experiment, chains=1)
    assert worse["status"] == "unsound" and "test_rmse" in worse["error"]
    assert any("R-hat needs chains>=2" in w for w in worse["warnings"])
    sound = {"test_rmse": trivial["test_rmse"] / 2, "test_ll": trivial["test_ll"] - 1.0}
    judge(sound, experiment, chains=2)
    assert "status" not in sound and sound["trivial"] == trivial
    assert any("density is worse than ignoring the inputs" in w for w in sound["warnings"])


def test_a_pruning_run_writes_its_curve_and_the_signal_to_noise_beside_its_metrics(
    uci_root, tmp_path
):
    metrics = run(config(uci_root, "pruning=true", "pruning_samples=4"), tmp_path)
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == metrics["status"]
    with (tmp_path / "pruning.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert float(rows[0]["fraction_removed"]) == 0.0 and len(rows) > 1
    with (tmp_path / "signal_to_noise.csv").open() as file:
        assert float(next(csv.DictReader(file))["sigma"]) > 0
