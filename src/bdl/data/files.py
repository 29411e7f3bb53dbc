"""A dataset from the user's own files, no code: ``bdl-run dataset=files dataset.train=a.csv
dataset.test=b.csv dataset.target=y``.

Three formats, none of which can run code when read: CSV (one header row naming the columns,
one row per point, every cell a number, but a classification target may be text), NPZ (read by
``numpy.load`` with ``allow_pickle=False``) and safetensors. An NPZ or safetensors file holds the
features as the array ``x`` (one row per point, of any shape: images too) and the target as the
array ``dataset.target``; a CSV's features are its other columns (or ``dataset.features``). A
file is read as what its bytes are, whatever its suffix: a safetensors header (8 bytes of
little-endian length, then that many bytes of JSON), a ZIP archive's signature (NPZ), or text
(CSV). A pickle, which none of them is, is refused as what it is (`pickletools` walks its
opcodes to its STOP without running any): a data file someone hands you is data.

The task is declared (``dataset.task=regression`` or ``classification``) or inferred, with a
note in the log: a target of text labels, or of the integers 0..K-1 alone, is a classification
into K classes; any other numeric target a regression. Declared a classification, integer labels
other than 0..K-1 (a wine's quality scores 3..8) are mapped in order onto 0..K-1, said in the
log. The features, and a regression's target,
are standardised with the training rows' mean and standard deviation alone, by the UCI loader's
own code (`bdl.data.uci.standardise`), so that nothing leaks from the test rows; RMSE and
log-likelihood are reported in the target's own units. A validation split (``val_*`` metrics,
where settings are chosen, never on the test rows) is a third file, or a fraction of the training
rows held out before the statistics are taken.

The checks of the UCI loader (`bdl.data.uci`) hold here too: a cell beyond ±`LARGEST_CELL`
(whose square overflows the standardisation) is refused by its file, line and column; so are
the target among the features, a test file whose rows are mostly training rows, and fewer than
`MIN_TRAIN_ROWS` training rows.

A run keeps its data: `keep_in_run` copies the files into the run directory (``data/train.csv``
...) and has the run read them there, so that ``bdl-eval`` and `bdl.load_run` find them from any
folder, and a resumed run reads what it started on.
"""

from __future__ import annotations

import copy
import csv
import difflib
import filecmp
import json
import logging
import math
import os
import pickletools
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bdl.atomic import atomic_file

from . import uci
from .base import DataError, Dataset
from .uci import LARGEST_CELL

log = logging.getLogger("bdl")

FORMATS = (".csv", ".npz", ".safetensors")
TASKS = ("auto", "regression", "classification")
#: The fewest training rows: the standardisation's scale of one row is zero.
MIN_TRAIN_ROWS = 2
#: The most names a refusal lists: a file of 50 000 columns is refused in one readable line.
LISTED = 8


def _listing(names: Sequence) -> str:
    """``names`` joined by commas, the first `LISTED` and their count where there are more."""
    names = [str(n) for n in names]
    if len(names) <= LISTED:
        return ", ".join(names) or "none"
    return f"{', '.join(names[:LISTED])}, ... ({len(names)} in all)"


def _did_you_mean(name: str, names: Sequence[str]) -> str:
    """' (did you mean 'Name'?)' for the closest of ``names``, case first, or ''."""
    folded = [n for n in names if n.casefold() == name.casefold()]
    close = folded or difflib.get_close_matches(name, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


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
            f"{path} has no column {target!r}{_did_you_mean(target, header)} (its columns: "
            f"{_listing(header)}): set dataset.target to the target's column"
        )
    names = list(features) if features is not None else [n for n in header if n != target]
    position = {name: k for k, name in reversed(list(enumerate(header)))}  # the first of a name
    missing = [n for n in names if n not in position]
    if missing:
        raise DataError(
            f"{path} has no column {missing[0]!r} of dataset.features"
            f"{_did_you_mean(missing[0], header)}"
        )
    if target in names:
        raise DataError(
            f"dataset.features lists the target {target!r}: the network would read the target "
            "from its inputs; remove it from dataset.features"
        )
    if not names:
        raise DataError(f"{path} has no feature column beside the target {target!r}")
    columns = [position[n] for n in names]
    x = np.empty((len(rows) - 1, len(names)), dtype=np.float64)
    labels = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise DataError(
                f"{path}: line {line} has {len(row)} cells where the header has {len(header)}"
            )
        for j, (name, column) in enumerate(zip(names, columns, strict=True)):
            x[line - 2, j] = _number(path, line, name, row[column])
        labels.append(row[position[target]].strip())
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
        bad = np.flatnonzero(~np.isfinite(y) | (np.abs(y) > LARGEST_CELL))
        if bad.size:
            raise DataError(
                f"{path}: line {bad[0] + 2}, column {target!r} is {labels[bad[0]]!r}, "
                f"{_fault(y[bad[0]])}: fix the cell"
            )
    return x, y, names


def _float(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _fault(value: float | None) -> str:
    """What is wrong with a cell's ``value`` (None: no number)."""
    if value is not None and math.isfinite(value):
        return f"beyond ±{LARGEST_CELL:g}, whose square overflows the standardisation"
    return "not a finite number"


def _number(path: Path, line: int, column: str, cell: str) -> float:
    value = _float(cell)
    if value is None or not math.isfinite(value) or abs(value) > LARGEST_CELL:
        raise DataError(
            f"{path}: line {line}, column {column!r} is {cell!r}, {_fault(value)}: fix the "
            "cell or leave the column out (dataset.features)"
        )
    return value


def _read_arrays(path: Path, target: str) -> tuple[np.ndarray, np.ndarray]:
    """The arrays ``x`` and ``target`` of an NPZ or safetensors file."""
    if _format(path) == ".npz":
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
                f"{path} has no array {name!r}{_did_you_mean(name, list(arrays))} (its arrays: "
                f"{_listing(arrays)}): it needs the features as x and the target as "
                "dataset.target"
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
    bad = np.argwhere(~np.isfinite(x) | (np.abs(x) > LARGEST_CELL))
    if bad.size:
        place = ", ".join(map(str, bad[0][1:]))
        raise DataError(
            f"{path}: row {bad[0][0]} of x holds {x[tuple(bad[0])]:g} at [{place}], "
            f"{_fault(x[tuple(bad[0])])}: fix the value"
        )
    if y.dtype.kind in "biuf":
        y = y.astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(y) | (np.abs(y) > LARGEST_CELL))
        if bad.size:
            raise DataError(
                f"{path}: row {bad[0]} of {target} is {y[bad[0]]:g}, {_fault(y[bad[0]])}: fix "
                "the value"
            )
    return x, y


def _read(
    path: Path, target: str, features: Sequence[str] | None
) -> tuple[np.ndarray, np.ndarray, list[str] | None]:
    if not path.is_file():
        raise DataError(
            f"{path} does not exist: give the path of a .csv, .npz or .safetensors file"
        )
    kind = _format(path)
    if kind == "pickle":
        raise DataError(
            f"{path} is a pickle, which bdl never loads: save it as CSV, NPZ or safetensors"
        )
    if path.suffix not in FORMATS:
        raise DataError(
            f"{path}: a dataset file is {', '.join(FORMATS)} (never a pickle): convert it"
        )
    if kind == ".csv":
        return _read_csv(path, target, features)
    if features is not None:
        raise DataError(f"dataset.features picks columns of a CSV; {path} holds arrays")
    return (*_read_arrays(path, target), None)


#: The most bytes of a safetensors header (the safetensors library's own limit).
HEADER_LIMIT = 100_000_000


def _format(path: Path) -> str:
    """What the file at ``path`` is, by its bytes: ``.safetensors`` (an 8-byte little-endian
    length, then a JSON object of that length), ``.npz`` (a ZIP archive's signature),
    ``pickle`` (opcodes that `pickletools` walks to a STOP at the file's end, running none),
    else ``.csv`` (text, whose reader names what is wrong with it). A suffix that says
    otherwise does not change what is read; a broken file of its suffix's format keeps that
    format, so that its reader names the fault."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else 0
        if 2 <= length <= min(size - 8, HEADER_LIMIT) and f.read(1) == b"{":
            try:
                header = json.loads(b"{" + f.read(length - 1))
            except (UnicodeDecodeError, ValueError):
                header = None
            if isinstance(header, dict):
                return ".safetensors"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06") or _is_pickle(path):
        return ".npz" if head[:2] == b"PK" else "pickle"
    if path.suffix in (".npz", ".safetensors"):
        return path.suffix
    return ".csv"


def _is_pickle(path: Path) -> bool:
    """Whether ``path`` parses as one pickle: its opcodes, each with its argument, up to a STOP
    that ends the file. `pickletools.genops` parses them and runs none."""
    with open(path, "rb") as f:
        try:
            for opcode, _, position in pickletools.genops(f):
                if opcode.name == "STOP":
                    return f.read(1) == b"" and position is not None
        except Exception:  # any bytes may come: whatever stops the walk, it is no pickle
            return False
    return False


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
    """The class labels, in order: the training file's text labels sorted, or its integers
    sorted; integers other than 0..K-1 are said to be mapped onto them."""
    if y.dtype.kind == "U":
        return sorted(set(y.tolist()))
    if not np.array_equal(y, np.round(y)):
        row = int(np.flatnonzero(y != np.round(y))[0])
        raise DataError(
            f"{path}: row {row} of {target} is {y[row]:g}; class labels are integers (or text): "
            "set dataset.task=regression for a numeric target"
        )
    classes = [int(c) for c in np.unique(y)]
    if classes != list(range(len(classes))):
        log.info(
            "dataset=files: %s's %s holds the classes %s: read as the classes 0..%d in that order",
            path,
            target,
            _listing(classes),
            len(classes) - 1,
        )
    return classes


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


def _features(columns: list[str] | None, x: np.ndarray) -> str:
    return _listing(columns) if columns is not None else str(x.shape[1:])


def _check_disjoint(paths: dict[str, Path], read: dict[str, tuple]) -> None:
    """Refuse a test file that is the training file, or whose rows are mostly training rows
    (features and target alike): a test metric on rows trained on says nothing of held-out
    data. A few shared rows are duplicates that a data set may hold (of wine-quality-red's
    1 599 rows, 240 repeat another), said in the log."""
    train, test = paths["train"], paths["test"]
    if train.resolve() == test.resolve():
        raise DataError(
            f"dataset.test is the training file {train}: the test metric would be measured on "
            "rows trained on; give a file of held-out rows"
        )
    (x_train, y_train, _), (x_test, y_test, _) = read["train"], read["test"]

    def rows(x: np.ndarray, y: np.ndarray) -> list[bytes]:
        flat = np.ascontiguousarray(x.reshape(len(x), -1), dtype=np.float64)
        return [a.tobytes() + str(b).encode() for a, b in zip(flat, y.tolist(), strict=True)]

    trained = set(rows(x_train, y_train))
    shared = [k for k, row in enumerate(rows(x_test, y_test)) if row in trained]
    if 2 * len(shared) > len(y_test):
        raise DataError(
            f"{test}: {len(shared)} of its {len(y_test)} rows are rows of the training file "
            f"{train} (the first: row {shared[0]}): the test metric would be measured on rows "
            "trained on; give a file of held-out rows"
        )
    if shared:
        log.info(
            "dataset=files: %d of %s's %d rows are also rows of %s (duplicates in the data?)",
            len(shared),
            test,
            len(y_test),
            train,
        )


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
                    f"{paths[part]}'s features ({_features(other, x)}) differ from "
                    f"{paths['train']}'s ({_features(columns, x_train)}): give the same columns"
                )
    parts = {part: (x, y) for part, (x, y, _) in read.items()}
    if len(y_train) < MIN_TRAIN_ROWS:
        raise DataError(
            f"{paths['train']} has {len(y_train)} training row: give at least {MIN_TRAIN_ROWS}"
        )
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
        _, _, *scaled = uci.standardise(*flat)
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
            mean, std, *ys = uci.standardise(*ys)

    _check_disjoint(paths, read)

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


#: The options of a files dataset that name a file.
FILE_KEYS = ("train", "test", "validation")


def keep_in_run(cfg: Any, directory: str | os.PathLike) -> tuple[Any, list[tuple[Path, Path]]]:
    """A run's config ``cfg`` set to read its files dataset's data files from their copies in
    ``directory/data`` (absolute paths), with each (file, copy); ``cfg`` itself as it is, for
    another dataset. A file not there is left as given, for the loader to name; a copy already
    there (a resumed run, or `bdl.run_model`'s own files) stands for it."""
    if cfg.dataset.get("_target_") != f"{__name__}.load":
        return cfg, []
    cfg, kept = copy.deepcopy(cfg), []
    for key in FILE_KEYS:
        value = cfg.dataset.get(key)
        if not isinstance(value, str) or not value:
            continue
        source = Path(value).absolute()
        kept_copy = Path(directory).absolute() / "data" / f"{key}{source.suffix}"
        if source.is_file() or kept_copy.is_file():
            cfg.dataset[key] = str(kept_copy)
            kept.append((source, kept_copy))
    return cfg, kept


def copy_into_run(kept: list[tuple[Path, Path]], resumed: bool) -> None:
    """Copy each (source, copy) of `keep_in_run`; for a ``resumed`` run, a copy there already
    stays, and one that holds other data than its file is refused (a resumed run must read
    what it started on)."""
    for source, kept_copy in kept:
        if source == kept_copy or not source.is_file():
            continue
        if resumed and kept_copy.is_file():
            if not filecmp.cmp(source, kept_copy, shallow=False):
                raise DataError(
                    f"{kept_copy} holds other data than {source}: give the run a fresh directory, "
                    "or the file it started on to resume it"
                )
            continue
        kept_copy.parent.mkdir(parents=True, exist_ok=True)
        with open(source, "rb") as original, atomic_file(kept_copy) as file:
            shutil.copyfileobj(original, file)
