"""Shared fixtures: real data when the machine has it, and tiny fakes when it cannot have it; the
sampler options that the runner's tests parametrise over."""

from __future__ import annotations

import atexit
import functools
import gzip
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from torch import nn
from torch._inductor import cpp_builder
from torch._inductor.exc import InvalidCxxCompiler
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from bdl.composition import plugins
from bdl.composition.instantiation import resolve
from bdl.samplers.base import Declaration

# One Inductor cache for every test of this process and the commands it starts, as one user's
# runs share theirs (bdl.compiled.keep_caches): a test that isolates bdl's cache folder would
# otherwise compile every program from nothing, which tests nothing more.
# (Inductor writes its default into the environment when torch is imported: not the user's.)
# Removed when the process that made it ends (pytest-xdist's workers inherit it and end first):
# some 26 MB a session that would otherwise pile up in the temporary folder.
if os.environ.get("TORCHINDUCTOR_CACHE_DIR", default_cache_dir()) == default_cache_dir():
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bdl-tests-inductor-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

SAMPLER_CONFIGS = Path(__file__).parents[1] / "conf" / "sampler"
#: bdl's own sampler options (the docs' table lists these).
OWN_SAMPLER_OPTIONS = sorted(p.stem for p in SAMPLER_CONFIGS.glob("*.yaml"))
#: Every option of the sampler group: a sampler is covered by the resume, chains and matrix tests
#: the moment its YAML exists, or its package declaring it is installed (bdl.composition.plugins).
SAMPLER_OPTIONS = sorted([*OWN_SAMPLER_OPTIONS, *plugins.options("sampler")])


@functools.cache
def declaration(option: str) -> Declaration:
    """What the sampler of ``option`` (a ``conf/sampler`` file) declares."""
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return resolve(compose("config", [f"sampler={option}"]).sampler).declaration


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
def compiler(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """For tests of ``compile=true``: skips on a machine where Inductor finds no C++ compiler,
    and fails a test in which bdl fell back to eager gradients or to a trajectory step by step,
    which would make its comparison with the eager ones vacuous."""
    try:
        cpp_builder.get_cpp_compiler()  # Inductor's own search
    except InvalidCxxCompiler:
        pytest.skip("compile=true needs a C++ compiler (g++) for torch.compile on the CPU")
    with caplog.at_level("WARNING", logger="bdl"):
        yield
    # the test's own records: ``caplog.records`` here would be the teardown's, always empty
    if any(
        record.getMessage().startswith("compile=true:") for record in caplog.get_records("call")
    ):
        pytest.fail("compile=true fell back to eager computation: nothing compiled was tested")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real data folder ($BDL_DATA_DIR): the one rule for tests that need the real files.

    Unset, the test skips (a machine without the data); set to a folder that does not exist, it
    fails, since that is a broken setup rather than a missing data set. Everything else (the
    runner, the CLI, the loaders' formats and error paths) runs on `fake_data_root`.
    """
    value = os.environ.get("BDL_DATA_DIR")
    if not value:
        pytest.skip("needs real data: set BDL_DATA_DIR to a folder with MNIST/raw/ and uci/")
    path = Path(value).expanduser()
    if not path.is_dir():
        pytest.fail(f"BDL_DATA_DIR={value} is not a folder: point it at the real data or unset it")
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


def _idx(array: np.ndarray) -> bytes:
    """``array`` (uint8) in LeCun's IDX format: magic 0x0000 08 <ndim>, big-endian sizes, data."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    return header + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def mnist_images(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """28×28 uint8 images in which class k lights rows 2k+4 and 2k+5 above a noisy background,
    so that a few epochs of a small network learn them (a run's accuracy is checkable)."""
    images = rng.integers(0, 64, size=(labels.size, 28, 28), dtype=np.uint8)
    for k in range(10):
        images[labels == k, 2 * k + 4 : 2 * k + 6, 4:24] = 255
    return images


def write_fake_mnist(root: Path, seed: int = 0, folder: str = "MNIST") -> Path:
    """MNIST's four files under ``root/<folder>/raw/`` in the IDX format, both the ``.gz``
    archives and the extracted files that torchvision reads in place, with the real sizes (60 000
    training and 10 000 test images: the loader checks them); ``folder="FashionMNIST"`` writes
    Fashion-MNIST's, which has MNIST's format, its bars lit in columns rather than rows so that
    each set is out of the other's distribution. Returns ``root``."""
    rng = np.random.default_rng(seed)
    raw = Path(root) / folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, count in (("train", 60000), ("t10k", 10000)):
        labels = rng.integers(0, 10, size=count).astype(np.uint8)
        images = mnist_images(labels, rng)
        if folder != "MNIST":
            images = np.ascontiguousarray(images.transpose(0, 2, 1))
        for kind, array in (("images", images), ("labels", labels)):
            payload = _idx(array)
            name = f"{prefix}-{kind}-idx{array.ndim}-ubyte"
            (raw / name).write_bytes(payload)
            (raw / f"{name}.gz").write_bytes(gzip.compress(payload, compresslevel=1))
    return Path(root)


# Rows, columns (features + target, the target last) and splits of the fake UCI folders; Boston
# keeps the real shape (506 × 14, 20 splits of 455 / 51) so outputs have the real sizes.
FAKE_UCI = {
    "bostonHousing": (506, 14, 20),
    "concrete": (40, 9, 20),
    "energy": (40, 10, 20),
    "kin8nm": (40, 9, 20),
    "naval-propulsion-plant": (40, 18, 20),
    "power-plant": (40, 5, 20),
    "protein-tertiary-structure": (40, 10, 5),
    "wine-quality-red": (40, 12, 20),
    "yacht": (40, 7, 20),
}


def command_env(data_root: Path, cache: Path) -> dict[str, str]:
    """The user's environment for a bdl command run as a process: ``data_root`` as BDL_DATA_DIR,
    every cache in ``cache``, one thread, Hydra's errors in one line."""
    return {
        **os.environ,
        "BDL_DATA_DIR": str(data_root),
        "BDL_CACHE_DIR": str(cache),
        "XDG_CACHE_HOME": str(cache),
        "OMP_NUM_THREADS": "1",
        "HYDRA_FULL_ERROR": "0",
    }


# ``bdl.cli.main`` (the ``bdl-run`` console script) on each case in turn, in one interpreter: a
# process's start (torch, Hydra) is paid once, not per command line. Each case runs in its own
# folder and environment; what a process would have shown is recorded, a traceback included.
_ONE_PROCESS_DRIVER = """
import contextlib, io, json, os, sys, traceback
from bdl.cli import main
results, home = [], os.getcwd()
for case in json.load(sys.stdin):
    sys.argv = ["bdl-run", *case["argv"]]
    if case.get("env") is not None:
        os.environ.clear()
        os.environ.update(case["env"])
    os.chdir(case.get("cwd") or home)
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as e:  # a message in it is what Python prints on stderr at exit
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
        except BaseException:
            code = 1
            traceback.print_exc()
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
sys.stdout.write(json.dumps(results))
"""


def bdl_run_in_one_process(cases: list[dict], env: dict[str, str] | None = None) -> list[dict]:
    """``bdl-run`` on each case (``{"argv": [...], "cwd": folder, "env": {...}}``, cwd and env
    optional) in one interpreter started with ``env``: per case, its exit code, stdout and
    stderr (``code``, ``out``, ``err``)."""
    result = subprocess.run(
        [sys.executable, "-c", _ONE_PROCESS_DRIVER],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def write_fake_uci(
    root: Path,
    name: str,
    rows: int,
    columns: int,
    splits: int,
    seed: int = 0,
    noise: float = 0.3,
    more_test_rows: int = 0,
):
    """One UCI folder in the layout of the standard splits (``data.txt``, ``index_*.txt``,
    ``n_splits.txt``): a linear target plus ``noise`` times standard normal noise, 90/10 random
    splits; ``more_test_rows`` drawn after them join every split's test rows (the training
    rows are those of the same call without them)."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "uci" / name
    folder.mkdir(parents=True, exist_ok=True)
    x = rng.normal(size=(rows, columns - 1))
    weights = rng.normal(size=columns - 1)
    y = x @ weights + noise * rng.normal(size=rows)
    np.savetxt(folder / "index_features.txt", np.arange(columns - 1), fmt="%d")
    np.savetxt(folder / "index_target.txt", [columns - 1], fmt="%d")
    np.savetxt(folder / "n_splits.txt", [splits], fmt="%d")
    n_test = -(-rows // 10)  # the standard splits round the 10% up (Boston: 51 of 506)
    orders = [rng.permutation(rows) for _ in range(splits)]
    more = rng.normal(size=(more_test_rows, columns - 1))
    x = np.concatenate([x, more])
    y = np.concatenate([y, more @ weights + noise * rng.normal(size=more_test_rows)])
    np.savetxt(folder / "data.txt", np.column_stack([x, 10 + 5 * y]), fmt="%.6f")
    extra = np.arange(rows, rows + more_test_rows)
    for i, order in enumerate(orders):
        np.savetxt(folder / f"index_train_{i}.txt", np.sort(order[n_test:]), fmt="%d")
        test = np.concatenate([np.sort(order[:n_test]), extra])
        np.savetxt(folder / f"index_test_{i}.txt", test, fmt="%d")


@pytest.fixture(scope="session")
def fake_data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root generated once per session in the real on-disk formats: ``MNIST/raw/`` and
    ``FashionMNIST/raw/`` (IDX, extracted and ``.gz``), ``uci/<name>/`` for every UCI set and
    ``cifar-10-batches-py/`` (Python 2 pickles; loading it needs `no_cifar_md5`, since the
    md5s cannot match).

    Runner and CLI tests run on it, so they need no real data; what is learnt from it says
    nothing about the real benchmarks."""
    root = tmp_path_factory.mktemp("fake-data")
    write_fake_mnist(root)
    write_fake_mnist(root, seed=1, folder="FashionMNIST")
    for i, (name, shape) in enumerate(FAKE_UCI.items()):
        write_fake_uci(root, name, *shape, seed=i)
    write_fake_cifar10(root)
    return root


def networks_of_samples(posterior, chain=None) -> Iterator[tuple[nn.Module, nn.Module]]:
    """The run's network and likelihood holding each stored sample (of ``chain``, or of all
    chains) in turn, its tensors copied in by name: the predictions of every sample, computed
    outside the runner's averages."""
    model, likelihood = posterior.network()
    live = dict(model.named_parameters())
    live.update({f"likelihood.{k}": v for k, v in likelihood.state_dict(keep_vars=True).items()})
    for sample in posterior.samples(chain):
        with torch.no_grad():
            for name, p in live.items():
                p.copy_(sample.params[name])
        yield model, likelihood


def gaussian_mixture_of_samples(
    posterior, chain=None
) -> tuple[torch.Tensor, torch.distributions.Distribution]:
    """The test targets in original units and the equal mixture of the run's stored samples'
    (``chain``'s, or all chains') Gaussian predictives on its test inputs, each rebuilt from the
    sample's tensors: what a regression run's ``test_rmse`` (mixture mean) and ``test_ll`` must
    be computed from."""
    data = posterior.data
    means, scales = [], []
    for model, likelihood in networks_of_samples(posterior, chain):
        with torch.no_grad():
            mu, var = likelihood.predict(model(data.x_test)).double().unbind(-1)
        means.append(mu * data.target_std + data.target_mean)
        scales.append(var.sqrt() * data.target_std)
    mixture = torch.distributions.MixtureSameFamily(
        torch.distributions.Categorical(torch.ones(len(means), dtype=torch.float64)),
        torch.distributions.Normal(torch.stack(means, -1), torch.stack(scales, -1)),
    )
    return data.y_test.double() * data.target_std + data.target_mean, mixture


# --- run directories for bdl-report (bdl.analysis.sweeps, bdl.analysis.tables, bdl.analysis.report)
# ---------------------

REPORT_SAMPLERS = {
    "sghmc": ("bdl.samplers.sghmc.SGHMC", 0.1, {0: 0.90, 1: 0.92}),
    "sgld": ("bdl.samplers.sgld.SGLD", 0.01, {0: 0.80, 1: 0.84}),
}

REPORT_CONFIG = """\
sampler:
  _target_: {target}
  _partial_: true
  lr: {lr}
dataset:
  name: mnist
  root: {root}
model:
  hidden: [64, 64]
seed: {seed}
epochs: 10
out: ${{hydra:runtime.output_dir}}
tag: ${{dataset.name}}-{seed}
"""

REPORT_HYDRA = """\
hydra:
  run:
    dir: outputs/${{now:%Y-%m-%d}}
  job:
    name: run
  output_subdir: .hydra
  runtime:
    output_dir: {out}
    choices:
      sampler: {sampler}
      dataset: mnist
      hydra/env: default
      hydra/callbacks: null
"""


def write_run(directory: Path, sampler: str, seed: int, hydra_yaml: bool = True) -> None:
    target, lr, accs = REPORT_SAMPLERS[sampler]
    (directory / ".hydra").mkdir(parents=True)
    (directory / ".hydra" / "config.yaml").write_text(
        REPORT_CONFIG.format(target=target, lr=lr, root=directory / "data", seed=seed)
    )
    if hydra_yaml:
        (directory / ".hydra" / "hydra.yaml").write_text(
            REPORT_HYDRA.format(out=directory, sampler=sampler)
        )
    metrics = {
        "test_accuracy": accs[seed],
        "test_nll": 0.5 + seed,
        "num_samples": 10,
        "epochs": 10,
        "wall_time_s": 123456.0,
    }
    (directory / "metrics.json").write_text(json.dumps(metrics))


@pytest.fixture
def sweep(tmp_path) -> Path:
    """A Hydra multirun tree: 2 samplers x 2 seeds, jobs 0..3 one level below the date dirs."""
    root = tmp_path / "multirun"
    job = 0
    for sampler in REPORT_SAMPLERS:
        for seed in (0, 1):
            write_run(root / "2024-01-01" / "12-00-00" / str(job), sampler, seed)
            job += 1
    (root / "2024-01-01" / "12-00-00" / "multirun.yaml").write_text("{}\n")
    return root
