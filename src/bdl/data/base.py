"""The common currency of the data loaders, and where their files live.

Every loader returns the whole dataset as in-memory tensors: the benchmarks used here (MNIST,
CIFAR-10, the UCI regression sets) fit comfortably in RAM, and samplers that sweep over the data
thousands of times are much faster indexing a tensor than going through a per-item ``Dataset``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from torch import Tensor

from bdl.atomic import atomic_file

__all__ = ["DataError", "Dataset", "cache_dir", "data_root"]


class DataError(Exception):
    """A user-fixable data problem; str(err) is one message naming the file(s) and the fix.

    Kept distinct from the ``RuntimeError``/``URLError``/``OSError`` zoo that torchvision and the
    standard library raise, so a command-line entry point can print it as a one-line diagnosis
    instead of a traceback.
    """


@dataclass
class Dataset:
    """A fully materialised train/test split.

    Regression targets are stored standardised because the likelihood noise scales and priors are
    set on that scale; ``target_mean``/``target_std`` are kept so metrics such as RMSE and
    log-likelihood can be reported in original units, as the UCI literature does.
    """

    name: str
    task: str  # "classification" or "regression"
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    num_classes: int | None = None
    target_mean: float = 0.0
    target_std: float = 1.0
    # Held-out training points that no run trains on (MNIST's last images), for bdl-eval
    # split=validation; None for datasets without such a split.
    x_validation: Tensor | None = None
    y_validation: Tensor | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def out_features(self) -> int:
        """Width of the network's last layer: one logit per class, or a single regression mean."""
        if self.task == "classification":
            if self.num_classes is None:
                raise ValueError(f"classification dataset {self.name!r} has no num_classes")
            return int(self.num_classes)
        return 1

    @property
    def num_train(self) -> int:
        return int(self.x_train.shape[0])


def _user_cache_home() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg).expanduser() if xdg else Path.home() / ".cache"


def data_root(root: str | os.PathLike | None) -> Path:
    """Resolve where datasets are read from.

    An explicit ``root`` (``dataset.root`` in the config) wins so a single run can be pointed
    elsewhere; ``$BDL_DATA_DIR`` lets a machine with a shared, possibly read-only, data folder
    configure it once; the user cache is the fallback because that is where downloads land.
    """
    if root is not None and str(root) != "":
        return Path(root).expanduser()
    env = os.environ.get("BDL_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return _user_cache_home() / "bdl" / "data"


def root_is_named(root: str | os.PathLike | None) -> bool:
    """Whether the user chose the data root (``dataset.root`` or ``$BDL_DATA_DIR``).

    A named root is the one read: a loader never quietly substitutes files from the cache for
    files that are missing there, since the cache may hold another root's data. Only the default
    root shares its place with downloads, so only there does the cache stand in for it.
    """
    return (root is not None and str(root) != "") or bool(os.environ.get("BDL_DATA_DIR"))


def check_root_is_folder(root: Path, expected: str) -> None:
    """Refuse a data root that exists but is not a folder, naming what belongs in it."""
    if root.exists() and not root.is_dir():
        raise DataError(
            f"The data root {root} (dataset.root, else BDL_DATA_DIR) is a file, not a folder. "
            f"Point dataset.root or BDL_DATA_DIR at a folder containing {expected}."
        )


@contextlib.contextmanager
def cache_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (created if needed) against other processes.

    Parallel sweep jobs start on an empty cache together; the one holding the lock stages and
    extracts while the others wait, then find the files complete. Every file is still written
    through a temporary and ``os.replace``, so a crash mid-write never leaves half a file.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(folder / ".lock"))
        lock.acquire()
    except OSError as err:
        raise DataError(
            f"Cannot create or lock the cache folder {folder} ({err}); make it writable or point "
            "BDL_CACHE_DIR at a writable folder."
        ) from err
    try:
        yield
    finally:
        lock.release()


def cache_dir() -> Path:
    """The writable folder for anything we derive or download.

    The data root may be read-only (a shared mount), so extraction and downloads never go there.
    ``$BDL_CACHE_DIR`` exists so tests and clusters can redirect the writes.
    """
    env = os.environ.get("BDL_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return _user_cache_home() / "bdl"


def copy_atomic(src: Path, dst: Path) -> None:
    """Copy through a temporary file and rename, so a concurrent run never sees half a file."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(dst) as out, open(src, "rb") as inp:
        shutil.copyfileobj(inp, out)


def write_atomic(data: bytes, dst: Path) -> None:
    """Write bytes through a temporary file and rename (see `copy_atomic`)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(dst) as out:
        out.write(data)


def same_path(a: Path, b: Path) -> bool:
    """Whether two paths name the same location, without requiring either to exist."""
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def cause_summary(err: BaseException) -> str:
    """The first line of an underlying error, minus torchvision's advice to pass download=True
    (our users set ``dataset.download`` instead, which the DataError message already says)."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line.split(" You can use download=True")[0].rstrip(". ") or type(err).__name__
