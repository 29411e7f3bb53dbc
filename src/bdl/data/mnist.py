"""MNIST through ``torchvision.datasets.MNIST``, tolerant of a read-only data root.

torchvision only reads the *extracted* IDX files, and extracts the ``.gz`` originals next to
themselves. A shared data folder (``$BDL_DATA_DIR``) typically holds just the ``.gz`` files and
may be read-only, so unless the extracted files are already there we stage the archives into
the writable cache and let torchvision verify and extract them there. Letting torchvision do the
parsing keeps us on the code path everybody else's MNIST numbers come from.
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path
from urllib.error import URLError

import torch
from torchvision.datasets import MNIST
from torchvision.datasets.utils import check_integrity

from .base import (
    DataError,
    Dataset,
    cache_dir,
    cause_summary,
    copy_atomic,
    data_root,
    same_path,
)

__all__ = ["load"]

NUM_TRAIN_TOTAL = 60000


def _stem(gz_name: str) -> str:
    return os.path.splitext(gz_name)[0]


def _stage(root: Path, download: bool) -> tuple[Path, bool, list[Path]]:
    """Pick the root torchvision should read and whether it may call its ``download()``.

    Returns ``(root_for_torchvision, download_flag, corrupt_sources)``. The download flag is
    forced on when torchvision's "download" would only be an offline extraction; that makes
    ``download=False`` work with a data folder holding just the ``.gz`` files, which is the
    common offline setup. Damaged sources are never staged, so fixing them fixes the next run.
    """
    raw = root / "MNIST" / "raw"
    if all((raw / _stem(name)).is_file() for name, _ in MNIST.resources):
        # Already extracted: torchvision reads them in place and must never write there.
        return root, False, []

    cache = cache_dir()
    staged = cache / "MNIST" / "raw"
    corrupt: list[Path] = []
    all_extracted = all_archives = True
    for name, md5 in MNIST.resources:
        dst = staged / name
        all_extracted &= (staged / _stem(name)).is_file()
        if check_integrity(str(dst), md5):
            continue
        src = raw / name
        if src.is_file() and not same_path(src, dst):
            if check_integrity(str(src), md5):
                try:
                    copy_atomic(src, dst)
                except OSError as err:
                    raise DataError(
                        f"Cannot stage MNIST file {src} into the cache folder {staged}: {err}. "
                        "Make the cache writable or point BDL_CACHE_DIR at a writable folder."
                    ) from err
                continue
            corrupt.append(src)
        elif src.is_file():
            corrupt.append(src)
        all_archives = False
    # With every archive verified (or everything extracted) torchvision's download() needs no
    # network, so it may run even when the caller asked for download=False.
    return cache, (True if all_archives or all_extracted else download), corrupt


def _error_message(root: Path, staged_root: Path, corrupt: list[Path], cause: BaseException) -> str:
    names = ", ".join(name for name, _ in MNIST.resources)
    raw = root / "MNIST" / "raw"
    msg = (
        f"MNIST could not be loaded ({cause_summary(cause)}). Expected the original files "
        f"{names} in {raw}/ (copies are staged and extracted in {staged_root / 'MNIST' / 'raw'}/)."
    )
    if corrupt:
        msg += " These failed torchvision's md5 check: " + ", ".join(map(str, corrupt)) + "."
    msg += (
        " Put the four .gz files there, or set BDL_DATA_DIR / dataset.root to a folder that "
        "contains MNIST/raw/, or allow dataset.download=true with network access."
    )
    return msg


def load(
    root: str | os.PathLike | None = None,
    validation: int = 10000,
    download: bool = True,
    pixel_divisor: float = 255.0,
) -> Dataset:
    """Load MNIST with the last ``validation`` training images held out.

    Holding out the tail (50k train by default) follows Chen et al. (2014), whose SGHMC MNIST
    results the experiments are compared against; no run trains on the held-out images, which
    are kept as the validation split (``x_validation``, ``bdl-eval split=validation``). Pixels
    are divided by ``pixel_divisor``: 255 gives [0, 1]; Blundell et al. (2015) divided by 126.
    They are scaled straight from ``.data`` rather than through per-item transforms, which would
    be needlessly slow for full-batch use.
    """
    if (
        isinstance(validation, bool)
        or not isinstance(validation, numbers.Integral)
        or not 0 <= validation < NUM_TRAIN_TOTAL
    ):
        raise DataError(
            f"dataset.validation={validation!r} is invalid for MNIST: it must be an integer in "
            f"[0, {NUM_TRAIN_TOTAL}) (the number of training images held out)."
        )
    if not pixel_divisor > 0:
        raise DataError(f"dataset.pixel_divisor must be positive, got {pixel_divisor!r}")
    base = data_root(root)
    where, tv_download, corrupt = _stage(base, download)
    try:
        train = MNIST(str(where), train=True, download=tv_download)
        test = MNIST(str(where), train=False, download=False)
        x_all, y_all = train.data, train.targets
        x_test, y_test = test.data, test.targets
    except (RuntimeError, URLError, OSError, ValueError, EOFError) as err:
        raise DataError(_error_message(base, cache_dir(), corrupt, err)) from err

    n = NUM_TRAIN_TOTAL - int(validation)
    if x_all.shape[0] != NUM_TRAIN_TOTAL or tuple(x_all.shape[1:]) != (28, 28):
        raise DataError(
            f"MNIST training images in {where / 'MNIST' / 'raw'} have shape "
            f"{tuple(x_all.shape)}, expected ({NUM_TRAIN_TOTAL}, 28, 28); replace them with "
            "the original files."
        )
    return Dataset(
        name="mnist",
        task="classification",
        x_train=_to_float(x_all[:n], pixel_divisor),
        y_train=y_all[:n].to(torch.int64).clone(),
        x_test=_to_float(x_test, pixel_divisor),
        y_test=y_test.to(torch.int64).clone(),
        num_classes=10,
        x_validation=_to_float(x_all[n:], pixel_divisor) if validation else None,
        y_validation=y_all[n:].to(torch.int64).clone() if validation else None,
    )


def _to_float(images: torch.Tensor, divisor: float) -> torch.Tensor:
    return images.to(torch.float32).div_(divisor).unsqueeze(1).contiguous()
