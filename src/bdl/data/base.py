"""The common currency of the data loaders, and where their files live.

Every loader returns the whole dataset as in-memory tensors: the benchmarks used here (MNIST,
CIFAR-10, the UCI regression sets) fit comfortably in RAM, and samplers that sweep over the data
thousands of times are much faster indexing a tensor than going through a per-item ``Dataset``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

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
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(data: bytes, dst: Path) -> None:
    """Write bytes through a temporary file and rename (see :func:`copy_atomic`)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
