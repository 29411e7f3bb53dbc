"""A dataset from the user's own files, no code: ``bdl-run dataset=files dataset.train=a.csv
dataset.test=b.csv dataset.target=y``.

Three formats, none of which can run code when read: CSV (one header row naming the columns,
one row per point, every cell a number, but a classification target may be text), NPZ (read by
``numpy.load`` with ``allow_pickle=False``) and safetensors. An NPZ or safetensors file holds the
features as the array ``x`` (one row per point, of any shape: images too) and the target as the
array ``dataset.target``; a CSV's features are its other columns (or ``dataset.features``). A
pickle, of any suffix, is refused: a data file someone hands you is data.

The task is declared (``dataset.task=regression`` or ``classification``) or inferred, with a
note in the log: a target of text labels, or of the integers 0..K-1 alone, is a classification
into K classes; any other numeric target a regression. The features, and a regression's target,
are standardised with the training rows' mean and standard deviation alone, by the UCI loader's
own code (`bdl.data.uci._standardise`), so that nothing leaks from the test rows; RMSE and
log-likelihood are reported in the target's own units. A validation split (``val_*`` metrics,
where settings are chosen, never on the test rows) is a third file, or a fraction of the training
rows held out before the statistics are taken.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from .base import DataError, Dataset
from .uci import _standardise

log = logging.getLogger("bdl")

FORMATS = (".csv", ".npz", ".safetensors")
TASKS = ("auto", "regression", "classification")


def _read_csv(
    path: Path, target: str, features: Sequence[str] | None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features (float64) and target (float64, or text where a cell is no number) of a CSV."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise DataError(f"{path} cannot be read as CSV ({error}): give a UTF-8 CSV file") from None
    if not rows:
        raise DataError(f"{path} is empty: a CSV needs a header row naming its columns")
    header = [name.strip() for name in rows[0]]
    if target not in header:
        raise DataError(
            f"{path} has no column {target!r} (its columns: {', '.join(header)}): "
            f"set dataset.target to the target's column"
        )
    names = list(features) if features is not None else [n for n in header if n != target]
    missing = [n for n in names if n not in header]
    if missing:
        raise DataError(f"{path} has no column {missing[0]!r} of dataset.features")
    if not names:
        raise DataError(f"{path} has no feature column beside the target {target!r}")
    columns = [header.index(n) for n in names]
    x = np.empty((len(rows) - 1, len(names)), dtype=np.float64)
    labels = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise DataError(
                f"{path}: line {line} has {len(row)} cells where the header has {len(header)}"
            )
        for j, (name, column) in enumerate(zip(names, columns, strict=True)):
            x[line - 2, j] = _number(path, line, name, row[column])
        labels.append(row[header.index(target)].strip())
    if not labels:
        raise DataError(f"{path} has a header and no row: it needs at least one point")
    numbers = [_float(v) for v in labels]
    if all(v is None for v in numbers):
        y = np.array(labels)  # text labels: a classification
    elif None in numbers:  # numbers but for a typo
        row = numbers.index(None)
        raise DataError(
            f"{path}: line {row + 2}, column {target!r} is {labels[row]!r}, not a number like "
            "the column's other cells: fix the cell"
        )
    else:
        y = np.array(numbers, dtype=np.float64)
    if y.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(y))
        if bad.size:
            raise DataError(
                f"{path}: line {bad[0] + 2}, column {target!r} is {labels[bad[0]]!r}, "
                "not a finite number"
            )
    return x, y, names


def _float(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _number(path: Path, line: int, column: str, cell: str) -> float:
    value = _float(cell)
    if value is None or not math.isfinite(value):
        raise DataError(
            f"{path}: line {line}, column {column!r} is {cell!r}, not a finite number: "
            "fix the cell or leave the column out (dataset.features)"
        )
    return value


def _read_arrays(path: Path, target: str) -> tuple[np.ndarray, np.ndarray]:
    """The arrays ``x`` and ``target`` of an NPZ or safetensors file."""
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as archive:
                arrays = {name: archive[name] for name in archive.files}
        except ValueError as error:
            raise DataError(
                f"{path} holds pickled data, which bdl never loads ({error}): save plain arrays, "
                "numpy.savez(path, x=..., y=...)"
            ) from None
        except (OSError, zipfile.BadZipFile, EOFError) as error:
            raise DataError(
                f"{path} is not an NPZ archive ({error}): save it by numpy.savez"
            ) from None
    else:
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        try:
            arrays = load_file(path)
        except (SafetensorError, OSError) as error:
            raise DataError(
                f"{path} is not a safetensors file ({error}): save it by "
                "safetensors.numpy.save_file"
            ) from None
    for name in ("x", target):
        if name not in arrays:
            raise DataError(
                f"{path} has no array {name!r} (its arrays: {', '.join(arrays) or 'none'}): "
                "it needs the features as x and the target as dataset.target"
            )
    x, y = arrays["x"], arrays[target]
    if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
        raise DataError(
            f"{path}: x has shape {x.shape} and {target} {y.shape}; x needs one row per point "
            f"and {target} one value per row"
        )
    if x.dtype.kind not in "biuf" or y.dtype.kind not in "biufU":
        raise DataError(f"{path}: x ({x.dtype}) and {target} ({y.dtype}) must be numbers")
    x = x.astype(np.float64)
    bad = np.argwhere(~np.isfinite(x))
    if bad.size:
        raise DataError(f"{path}: row {bad[0][0]} of x holds a value that is not a finite number")
    if y.dtype.kind in "biuf":
        y = y.astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(y))
        if bad.size:
            raise DataError(f"{path}: row {bad[0]} of {target} is not a finite number")
    return x, y


def _read(
    path: Path, target: str, features: Sequence[str] | None
) -> tuple[np.ndarray, np.ndarray, list[str] | None]:
    if not path.is_file():
        raise DataError(
            f"{path} does not exist: give the path of a .csv, .npz or .safetensors file"
        )
    with open(path, "rb") as f:
        head = f.read(2)
    if head[:1] == b"\x80":  # the pickle protocol's opcode, whatever the file's suffix
        raise DataError(
            f"{path} is a pickle, which bdl never loads: save it as CSV, NPZ or safetensors"
        )
    if path.suffix not in FORMATS:
        raise DataError(
            f"{path}: a dataset file is {', '.join(FORMATS)} (never a pickle): convert it"
        )
    if path.suffix == ".csv":
        return _read_csv(path, target, features)
    if features is not None:
        raise DataError(f"dataset.features picks columns of a CSV; {path} holds arrays")
    return (*_read_arrays(path, target), None)


def _infer_task(task: str, y: np.ndarray, path: Path, target: str) -> str:
    """The declared task, or the one ``y`` (the training targets) implies, said in the log."""
    if task not in TASKS:
        raise DataError(f"dataset.task={task!r}: use one of {', '.join(TASKS)}")
    if task != "auto":
        return task
    if y.dtype.kind == "U":
        inferred, why = "classification", "text labels"
    else:
        values = np.unique(y)
        labels = np.array_equal(values, np.arange(values.size)) and values.size >= 2
        inferred = "classification" if labels else "regression"
        why = f"the integers 0..{values.size - 1} alone" if labels else "numbers other than 0..K-1"
    other = "regression" if inferred == "classification" else "classification"
    log.info(
        "dataset=files: %s's %s holds %s: read as %s (dataset.task=%s says otherwise)",
        path,
        target,
        why,
        inferred,
        other,
    )
    return inferred


def _classes(y: np.ndarray, path: Path, target: str) -> list:
    """The class labels, in order: the training file's text labels sorted, or 0..K-1."""
    if y.dtype.kind == "U":
        return sorted(set(y.tolist()))
    if not np.array_equal(y, np.round(y)) or y.min() < 0:
        row = int(np.flatnonzero((y != np.round(y)) | (y < 0))[0])
        raise DataError(
            f"{path}: row {row} of {target} is {y[row]:g}; class labels are the integers "
            "0..K-1 (or text): set dataset.task=regression for a numeric target"
        )
    return list(range(int(y.max()) + 1))


def _labels(y: np.ndarray, classes: list, path: Path, target: str) -> np.ndarray:
    index = {str(c) if isinstance(c, str) else float(c): k for k, c in enumerate(classes)}
    out = np.empty(len(y), dtype=np.int64)
    for row, value in enumerate(y.tolist()):
        key = value if isinstance(value, str) else float(value)
        if key not in index:
            raise DataError(
                f"{path}: row {row} of {target} is {value!r}, a class the training file does "
                f"not have (its classes: {', '.join(map(str, classes))})"
            )
        out[row] = index[key]
    return out


def load(
    train: str,
    test: str,
    target: str = "y",
    task: str = "auto",
    validation: str | float | None = None,
    features: list[str] | None = None,
    standardise: bool = True,
) -> Dataset:
    """The dataset of the files ``train`` and ``test`` (and ``validation``: a third file, or a
    fraction in (0, 1) of the training rows held out, the same rows on every run).

    ``target`` names the target's column (CSV) or array (NPZ, safetensors); ``features`` the
    CSV's feature columns (default: all but the target). ``task``: ``auto``, ``regression`` or
    ``classification``. ``standardise``: scale the features, and a regression's target, by the
    training rows' statistics.
    """
    for key, value in (("train", train), ("test", test)):
        if not value:
            raise DataError(f"dataset.{key} is not set: give a file, dataset.{key}=FILE.csv")
    paths = {"train": Path(os.fspath(train)), "test": Path(os.fspath(test))}
    held_out = 0.0
    if isinstance(validation, bool):
        raise DataError("dataset.validation is a file or a fraction in (0, 1) of the train rows")
    if isinstance(validation, int | float):
        held_out = float(validation)
        if not 0 <= held_out < 1:
            raise DataError(
                f"dataset.validation={validation} must be a fraction in [0, 1) of the training "
                "rows, or a file"
            )
    elif validation:
        paths["validation"] = Path(os.fspath(validation))
    read = {part: _read(path, target, features) for part, path in paths.items()}
    x_train, y_train, columns = read["train"]
    for part in ("test", "validation"):
        if part in read:
            x, _, other = read[part]
            if x.shape[1:] != x_train.shape[1:] or other != columns:
                raise DataError(
                    f"{paths[part]}'s features ({other or x.shape[1:]}) differ from "
                    f"{paths['train']}'s ({columns or x_train.shape[1:]}): give the same columns"
                )
    parts = {part: (x, y) for part, (x, y, _) in read.items()}
    if held_out:
        count = round(held_out * len(y_train))
        if not 0 < count < len(y_train):
            raise DataError(
                f"dataset.validation={validation} holds out {count} of the {len(y_train)} "
                "training rows: choose a fraction that leaves rows on both sides"
            )
        order = np.random.default_rng(0).permutation(len(y_train))
        parts["validation"] = (x_train[order[:count]], y_train[order[:count]])
        parts["train"] = (x_train[order[count:]], y_train[order[count:]])
    task = _infer_task(task, parts["train"][1], paths["train"], target)
    names = list(parts)
    xs = [parts[n][0] for n in names]
    ys = [parts[n][1] for n in names]
    if standardise:
        flat = [x.reshape(len(x), -1) for x in xs]
        _, _, *scaled = _standardise(*flat)
        xs = [s.reshape(x.shape) for s, x in zip(scaled, xs, strict=True)]
    num_classes, mean, std = None, 0.0, 1.0
    if task == "classification":
        classes = _classes(ys[0], paths["train"], target)
        ys = [
            _labels(y, classes, paths.get(n, paths["train"]), target)
            for n, y in zip(names, ys, strict=True)
        ]
        num_classes = len(classes)
    else:
        if any(y.dtype.kind == "U" for y in ys):
            raise DataError(
                f"dataset.task=regression, but {target} holds text in {paths['train']}: "
                "set dataset.task=classification"
            )
        if standardise:
            mean, std, *ys = _standardise(*ys)

    def tensor(values: np.ndarray) -> torch.Tensor:
        if values.dtype.kind == "i":
            return torch.from_numpy(values)
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))

    split = dict(zip(names, zip(xs, ys, strict=True), strict=True))
    validation_part = split.get("validation")
    return Dataset(
        name=paths["train"].stem,
        task=task,
        x_train=tensor(split["train"][0]),
        y_train=tensor(split["train"][1]),
        x_test=tensor(split["test"][0]),
        y_test=tensor(split["test"][1]),
        num_classes=num_classes,
        target_mean=float(mean),
        target_std=float(std),
        x_validation=None if validation_part is None else tensor(validation_part[0]),
        y_validation=None if validation_part is None else tensor(validation_part[1]),
    )
