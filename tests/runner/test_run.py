"""The runner through its public entry point, ``bdl.runner.run.run(cfg, directory)``, on the
generated
data of ``fake_data_root`` (real formats, no real data needed): what it writes agrees with what
it reports, and Metropolis kernels stay exact when Gibbs steps change the potential under them."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from conftest import gaussian_mixture_of_samples, networks_of_samples
from hydra import compose, initialize_config_module
from safetensors.torch import load_file

import bdl
from bdl.analysis.evaluate import evaluate
from bdl.analysis.plots import summary_figure
from bdl.runner.experiment import build
from bdl.runner.results import _stored_detections
from bdl.runner.run import run
from bdl.storage.outputs import RunDirectory
from bdl.storage.store import read_manifest

# minibatches of 32 and the UCI step size (sampler=sghmc_uci's), which these runs were written for
UCI = [
    "dataset=boston",
    "batch_size=32",
    "protocol.mlp.hidden=[8]",
    "thin=1",
    "burn_in=0",
    "sampler.lr=3e-4",
]


@pytest.fixture
def run_with(fake_data_root, isolated_cache, tmp_path):
    """Compose ``overrides`` on the generated data, run into ``tmp_path/name``; returns the
    metrics and the run directory."""

    def go(overrides: list[str], name: str = "run"):
        with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
            cfg = compose("config", [f"dataset.root={fake_data_root}", "figures=false", *overrides])
        directory = tmp_path / name
        return run(cfg, directory), directory

    return go


def _curve(directory) -> list[dict[str, str]]:
    with (directory / "curve.csv").open() as file:
        return list(csv.DictReader(file))


KERNELS = [("hmc", ["sampler.num_steps=3"], 3), ("mala", [], 1), ("rwmh", [], 1)]


@pytest.mark.parametrize("prior", ["gaussian", "gamma_hierarchical"])
@pytest.mark.parametrize("sampler, extra, leapfrog", KERNELS, ids=[k[0] for k in KERNELS])
def test_metropolis_kernels_reevaluate_the_potential_after_each_gibbs_step(
    run_with, sampler, extra, leapfrog, prior
):
    """At a vanishing step (lr 1e-12) a proposal sits on the current point, so an exact test
    accepts every one: log r = U(θ) − U(θ') ≈ 0. A kernel that kept its cached U across a Gibbs
    update of the prior's precisions would compare U under the old precisions with U under the
    new ones, an O(1) difference of either sign, and reject about half. Counting by hand, each of
    the E iterations evaluates ∇U ``leapfrog`` times for its proposal (HMC: L, MALA and RWMH: 1),
    plus once at the start point when the cache is empty: on the first iteration, and after every
    Gibbs step (one per epoch) when there are hyperparameters."""
    epochs = 12
    overrides = [f"sampler={sampler}", *extra, "sampler.lr=1e-12", "sampler.adapt=false"]
    overrides.append("likelihood.noise_std=0.5")  # the prior's precisions are the only Gibbs ones
    metrics, directory = run_with([*UCI, f"prior={prior}", *overrides, f"epochs={epochs}"])
    assert metrics["accept_rate"] == 1.0
    if prior == "gaussian":
        assert metrics["grad_evals"] == epochs * leapfrog + 1
    else:
        assert metrics["grad_evals"] == epochs * (leapfrog + 1)
        precisions = [float(row["precision/layers.0.weight"]) for row in _curve(directory)]
        assert len(set(precisions)) == epochs  # resampled every epoch


def test_gibbs_noise_precision_under_a_metropolis_kernel(run_with):
    metrics, directory = run_with(
        [*UCI, "sampler=mala", "sampler.lr=1e-12", "sampler.adapt=false", "epochs=10"]
        + ["likelihood.noise_std=null", "likelihood.gibbs=true"]
    )
    assert metrics["accept_rate"] == 1.0 and metrics["grad_evals"] == 20
    assert len({row["noise_precision"] for row in _curve(directory)}) == 10


def test_regression_metrics_are_those_of_the_written_predictive(run_with):
    """test_rmse recomputed from predictive.safetensors (the mixture mean's RMSE), test_ll from
    the stored samples (the mean log density of their equal mixture), in original units."""
    metrics, directory = run_with([*UCI, "sampler=sghmc", "epochs=3", "batch_size=64"])
    saved = load_file(directory / "predictive.safetensors")
    mean, variance = saved["predictive"].double().unbind(-1)
    targets = saved["targets"].double()
    assert mean.shape == (51,) and metrics["num_samples"] == 3
    rmse = (mean - targets).square().mean().sqrt().item()
    assert metrics["test_rmse"] == pytest.approx(rmse, rel=1e-5)
    # test_ll is the equal mixture's over the samples (not the moment-matched Gaussian's that
    # predictive.safetensors holds): rebuilt here from each stored sample's (mean, variance)
    _, mixture = gaussian_mixture_of_samples(bdl.load_run(directory))
    assert metrics["test_ll"] == pytest.approx(mixture.log_prob(targets).mean().item(), rel=1e-6)
    rows = _curve(directory)
    assert [int(r["num_samples"]) for r in rows] == [1, 2, 3]
    assert float(rows[-1]["test_metric"]) == pytest.approx(rmse, rel=1e-5)


def test_an_optimisers_curve_holds_its_current_points_test_metric(run_with):
    """SGD keeps its final point alone, but its curve has a test RMSE at every epoch (Chen et al.'s
    Fig. 3 draws SGD's line): the iterate's, which at the last epoch is the final sample's."""
    metrics, directory = run_with([*UCI, "sampler=sgd", "epochs=3", "batch_size=64"])
    rows = _curve(directory)
    assert [int(r["num_samples"]) for r in rows] == [0, 0, 0]
    values = [float(r["test_metric"]) for r in rows]
    assert len(set(values)) == 3  # a new point each epoch
    assert values[-1] == pytest.approx(metrics["test_rmse"], rel=1e-6)


def test_figures_false_leaves_the_run_without_figures(run_with):
    _, directory = run_with([*UCI, "epochs=3", "burn_in=1", "figures=false"])
    assert (directory / "metrics.json").is_file() and not list(directory.glob("*.png"))


def test_a_run_of_chains_writes_its_summary_figure(run_with):
    """summary.png: the test RMSE and the potential of each of the 2 chains over the 6 epochs,
    burn-in (2 epochs) marked, and the R-hat histogram of diagnostics.csv's test points."""
    overrides = [*UCI, "chains=2", "epochs=6", "burn_in=2", "batch_size=64", "figures=true"]
    metrics, directory = run_with(overrides)
    assert (directory / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metric, potential, rhat = summary_figure(directory).axes
    assert [len(line.get_xdata()) for line in metric.lines[:2]] == [4, 4]  # after burn-in
    assert [len(line.get_xdata()) for line in potential.lines[:2]] == [6, 6]
    assert metric.lines[2].get_xdata()[0] == 2 and potential.lines[2].get_xdata()[0] == 2
    assert metric.lines[3].get_ydata()[0] == pytest.approx(metrics["test_rmse"])
    assert sum(p.get_height() for p in rhat.patches) == 51  # boston's generated test points


def test_classification_metrics_are_those_of_the_written_predictive(run_with):
    overrides = ["dataset.validation=59000", "epochs=3", "burn_in=1", "batch_size=100"]
    metrics, directory = run_with(overrides)
    saved = load_file(directory / "predictive.safetensors")
    probs, targets = saved["predictive"].double(), saved["targets"].long()
    assert probs.shape == (10000, 10) and metrics["num_samples"] == 2
    # each sample's probabilities are a float32 softmax: a row sums to 1 within about one float32
    # rounding per class (2.3e-7 seen on one CPU, more than float64's default tolerance)
    torch.testing.assert_close(
        probs.sum(-1),
        torch.ones(10000, dtype=torch.float64),
        rtol=0,
        atol=10 * torch.finfo(torch.float32).eps,
    )
    accuracy = (probs.argmax(-1) == targets).double().mean().item()
    assert metrics["test_accuracy"] == pytest.approx(accuracy)
    nll = -probs.gather(1, targets[:, None]).clamp_min(1e-12).log().mean().item()
    assert metrics["test_nll"] == pytest.approx(nll, rel=1e-6)
    # the generated classes are separable: three epochs learn them, far above chance (0.1)
    assert metrics["test_accuracy"] > 0.5
    assert [entry["epoch"] for entry in read_manifest(directory / "samples")] == [1, 2]


def test_cifar10_runs_resnet20_frn(run_with, no_cifar_md5):
    metrics, directory = run_with(
        ["dataset=cifar10", "model.width=4", "epochs=2", "burn_in=1", "batch_size=10"]
        + ["protocol.augment=true"]
    )
    assert metrics["num_samples"] == 1 and metrics["grad_evals"] == 2 * 2
    assert load_file(directory / "predictive.safetensors")["predictive"].shape == (6, 10)
    assert math.isfinite(metrics["test_nll"])


def test_mnist_validation_images_give_val_metrics(run_with):
    """The held-out training images are scored like the test set (val_*): here recomputed by
    hand from the stored samples' class probabilities on them."""
    metrics, directory = run_with(
        ["dataset=mnist", "dataset.validation=59000", "epochs=3", "burn_in=1", "batch_size=100"]
    )
    posterior = bdl.load_run(directory)
    data = posterior.data
    probs = []
    for model, _ in networks_of_samples(posterior):
        with torch.no_grad():
            probs.append(model(data.x_validation).double().softmax(-1))
    average = torch.stack(probs).mean(0)
    assert len(probs) == metrics["num_samples"] == 2
    hits = (average.argmax(-1) == data.y_validation).double().mean().item()
    assert metrics["val_accuracy"] == pytest.approx(hits, abs=1e-12)
    nll = -average.gather(1, data.y_validation[:, None]).log().mean().item()
    assert metrics["val_nll"] == pytest.approx(nll, rel=1e-6)
    assert {"val_ece", "val_brier"} <= set(metrics)


@pytest.mark.parametrize("dataset", ["mnist", "boston"])
def test_a_short_run_is_refused_once_with_settings_that_work(fake_data_root, dataset):
    """epochs=20 alone: the protocols' burn-in (MNIST 50, UCI 2000) and thinning (UCI 20) leave
    no sample; the one refusal names values for both, and those values build."""
    import bdl.runner.run
    from bdl.composition.config import ConfigError

    def build(*overrides: str):
        with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
            args = [f"dataset.root={fake_data_root}", f"dataset={dataset}", "epochs=20"]
            return bdl.runner.experiment.build(compose("config", [*args, *overrides]))

    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        args = [f"dataset.root={fake_data_root}", f"dataset={dataset}", "epochs=20"]
        with pytest.raises(ConfigError, match="keep epochs=20 with burn_in=10 thin=1$"):
            bdl.composition.config.validate(compose("config", args))  # burn_in >= epochs
    with pytest.raises(ConfigError, match="keep epochs=20 with burn_in=10 thin=1$"):
        build("burn_in=19", "thin=5")  # no sample after burn-in
    assert build("burn_in=10", "thin=1").collects(10)


def test_the_resume_command_names_a_program_the_shell_finds(monkeypatch, tmp_path):
    """Started as .venv/bin/bdl-run without the environment activated, the printed command
    names that path; started through the PATH (or as python -m bdl.cli), plain bdl-run."""
    import bdl.runner.run

    program = tmp_path / "venv" / "bin" / "bdl-run"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setattr("sys.argv", [str(program)])
    monkeypatch.setenv("PATH", "/nonexistent")
    assert bdl.runner.interrupts.resume_command(tmp_path).startswith(f"{program} ")
    monkeypatch.setenv("PATH", str(program.parent))
    assert bdl.runner.interrupts.resume_command(tmp_path).startswith("bdl-run ")
    monkeypatch.setattr("sys.argv", ["/somewhere/bdl/cli.py"])
    assert bdl.runner.interrupts.resume_command(tmp_path).startswith("bdl-run ")


def test_mnist_run_scores_fashion_mnist_as_out_of_distribution(run_with, fake_data_root):
    """The protocol's ood=fashion_mnist: metrics.json's AUROC of each score equals the pairwise
    count, and its AUPR torchmetrics' average precision, on scores recomputed from the stored
    samples' softmax on both test sets; the generated Fashion-MNIST (bars in columns, not rows)
    is told apart almost surely."""
    from torchmetrics.functional.classification import binary_average_precision

    from bdl.data.fashion_mnist import load as load_fashion

    metrics, directory = run_with(
        ["dataset=mnist", "dataset.validation=59000", "epochs=3", "burn_in=1", "batch_size=100"]
    )
    posterior = bdl.load_run(directory)
    x_in = posterior.data.x_test
    x_out = load_fashion(root=fake_data_root, validation=0, download=False).x_test
    inside, outside = [], []
    for model, _ in networks_of_samples(posterior):
        with torch.no_grad():
            inside.append(model(x_in).double().softmax(-1))
            outside.append(model(x_out).double().softmax(-1))

    def scores(probs: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        stacked = torch.stack(probs)
        mean = stacked.mean(0)
        entropy = -(mean * mean.log()).nansum(-1)
        expected = -(stacked * stacked.log()).nansum(-1).mean(0)
        return {
            "entropy": entropy,
            "mutual_information": entropy - expected,
            "max_probability": -mean.max(-1).values,
        }

    ins, outs = scores(inside), scores(outside)
    assert metrics["ood"] == "fashion_mnist" and metrics["num_samples"] == 2
    for name in ins:
        # every pair of one in- and one out-of-distribution point, a thousand rows at a time
        wins = sum(
            ((o[:, None] > ins[name]).double() + 0.5 * (o[:, None] == ins[name]).double()).sum()
            for o in outs[name].split(1000)
        )
        pairwise = wins.item() / (len(ins[name]) * len(outs[name]))
        assert metrics[f"ood_auroc_{name}"] == pytest.approx(pairwise, abs=1e-4)
        # average precision with the out-of-distribution points positive, by torchmetrics
        # (sklearn's definition) on the recomputed scores
        scored = torch.cat([ins[name], outs[name]])
        labels = torch.cat([torch.zeros(len(ins[name])), torch.ones(len(outs[name]))]).long()
        precision = binary_average_precision(scored, labels).item()
        assert metrics[f"ood_aupr_{name}"] == pytest.approx(precision, abs=1e-4)
    assert metrics["ood_auroc_entropy"] > 0.95
    # bdl-eval scores the stored samples by the same code: the same numbers, to the last bit
    evaluated, _ = evaluate(directory, {"ood": "fashion_mnist", "device": "cpu"})
    scored = {k: v for k, v in metrics.items() if k.startswith("ood")}
    assert {k: evaluated[k] for k in scored} == scored
    # and so does a run's end whose checkpoint kept no scores (an older bdl's): the run's own
    # network, each stored sample put into it (bdl.composition.network.predict_samples)
    experiment = build(posterior.config)
    (stored,) = _stored_detections(experiment, RunDirectory(directory), chains=1)
    assert {"ood": "fashion_mnist", **stored.metrics()} == scored


def test_a_bad_ood_name_is_one_line_naming_the_choices(fake_data_root):
    from bdl.composition.config import ConfigError
    from bdl.runner.experiment import build

    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", [f"dataset.root={fake_data_root}", "ood=fashion", "epochs=2"])
    with pytest.raises(ConfigError) as error:
        build(cfg)
    message = str(error.value)
    assert "\n" not in message and "did you mean fashion_mnist?" in message
    assert "fashion_mnist, mnist, noise" in message


def test_a_missing_ood_set_names_ood_null(fake_data_root, isolated_cache, tmp_path):
    """A root with MNIST but no Fashion-MNIST: the refusal, before training, says how to run
    without the out-of-distribution set."""
    from bdl.data import DataError
    from bdl.runner.experiment import build

    (tmp_path / "MNIST").symlink_to(fake_data_root / "MNIST")
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", [f"dataset.root={tmp_path}", "dataset.download=false"])
    with pytest.raises(DataError, match=r"^ood=fashion_mnist: Fashion-MNIST could not be") as error:
        build(cfg)
    assert str(error.value).endswith("Or run without it: ood=null.")
    assert "\n" not in str(error.value)
