"""CIFAR-10 through ``torchvision.datasets.CIFAR10``, tolerant of a read-only data root.

torchvision reads ``<root>/cifar-10-batches-py/`` and, when asked to download, writes the tarball
and its extraction into ``root``. Because the data root may be a read-only shared folder, the
only thing ever done in it is reading: a tarball found there is extracted into the cache, and
downloads go to the cache. The md5 checks stay torchvision's own.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tarfile
import tempfile
from pathlib import Path
from urllib.error import URLError

import numpy as np
import torch
from torchvision.datasets import CIFAR10

from .base import DataError, Dataset, cache_dir, cause_summary, data_root, same_path

__all__ = ["MEAN", "STD", "load"]

# The per-channel statistics of the CIFAR-10 training set, as used throughout the literature,
# so that results are comparable with published ResNet/SGHMC numbers.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)

_FILES = [name for name, _ in CIFAR10.train_list + CIFAR10.test_list] + [CIFAR10.meta["filename"]]


def _extract_into_cache(tarball: Path, cache: Path) -> None:
    """Extract next to the final location, then rename, so a crash leaves no half-folder."""
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".cifar10-extract."))
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            try:
                tar.extractall(tmp, filter="data")
            except TypeError:  # Python < 3.10.12 has no extraction filters
                tar.extractall(tmp)  # noqa: S202 - torchvision does the same with its tarball
        extracted = tmp / CIFAR10.base_folder
        if not extracted.is_dir():
            raise DataError(
                f"{tarball} does not contain a {CIFAR10.base_folder}/ folder; it is not the "
                "CIFAR-10 python tarball (cifar-10-python.tar.gz). Replace it with the original."
            )
        try:
            os.replace(extracted, cache / CIFAR10.base_folder)
        except OSError:
            # Another process won the race and put a folder there first; use theirs.
            if not (cache / CIFAR10.base_folder).is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _locate(root: Path, download: bool) -> tuple[Path, bool]:
    """Pick the root torchvision should read and whether it may download into it."""
    if (root / CIFAR10.base_folder).is_dir():
        # Read in place; never let torchvision write a tarball into the data root.
        return root, False
    cache = cache_dir()
    if not (cache / CIFAR10.base_folder).is_dir():
        tarball = root / CIFAR10.filename
        if tarball.is_file():
            try:
                _extract_into_cache(tarball, cache)
            except (tarfile.TarError, OSError, EOFError) as err:
                raise DataError(
                    f"Cannot extract the CIFAR-10 tarball {tarball} into {cache}: {err}. Replace "
                    "it with the original cifar-10-python.tar.gz (md5 "
                    f"{CIFAR10.tgz_md5}) or point BDL_CACHE_DIR at a writable folder."
                ) from err
    return cache, download


def _error_message(root: Path, where: Path, cause: BaseException) -> str:
    in_root = root / CIFAR10.base_folder
    in_cache = where / CIFAR10.base_folder
    places = f"{in_root}/" if same_path(root, where) else f"{in_root}/ (or {in_cache}/)"
    msg = (
        f"CIFAR-10 could not be loaded ({cause_summary(cause)}). Expected the files "
        f"{', '.join(_FILES)} of the original python version in {places}, or the tarball "
        f"{CIFAR10.filename} in {root}/. Put them there, or set BDL_DATA_DIR / dataset.root to "
        f"a folder containing {CIFAR10.base_folder}/ or {CIFAR10.filename}, or allow "
        "dataset.download=true with network access."
    )
    if in_cache.is_dir() and not same_path(root, where):
        msg += f" If {in_cache} is a damaged extraction, delete it so it is rebuilt."
    return msg


def _images(data: np.ndarray) -> torch.Tensor:
    """uint8 NHWC -> float32 NCHW, scaled to [0, 1] and standardised per channel."""
    x = torch.from_numpy(np.ascontiguousarray(data)).permute(0, 3, 1, 2).to(torch.float32)
    x.div_(255.0)
    mean = torch.tensor(MEAN, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(STD, dtype=torch.float32).view(1, 3, 1, 1)
    return x.sub_(mean).div_(std).contiguous()


def load(root: str | os.PathLike | None = None, download: bool = True) -> Dataset:
    """Load the CIFAR-10 train (50k) and test (10k) sets, normalised with the standard statistics.

    Augmentation is deliberately not applied here: the whole set is returned as tensors and the
    training loop applies :func:`bdl.data.augment.random_crop_flip` per minibatch, on device.
    """
    base = data_root(root)
    where, tv_download = _locate(base, download)
    try:
        train = CIFAR10(str(where), train=True, download=tv_download)
        test = CIFAR10(str(where), train=False, download=False)
        x_train, y_train = _images(train.data), torch.as_tensor(train.targets, dtype=torch.int64)
        x_test, y_test = _images(test.data), torch.as_tensor(test.targets, dtype=torch.int64)
    except (
        RuntimeError,
        URLError,
        OSError,
        ValueError,
        EOFError,
        KeyError,
        tarfile.TarError,
        pickle.UnpicklingError,
    ) as err:
        raise DataError(_error_message(base, where, err)) from err
    return Dataset(
        name="cifar10",
        task="classification",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        num_classes=10,
    )
