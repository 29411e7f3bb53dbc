"""The GPU suite (``pytest -m gpu``): bdl's runs on CUDA, asserting what their CPU tests assert.

Every test here is marked ``gpu`` and skipped, with one reason, where torch sees no CUDA device;
CI never runs them. ``BDL_TEST_DEVICE=cpu`` runs the same bodies on the CPU (a dry run of their
logic on a machine without a GPU: slow, minutes, since every run is repeated on the CPU for the
comparisons).

Determinism: the tests that compare two runs bit for bit (resume after a kill, the same seed
twice) need cuBLAS's fixed workspace (``CUBLAS_WORKSPACE_CONFIG=:4096:8``, set here before CUDA
starts) and ``torch.use_deterministic_algorithms(True)``, with cuDNN's autotuner off: without them
cuBLAS may pick another reduction split from one call to the next, and atomics add in any order.
``warn_only``: an operation without a deterministic kernel warns (and the comparison then shows
whether it mattered) rather than stopping the suite.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

#: The device the suite runs on: cuda, or cpu for a dry run of its logic.
DEVICE = os.environ.get("BDL_TEST_DEVICE", "cuda")
HERE = Path(__file__).parent


def skip_without_the_device() -> None:
    """Skip the calling test module, in one line, where `DEVICE` is cuda and there is none;
    called at the top of each module, before it imports the CPU tests it reuses."""
    if DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.skip(
            "needs CUDA (make gpu-check on a GPU machine; BDL_TEST_DEVICE=cpu runs these tests' "
            "logic on the CPU)",
            allow_module_level=True,
        )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each failure's cause printed as it happens: the GPU check's time budget can end the run
    before pytest's summary, and a device's lease is too short to run it again for the cause."""
    if report.failed and report.nodeid.startswith("tests/gpu/"):
        cause = report.longreprtext.splitlines()[-15:]
        print(f"\n{report.nodeid} failed ({report.when}):", *cause, sep="\n  ", flush=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(autouse=True)
def deterministic() -> Iterator[None]:
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    yield
    torch.use_deterministic_algorithms(previous)


@pytest.fixture(autouse=True)
def on_the_device(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[torch.device]]:
    """Fails a test whose runs all stayed off `DEVICE`: a CPU test reused here composes
    ``device=auto``, which must have picked the GPU."""
    import bdl.runner.experiment

    built: list[torch.device] = []
    real = bdl.runner.experiment.build

    def build(*args, **kwargs):
        experiment = real(*args, **kwargs)
        built.append(experiment.run.device)
        return experiment

    monkeypatch.setattr(bdl.runner.experiment, "build", build)
    yield built
    if built:
        assert DEVICE in {d.type for d in built}, f"no run of this test was on {DEVICE}: {built}"
