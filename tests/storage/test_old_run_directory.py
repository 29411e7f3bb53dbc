"""A run directory written before bdl's modules were grouped by job (commit 1ea9915, checkpoint
format 3) is still bdl's to finish and to read: killed after its fourth epoch, it resumes to the
same samples, metrics and curve as a run of the same config started now, and ``load_run``,
``bdl-eval`` and ``bdl-report`` read it.

The same, not bitwise: the fixture's first four epochs were computed on another machine, whose
kernels round otherwise (AVX-512 against AVX2 or the generic ones: ``ATEN_CPU_CAPABILITY``).
Resumed here, the run agrees with a run made here to `RTOL` relative (measured: 3e-6 at most,
on ``rise_max``, with ``ATEN_CPU_CAPABILITY=default`` on an AVX-512 Xeon), where a resume that
lost or redid an epoch draws other noise, and moves the samples by the noise's scale. Resuming
bitwise is promised within one machine, and tested there (``tests/runner/test_resume.py``).

``tests/fixtures/run-1ea9915`` was made at that commit, in a folder holding the tiny data set of
``write_fake_uci(Path("data"), "tiny", rows=60, columns=4, splits=1)``, by ``bdl.run.run`` on
the config of `OVERRIDES` (without ``resume=true``), with ``Sampling._checkpoint_due`` raising
at its fourth call, as ``tests/runner/test_resume.py`` kills a run."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import command_env, write_fake_uci
from hydra import compose, initialize_config_module

import bdl
from bdl.runner.run import run
from bdl.storage.store import load_samples

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
#: How far another CPU's rounding may move a value over six epochs (measured: 3e-6), far below
#: what a wrong resume moves (an epoch lost or redone draws other noise).
RTOL = 1e-4


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
    assert_same_run(old, folder / "whole")


NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def assert_close(a, b, where: str) -> None:
    """``a`` equals ``b``, numbers (and the numbers in text) within `RTOL`."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_close(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            assert_close(u, v, f"{where}[{i}]")
    elif isinstance(a, str) and NUMBER.search(a) and NUMBER.sub("#", a) == NUMBER.sub("#", b):
        assert_close(
            [float(n) for n in NUMBER.findall(a)], [float(n) for n in NUMBER.findall(b)], where
        )
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-12), f"{where}: {a} against {b}"
    else:
        assert a == b, f"{where}: {a!r} against {b!r}"


def assert_same_run(run: Path, other: Path) -> None:
    """The metrics (less wall time), the curve (less its wall-time column) and the samples of
    ``run`` and ``other`` agree to `RTOL`."""
    metrics = [json.loads((d / "metrics.json").read_text()) for d in (run, other)]
    for m in metrics:
        m.pop("wall_time_s")
    assert_close(*metrics, "metrics.json")
    curves = []
    for d in (run, other):
        with (d / "curve.csv").open() as file:
            rows = list(csv.DictReader(file))
        curves.append([{k: _cell(v) for k, v in r.items() if k != "wall_time_s"} for r in rows])
    assert_close(*curves, "curve.csv")
    draws = [list(load_samples(d / "samples")) for d in (run, other)]
    assert len(draws[0]) == len(draws[1]) == 4
    for (tensors, entry), (others, other_entry) in zip(*draws, strict=True):
        assert tensors.keys() == others.keys()
        # the shard's SHA-256 digests its tensors' last bits: they are compared to RTOL below
        del entry["sha256"], other_entry["sha256"]
        assert_close(entry, other_entry, "the sample's entry")
        for key, value in tensors.items():
            scale = others[key].abs().max().item()
            torch.testing.assert_close(value, others[key], rtol=RTOL, atol=RTOL * scale)


def _cell(value: str):
    try:
        return float(value)
    except ValueError:
        return value


def test_the_old_run_is_read_by_load_run_and_the_reports(finished, tmp_path):
    folder, old = finished
    env = command_env(folder / "data", tmp_path / "cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        posterior = bdl.load_run(old)
        whole = bdl.load_run(folder / "whole")
        assert len(list(posterior.samples())) == len(list(whole.samples())) == 4
        x = posterior.data.x_test
        torch.testing.assert_close(posterior.predict(x), whole.predict(x), rtol=RTOL, atol=0)
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
