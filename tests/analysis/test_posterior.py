"""A saved posterior reloaded: the same predictions and metrics as the run, chains, arviz, and
bdl-eval's one-line errors. Runs are tiny and made here, on generated data."""

from __future__ import annotations

import csv
import hashlib
import importlib.metadata
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from scipy.special import logsumexp
from scipy.stats import norm

import bdl
from bdl.analysis.evaluate import main as bdl_eval
from bdl.analysis.posterior import RunError, load_run
from bdl.composition.network import load_data
from bdl.data.shift import rotate
from bdl.runner.run import run

pytestmark = pytest.mark.usefixtures("isolated_cache")


def write_uci(root: Path, name: str, features: int, rows: int = 60, seed: int = 0) -> None:
    """A regression set in the layout of the standard UCI splits: y linear in x plus noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features))
    y = 3.0 + x @ rng.normal(size=features) + 0.1 * rng.normal(size=rows)
    folder = root / "uci" / name
    folder.mkdir(parents=True)
    np.savetxt(folder / "data.txt", np.column_stack([x, y]))
    np.savetxt(folder / "index_features.txt", np.arange(features), fmt="%d")
    np.savetxt(folder / "index_target.txt", [features], fmt="%d")
    np.savetxt(folder / "n_splits.txt", [1], fmt="%d")
    np.savetxt(folder / "index_train_0.txt", np.arange(48), fmt="%d")
    np.savetxt(folder / "index_test_0.txt", np.arange(48, rows), fmt="%d")


def make_run(directory: Path, *overrides: str) -> Path:
    """Compose bdl-run's config, save it where Hydra does (unresolved) and run it."""
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", ["device=cpu", "log_every=100", "figures=false", *overrides])
    (directory / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, directory / ".hydra" / "config.yaml")
    run(cfg, directory)
    return directory


@pytest.fixture
def uci_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    write_uci(root, "tiny", features=3)
    write_uci(root, "wide", features=5, seed=1)
    write_uci(root, "other", features=3, seed=2)
    return root


def tiny_uci(root: Path) -> list[str]:
    """The overrides that read the generated regression set ``tiny`` under ``root``."""
    return ["dataset=boston", "dataset.name=tiny", f"dataset.root={root}", "dataset.download=false"]


@pytest.fixture
def uci_run(tmp_path: Path, uci_root: Path) -> Path:
    return make_run(
        tmp_path / "uci-run",
        *tiny_uci(uci_root),
        "sampler.lr=3e-4",  # the UCI step size (sampler=sghmc_uci's)
        "epochs=5",
        "burn_in=2",
        "thin=1",
        "batch_size=16",
    )


@pytest.fixture
def cifar_run(tmp_path: Path, cifar_root: Path) -> Path:
    return make_run(
        tmp_path / "cifar-run",
        "dataset=cifar10",
        "model=linear",
        f"dataset.root={cifar_root}",
        "dataset.download=false",
        "epochs=4",
        "burn_in=1",
        "batch_size=5",
    )


def test_bdl_eval_reproduces_the_regression_runs_metrics(uci_run: Path):
    assert bdl_eval([str(uci_run)]) == 0
    written = json.loads((uci_run / "eval" / "tiny-test" / "metrics.json").read_text())
    metrics = json.loads((uci_run / "metrics.json").read_text())
    assert metrics["num_samples"] == 3
    for key in ("test_rmse", "test_ll", "num_samples", "converged", "reasons", "notes"):
        assert written[key] == metrics[key]
    # three draws: too few for any diagnostic, the one reason, which load_run exposes too
    assert metrics["converged"] is False and metrics["reasons"][0].startswith("3 draws a chain")
    assert load_run(uci_run).verdict == {k: metrics[k] for k in ("converged", "reasons", "notes")}


def test_bdl_eval_reproduces_the_classification_runs_metrics(cifar_run: Path):
    out = cifar_run.parent / "elsewhere"
    assert bdl_eval([str(cifar_run), f"out={out}"]) == 0
    written = json.loads((out / "metrics.json").read_text())
    metrics = json.loads((cifar_run / "metrics.json").read_text())
    for key in ("test_accuracy", "test_nll", "test_ece", "test_brier", "num_samples"):
        assert written[key] == metrics[key]
    assert written["evaluated_on"] == "cifar10-test"


def shard_draws(store: Path) -> list[tuple[dict[str, torch.Tensor], dict]]:
    """The draws of a sample store read by hand, with their metadata: each shard its manifest
    lists, a safetensors file of each tensor stacked over its draws."""
    draws = []
    for shard in json.loads((store / "manifest.json").read_text())["shards"]:
        with safe_open(store / shard["file"], "pt") as file:
            metadata = json.loads(file.metadata()["draws"])
        stacked = load_file(store / shard["file"])
        draws += [({n: t[i] for n, t in stacked.items()}, m) for i, m in enumerate(metadata)]
    return draws


def test_predict_is_the_runs_model_average(cifar_run: Path):
    posterior = bdl.load_run(cifar_run)
    saved = load_file(cifar_run / "predictive.safetensors")["predictive"]
    assert torch.equal(posterior.predict(posterior.data.x_test), saved)
    # By hand: the mean over the sample files of softmax(W x + b).
    x = posterior.data.x_test.flatten(1)
    by_hand = torch.stack(
        [
            torch.softmax(x @ s["linear.weight"].T + s["linear.bias"], -1).double()
            for s, _ in shard_draws(cifar_run / "samples")
        ]
    ).mean(0)
    torch.testing.assert_close(posterior.predict(posterior.data.x_test), by_hand)


def test_config_metrics_and_samples(uci_run: Path):
    posterior = load_run(uci_run)
    assert posterior.config.dataset.name == "tiny" and posterior.config.epochs == 5
    assert posterior.metrics == json.loads((uci_run / "metrics.json").read_text())
    samples = list(posterior.samples())
    by_hand = shard_draws(uci_run / "samples")
    assert [s.info["epoch"] for s in samples] == [e["epoch"] for _, e in by_hand] == [2, 3, 4]
    assert [(s.chain, s.draw) for s in samples] == [(0, 0), (0, 1), (0, 2)]
    first = by_hand[0][0]
    assert all(torch.equal(samples[0].params[k], first[k]) for k in first)
    assert "likelihood.log_precision" in first


def test_chains_and_inferencedata(uci_run: Path):
    """The multi-chain layout samples/chain_<k>/: chain 1 here is chain 0 with its samples
    shifted, so chain 1's draws differ from chain 0's by exactly that shift."""
    samples = uci_run / "samples"
    shutil.copytree(samples, uci_run / "chain_0")
    second = uci_run / "chain_1"
    shutil.copytree(samples, second)
    shutil.rmtree(samples)
    samples.mkdir()
    shutil.move(uci_run / "chain_0", samples / "chain_0")
    manifest = json.loads((second / "manifest.json").read_text())
    for shard in manifest["shards"]:
        path = second / shard["file"]
        with safe_open(path, "pt") as file:
            metadata = file.metadata()
        save_file({k: v + 1.0 for k, v in load_file(path).items()}, path, metadata=metadata)
        shard["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (second / "manifest.json").write_text(json.dumps(manifest))
    shutil.move(second, samples / "chain_1")

    posterior = load_run(uci_run)
    assert posterior.num_chains == 2 and len(posterior) == 6
    idata = posterior.to_inferencedata()
    weight = idata.posterior["layers.0.weight"]
    assert weight.dims[:2] == ("chain", "draw") and weight.shape == (2, 3, 50, 3)
    np.testing.assert_allclose(weight.values[1], weight.values[0] + 1.0, rtol=1e-6)
    first = shard_draws(samples / "chain_0")[0][0]["layers.0.weight"]
    np.testing.assert_array_equal(weight.values[0, 0], first.double().numpy())
    assert idata.sample_stats["epoch"].values.tolist() == [[2, 3, 4], [2, 3, 4]]
    only_bias = posterior.to_inferencedata(var_names=["*.bias"])
    assert set(only_bias.posterior.data_vars) == {"layers.0.bias", "layers.2.bias"}
    # The model average over both chains is the average of the chains' mixtures.
    x = posterior.data.x_test
    both, zero, one = (posterior.predict(x, chain=c) for c in (None, 0, 1))
    torch.testing.assert_close(both[:, 0], (zero[:, 0] + one[:, 0]) / 2)


def _waic_by_hand(pointwise: np.ndarray) -> float:
    """elpd_waic (Watanabe 2010; Vehtari et al. 2017, eqs. 3-5): the log pointwise predictive
    density less the variance of each point's log-likelihood over the draws (arviz divides the
    sum of squares by the number of draws, not one less)."""
    draws = pointwise.reshape(-1, pointwise.shape[-1])
    lppd = (logsumexp(draws, axis=0) - math.log(draws.shape[0])).sum()
    return float(lppd - draws.var(axis=0).sum())


def _check_arviz_groups(
    idata, pointwise: np.ndarray, observed: np.ndarray, run: Path, bias: str
) -> None:
    """The log-likelihood, observed data and sample stats against values computed here from the
    run's files; az.loo, az.waic, the plots and a netcdf round trip on it."""
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    # to the float32 rounding of the network bdl evaluates (the hand one is in float64)
    np.testing.assert_allclose(idata.log_likelihood["y"].values, pointwise, rtol=1e-4)
    np.testing.assert_allclose(idata.observed_data["y"].values, observed, rtol=1e-6)
    assert idata.log_likelihood["y"].dims == ("chain", "draw", "test_point")
    assert idata.posterior_predictive["y"].shape == pointwise.shape
    waic = az.waic(idata, var_name="y")
    assert waic["elpd_waic"] == pytest.approx(_waic_by_hand(pointwise), rel=1e-5)
    loo = az.loo(idata, pointwise=True, var_name="y")
    assert math.isfinite(loo["elpd_loo"]) and loo["pareto_k"].shape == (pointwise.shape[-1],)
    # PSIS-LOO's elpd is at most the in-sample lppd (each point's own draws favour it)
    lppd = (logsumexp(pointwise.reshape(-1, pointwise.shape[-1]), axis=0)).sum()
    assert loo["elpd_loo"] <= lppd - math.log(pointwise[..., 0].size) * pointwise.shape[-1]
    # the sample stats: the epoch's row of curve.csv that each draw ended
    with (run / "curve.csv").open() as file:
        rows = csv.DictReader(file)
        curve = {int(row["epoch"]): row for row in rows if row.get("chain", "0") == "0"}
    epochs = idata.sample_stats["epoch"].values[0]
    assert idata.sample_stats["potential"].values[0].tolist() == [
        float(curve[e + 1]["potential"]) for e in epochs
    ]
    lr = OmegaConf.load(run / ".hydra" / "config.yaml").sampler.lr
    np.testing.assert_allclose(idata.sample_stats["step_size"].values, lr)
    assert not idata.sample_stats["diverging"].values.any()
    az.plot_ppc(idata, num_pp_samples=2)
    az.plot_trace(idata, var_names=[bias])
    matplotlib.pyplot.close("all")
    idata.to_netcdf(run / "idata.nc")
    back = az.from_netcdf(run / "idata.nc")
    for group in ("posterior", "log_likelihood", "posterior_predictive", "observed_data"):
        assert back[group].identical(idata[group]), group
    np.testing.assert_array_equal(back.sample_stats["diverging"], idata.sample_stats["diverging"])


def test_inferencedata_of_a_regression_run_with_loo_and_waic(tmp_path: Path, uci_root: Path):
    run_dir = make_run(
        tmp_path / "regression",
        *tiny_uci(uci_root),
        "sampler.lr=3e-4",
        "epochs=12",
        "burn_in=2",
        "thin=1",
        "batch_size=16",
        "chains=2",
    )
    posterior = load_run(run_dir)
    idata = posterior.to_inferencedata(train=True)
    # by hand: log N(y | f(x) std + mean, std^2 / tau) in original units, f the ReLU network
    raw = np.loadtxt(uci_root / "uci" / "tiny" / "data.txt")
    x_train, y_test = raw[:48, :3], raw[48:, 3]
    x = (raw[48:, :3] - x_train.mean(0)) / x_train.std(0)
    mean, std = raw[:48, 3].mean(), raw[:48, 3].std()
    assert (mean, std) == pytest.approx((posterior.data.target_mean, posterior.data.target_std))
    pointwise, means, sigmas = np.empty((2, 10, 12)), np.empty((2, 10, 12)), np.empty((2, 10, 1))
    for k in range(2):
        store = run_dir / "samples" / f"chain_{k}"
        for d, (draw, _) in enumerate(shard_draws(store)):
            w = {n: t.double().numpy() for n, t in draw.items()}
            hidden = np.maximum(x @ w["layers.0.weight"].T + w["layers.0.bias"], 0)
            f = (hidden @ w["layers.2.weight"].T + w["layers.2.bias"])[:, 0]
            sigma = std / np.exp(0.5 * w["likelihood.log_precision"])
            pointwise[k, d] = norm.logpdf(y_test, f * std + mean, sigma)
            means[k, d], sigmas[k, d] = f * std + mean, sigma
    _check_arviz_groups(idata, pointwise, y_test, run_dir, "layers.2.bias")
    # the training set on request, beside the test set
    assert idata.log_likelihood["y_train"].shape == (2, 10, 48)
    np.testing.assert_allclose(idata.observed_data["y_train"], raw[:48, 3], rtol=1e-6)
    assert idata.posterior["layers.0.weight"].dims[2:] == ("layers.0.out", "layers.0.in")
    assert idata.posterior["layers.0.bias"].dims[2:] == ("layers.0.out",)
    # the replicated targets: the network's mean plus the noise, so that standardised by the
    # hand-computed mean and noise they are N(0, 1) (240 values: the std's error is about 0.05)
    z = (idata.posterior_predictive["y"].values - means) / sigmas
    assert abs(z.mean()) < 0.25 and 0.8 < z.std() < 1.2
    again = posterior.to_inferencedata(seed=1).posterior_predictive["y"].values
    assert not np.allclose(again, idata.posterior_predictive["y"].values)


def test_inferencedata_of_a_classification_run_with_loo_and_waic(tmp_path: Path, cifar_root):
    run_dir = make_run(
        tmp_path / "classification",
        "dataset=cifar10",
        "model=linear",
        f"dataset.root={cifar_root}",
        "dataset.download=false",
        "epochs=10",
        "burn_in=2",
        "batch_size=5",
    )
    posterior = load_run(run_dir)
    idata = posterior.to_inferencedata()
    x, y = posterior.data.x_test.flatten(1).double().numpy(), posterior.data.y_test.numpy()
    draws = shard_draws(run_dir / "samples")
    pointwise = np.empty((1, len(draws), len(y)))
    for d, (draw, _) in enumerate(draws):
        w = {n: t.double().numpy() for n, t in draw.items()}
        logits = x @ w["linear.weight"].T + w["linear.bias"]
        pointwise[0, d] = logits[np.arange(len(y)), y] - logsumexp(logits, axis=1)
    _check_arviz_groups(idata, pointwise, y, run_dir, "linear.bias")
    labels = idata.posterior_predictive["y"].values
    assert labels.dtype.kind == "i" and labels.min() >= 0 and labels.max() < 10
    expected = {"epoch", "potential", "step_size", "diverging", "n_divergent"}
    assert set(idata.sample_stats) == expected
    assert not idata.sample_stats["n_divergent"].values.any()  # no Metropolis test, none


def test_report_compare_ranks_a_sweeps_runs_by_psis_loo(tmp_path: Path, uci_root: Path, capsys):
    import arviz as az

    from bdl.analysis.report import main as bdl_report

    sweep = tmp_path / "sweep"
    # SGLD at SGHMC's step barely moves in 10 epochs: no better than the trivial predictor
    for job, sampler, lr in [("0_sampler=sgld", "sgld", 2e-2), ("1_sampler=sghmc", "sghmc", 3e-4)]:
        make_run(
            sweep / job,
            *tiny_uci(uci_root),
            f"sampler={sampler}",
            f"sampler.lr={lr}",
            "epochs=10",
            "burn_in=2",
            "thin=1",
            "batch_size=16",
        )
    capsys.readouterr()
    assert bdl_report(["--compare", str(sweep)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    table = [dict(zip(header, (c.strip() for c in r.strip("|").split("|")))) for r in rows[2:]]
    assert sorted(Path(row["run_dir"]).name for row in table) == [
        "0_sampler=sgld",
        "1_sampler=sghmc",
    ]
    elpds = [float(row["elpd_loo"]) for row in table]
    assert elpds == sorted(elpds, reverse=True)
    for row in table:
        run_dir = Path(row["run_dir"])
        # PSIS-LOO over the training points, the log-likelihood by hand-checked code above
        loo = az.loo(load_run(run_dir).to_inferencedata(train=True), var_name="y_train")
        assert float(row["elpd_loo"]) == pytest.approx(loo["elpd_loo"], rel=1e-3)
        assert float(row["se"]) == pytest.approx(loo["se"], rel=1e-3)
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert float(row["test_rmse"]) == pytest.approx(metrics["test_rmse"], rel=1e-3)
        assert 0 <= int(row["pareto_k_warnings"]) <= 48


def test_bad_input_one_message_each(uci_run: Path, cifar_run: Path, uci_root: Path, capsys):
    def error(*args: str) -> str:
        assert bdl_eval(list(args)) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("bdl-eval: error: ")
        return lines[0]

    not_a_run = uci_run.parent / "not-a-run"
    not_a_run.mkdir()
    assert "is not a bdl run directory" in error(str(not_a_run))
    shape = error(str(uci_run), "dataset.name=wide")
    assert "inputs of shape (3,)" in shape and "(5,)" in shape
    task = error(str(cifar_run), "dataset=boston", "dataset.name=tiny", f"dataset.root={uci_root}")
    assert "classification into 10 classes" in task and "regression" in task
    assert "has no validation split" in error(str(uci_run), "split=validation")
    assert "shift.rotate applies to images" in error(str(uci_run), "shift.rotate=30")
    assert "is not an option" in error(str(uci_run), "epochs=3")
    missing = error(str(uci_run), f"dataset.root={not_a_run}")  # the loader's message, not Hydra's
    assert "missing file" in missing and "BDL_DATA_DIR" in missing


def test_overrides_in_hydras_grammar_and_a_misspelt_key(uci_run: Path, capsys):
    out = uci_run / "quoted"
    assert bdl_eval([str(uci_run), "dataset.name='other'", f"out='{out}'"]) == 0
    assert json.loads((out / "metrics.json").read_text())["evaluated_on"] == "other-test"
    capsys.readouterr()
    for argument, line in [
        ("dataset.nam=other", "dataset.nam is not a key of the run's dataset: did you mean "),
        ("splt=test", "splt=test is not an option of bdl-eval: did you mean split=test?"),
        ("dataset=bostn", "dataset=bostn is not an option of the dataset group: did you mean "),
    ]:
        assert bdl_eval([str(uci_run), argument]) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"bdl-eval: error: {line}"), lines
    assert lines[0].endswith("dataset=boston?")


def test_a_sweep_directory_is_evaluated_into_one_table(tmp_path: Path, uci_root: Path, capsys):
    sweep = tmp_path / "sweep"
    for job, seed in [("0_seed=0", 0), ("1_seed=1", 1)]:
        make_run(
            sweep / job,
            *tiny_uci(uci_root),
            "sampler.lr=3e-4",
            "epochs=3",
            "burn_in=1",
            "thin=1",
            "batch_size=16",
            f"seed={seed}",
        )
    capsys.readouterr()
    assert bdl_eval([str(sweep)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert len(rows) == 4  # header, rule, a row per run
    for job, row in zip(["0_seed=0", "1_seed=1"], rows[2:]):
        cells = dict(zip(header, (cell.strip() for cell in row.strip("|").split("|"))))
        saved = json.loads((sweep / job / "metrics.json").read_text())
        assert cells["run"] == job
        assert float(cells["test_rmse"]) == pytest.approx(saved["test_rmse"], rel=1e-3)
        written = json.loads((sweep / job / "eval" / "tiny-test" / "metrics.json").read_text())
        assert written["test_rmse"] == saved["test_rmse"]


def test_data_file_and_rotation(cifar_run: Path):
    posterior = load_run(cifar_run)
    x, y = posterior.data.x_test, posterior.data.y_test
    # Rotating by 90 degrees moves pixels onto the grid: exactly torch.rot90 (counter-clockwise).
    save_file({"x": torch.rot90(x, 1, dims=(-2, -1)).contiguous(), "y": y}, cifar_run / "r.st")
    assert bdl_eval([str(cifar_run), f"data={cifar_run / 'r.st'}", f"out={cifar_run / 'a'}"]) == 0
    assert bdl_eval([str(cifar_run), "shift.rotate=90", f"out={cifar_run / 'b'}"]) == 0
    a = load_file(cifar_run / "a" / "predictive.safetensors")["predictive"]
    b = load_file(cifar_run / "b" / "predictive.safetensors")["predictive"]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(b, load_file(cifar_run / "predictive.safetensors")["predictive"])


def test_regression_targets_in_original_units(uci_run: Path, uci_root: Path):
    """Targets of another dataset (or a file) are compared in original units: the RMSE is that of
    the model average's mean against the raw data file's target column."""
    posterior = load_run(uci_run)
    assert bdl_eval([str(uci_run), "dataset.name=other", f"out={uci_run / 'other'}"]) == 0
    raw = np.loadtxt(uci_root / "uci" / "other" / "data.txt")[48:]
    other = load_data(OmegaConf.create({"dataset": {**posterior.config.dataset, "name": "other"}}))
    mean = posterior.predict(other.x_test)[:, 0].numpy()
    written = json.loads((uci_run / "other" / "metrics.json").read_text())
    assert written["test_rmse"] == pytest.approx(np.sqrt(np.mean((mean - raw[:, 3]) ** 2)))
    # The run's own test points from a file, targets in original units: the run's metrics.
    original = posterior.data.y_test.double() * posterior.data.target_std
    points = {"x": posterior.data.x_test, "y": original + posterior.data.target_mean}
    save_file(points, uci_run / "points.safetensors")
    out = uci_run / "points"
    assert bdl_eval([str(uci_run), f"data={uci_run / 'points.safetensors'}", f"out={out}"]) == 0
    written = json.loads((out / "metrics.json").read_text())
    for key in ("test_rmse", "test_ll"):
        assert written[key] == pytest.approx(posterior.metrics[key], rel=1e-9)


def test_function_moments_of_a_regression_run(uci_run: Path, cifar_run: Path):
    """The mean and standard deviation of f over the samples, from the samples by hand."""
    posterior = load_run(uci_run)
    model, likelihood = posterior.network()
    outputs = []
    for sample in posterior.samples():
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(sample.params[name])
            outputs.append(model(posterior.data.x_test).squeeze(-1).double())
    f = torch.stack(outputs) * posterior.data.target_std + posterior.data.target_mean
    mean, std = posterior.function_moments()
    torch.testing.assert_close(mean, f.mean(0))
    torch.testing.assert_close(std, f.std(0, correction=0))
    with pytest.raises(RunError, match="classification run: no regression function"):
        load_run(cifar_run).function_moments()


def test_function_standard_error_is_the_spread_of_the_chains_means(
    tmp_path: Path, uci_root: Path, uci_run: Path
):
    run_dir = make_run(
        tmp_path / "chains",
        *tiny_uci(uci_root),
        "sampler.lr=3e-4",
        "epochs=4",
        "burn_in=1",
        "thin=1",
        "batch_size=16",
        "chains=3",
    )
    posterior = load_run(run_dir)
    model, _ = posterior.network()
    chain_means = []
    for chain in range(3):
        outputs = []
        for sample in posterior.samples(chain):
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p.copy_(sample.params[name])
                outputs.append(model(posterior.data.x_test).squeeze(-1).double())
        chain_means.append(torch.stack(outputs).mean(0))
    f = torch.stack(chain_means) * posterior.data.target_std + posterior.data.target_mean
    torch.testing.assert_close(posterior.function_standard_error(), f.std(0) / 3**0.5)
    with pytest.raises(RunError, match="one chain.*chains=K"):
        load_run(uci_run).function_standard_error()


def test_not_a_run_from_the_command_line(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "bdl.analysis.evaluate", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=120,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("bdl-eval: error: ") and ".hydra/config.yaml" in result.stderr


def test_a_gibbs_sampled_noise_precision_travels_with_its_samples(tmp_path: Path, uci_root: Path):
    run_dir = make_run(
        tmp_path / "gibbs-run",
        "dataset=boston",
        "dataset.name=tiny",
        f"dataset.root={uci_root}",
        "likelihood.gibbs=true",
        "sampler.lr=3e-4",  # the UCI step size (sampler=sghmc_uci's)
        "epochs=3",
        "burn_in=1",
        "thin=1",
        "batch_size=16",
    )
    posterior = load_run(run_dir)
    precisions = [s.params["likelihood.log_precision"] for s in posterior.samples()]
    assert len(precisions) == 2 and not torch.equal(*precisions)  # resampled between samples
    saved = load_file(run_dir / "predictive.safetensors")["predictive"]
    torch.testing.assert_close(posterior.predict(posterior.data.x_test), saved, rtol=0, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_predict_on_another_device(cifar_run: Path):
    posterior = load_run(cifar_run)
    x = posterior.data.x_test
    torch.testing.assert_close(posterior.predict(x.cuda()), posterior.predict(x, device="cpu"))


def test_a_run_without_samples_is_named(tmp_path: Path):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(RunError, match="holds no posterior samples"):
        load_run(tmp_path)


def test_public_api():
    assert bdl.__version__ == importlib.metadata.version("bdl")
    assert bdl.load_run is load_run
    assert {"SGLD", "SGHMC", "Potential", "priors", "likelihoods"} <= set(bdl.__all__)


def test_mnist_validation_and_rotated_test_set(tmp_path: Path, data_dir: Path):
    """On real MNIST: the held-out images and the rotated test set are scored as by hand."""
    run_dir = make_run(
        tmp_path / "mnist-run",
        f"dataset.root={data_dir}",
        "dataset.validation=55000",
        "epochs=4",
        "burn_in=2",
        "batch_size=100",
    )
    assert bdl_eval([str(run_dir), "split=validation"]) == 0
    assert bdl_eval([str(run_dir), "shift.rotate=60"]) == 0
    posterior = load_run(run_dir)
    for label, x, y in (
        ("mnist-validation", posterior.data.x_validation, posterior.data.y_validation),
        ("mnist-test-rotate60", rotate(posterior.data.x_test, 60), posterior.data.y_test),
    ):
        metrics = json.loads((run_dir / "eval" / label / "metrics.json").read_text())
        probs = load_file(run_dir / "eval" / label / "predictive.safetensors")["predictive"]
        assert torch.equal(probs, posterior.predict(x))
        assert metrics["test_accuracy"] == (probs.argmax(-1) == y).double().mean().item()
    validation = json.loads((run_dir / "eval" / "mnist-validation" / "metrics.json").read_text())
    # the runner scored the same images while sampling
    assert posterior.metrics["val_accuracy"] == validation["test_accuracy"]
    assert posterior.metrics["val_nll"] == pytest.approx(validation["test_nll"], rel=1e-9)
    rotated = json.loads((run_dir / "eval" / "mnist-test-rotate60" / "metrics.json").read_text())
    assert validation["test_accuracy"] > 0.5 and rotated["test_accuracy"] < 0.5


def page_examples(page: str) -> list[str]:
    """The Python blocks of a page of the documentation site."""
    path = Path(__file__).parents[2] / "docs" / page
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def test_docs_load_run_example(uci_run: Path, capsys):
    namespace = {"bdl": bdl, "run_dir": uci_run}
    exec(page_examples("guide/posterior.md")[0], namespace)
    saved = load_file(uci_run / "predictive.safetensors")["predictive"]
    assert torch.equal(namespace["average"], saved)
    assert namespace["first"].draw == 0 and namespace["first"].info["epoch"] == 2
    assert set(namespace["idata"].posterior.data_vars) == {"layers.0.bias", "layers.2.bias"}
    assert "test_rmse" in capsys.readouterr().out


def test_docs_python_example_samples_the_closed_form_posterior(capsys):
    """The "Python use" page's SGHMC example against Bayesian linear regression's posterior mean
    Σ Xᵀy/σ², Σ = (XᵀX/σ² + I)⁻¹ (Bishop 2006, eqs. 3.53-3.54)."""
    namespace: dict = {}
    exec(page_examples("guide/python.md")[0], namespace)
    x, y = namespace["x"].double(), namespace["y"].double()
    design = torch.cat([x, torch.ones_like(x)], 1)
    covariance = torch.linalg.inv(design.T @ design / 0.25 + torch.eye(2, dtype=torch.float64))
    slope = (covariance @ design.T @ y / 0.25)[0].item()
    mean = sum(namespace["slopes"]) / len(namespace["slopes"])
    assert abs(mean - slope) < 0.5 * covariance[0, 0].sqrt().item()
    assert f"{mean:.3f}" in capsys.readouterr().out


def test_predict_runs_the_networks_on_the_device_it_is_given(uci_run, monkeypatch):
    posterior = load_run(uci_run)
    real, devices = type(posterior).average, []

    def recording(self, x, y=None, device=None, chain=None):
        devices.append(device)
        return real(self, x, y, device=device, chain=chain)

    monkeypatch.setattr(type(posterior), "average", recording)
    x = posterior.data.x_test
    torch.testing.assert_close(posterior.predict(x, device="cpu"), posterior.predict(x))
    assert devices == ["cpu", None]  # None: x's own device


def test_corruption_and_out_of_distribution_set(cifar_run: Path, capsys):
    """shift.corrupt predicts on the images corrupt() makes (as a data file of them does);
    ood=noise adds the AUROC of each score, here recounted pair by pair from the samples'
    predictions; mistakes are one line naming the choices."""
    from bdl.data.ood import ood_inputs
    from bdl.data.shift import corrupt

    posterior = load_run(cifar_run)
    x, y = posterior.data.x_test, posterior.data.y_test
    save_file({"x": corrupt(x, "contrast", 5).contiguous(), "y": y}, cifar_run / "c.st")
    assert bdl_eval([str(cifar_run), f"data={cifar_run / 'c.st'}", f"out={cifar_run / 'a'}"]) == 0
    args = ["shift.corrupt=contrast", "shift.severity=5", "ood=noise", f"out={cifar_run / 'b'}"]
    assert bdl_eval([str(cifar_run), *args]) == 0
    a = load_file(cifar_run / "a" / "predictive.safetensors")["predictive"]
    b = load_file(cifar_run / "b" / "predictive.safetensors")["predictive"]
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    metrics = json.loads((cifar_run / "b" / "metrics.json").read_text())
    assert metrics["evaluated_on"] == "cifar10-test-contrast5-ood-noise"

    noise = ood_inputs("noise", posterior.data, posterior.config.dataset)
    inside = torch.stack([p for _, p in posterior.predictions(corrupt(x, "contrast", 5))])
    outside = torch.stack([p for _, p in posterior.predictions(noise)])

    def entropy(p: torch.Tensor) -> torch.Tensor:
        return torch.special.entr(p).sum(-1)  # -p log p, 0 where p = 0

    for name, score in [
        ("entropy", lambda p: entropy(p.double().mean(0))),
        ("mutual_information", lambda p: entropy(p.double().mean(0)) - entropy(p.double()).mean(0)),
        ("max_probability", lambda p: -p.double().mean(0).max(-1).values),
    ]:
        s_in, s_out = score(inside), score(outside)
        diff = s_out[:, None] - s_in[None, :]
        pairwise = ((diff > 1e-9).double() + 0.5 * (diff.abs() <= 1e-9).double()).mean()
        assert metrics[f"ood_auroc_{name}"] == pytest.approx(pairwise.item()), name

    capsys.readouterr()
    for argument, line in [
        ("shift.corrupt=gaussian", "did you mean gaussian_noise? (the choices: gaussian_noise, "),
        ("ood=fashion", "did you mean fashion_mnist? (the choices: fashion_mnist, mnist, noise"),
        ("shift.severity=2", "shift.severity grades a corruption: give shift.corrupt=NAME"),
        ("ood=mnist", "ood=mnist has inputs of shape (1, 28, 28), but cifar10's are (3, 32, 32)"),
    ]:
        assert bdl_eval([str(cifar_run), argument]) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and line in lines[0], lines


def test_severity_all_prints_the_metrics_against_severity(cifar_run: Path, capsys):
    """One row per severity 1-5, each the metrics.json bdl-eval wrote for that severity."""
    capsys.readouterr()
    assert bdl_eval([str(cifar_run), "shift.corrupt=gaussian_noise", "shift.severity=all"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert header[:2] == ["run", "severity"] and len(rows) == 2 + 5
    for severity, row in zip(range(1, 6), rows[2:], strict=True):
        cells = dict(zip(header, (cell.strip() for cell in row.strip("|").split("|")), strict=True))
        written = cifar_run / "eval" / f"cifar10-test-gaussian_noise{severity}" / "metrics.json"
        metrics = json.loads(written.read_text())
        assert int(cells["severity"]) == severity
        assert float(cells["test_nll"]) == pytest.approx(metrics["test_nll"], rel=1e-3)
    assert bdl_eval([str(cifar_run), "shift.severity=all"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "bdl-eval: error: shift.severity=all grades a corruption: give shift.corrupt=NAME with it"
    ]


def _hand_made_run(directory: Path, draws_per_chain: list[int], config: str = "seed: 0\n") -> Path:
    """A run directory written by hand: its config and one sample store per chain (``samples/``
    itself for one chain), each sample one tensor ``w`` and its epoch."""
    from bdl.storage.store import SampleStore

    (directory / ".hydra").mkdir(parents=True)
    (directory / ".hydra" / "config.yaml").write_text(config)
    for k, draws in enumerate(draws_per_chain):
        store = directory / "samples"
        store = store if len(draws_per_chain) == 1 else store / f"chain_{k}"
        samples = SampleStore(store)
        for draw in range(draws):
            samples.add({"w": torch.full((2,), float(draw))}, epoch=draw)
    return directory


def test_what_is_not_a_loadable_run_is_one_line_naming_the_fix(tmp_path: Path):
    def message(directory: Path) -> str:
        with pytest.raises(RunError) as error:
            load_run(directory)
        return str(error.value).replace(str(directory), "D")

    assert message(tmp_path) == (
        "D is not a bdl run directory (it has no .hydra/config.yaml): pass the directory bdl-run "
        "wrote, e.g. outputs/<dataset>/<sampler>/<date>"
    )
    empty = _hand_made_run(tmp_path / "empty", [])
    assert message(empty) == (
        "D holds no posterior samples (D/samples/manifest.json is missing): the run was an "
        "optimiser's or stopped before burn-in ended; re-run it"
    )
    gap = _hand_made_run(tmp_path / "gap", [1, 1, 1])
    shutil.rmtree(gap / "samples" / "chain_1")
    assert message(gap) == (
        "D/samples holds the chains [0, 2], not 0, 1, …: a chain's directory is missing; restore "
        "it or re-run"
    )
    broken = _hand_made_run(tmp_path / "broken", [1], config="seed: [0\n")
    text = message(broken)
    assert text.startswith("D/.hydra/config.yaml is not a bdl-run config (")
    assert text.endswith("); restore the file bdl-run wrote") and "\n" not in text
    metrics = _hand_made_run(tmp_path / "metrics", [1])
    (metrics / "metrics.json").write_text("{not json")
    text = message(metrics)
    assert text.startswith("D/metrics.json is not readable JSON (") and text.endswith("); re-run")


def test_a_question_the_run_cannot_answer_names_what_it_has(tmp_path: Path):
    one = load_run(_hand_made_run(tmp_path / "one", [2]))
    with pytest.raises(ValueError) as error:
        list(one.samples(1))
    assert str(error.value) == "chain=1: this run has chains 0..0"
    with pytest.raises(RunError) as error:
        one.function_standard_error()
    assert str(error.value) == (
        f"{tmp_path / 'one'} has one chain: a standard error from the chains' spread needs two "
        "or more (run with chains=K)"
    )
    with pytest.raises(ValueError) as error:
        one.to_inferencedata(["layers.*"], log_likelihood=False)
    assert str(error.value) == "var_names=['layers.*'] matches no parameter"
    uneven = load_run(_hand_made_run(tmp_path / "uneven", [1, 2]))
    with pytest.raises(RunError) as error:
        uneven.to_inferencedata(log_likelihood=False)
    assert str(error.value) == (
        f"{tmp_path / 'uneven'}: the chains hold [1, 2] samples; InferenceData needs the same "
        "number of draws in every chain"
    )
