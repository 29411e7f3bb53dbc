"""MNIST through ``torchvision.datasets.MNIST``, tolerant of a read-only data root.

torchvision only reads the *extracted* IDX files, and extracts the ``.gz`` originals next to
themselves. A shared data folder (``$BDL_DATA_DIR``) typically holds just the ``.gz`` files and
may be read-only, so unless the extracted files are already there we check the archives against
torchvision's md5 sums, stage them into the writable cache and extract them there, under a lock
and through temporaries so that parallel jobs can share one cache. Letting torchvision do the
parsing keeps us on the code path everybody else's MNIST numbers come from.
"""

from __future__ import annotations

import gzip
import logging
import numbers
import os
import shutil
import tempfile
from pathlib import Path
from urllib.error import URLError

import torch
from torchvision.datasets import MNIST
from torchvision.datasets.utils import check_integrity, download_url

from bdl.atomic import atomic_file

from .base import (
    DataError,
    Dataset,
    cache_dir,
    cache_lock,
    cause_summary,
    check_root_is_folder,
    copy_atomic,
    data_root,
    root_is_named,
    same_path,
)

__all__ = ["load"]

_log = logging.getLogger(__name__)

NUM_TRAIN_TOTAL = 60000
# The original archives and their md5 sums (torchvision's): a file that passes is the original,
# so the cache, which only ever holds verified archives and what was extracted from them, holds
# the same bytes whichever root or mirror they came from.
MD5 = dict(MNIST.resources)


def _stem(gz_name: str) -> str:
    return os.path.splitext(gz_name)[0]


def _extract(archive: Path, dst: Path) -> None:
    """Decompress through a temporary and rename: a concurrent reader never sees half a file."""
    with gzip.open(archive, "rb") as inp, atomic_file(dst) as out:
        shutil.copyfileobj(inp, out, 1 << 20)


def _download(name: str, staged: Path) -> None:
    """Fetch one archive from torchvision's mirrors, md5-checked, into ``staged`` atomically."""
    errors = []
    for mirror in MNIST.mirrors:
        tmp = Path(tempfile.mkdtemp(dir=staged, prefix=".download."))
        try:
            download_url(mirror + name, root=str(tmp), filename=name, md5=MD5[name])
            os.replace(tmp / name, staged / name)
            return
        except (URLError, OSError, RuntimeError, ValueError) as err:
            errors.append(f"{mirror}: {cause_summary(err)}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    raise DataError("download failed (" + "; ".join(errors) + ")")


def _prepare(root: Path, named: bool, download: bool) -> Path:
    """The root torchvision should read, with the four extracted IDX files in ``MNIST/raw/``.

    A root already holding the extracted files is read in place. Otherwise the root's archives
    are md5-checked and staged into the cache, where they are extracted: the data root may be
    read-only. An archive the root lacks comes from the cache (verified copies of earlier
    downloads) or a download only if the user named no root, or allowed ``dataset.download``:
    a root the user named is the one read. Everything in the cache happens under its lock, so
    parallel jobs starting on an empty cache extract once and all find complete files.
    """
    check_root_is_folder(root, "MNIST/raw/ holding the four original .gz files")
    raw = root / "MNIST" / "raw"
    if all((raw / _stem(name)).is_file() for name in MD5):
        return root  # already extracted: read in place, never written to
    present = [name for name in MD5 if (raw / name).is_file()]
    corrupt = [raw / name for name in present if not check_integrity(str(raw / name), MD5[name])]
    if corrupt:
        raise DataError(_error_message(root, "md5 check failed", corrupt))
    cache = cache_dir()
    staged = cache / "MNIST" / "raw"
    with cache_lock(cache / "MNIST"):
        staged.mkdir(parents=True, exist_ok=True)
        for name in MD5:
            dst = staged / name
            cached = check_integrity(str(dst), MD5[name])
            if name in present:
                if not cached and not same_path(raw / name, dst):
                    copy_atomic(raw / name, dst)
            elif not download and (named or not cached):
                raise DataError(_error_message(root, "dataset.download=false", []))
            elif not cached:
                _log.info("downloading %s into %s", name, staged)
                try:
                    _download(name, staged)
                except DataError as err:
                    raise DataError(_error_message(root, str(err), [])) from err
            elif named:
                _log.warning(
                    "%s is not in the data root %s; using the original (md5-checked) in %s, "
                    "as dataset.download=true allows",
                    name,
                    raw,
                    staged,
                )
            if not (staged / _stem(name)).is_file():
                _extract(dst, staged / _stem(name))
    return cache


def _error_message(root: Path, cause: str, corrupt: list[Path]) -> str:
    names = ", ".join(MD5)
    raw = root / "MNIST" / "raw"
    msg = f"MNIST could not be loaded ({cause}). Expected the original files {names} in {raw}/."
    if corrupt:
        msg += " These are not the originals (torchvision's md5): " + ", ".join(map(str, corrupt))
        msg += "."
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
    try:
        where = _prepare(base, root_is_named(root), download)
    except OSError as err:
        raise DataError(
            f"Cannot stage MNIST into the cache folder {cache_dir() / 'MNIST' / 'raw'} ({err}). "
            "Make it writable or point BDL_CACHE_DIR at a writable folder."
        ) from err
    try:
        train = MNIST(str(where), train=True, download=False)
        test = MNIST(str(where), train=False, download=False)
        x_all, y_all = train.data, train.targets
        x_test, y_test = test.data, test.targets
    except (RuntimeError, OSError, ValueError, EOFError) as err:
        damaged = where / "MNIST" / "raw"
        raise DataError(
            f"MNIST files in {damaged}/ cannot be read ({cause_summary(err)}). "
            + (
                "Replace them with the original files."
                if same_path(where, base)
                else "Delete the extracted files there (not the .gz) so they are rebuilt."
            )
        ) from err

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
