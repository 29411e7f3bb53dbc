"""Resume as a user meets it: ``bdl-run`` killed with SIGKILL, stopped with SIGTERM or SIGINT, and
continued with ``resume=true``; a sweep that goes on past a failing job.

The fast tests use a tiny regression set the test writes; the slow ones kill real ``bdl-run``
processes at random moments on MNIST (SGHMC, 20 kills), a UCI set (HMC), Bayes by Backprop and a
Gibbs-sampled hyperprior (5 kills each) and require the final samples, metrics and curve to be
bitwise those of an uninterrupted run.
"""

from __future__ import annotations

import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import write_fake_uci

from runner.test_resume import outputs, write_tiny_uci


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    cache = tmp_path_factory.mktemp("cache")
    return {**os.environ, "BDL_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> list[str]:
    root = write_tiny_uci(tmp_path_factory.mktemp("data"), n=200)
    return [
        "dataset=boston",
        "dataset.name=tiny",
        f"dataset.root={root}",
        "dataset.download=false",
        "sampler.lr=3e-4",  # the UCI step size (sampler=sghmc_uci's)
        "epochs=40",
        "burn_in=5",
        "thin=1",
        "batch_size=8",
    ]


@pytest.fixture(scope="module")
def whole(env, tiny, tmp_path_factory) -> Path:
    """``tiny`` run without interruption: what every interrupted run of it must end as."""
    directory = tmp_path_factory.mktemp("whole") / "run"
    result = finish([*tiny, f"hydra.run.dir={directory}"], env)
    assert result.returncode == 0, result.stderr
    return directory


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bdl.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bdl.cli", *args], env=env, capture_output=True, text=True
    )


def wait_for_progress(directory: Path, rows: int, process: subprocess.Popen) -> None:
    """Until ``curve.csv`` has ``rows`` epochs (a run well under way)."""
    curve = directory / "curve.csv"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if curve.exists() and len(curve.read_text().splitlines()) > rows:
            return
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_with_one_line_and_the_resume_command(env, tiny, whole, tmp_path, signum):
    args = [*tiny, f"hydra.run.dir={tmp_path / 'run'}"]
    process = start(args, env)
    wait_for_progress(tmp_path / "run", 10, process)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signum
    assert "Traceback" not in stderr
    (line,) = [line for line in stderr.splitlines() if line.startswith("bdl-run:")]
    assert f"{signum.name}: stopped in epoch" in line
    command = line.split("Resume with: ")[1]
    resumed = finish(shlex.split(command)[1:], env)
    assert resumed.returncode == 0, resumed.stderr
    assert outputs(tmp_path / "run") == outputs(whole)


def test_a_sweep_finishes_its_other_jobs_and_then_fails(env, tiny, tmp_path):
    result = finish(
        [
            "-m",
            *tiny,
            "epochs=8",
            "sampler=sgld",
            "sampler.lr=1e-1,1e5,1e-1",
            "burn_in=0",  # no burn-in in which the step could back off (bdl.runner.stability)
            "seed=0",
            f"hydra.sweep.dir={tmp_path}",
        ],
        env,
    )
    assert result.returncode == 1
    assert "1 job(s) of the sweep failed" in result.stderr and "diverged" in result.stderr
    statuses = [
        next(tmp_path.glob(f"{job}_*")).joinpath("metrics.json").read_text() for job in range(3)
    ]
    assert ['"completed"' in s for s in statuses] == [True, False, True]
    assert '"diverged"' in statuses[1]


def kill_and_resume(args: list[str], env: dict[str, str], directory: Path, kills: int) -> None:
    """Run ``args`` into ``directory``, SIGKILLing it ``kills`` times at random moments and
    resuming each time with resume=true (which starts again while there is no checkpoint yet, as
    a requeued job does), until it completes."""
    rng = random.Random(0)
    command = [*args, f"hydra.run.dir={directory}", "resume=true"]
    for attempt in range(kills + 1):
        process = start(command, env)
        if attempt < kills:
            time.sleep(rng.uniform(4.0, 9.0))  # past start-up (about 4 s), into the epochs
            process.kill()
        process.communicate(timeout=900)
        if process.returncode == 0:
            return
    assert finish(command, env).returncode == 0


SLOW_CASES = {
    "sghmc mnist": (["sampler=sghmc", "dataset=mnist", "epochs=30", "burn_in=5"], 20),
    "hmc uci": (["sampler=hmc", "dataset=boston", "sampler.lr=3e-4", "epochs=30", "burn_in=10"], 5),
    "bbb mnist": (["sampler=bbb", "dataset=mnist", "epochs=6", "burn_in=0"], 5),
    "gamma hyperprior": (
        ["sampler=sghmc", "dataset=mnist", "prior=gamma_hierarchical", "epochs=15", "burn_in=5"],
        5,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES)
def test_sigkill_at_random_moments_resumes_bitwise(env, tmp_path, case):
    if not os.environ.get("BDL_DATA_DIR"):
        pytest.skip("needs real data: set BDL_DATA_DIR")
    args, kills = SLOW_CASES[case]
    args = [*args, "checkpoint_every=1"]
    whole = finish([*args, f"hydra.run.dir={tmp_path / 'whole'}"], env)
    assert whole.returncode == 0, whole.stderr
    kill_and_resume(args, env, tmp_path / "killed", kills)
    assert outputs(tmp_path / "killed") == outputs(tmp_path / "whole")


@pytest.mark.slow
def test_sigkill_around_back_offs_after_burn_in_resumes_bitwise(env, tmp_path):
    """SGLD at its MNIST step after a burn-in of 3 epochs on a sharply peaked regression (the
    climbs of tests/runner/test_stability.py: back-offs after burn-in at epochs 29, 49 and 125 when
    this was written), a checkpoint at every epoch, killed 5 times at random moments: each resumed
    run returns to the same points, drops the same draws and ends as the run never stopped."""
    root = tmp_path / "data"
    write_fake_uci(root, "sharp", rows=200, columns=5, splits=1, noise=0.01, more_test_rows=180)
    args = ["dataset=yacht", "dataset.name=sharp", f"dataset.root={root}"]
    args += ["dataset.download=false", "figures=false", "sampler=sgld", "epochs=300"]
    args += ["burn_in=3", "thin=1", "checkpoint_every=1"]
    whole = finish([*args, f"hydra.run.dir={tmp_path / 'whole'}"], env)
    assert whole.returncode == 0, whole.stderr
    assert "limits; back to epoch" in whole.stdout + whole.stderr
    kill_and_resume(args, env, tmp_path / "killed", 5)
    assert outputs(tmp_path / "killed") == outputs(tmp_path / "whole")


@pytest.mark.slow
def test_sigkill_before_the_first_checkpoint_resumes_bitwise(env, tiny, whole, tmp_path):
    """The default checkpoint interval (a minute) is longer than this whole run: a kill anywhere
    in it is a kill before its first checkpoint."""
    args = [*tiny, f"hydra.run.dir={tmp_path / 'run'}"]
    process = start(args, env)
    wait_for_progress(tmp_path / "run", 10, process)  # past burn-in: samples taken
    process.kill()
    process.communicate(timeout=120)
    assert not (tmp_path / "run" / "checkpoint.safetensors").exists()
    # nor a sample on disk: the draws wait in memory for the first checkpoint, so that nothing
    # holds the folder (a run without resume=true would replace it) and resume=true starts over
    assert not [path for path in (tmp_path / "run" / "samples").rglob("*") if path.is_file()]
    resumed = finish([*args, "resume=true"], env)
    assert resumed.returncode == 0, resumed.stderr
    assert "has no checkpoint: starting the run from the beginning" in resumed.stdout
    assert outputs(tmp_path / "run") == outputs(whole)


@pytest.mark.parametrize("sweep", [False, True])
def test_a_run_directory_that_cannot_be_made_is_one_line(env, tiny, tmp_path, sweep):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    result = finish([*(["-m"] if sweep else []), *tiny, f"{key}={blocker / 'run'}"], env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"bdl-run: error: cannot create the run directory {blocker / 'run'}: {blocker} is a "
        f"file; choose another {key}"
    )
