"""The end of a run (``bdl.runner.results``): the verdict on its metrics against the trivial
predictor,
and the files beside ``metrics.json``."""

import csv
import json

import pytest

from bdl.analysis.posterior import load_run
from bdl.runner.experiment import build
from bdl.runner.results import judge
from bdl.runner.run import run
from runner.test_resume import config, write_tiny_uci


@pytest.fixture(scope="module")
def uci_root(tmp_path_factory):
    return write_tiny_uci(tmp_path_factory.mktemp("data"))


def test_a_posterior_worse_than_ignoring_the_inputs_is_unsound(uci_root):
    experiment = build(config(uci_root))
    trivial = experiment.run.task.trivial_metrics()
    worse = {"test_rmse": trivial["test_rmse"] * 1.5, "test_ll": trivial["test_ll"] + 1.0}
    judge(worse, experiment, chains=1)
    task = experiment.run.task
    (rmse,) = task.worse_than(worse, trivial, ("test_rmse",))  # "test_rmse X (trivial's)"
    assert rmse.startswith("test_rmse ")
    assert worse["status"] == "unsound"
    assert worse["error"] == (
        f"the posterior predicts worse than ignoring the inputs: {rmse} (the trivial predictor's "
        "in brackets). Try another sampler, a smaller sampler.lr or more epochs"
    )
    assert worse["warnings"] == []  # one chain is a note of the convergence verdict, no warning
    sound = {"test_rmse": trivial["test_rmse"] / 2, "test_ll": trivial["test_ll"] - 1.0}
    judge(sound, experiment, chains=2)
    assert "status" not in sound and sound["trivial"] == trivial
    (density,) = task.worse_than(sound, trivial, ("test_ll",))
    assert sound["warnings"] == [
        f"the predictive density is worse than ignoring the inputs: {density} (the trivial "
        "predictor's in brackets); its point predictions beat it, its spread does not (an "
        "overconfident fit)"
    ]


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


def test_divergent_transitions_of_stacked_chains_reach_metrics_and_inferencedata(
    uci_root, tmp_path
):
    """Two stacked HMC chains at a step and threshold where most transitions after burn-in are
    divergent: the count, fraction and epochs in ``metrics.json`` are the curve's, per chain,
    burn-in's left out, and ``sample_stats`` flags the draws of those epochs (thin=1: one draw
    per epoch)."""
    overrides = ["sampler=hmc", "sampler.num_steps=3", "sampler.lr=0.003", "chains=2"]
    metrics = run(config(uci_root, *overrides, "sampler.divergence_threshold=0.01"), tmp_path)
    with (tmp_path / "curve.csv").open() as file:
        curve = list(csv.DictReader(file))
    per_chain = [
        [int(r["epoch"]) for r in curve if int(r["chain"]) == k and int(r["divergences"])]
        for k in range(2)
    ]
    after = [[e for e in epochs if e > 2] for epochs in per_chain]
    assert metrics["divergent_epochs"] == after and metrics["divergences"] == sum(map(len, after))
    assert metrics["divergence_fraction"] == metrics["divergences"] / 8  # 4 epochs x 2 chains
    assert 0 < metrics["divergences"] < 8
    stats = load_run(tmp_path).to_inferencedata(log_likelihood=False).sample_stats
    flagged = stats["diverging"].values
    assert flagged.tolist() == [[e in epochs for e in range(3, 7)] for epochs in after]
    assert stats["n_divergent"].values.sum() == metrics["divergences"]
