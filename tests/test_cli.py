"""`bdl-run` and `bdl-report` as a user runs them: from the command line, in a subprocess. The
command lines whose answer is a message or a small run share one ``bdl-run`` interpreter
(`answers`), held to a process of their own by a test."""

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
from conftest import bdl_run_in_one_process, command_env
from omegaconf import OmegaConf
from safetensors.torch import load_file
from storage.test_outputs import wandb_records

from bdl.composition.config import RunConfig
from bdl.storage.store import load_samples

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
    samples = list(load_samples(run_dir / "samples"))
    assert [entry["epoch"] for _, entry in samples] == [1, 2]
    assert samples[0][0]["layers.0.weight"].shape == (100, 784)


def test_same_seed_same_samples_and_reference_metrics(env, tiny_mnist, tmp_path):
    first, second = tiny_mnist, tmp_path / "b"
    result = bdl(
        *TINY_MNIST, f"hydra.run.dir={second}", f"reference={first}", env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    pairs = zip(load_samples(first / "samples"), load_samples(second / "samples"), strict=True)
    for (a, _), (b, _) in pairs:
        assert all((a[k] == b[k]).all() for k in a)
    metrics = json.loads((second / "metrics.json").read_text())
    assert metrics["agreement"] == 1.0 and metrics["total_variation"] < 1e-6


def test_regression_run_reports_rmse_and_log_likelihood(answers):
    folder, result = answers["regression run", ""]
    assert result["code"] == 0, result["err"]
    metrics = json.loads((folder / "run" / "metrics.json").read_text())
    assert {"test_rmse", "test_ll"} <= metrics.keys()
    predictive = load_file(folder / "run" / "predictive.safetensors")
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


BAD_INPUT = [
    ("sampler=nope", "sampler"),
    ("epochs=-1", "epochs"),
    ("batch_size=0", "batch_size"),
    ("seed=abc", "seed"),
    ("device=tpu", "device"),
    ("epoch=3", "epoch"),
    ("sampler.lr=-0.1", "sampler.lr"),
]
CONFIG_MISTAKES = [
    (["+unknown_key=1"], "unknown_key is not a key of the config"),
    (
        ["+sampler.foo=1"],
        "sampler.foo is not an option of SGHMC (options: lr, alpha, grad_var, burn_in_alpha)",
    ),
    (["+model.foo=1"], "model.foo is not an option of MLP"),
    (["+schedule.foo=1"], "schedule.foo is not an option of Constant"),
    (["+likelihood.foo=1"], "likelihood.foo is not a key of likelihood"),
    (["sampler.lr=[1,2]"], "sampler.lr=[1, 2] must be a finite number"),
    (["sampler.lr=fast"], "sampler.lr=fast must be a finite number"),
    (["temperature=inf"], "temperature=inf is out of range"),
    (["temperature=nan"], "temperature=nan is out of range"),
    (["prior.scale=inf"], "prior.scale=inf must be a finite number"),
    (["likelihood.noise_std=inf"], "likelihood.noise_std must be positive and finite"),
    (["likelihood.noise_std=nan"], "likelihood.noise_std must be positive and finite"),
    (["sampler=hmc", "sampler.lr=inf"], "sampler.lr=inf must be a finite number"),
    (["sampler=hmc", "sampler.lr=nan"], "sampler.lr=nan must be a finite number"),
]
MISTAKES = [
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
]
SWEEP_SAMPLERS = ["sgld", "sghmc", "hmc", "bbb"]


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


@pytest.fixture(scope="module")
def answers(env, no_data, tmp_path_factory) -> dict[tuple[str, str], tuple[Path, dict]]:
    """The command lines of the tests below, each in a folder of its own, run by one ``bdl-run``
    interpreter (`bdl_run_in_one_process`; `test_one_process_answers_as_its_own_process_does`
    holds it to a process per command): (test, case) -> (the folder, what the command showed)."""
    cases: dict[tuple[str, str], tuple[list[str], dict[str, str]]] = {}
    for override, _ in BAD_INPUT:
        cases["bad input", override] = [*TINY_BOSTON[1:], override, "hydra.run.dir=run"], env
    for overrides, _ in CONFIG_MISTAKES:
        argv = [*overrides, "dataset.download=false", "hydra.run.dir=run"]
        cases["config mistake", " ".join(overrides)] = argv, no_data
    for arguments, _ in MISTAKES:
        cases["mistake", " ".join(arguments)] = arguments, no_data
    cases["help", ""] = ["--help"], no_data
    cases["device", ""] = ["device=cuda"], no_data
    cases["regression run", ""] = [*TINY_BOSTON, "hydra.run.dir=run"], env
    cases["bad split", ""] = [*TINY_BOSTON, "dataset.split=99", "hydra.run.dir=run"], env
    empty = tmp_path_factory.mktemp("no-mnist")
    fresh_cache = {**env, "BDL_CACHE_DIR": str(empty), "XDG_CACHE_HOME": str(empty)}
    missing = [*TINY_MNIST, f"dataset.root={empty}", "dataset.download=false", "hydra.run.dir=run"]
    cases["missing data", ""] = missing, fresh_cache
    diverging = [*TINY_BOSTON, "epochs=30", "sampler.lr=1e6", "burn_in=0", "hydra.run.dir=run"]
    cases["diverged", ""] = diverging, env
    sweep = ["-m", f"sampler={','.join(SWEEP_SAMPLERS)}", "dataset=boston", "--cfg", "job"]
    cases["sweep", ""] = sweep, no_data
    folders = {key: tmp_path_factory.mktemp("case") for key in cases}
    results = bdl_run_in_one_process(
        [
            {"argv": argv, "cwd": str(folders[key]), "env": case_env}
            for key, (argv, case_env) in cases.items()
        ]
    )
    return {key: (folders[key], result) for key, result in zip(cases, results, strict=True)}


@pytest.mark.parametrize("key", [("mistake", "epoch=20"), ("bad input", "sampler.lr=-0.1")])
def test_one_process_answers_as_its_own_process_does(answers, env, no_data, tmp_path, key):
    """What the shared interpreter shows for a command is what a process of its own shows: a
    mistake found before Hydra starts, and one found by the sampler inside the job."""
    folder, shared = answers[key]
    if key[0] == "mistake":
        alone = bdl(key[1], env=no_data, cwd=tmp_path)
    else:
        alone = bdl(*TINY_BOSTON[1:], key[1], "hydra.run.dir=run", env=env, cwd=tmp_path)
    assert (alone.returncode, alone.stdout, alone.stderr) == (
        shared["code"], shared["out"], shared["err"]
    )  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("override, named", BAD_INPUT)
def test_bad_input_fails_with_one_message_and_no_traceback(answers, override, named):
    _, result = answers["bad input", override]
    assert result["code"] != 0
    assert named in result["err"]
    assert "Traceback" not in result["err"] + result["out"]


@pytest.mark.parametrize("overrides, named", CONFIG_MISTAKES)
def test_config_mistakes_end_in_one_line_before_any_data_is_read(answers, overrides, named):
    _, result = answers["config mistake", " ".join(overrides)]
    lines = result["err"].strip().splitlines()
    assert result["code"] != 0
    assert len(lines) == 1 and lines[0].startswith(f"bdl-run: error: {named}"), result["err"]


@pytest.mark.parametrize("arguments, line", MISTAKES)
def test_a_mistake_is_one_line_naming_the_fix_and_leaves_no_directory(answers, arguments, line):
    """Each answered by bdl's one line (no Hydra search path, no `+key` advice, no usage text),
    before Hydra creates the run's directory."""
    folder, result = answers["mistake", " ".join(arguments)]
    assert result["code"] != 0
    lines = result["err"].splitlines()
    assert result["out"] == "" and len(lines) == 1, result["err"]
    assert lines[0].startswith(f"bdl-run: error: {line}"), lines[0]
    assert "+" not in lines[0]
    assert list(folder.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="device=cuda is refused only without CUDA")
def test_an_error_after_hydra_started_removes_the_directory_it_made(answers):
    folder, result = answers["device", ""]
    assert result["err"].splitlines() == [
        "bdl-run: error: device=cuda but CUDA is not available here: use device=auto or cpu"
    ]
    assert list(folder.iterdir()) == []


def test_help_names_the_groups_their_options_and_the_keys(answers):
    _, result = answers["help", ""]
    assert result["code"] == 0 and result["out"].startswith("bdl-run")
    conf = files("bdl.conf")
    for group in ["dataset", "experiment", "model", "prior", "protocol", "sampler", "schedule"]:
        options = sorted(p.name[: -len(".yaml")] for p in (conf / group).iterdir())
        assert f"{group}: {', '.join(options)}" in result["out"]
    # no internal file (a shared piece, an _underscored one) is listed as an option
    assert "uci_loader" not in result["out"] and not re.search(r"[:,] _", result["out"])
    keys = result["out"].split("== Top-level keys ==")[1].split("==")[0]
    groups = {"dataset", "model", "prior", "sampler", "schedule"}
    assert [f.name for f in fields(RunConfig) if f.name not in groups and f.name not in keys] == []


def test_a_sweep_prints_each_jobs_config_with_its_samplers_own_step_size(answers):
    _, result = answers["sweep", ""]
    assert result["code"] == 0, result["err"]
    jobs = result["out"].split("# job ")[1:]
    assert len(jobs) == len(SWEEP_SAMPLERS)
    for sampler, job in zip(SWEEP_SAMPLERS, jobs):
        cfg = OmegaConf.create(job.split("\n", 1)[1])
        own = OmegaConf.load(str(files("bdl.conf") / "sampler" / f"{sampler}.yaml"))
        assert cfg.sampler == own and cfg.epochs == 10000  # the UCI protocol's


def test_bad_split_and_missing_data_name_the_fix(answers):
    _, result = answers["bad split", ""]
    assert result["code"] != 0 and "dataset.split" in result["err"]
    assert "Traceback" not in result["err"]
    _, result = answers["missing data", ""]
    assert result["code"] != 0 and "Traceback" not in result["err"]
    assert "train-images-idx3-ubyte" in result["err"] and "BDL_DATA_DIR" in result["err"]


def test_diverged_chain_stops_cleanly_and_keeps_what_was_written(answers):
    # burn_in=0: no burn-in in which the step could back off (bdl.runner.stability)
    folder, result = answers["diverged", ""]
    assert result["code"] != 0
    assert "diverged" in result["err"] and "sampler.lr" in result["err"]
    assert "Traceback" not in result["err"]
    # the epochs before the divergence, all finite: the diverged one is not written
    lines = (folder / "run" / "curve.csv").read_text().splitlines()
    assert lines[0].split(",")[1] == "potential"
    potentials = [float(line.split(",")[1]) for line in lines[1:]]
    assert len(potentials) < 30 and all(math.isfinite(u) for u in potentials)


@pytest.mark.parametrize(
    "argv, key", [([], "hydra.run.dir"), (["-m", "seed=0,1"], "hydra.sweep.dir")]
)
def test_an_output_folder_that_cannot_be_made_is_one_line_naming_the_option(
    tmp_path, monkeypatch, argv, key
):
    """A file where the run's (or sweep's) folder would go, before Hydra meets it: the option
    that moves the folder is named."""
    from bdl import cli

    monkeypatch.chdir(tmp_path)
    default = "multirun" if argv else "outputs"
    (tmp_path / default).write_text("a file")
    with pytest.raises(SystemExit) as stop:
        cli._check_output_root(argv)
    assert str(stop.value) == (
        f"bdl-run: error: cannot create the run directory {tmp_path / default}: "
        f"{tmp_path / default} is a file; choose another {key}"
    )
    with pytest.raises(SystemExit) as stop:
        cli._check_output_root([*argv, f"{key}={tmp_path / default}/run"])
    assert str(stop.value) == (
        f"bdl-run: error: cannot create the run directory {tmp_path / default}/run: "
        f"{tmp_path / default} is a file; choose another {key}"
    )
    if os.geteuid() != 0:  # root writes into a read-only folder
        (tmp_path / "ro").mkdir(mode=0o500)
        with pytest.raises(SystemExit) as stop:
            cli._check_output_root([*argv, f"{key}={tmp_path}/ro/run"])
        assert str(stop.value) == (
            f"bdl-run: error: cannot create the run directory {tmp_path}/ro/run: "
            f"{tmp_path}/ro is read-only; choose a writable {key}"
        )
    cli._check_output_root([*argv, f"{key}={tmp_path}/new/run"])  # a folder to make: no error


def test_under_torchrun_a_sweep_is_refused_and_other_ranks_log_nothing(monkeypatch):
    from bdl import cli

    for flag in ("-m", "--multirun"):  # Hydra's two spellings of a sweep
        with pytest.raises(SystemExit) as stop:
            cli._torchrun_overrides([flag, "seed=0,1"])
        assert str(stop.value) == (
            "bdl-run: error: a sweep (-m) under torchrun: run the sweep's jobs with a launcher "
            "(hydra/launcher=slurm), each job its own torchrun"
        )
    monkeypatch.setenv("RANK", "0")
    assert cli._torchrun_overrides(["seed=1"]) == ([], None)
    monkeypatch.setenv("RANK", "1")
    silent = ["hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
    assert cli._torchrun_overrides(["hydra.run.dir=run"]) == (silent, None)
    overrides, scratch = cli._torchrun_overrides(["seed=1"])
    try:
        assert overrides == [*silent, f"hydra.run.dir={scratch}"]
        assert Path(scratch).is_dir() and Path(scratch).name.startswith("bdl-rank-")
    finally:
        os.rmdir(scratch)


def test_a_sweeps_failed_jobs_are_listed_in_job_order_with_their_cause(tmp_path):
    from bdl import cli

    jobs = {
        "0": {"status": "completed"},
        "10": None,  # unreadable
        "2": {"status": "failed", "error": "sampler.lr=-1 must be positive"},
        "1": {"status": "diverged", "diverged_epoch": 7},
        "3": {"status": "interrupted", "epoch": 4},
    }
    for job, metrics in jobs.items():
        (tmp_path / job).mkdir()
        text = "{broken" if metrics is None else json.dumps(metrics)
        (tmp_path / job / "metrics.json").write_text(text)
    assert cli.sweep_failures(tmp_path) == [
        (tmp_path / "1", "the chain diverged in epoch 7"),
        (tmp_path / "2", "sampler.lr=-1 must be positive"),
        (tmp_path / "3", "interrupted (epoch 4)"),
        (tmp_path / "10", f"{tmp_path / '10' / 'metrics.json'} is unreadable"),
    ]
