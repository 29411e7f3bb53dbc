"""`bdl-run` and `bdl-report` as a user runs them: in a subprocess, from the command line."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from dataclasses import fields
from importlib.resources import files
from pathlib import Path

import pytest
import torch
from conftest import command_env
from omegaconf import OmegaConf
from safetensors.torch import load_file
from storage.test_outputs import wandb_records

from bdl.composition.config import RunConfig

TINY_MNIST = ["dataset.validation=59000", "epochs=3", "burn_in=1", "batch_size=100"]
# sampler.lr: the UCI step size (sampler=sghmc_uci's)
TINY_BOSTON = [
    "dataset=boston",
    "batch_size=32",
    "epochs=4",
    "burn_in=1",
    "thin=1",
    "sampler.lr=3e-4",
]


@pytest.fixture(scope="module")
def env(tmp_path_factory, fake_data_root) -> dict[str, str]:
    """The user's environment with every cache in a temporary folder and the generated data
    (real formats, real MNIST and Boston sizes) as BDL_DATA_DIR."""
    cache = tmp_path_factory.mktemp("cache")
    return command_env(fake_data_root, cache)


def bdl(*args: str, env: dict[str, str], cwd: Path, module: str = "bdl.cli"):
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def tiny_mnist(env, tmp_path_factory) -> Path:
    """One run of TINY_MNIST from the command line, which the tests below read."""
    cwd = tmp_path_factory.mktemp("tiny-mnist")
    run_dir = cwd / "run"
    result = bdl(*TINY_MNIST, f"hydra.run.dir={run_dir}", env=env, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return run_dir


def test_tiny_run_writes_every_output(tiny_mnist):
    run_dir = tiny_mnist
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for key in [
        "test_accuracy",
        "test_nll",
        "test_ece",
        "test_brier",
        "num_samples",
        "epochs",
        "grad_evals",
        "wall_time_s",
    ]:
        assert key in metrics
    assert metrics["num_samples"] == 2 and metrics["grad_evals"] == 30
    assert metrics["test_accuracy"] > 0.5
    assert "epochs: 3" in (run_dir / ".hydra" / "config.yaml").read_text().splitlines()
    assert len((run_dir / "curve.csv").read_text().splitlines()) == 1 + 3
    predictive = load_file(run_dir / "predictive.safetensors")
    assert predictive["predictive"].shape == (10000, 10)
    manifest = json.loads((run_dir / "samples" / "manifest.json").read_text())
    assert [entry["epoch"] for entry in manifest] == [1, 2]
    sample = load_file(run_dir / "samples" / manifest[0]["file"])
    assert sample["layers.0.weight"].shape == (100, 784)


def test_same_seed_same_samples_and_reference_metrics(env, tiny_mnist, tmp_path):
    first, second = tiny_mnist, tmp_path / "b"
    result = bdl(
        *TINY_MNIST, f"hydra.run.dir={second}", f"reference={first}", env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    for name in ["sample_00000.safetensors", "sample_00001.safetensors"]:
        a, b = load_file(first / "samples" / name), load_file(second / "samples" / name)
        assert all((a[k] == b[k]).all() for k in a)
    metrics = json.loads((second / "metrics.json").read_text())
    assert metrics["agreement"] == 1.0 and metrics["total_variation"] < 1e-6


def test_regression_run_reports_rmse_and_log_likelihood(env, tmp_path):
    run_dir = tmp_path / "run"
    result = bdl(*TINY_BOSTON, f"hydra.run.dir={run_dir}", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert {"test_rmse", "test_ll"} <= metrics.keys()
    predictive = load_file(run_dir / "predictive.safetensors")
    assert predictive["predictive"].shape == (51, 2)


def test_multirun_then_report(env, tmp_path):
    sweep = tmp_path / "sweep"
    # at TINY_BOSTON's step, SGD's four epochs leave it tied with the trivial predictor: unsound
    tiny = [arg for arg in TINY_BOSTON if not arg.startswith("sampler.lr=")]
    result = bdl(
        "-m", *tiny, "sampler.lr=3e-3", "sampler=sgd,sghmc", f"hydra.sweep.dir={sweep}",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = bdl(str(sweep), env=env, cwd=tmp_path, module="bdl.analysis.report")
    assert report.returncode == 0, report.stderr
    lines = [line for line in report.stdout.splitlines() if line.startswith("|")]
    assert len(lines) == 4  # header, rule, sgd, sghmc
    assert "sgd" in report.stdout and "sghmc" in report.stdout and "test_rmse" in report.stdout


def test_wandb_offline_needs_no_account_or_network_and_groups_a_sweep(env, tmp_path):
    sweep = tmp_path / "sweep"
    offline = {**env, "WANDB_API_KEY": "", "WANDB_SILENT": "true"}
    result = bdl(
        "-m", *TINY_BOSTON, "seed=4", "wandb.mode=offline", f"hydra.sweep.dir={sweep}",
        env=offline, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (job,) = [path for path in sweep.iterdir() if path.is_dir()]
    (labels,) = [r.run for r in wandb_records(job) if r.WhichOneof("record_type") == "run"]
    assert (labels.run_group, labels.display_name) == (str(sweep), job.name)
    assert list(labels.tags) == ["boston", "sghmc"]


def covered(*case):
    """A case whose route to the one line a quicker case of its test takes (the same check on
    another key or value), and whose message tests/composition/test_config.py asserts in-process
    (test_config_mistakes_name_their_key, test_out_of_range_values_name_their_key), or, for
    ``epoch=3``, test_a_mistake_is_one_line_naming_the_fix_and_leaves_no_directory's
    ``epoch=20``: a process start each, run with the slow tests."""
    return pytest.param(*case, marks=pytest.mark.slow)


@pytest.mark.parametrize(
    "override, named",
    [
        ("sampler=nope", "sampler"),
        ("epochs=-1", "epochs"),
        covered("batch_size=0", "batch_size"),
        ("seed=abc", "seed"),
        ("device=tpu", "device"),
        covered("epoch=3", "epoch"),
        ("sampler.lr=-0.1", "sampler.lr"),
    ],
)
def test_bad_input_fails_with_one_message_and_no_traceback(env, tmp_path, override, named):
    result = bdl(
        *TINY_BOSTON[1:], override, f"hydra.run.dir={tmp_path / 'run'}", env=env, cwd=tmp_path
    )
    assert result.returncode != 0
    assert named in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.fixture(scope="module")
def no_data(tmp_path_factory) -> dict[str, str]:
    """An environment with no data anywhere: a run that got as far as reading data would fail
    with a data error, not with the config's."""
    empty = tmp_path_factory.mktemp("empty")
    return {
        **os.environ,
        "BDL_DATA_DIR": str(empty),
        "BDL_CACHE_DIR": str(empty),
        "XDG_CACHE_HOME": str(empty),
        "HYDRA_FULL_ERROR": "0",
    }


@pytest.mark.parametrize(
    "overrides, named",
    [
        (["+unknown_key=1"], "unknown_key is not a key of the config"),
        (
            ["+sampler.foo=1"],
            "sampler.foo is not an option of SGHMC (options: lr, alpha, grad_var, burn_in_alpha)",
        ),
        covered(["+model.foo=1"], "model.foo is not an option of MLP"),
        covered(["+schedule.foo=1"], "schedule.foo is not an option of Constant"),
        (["+likelihood.foo=1"], "likelihood.foo is not a key of likelihood"),
        covered(["sampler.lr=[1,2]"], "sampler.lr=[1, 2] must be a finite number"),
        (["sampler.lr=fast"], "sampler.lr=fast must be a finite number"),
        covered(["temperature=inf"], "temperature=inf is out of range"),
        (["temperature=nan"], "temperature=nan is out of range"),
        covered(["prior.scale=inf"], "prior.scale=inf must be a finite number"),
        covered(["likelihood.noise_std=inf"], "likelihood.noise_std must be positive and finite"),
        (["likelihood.noise_std=nan"], "likelihood.noise_std must be positive and finite"),
        covered(["sampler=hmc", "sampler.lr=inf"], "sampler.lr=inf must be a finite number"),
        (["sampler=hmc", "sampler.lr=nan"], "sampler.lr=nan must be a finite number"),
    ],
)
def test_config_mistakes_end_in_one_line_before_any_data_is_read(
    no_data, tmp_path, overrides, named
):
    result = bdl(
        *overrides,
        "dataset.download=false",
        f"hydra.run.dir={tmp_path / 'run'}",
        env=no_data,
        cwd=tmp_path,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0
    assert len(lines) == 1 and lines[0].startswith(f"bdl-run: error: {named}"), result.stderr


@pytest.mark.parametrize(
    "arguments, line",
    [
        (
            ["sampler=SGHMC"],
            "sampler=SGHMC is not an option of the sampler group: did you mean sampler=sghmc?",
        ),
        (["epoch=20"], "epoch is not a key of the config: did you mean epochs=20?"),
        (["lr=0.01"], "lr is not a key of the config: did you mean sampler.lr=0.01?"),
        (
            ["--epochs", "20"],
            "--epochs is not a flag of bdl-run (overrides are key=value): did you mean epochs=20?",
        ),
        (
            ["-m", "sampler=sgld,SGHMC"],
            "sampler=SGHMC is not an option of the sampler group: did you mean sampler=sghmc?",
        ),
        (["sampler.lrr=0.1"], "sampler.lrr is not a key of sampler: did you mean sampler.lr=0.1?"),
        (["+epoch=20"], "epoch is not a key of the config (top level): did you mean epochs?"),
        (["burn_in=900"], "burn_in=900 leaves no epoch to sample in (epochs=800)"),
    ],
)
def test_a_mistake_is_one_line_naming_the_fix_and_leaves_no_directory(
    no_data, tmp_path, arguments, line
):
    """Each answered by bdl's one line (no Hydra search path, no `+key` advice, no usage text),
    before Hydra creates the run's directory."""
    result = bdl(*arguments, env=no_data, cwd=tmp_path)
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert result.stdout == "" and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"bdl-run: error: {line}"), lines[0]
    assert "+" not in lines[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="device=cuda is refused only without CUDA")
def test_an_error_after_hydra_started_removes_the_directory_it_made(no_data, tmp_path):
    result = bdl("device=cuda", env=no_data, cwd=tmp_path)
    assert result.stderr.splitlines() == [
        "bdl-run: error: device=cuda but CUDA is not available here: use device=auto or cpu"
    ]
    assert list(tmp_path.iterdir()) == []


def test_help_names_the_groups_their_options_and_the_keys(no_data, tmp_path):
    result = bdl("--help", env=no_data, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("bdl-run")
    conf = files("bdl.conf")
    for group in ["dataset", "experiment", "model", "prior", "protocol", "sampler", "schedule"]:
        options = sorted(p.name[: -len(".yaml")] for p in (conf / group).iterdir())
        assert f"{group}: {', '.join(options)}" in result.stdout
    # no internal file (a shared piece, an _underscored one) is listed as an option
    assert "uci_loader" not in result.stdout and not re.search(r"[:,] _", result.stdout)
    keys = result.stdout.split("== Top-level keys ==")[1].split("==")[0]
    groups = {"dataset", "model", "prior", "sampler", "schedule"}
    assert [f.name for f in fields(RunConfig) if f.name not in groups and f.name not in keys] == []


def test_a_sweep_prints_each_jobs_config_with_its_samplers_own_step_size(no_data, tmp_path):
    samplers = ["sgld", "sghmc", "hmc", "bbb"]
    result = bdl(
        "-m",
        f"sampler={','.join(samplers)}",
        "dataset=boston",
        "--cfg",
        "job",
        env=no_data,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    jobs = result.stdout.split("# job ")[1:]
    assert len(jobs) == len(samplers)
    for sampler, job in zip(samplers, jobs):
        cfg = OmegaConf.create(job.split("\n", 1)[1])
        own = OmegaConf.load(str(files("bdl.conf") / "sampler" / f"{sampler}.yaml"))
        assert cfg.sampler == own and cfg.epochs == 10000  # the UCI protocol's


def test_bad_split_and_missing_data_name_the_fix(env, tmp_path):
    result = bdl(
        *TINY_BOSTON, "dataset.split=99", f"hydra.run.dir={tmp_path / 'a'}", env=env, cwd=tmp_path
    )
    assert result.returncode != 0 and "dataset.split" in result.stderr
    assert "Traceback" not in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    fresh_cache = {**env, "BDL_CACHE_DIR": str(empty), "XDG_CACHE_HOME": str(empty)}
    result = bdl(
        *TINY_MNIST,
        f"dataset.root={empty}",
        "dataset.download=false",
        f"hydra.run.dir={tmp_path / 'b'}",
        env=fresh_cache,
        cwd=tmp_path,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "train-images-idx3-ubyte" in result.stderr and "BDL_DATA_DIR" in result.stderr


def test_diverged_chain_stops_cleanly_and_keeps_what_was_written(env, tmp_path):
    run_dir = tmp_path / "run"
    result = bdl(
        *TINY_BOSTON,
        "epochs=30",
        "sampler.lr=1e6",
        "burn_in=0",  # no burn-in in which the step could back off (bdl.runner.stability)
        f"hydra.run.dir={run_dir}",
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "diverged" in result.stderr and "sampler.lr" in result.stderr
    assert "Traceback" not in result.stderr
    # the epochs before the divergence, all finite: the diverged one is not written
    lines = (run_dir / "curve.csv").read_text().splitlines()
    assert lines[0].split(",")[1] == "potential"
    potentials = [float(line.split(",")[1]) for line in lines[1:]]
    assert len(potentials) < 30 and all(math.isfinite(u) for u in potentials)
