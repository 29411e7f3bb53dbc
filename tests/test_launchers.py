"""Sweeps through Hydra's launchers: jobs in parallel processes (joblib), through submitit, and
the SLURM config with its requeue-and-resume."""

from __future__ import annotations

import importlib.util
import json
import signal
from pathlib import Path

import pytest
from conftest import command_env
from test_cli import bdl

from bdl import cli
from bdl.runner.interrupts import Signals

pytest.importorskip(
    "hydra_plugins.hydra_joblib_launcher", reason="needs the launchers: pip install '.[launchers]'"
)
pytest.importorskip(
    "hydra_plugins.hydra_submitit_launcher",
    reason="needs the launchers: pip install '.[launchers]'",
)

TINY_MNIST = ["dataset.validation=59000", "epochs=3", "burn_in=1", "batch_size=100"]
TINY_BOSTON = ["dataset=boston", "epochs=4", "burn_in=1", "thin=1"]


@pytest.fixture
def env(tmp_path, fake_data_root) -> dict[str, str]:
    """The generated data and a fresh, empty data cache: the sweep's jobs fill it at once."""
    cache = tmp_path / "cache"
    return command_env(fake_data_root, cache)


def statuses(sweep: Path) -> dict[str, str]:
    return {
        path.parent.name: json.loads(path.read_text())["status"]
        for path in sweep.glob("*/metrics.json")
    }


def test_a_joblib_sweep_runs_jobs_in_parallel_and_lists_its_failures(env, tmp_path):
    """Four jobs two at a time, in worker processes, into one empty cache; the two with a
    negative step size fail there, and the launching process lists them and exits 1."""
    sweep = tmp_path / "sweep"
    result = bdl(
        "-m",
        *TINY_MNIST,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "sampler=sgld,sghmc",
        "sampler.lr=1,-1",  # at 0.1, SGLD's three epochs tie the trivial predictor: unsound
        f"hydra.sweep.dir={sweep}",
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    assert "2 job(s) of the sweep failed" in result.stderr
    assert result.stderr.count("sampler.lr") >= 2  # each failure names its key
    assert sorted(statuses(sweep).values()) == ["completed", "completed", "failed", "failed"]
    for job, status in statuses(sweep).items():  # each failure names its job's directory
        assert (str(sweep / job) in result.stderr) == (status == "failed"), job
    jobs = {path.parents[1].name for path in sweep.glob("*/.hydra/config.yaml")}
    assert len(jobs) == 4  # one directory each: the jobs did not collide

    report = bdl(str(sweep), env=env, cwd=tmp_path, module="bdl.analysis.report")
    assert report.returncode == 0, report.stderr
    rows = [line for line in report.stdout.splitlines() if line.startswith("| sg")]
    assert len(rows) == 2 and "test_accuracy" in report.stdout  # the completed jobs
    assert "Not in the table (2 runs)" in report.stdout  # the failed ones, under it


def test_submitit_local_runs_a_job(env, tmp_path):
    sweep = tmp_path / "sweep"
    result = bdl(
        "-m",
        *TINY_BOSTON,
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=5",
        f"hydra.sweep.dir={sweep}",
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert list(statuses(sweep).values()) == ["completed"]
    assert list(sweep.glob(".submitit/*/*_log.out"))  # run by submitit, not in this process


@pytest.mark.slow
def test_a_slurm_sweep_runs_its_jobs_and_bdl_report_tables_them(env, tmp_path, monkeypatch):
    """``bdl-run -m hydra/launcher=slurm ...`` from the command line, submitit's local executor
    standing in for SLURM (no cluster here): bdl's launcher is built by Hydra, each job runs in
    its own process and completes, and ``bdl-report`` makes the sweep's table."""
    import submitit

    real = submitit.AutoExecutor
    clusters = []

    def local(folder, cluster=None, **kwargs):
        clusters.append(cluster)
        return real(folder, cluster="local", **kwargs)

    monkeypatch.setattr(submitit, "AutoExecutor", local)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    argv = ["-m", "hydra/launcher=slurm", "sampler=sghmc", "dataset=yacht", "seed=0,1"]
    argv += ["epochs=40", "burn_in=20", "thin=1", f"hydra.sweep.dir={sweep}"]
    monkeypatch.setattr("sys.argv", ["bdl-run", *argv])
    cli.main()
    assert clusters == ["slurm"]  # what SLURM would have been asked
    assert sorted(statuses(sweep).values()) == ["completed", "completed"]
    assert len(list(sweep.glob(".submitit/*/*_0_log.out"))) == 2  # one process per job

    report = bdl(str(sweep), env=env, cwd=tmp_path, module="bdl.analysis.report")
    assert report.returncode == 0, report.stderr
    table = [line for line in report.stdout.splitlines() if line.startswith("|")]
    assert table[2].split("|")[1].strip() == "2"  # n_runs: both jobs in one row


@pytest.mark.parametrize("name", ["slurm", "joblib", "submitit_local"])
def test_hydra_builds_bdl_s_launchers(name):
    """What Hydra does with ``hydra/launcher=NAME`` before any job: build the launcher its config
    names, which it does only from the ``hydra_plugins`` package."""
    from hydra import compose, initialize_config_module
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    with initialize_config_module("bdl.conf", version_base="1.3"):
        cfg = compose("config", [f"hydra/launcher={name}"], return_hydra_config=True)
    cli.register_launchers()  # as bdl-run does before Hydra starts
    launcher = Plugins.instance()._instantiate(cfg.hydra.launcher)
    assert isinstance(launcher, Launcher)
    assert type(launcher).__module__ + "." + type(launcher).__name__ == cfg.hydra.launcher._target_


def test_the_slurm_config_composes(env, tmp_path):
    result = bdl(
        "hydra/launcher=slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.gpus_per_node=1",
        "--cfg",
        "hydra",
        "--package",
        "hydra.launcher",
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    for line in [
        "_target_: hydra_plugins.bdl_launcher.SlurmLauncher",
        "partition: gpu",
        "gpus_per_node: 1",
        "cpus_per_task: 4",
        "timeout_min: 240",
        "max_num_timeout: 20",
        "requeue: true",
    ]:
        assert line in result.stdout


def test_a_requeued_slurm_job_resumes_from_its_checkpoint(tmp_path):
    """What submitit resubmits at a time limit or preemption: the same job with resume=true,
    which continues from a checkpoint or, before the first one, starts again (test_resume)."""
    from hydra import compose, initialize_config_module
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from hydra_plugins.bdl_launcher import SlurmLauncher

    with initialize_config_module("bdl.conf", version_base="1.3"):
        cfg = compose("config", ["hydra/launcher=slurm"], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path)
    launcher = SlurmLauncher(**{k: v for k, v in cfg.hydra.launcher.items() if k != "_target_"})
    overrides = ["sampler=sghmc", "seed=1"]

    def resubmitted() -> list[str]:
        return launcher.checkpoint(overrides, "hydra.sweep.dir", 0, "0", {}).args[0]

    HydraConfig.instance().set_config(cfg)  # as in the job, where submitit calls checkpoint
    try:
        assert resubmitted() == [*overrides, "resume=true"]
        overrides = ["resume=false", "seed=1"]
        assert resubmitted() == ["seed=1", "resume=true"]
    finally:
        HydraConfig.instance().cfg = None


def test_sigusr2_is_handed_on_to_submitit_once_the_run_has_stopped():
    received = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: received.append(signum))
    try:
        with Signals() as signals:
            signal.raise_signal(signal.SIGUSR2)
            assert signals.caught == signal.SIGUSR2 and received == []  # bdl stops first
        assert received == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_without_submitit_sigusr2_is_left_alone():
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
    with Signals():
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL


@pytest.mark.parametrize("name", ["joblib", "submitit_local", "submitit_slurm", "slurm"])
def test_a_launcher_not_installed_names_the_extra(monkeypatch, name):
    monkeypatch.setattr(importlib.util, "find_spec", lambda module: None)
    with pytest.raises(SystemExit) as stop:
        cli._check_launcher(["-m", f"hydra/launcher={name}", "seed=0,1"])
    package = "hydra-joblib-launcher" if name == "joblib" else "hydra-submitit-launcher"
    assert str(stop.value) == (
        f"bdl-run: error: hydra/launcher={name} is not installed: install bdl's launchers extra, "
        f"pip install 'bdl[launchers]' (or pip install {package})"
    )
