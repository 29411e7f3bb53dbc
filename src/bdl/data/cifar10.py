"""CIFAR-10 through ``torchvision.datasets.CIFAR10``, tolerant of a read-only data root.

torchvision reads ``<root>/cifar-10-batches-py/`` and, when asked to download, writes the tarball
and its extraction into ``root``. Because the data root may be a read-only shared folder, the
only thing ever done in it is reading: a tarball found there is extracted into the cache, and
downloads go to the cache, under a lock so that parallel jobs can share it. The md5 checks are
torchvision's own.
"""

from __future__ import annotations

import logging
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
from torchvision.datasets.utils import check_integrity

from .base import (
    DataError,
    Dataset,
    cache_dir,
    cache_lock,
    cause_summary,
    check_root_is_folder,
    data_root,
    root_is_named,
    same_path,
)

__all__ = ["MEAN", "STD", "load"]

_log = logging.getLogger(__name__)

# The per-channel statistics of the CIFAR-10 training set, as used throughout the literature,
# so that results are comparable with published ResNet/SGHMC numbers.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)

_FILES = [name for name, _ in CIFAR10.train_list + CIFAR10.test_list] + [CIFAR10.meta["filename"]]


def _extract_into_cache(tarball: Path, cache: Path) -> None:
    """Extract next to the final location, then rename, so a crash leaves no half-folder.

    Called under the cache's lock, so parallel jobs extract once between them.
    """
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
        os.replace(extracted, cache / CIFAR10.base_folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _locate(root: Path, named: bool, download: bool) -> Path:
    """The root torchvision should read, holding ``cifar-10-batches-py/``.

    A root holding the folder is read in place. A tarball there is md5-checked (so that the
    cache, extracted from originals only, cannot stand in for a different tarball) and extracted
    into the cache. A root holding neither is served from the cache or a download only if the
    user named no root or allowed ``dataset.download``. The cache is written under its lock.
    """
    check_root_is_folder(root, f"{CIFAR10.base_folder}/ or {CIFAR10.filename}")
    if (root / CIFAR10.base_folder).is_dir():
        # Read in place; never let torchvision write a tarball into the data root.
        return root
    cache = cache_dir()
    in_cache = (cache / CIFAR10.base_folder).is_dir()
    tarball = root / CIFAR10.filename
    if tarball.is_file():
        if not check_integrity(str(tarball), CIFAR10.tgz_md5):
            raise DataError(
                f"{tarball} is not the original CIFAR-10 python tarball (md5 check failed, "
                f"expected {CIFAR10.tgz_md5}); replace it with the original "
                f"{CIFAR10.filename}."
            )
        with cache_lock(cache):
            if not (cache / CIFAR10.base_folder).is_dir():
                try:
                    _extract_into_cache(tarball, cache)
                except (tarfile.TarError, OSError, EOFError) as err:
                    raise DataError(
                        f"Cannot extract the CIFAR-10 tarball {tarball} into {cache}: {err}. "
                        f"Replace it with the original {CIFAR10.filename} (md5 "
                        f"{CIFAR10.tgz_md5}) or point BDL_CACHE_DIR at a writable folder."
                    ) from err
        return cache
    if not download and (named or not in_cache):
        raise DataError(_error_message(root, cache, "dataset.download=false"))
    if named and in_cache:
        _log.warning(
            "the data root %s holds no CIFAR-10; using the md5-checked copy in %s, as "
            "dataset.download=true allows",
            root,
            cache,
        )
    if download:
        with cache_lock(cache):
            try:  # a no-op when the cache already holds md5-verified files
                CIFAR10(str(cache), train=True, download=True)
            except (URLError, OSError, RuntimeError, tarfile.TarError, EOFError) as err:
                raise DataError(_error_message(root, cache, cause_summary(err))) from err
    return cache


def _error_message(root: Path, where: Path, cause: str) -> str:
    in_root = root / CIFAR10.base_folder
    in_cache = where / CIFAR10.base_folder
    places = f"{in_root}/" if same_path(root, where) else f"{in_root}/ (or {in_cache}/)"
    msg = (
        f"CIFAR-10 could not be loaded ({cause}). Expected the files "
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
    training loop applies `bdl.data.augment.random_crop_flip` per minibatch, on device.
    """
    base = data_root(root)
    where = _locate(base, root_is_named(root), download)
    try:
        train = CIFAR10(str(where), train=True, download=False)
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
        raise DataError(_error_message(base, where, cause_summary(err))) from err
    return Dataset(
        name="cifar10",
        task="classification",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        num_classes=10,
    )
