"""Shared fixtures: real data when the machine has it, and tiny fakes when it cannot have it."""

from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

CIFAR_LABEL_NAMES = [
    b"airplane",
    b"automobile",
    b"bird",
    b"cat",
    b"deer",
    b"dog",
    b"frog",
    b"horse",
    b"ship",
    b"truck",
]


@pytest.fixture
def data_dir() -> Path:
    """The real data folder ($BDL_DATA_DIR); tests needing real data skip without it."""
    value = os.environ.get("BDL_DATA_DIR")
    if not value:
        pytest.skip("needs real data: set BDL_DATA_DIR to a folder with MNIST/raw/ and uci/")
    path = Path(value).expanduser()
    if not path.is_dir():
        pytest.skip(f"needs real data: BDL_DATA_DIR={value} does not exist")
    return path


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point every cache location into tmp_path so a test writes nothing under $HOME."""
    cache_home = tmp_path / "xdg-cache"
    bdl_cache = tmp_path / "bdl-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    monkeypatch.setenv("BDL_CACHE_DIR", str(bdl_cache))
    return bdl_cache


class _Py2Pickler(pickle._Pickler):
    """Pickles ``bytes`` as Python 2 ``str`` (BINSTRING opcodes).

    The real CIFAR-10 batches were written by Python 2: their keys load as ``str`` with
    ``encoding="latin1"`` (what torchvision uses) and as ``bytes`` with ``encoding="bytes"`` (the
    dataset website's recipe). A Python 3 pickle of ``b"data"`` keys would give torchvision a
    KeyError, so to reproduce the exact format we emit the Python 2 opcodes ourselves.
    """

    dispatch = pickle._Pickler.dispatch.copy()

    def _save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str


def _py2_pickle(obj: object) -> bytes:
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def write_fake_cifar10(root: Path, per_batch: int = 4, n_test: int = 6, seed: int = 0) -> Path:
    """Write a tiny CIFAR-10 in the original ``cifar-10-batches-py`` layout; returns ``root``.

    Pixel values are random uint8 and labels cycle through all ten classes, so channel order,
    scaling and label handling are all observable. The md5s of course differ from the originals.
    """
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)

    def batch(label: bytes, n: int, start: int) -> dict:
        return {
            b"batch_label": label,
            b"labels": [(start + i) % 10 for i in range(n)],
            b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
            b"filenames": [f"img_{start + i:05d}.png".encode() for i in range(n)],
        }

    for b in range(1, 6):
        entry = batch(f"training batch {b} of 5".encode(), per_batch, (b - 1) * per_batch)
        (folder / f"data_batch_{b}").write_bytes(_py2_pickle(entry))
    (folder / "test_batch").write_bytes(_py2_pickle(batch(b"testing batch 1 of 1", n_test, 3)))
    meta = {b"num_cases_per_batch": per_batch, b"label_names": CIFAR_LABEL_NAMES, b"num_vis": 3072}
    (folder / "batches.meta").write_bytes(_py2_pickle(meta))
    return Path(root)


@pytest.fixture
def make_fake_cifar10() -> Callable[..., Path]:
    """The fake-CIFAR writer, for tests that need the files without the md5 bypass."""
    return write_fake_cifar10


@pytest.fixture
def no_cifar_md5(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bypass only the CIFAR md5 checks (files must still exist), for fake files.

    ``check_integrity`` is patched in ``torchvision.datasets.cifar``, which covers both
    ``CIFAR10._check_integrity`` and the ``batches.meta`` check in ``_load_meta``, and in
    ``bdl.data.cifar10`` (the tarball's check); everything else, including how the batches are
    parsed, stays production code.
    """
    import torchvision.datasets.cifar as tv_cifar

    import bdl.data.cifar10

    def exists_only(fpath: str, md5: str | None = None) -> bool:
        return os.path.isfile(fpath)

    monkeypatch.setattr(tv_cifar, "check_integrity", exists_only)
    monkeypatch.setattr(bdl.data.cifar10, "check_integrity", exists_only)


@pytest.fixture
def cifar_root(tmp_path: Path, no_cifar_md5: None) -> Path:
    """A data root holding a tiny fake CIFAR-10 (20 train / 6 test images), md5 check bypassed."""
    return write_fake_cifar10(tmp_path / "cifar-root")


_BARRIER = """
import pathlib as _pathlib, sys as _sys, time as _time
_pathlib.Path(_sys.argv[-2]).touch()
while not _pathlib.Path(_sys.argv[-1]).exists():
    _time.sleep(0.001)
"""


@pytest.fixture
def race(tmp_path: Path) -> Callable[..., list[str]]:
    """Run ``setup`` then ``action`` in several Python processes, ``action`` in all at once.

    Each process signals once ``setup`` (the slow imports) is done; when all have, they are
    released together, so ``action`` really runs concurrently. Returns their standard outputs,
    asserting that every process succeeded.
    """

    def run(setup: str, action: str, args: list[str], env: dict[str, str], n: int = 2):
        go = tmp_path / "race-go"
        ready = [tmp_path / f"race-ready{i}" for i in range(n)]
        script = "\n".join([setup, _BARRIER, action])
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", script, *args, str(flag), str(go)],
                env={**env, "OMP_NUM_THREADS": "1"},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for flag in ready
        ]
        try:
            deadline = time.monotonic() + 300
            while not all(flag.exists() for flag in ready):
                failed = [r for r in racers if r.poll() is not None]
                assert not failed, failed[0].communicate()[1]
                assert time.monotonic() < deadline, "the processes never got past their setup"
                time.sleep(0.01)
            go.touch()
            results = [racer.communicate(timeout=300) for racer in racers]
        finally:
            for racer in racers:
                if racer.poll() is None:
                    racer.kill()
        for racer, (_, err) in zip(racers, results):
            assert racer.returncode == 0, err
        return [out for out, _ in results]

    return run
