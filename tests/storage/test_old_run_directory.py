"""A run directory written before bdl's modules were grouped by job (commit 1ea9915, checkpoint
format 3) is still bdl's to finish and to read: killed after its fourth epoch, it resumes to the
same samples, metrics and curve as a run of the same config started now, and ``load_run``,
``bdl-eval`` and ``bdl-report`` read it.

``tests/fixtures/run-1ea9915`` was made at that commit, in a folder holding the tiny data set of
``write_fake_uci(Path("data"), "tiny", rows=60, columns=4, splits=1)``, by ``bdl.run.run`` on
the config of `OVERRIDES` (without ``resume=true``), with ``Sampling._checkpoint_due`` raising
at its fourth call, as ``tests/runner/test_resume.py`` kills a run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import command_env, write_fake_uci
from hydra import compose, initialize_config_module
from runner.test_resume import outputs

import bdl
from bdl.runner.run import run

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run-1ea9915"
OVERRIDES = [
    "dataset=boston",
    "dataset.name=tiny",
    "dataset.root=data",  # relative: the tests run it in a folder of their own
    "dataset.download=false",
    "protocol.mlp.hidden=[8]",
    "sampler=sghmc_uci",
    "epochs=6",
    "burn_in=2",
    "thin=1",
    "batch_size=12",
    "checkpoint_every=1",
    "seed=3",
]


def config(*overrides: str):
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return compose("config", [*OVERRIDES, "figures=false", *overrides])


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """The old run resumed to its end, and the same config run whole, in one folder."""
    folder = tmp_path_factory.mktemp("old")
    write_fake_uci(folder / "data", "tiny", rows=60, columns=4, splits=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        old = shutil.copytree(FIXTURE, folder / "old")
        run(config("resume=true"), old)
        run(config(), folder / "whole")
    return folder, old


def test_a_run_killed_before_the_regrouping_resumes_to_the_same_run(finished):
    folder, old = finished
    assert (FIXTURE / "checkpoint.safetensors").exists()  # it was killed, not finished
    assert outputs(old) == outputs(folder / "whole")


def test_the_old_run_is_read_by_load_run_and_the_reports(finished, tmp_path):
    folder, old = finished
    env = command_env(folder / "data", tmp_path / "cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        posterior = bdl.load_run(old)
        whole = bdl.load_run(folder / "whole")
        assert len(list(posterior.samples())) == len(list(whole.samples())) == 4
        x = posterior.data.x_test
        assert torch.equal(posterior.predict(x), whole.predict(x))
    for module, args in [
        ("bdl.analysis.evaluate", [str(old)]),
        ("bdl.analysis.report", [str(old), "--out", str(tmp_path / "report")]),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", module, *args],
            env=env,
            cwd=folder,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
