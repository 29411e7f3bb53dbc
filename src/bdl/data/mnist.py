"""MNIST through ``torchvision.datasets.MNIST``, tolerant of a read-only data root.

torchvision only reads the *extracted* IDX files, and extracts the ``.gz`` originals next to
themselves. A shared data folder (``$BDL_DATA_DIR``) typically holds just the ``.gz`` files and
may be read-only, so unless the extracted files are already there we check the archives against
torchvision's md5 sums, stage them into the writable cache and extract them there, under a lock
and through temporaries so that parallel jobs can share one cache. Letting torchvision do the
parsing keeps us on the code path everybody else's MNIST numbers come from.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import logging
import math
import numbers
import os
import shutil
import tempfile
from dataclasses import dataclass, field
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

__all__ = ["Source", "load", "load_idx"]

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


@dataclass(frozen=True)
class Source:
    """One dataset in MNIST's IDX layout: torchvision's class for it (which reads
    ``<folder>/raw/``), the md5 sums of the four original archives, and, where an archive may
    come recompressed (Debian's Fashion-MNIST), those of the decompressed originals: an archive
    passes if either matches."""

    label: str
    folder: str
    dataset: type[MNIST]
    md5: dict[str, str]
    extracted_md5: dict[str, str] = field(default_factory=dict)

    def verified(self, archive: Path) -> bool:
        if check_integrity(str(archive), self.md5[archive.name]):
            return True
        want = self.extracted_md5.get(_stem(archive.name))
        if want is None or not archive.is_file():
            return False
        digest = hashlib.md5()
        try:
            with gzip.open(archive, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
        except (OSError, EOFError):
            return False
        return digest.hexdigest() == want


SOURCE = Source("MNIST", "MNIST", MNIST, MD5)


def _download(name: str, staged: Path, source: Source) -> None:
    """Fetch one of ``source``'s archives from torchvision's mirrors, md5-checked, into
    ``staged`` atomically."""
    errors = []
    md5 = source.md5[name]
    for mirror in source.dataset.mirrors:
        tmp = Path(tempfile.mkdtemp(dir=staged, prefix=".download."))
        try:
            download_url(mirror + name, root=str(tmp), filename=name, md5=md5)
            os.replace(tmp / name, staged / name)
            return
        except (URLError, OSError, RuntimeError, ValueError) as err:
            errors.append(f"{mirror}: {cause_summary(err)}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    raise DataError("download failed (" + "; ".join(errors) + ")")


def _prepare(root: Path, named: bool, download: bool, source: Source) -> Path:
    """The root torchvision should read, with the four extracted IDX files in
    ``<folder>/raw/``.

    A root already holding the extracted files is read in place. Otherwise the root's archives
    are md5-checked and staged into the cache, where they are extracted: the data root may be
    read-only. An archive the root lacks comes from the cache (verified copies of earlier
    downloads) or a download only if the user named no root, or allowed ``dataset.download``:
    a root the user named is the one read. Everything in the cache happens under its lock, so
    parallel jobs starting on an empty cache extract once and all find complete files.
    """
    check_root_is_folder(root, f"{source.folder}/raw/ holding the four original .gz files")
    md5 = source.md5
    raw = root / source.folder / "raw"
    if all((raw / _stem(name)).is_file() for name in md5):
        return root  # already extracted: read in place, never written to
    present = [name for name in md5 if (raw / name).is_file()]
    corrupt = [raw / name for name in present if not source.verified(raw / name)]
    if corrupt:
        raise DataError(_error_message(root, "md5 check failed", corrupt, source))
    cache = cache_dir()
    staged = cache / source.folder / "raw"
    with cache_lock(cache / source.folder):
        staged.mkdir(parents=True, exist_ok=True)
        for name in md5:
            dst = staged / name
            cached = source.verified(dst)
            if name in present:
                if not cached and not same_path(raw / name, dst):
                    copy_atomic(raw / name, dst)
            elif not download and (named or not cached):
                raise DataError(_error_message(root, "dataset.download=false", [], source))
            elif not cached:
                _log.info("downloading %s into %s", name, staged)
                try:
                    _download(name, staged, source)
                except DataError as err:
                    raise DataError(_error_message(root, str(err), [], source)) from err
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


def _error_message(root: Path, cause: str, corrupt: list[Path], source: Source) -> str:
    names = ", ".join(source.md5)
    raw = root / source.folder / "raw"
    msg = (
        f"{source.label} could not be loaded ({cause}). Expected the original files {names} in "
        f"{raw}/."
    )
    if corrupt:
        msg += " These are not the originals (torchvision's md5): " + ", ".join(map(str, corrupt))
        msg += "."
    msg += (
        " Put the four .gz files there, or set BDL_DATA_DIR / dataset.root to a folder that "
        f"contains {source.folder}/raw/, or allow dataset.download=true with network access."
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
    return load_idx(SOURCE, "mnist", root, validation, download, pixel_divisor)


def load_idx(
    source: Source,
    name: str,
    root: str | os.PathLike | None,
    validation: int,
    download: bool,
    pixel_divisor: float,
) -> Dataset:
    """The dataset of ``source`` (MNIST's layout and sizes) named ``name``, as `load`
    describes for MNIST."""
    label = source.label
    if (
        isinstance(validation, bool)
        or not isinstance(validation, numbers.Integral)
        or not 0 <= validation < NUM_TRAIN_TOTAL
    ):
        raise DataError(
            f"dataset.validation={validation!r} is invalid for {label}: it must be an integer in "
            f"[0, {NUM_TRAIN_TOTAL}) (the number of training images held out)."
        )
    if not pixel_divisor > 0:
        raise DataError(f"dataset.pixel_divisor must be positive, got {pixel_divisor!r}")
    base = data_root(root)
    try:
        where = _prepare(base, root_is_named(root), download, source)
    except OSError as err:
        raise DataError(
            f"Cannot stage {label} into the cache folder {cache_dir() / source.folder / 'raw'} "
            f"({err}). Make it writable or point BDL_CACHE_DIR at a writable folder."
        ) from err
    keep = (
        "Replace it with the original file."
        if same_path(where, base)
        else ("Delete the extracted files there (not the .gz) so they are rebuilt.")
    )
    for archive in source.md5:
        _check_idx(where / source.folder / "raw" / _stem(archive), keep)
    try:
        x_all, y_all, x_test, y_test = _parsed(source.dataset, str(where), _stamps(where, source))
    except (RuntimeError, OSError, ValueError, EOFError) as err:
        damaged = where / source.folder / "raw"
        raise DataError(
            f"{label} files in {damaged}/ cannot be read ({cause_summary(err)}). "
            + (
                "Replace them with the original files."
                if same_path(where, base)
                else "Delete the extracted files there (not the .gz) so they are rebuilt."
            )
        ) from err

    n = NUM_TRAIN_TOTAL - int(validation)
    if x_all.shape[0] != NUM_TRAIN_TOTAL or tuple(x_all.shape[1:]) != (28, 28):
        raise DataError(
            f"{label} training images in {where / source.folder / 'raw'} have shape "
            f"{tuple(x_all.shape)}, expected ({NUM_TRAIN_TOTAL}, 28, 28); replace them with "
            "the original files."
        )
    return Dataset(
        name=name,
        task="classification",
        x_train=_to_float(x_all[:n], pixel_divisor),
        y_train=y_all[:n].to(torch.int64).clone(),
        x_test=_to_float(x_test, pixel_divisor),
        y_test=y_test.to(torch.int64).clone(),
        num_classes=10,
        x_validation=_to_float(x_all[n:], pixel_divisor) if validation else None,
        y_validation=y_all[n:].to(torch.int64).clone() if validation else None,
    )


#: The item size of each IDX type code (LeCun et al.'s format: magic 0, 0, type, dimensions).
_IDX_ITEM_SIZE = {0x08: 1, 0x09: 1, 0x0B: 2, 0x0C: 4, 0x0D: 4, 0x0E: 8}


def _check_idx(path: Path, fix: str) -> None:
    """Refuse, naming it, an extracted IDX file whose size is not the one its header declares (a
    truncated copy): torchvision would fail on it without saying which file."""
    with path.open("rb") as handle:
        head = handle.read(4)
        size = path.stat().st_size
        item = _IDX_ITEM_SIZE.get(head[2]) if len(head) == 4 and head[:2] == b"\0\0" else None
        dims = handle.read(4 * head[3]) if item is not None else b""
    if item is None or len(dims) != 4 * head[3]:
        raise DataError(f"{path} is not an IDX file (its header is not MNIST's). {fix}")
    shape = [int.from_bytes(dims[i : i + 4], "big") for i in range(0, len(dims), 4)]
    declared = 4 + len(dims) + item * math.prod(shape)
    if size != declared:
        raise DataError(
            f"{path} holds {size} bytes, but its header declares {declared} (shape "
            f"{tuple(shape)}): a truncated or damaged file. {fix}"
        )


def _stamps(where: Path, source: Source) -> tuple[tuple[int, int], ...]:
    """The size and modification time of each extracted file of ``source`` under ``where``."""
    raw = where / source.folder / "raw"
    return tuple((s.st_size, s.st_mtime_ns) for s in (os.stat(raw / _stem(n)) for n in source.md5))


@functools.lru_cache(maxsize=4)
def _parsed(
    dataset: type[MNIST], where: str, stamps: tuple[tuple[int, int], ...]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Training images and labels, test images and labels, as torchvision's ``dataset`` parses
    them from ``where``. Kept while the files are unchanged (``stamps``), so that the jobs of a
    sweep in one process parse each file once; callers copy before they change anything
    (`load_idx` converts and clones)."""
    train = dataset(where, train=True, download=False)
    test = dataset(where, train=False, download=False)
    return train.data, train.targets, test.data, test.targets


def _to_float(images: torch.Tensor, divisor: float) -> torch.Tensor:
    return images.to(torch.float32).div_(divisor).unsqueeze(1).contiguous()
