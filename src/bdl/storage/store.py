"""Posterior samples and predictive distributions on disk, in formats that never execute code.

A chain of thousands of network samples does not fit in memory, so `SampleStore` writes
each sample to its own ``sample_NNNNN.safetensors`` file the moment it is taken and keeps only a
small JSON manifest. The manifest records every file's SHA-256: a run killed while writing, a
partial copy or a file from another run is then reported by name instead of silently feeding
garbage into an evaluation. Safetensors (and ``np.load(allow_pickle=False)``) are used throughout
because ``torch.load``/pickle can run arbitrary code from a downloaded or shared file.

The manifest is a JSON list of entries ``{"index", "file", "sha256", **metadata}``; it is
rewritten atomically, so that a crash leaves either the old or the new manifest, never half of
one, and it lists a sample only once the sample's file is complete on disk.

A store flushes each sample to disk (``fsync``) and lists it as it is added, or, opened with
``fsync_each=False``, writes the sample's file at once but flushes and lists the samples added
since the last call when `SampleStore.sync` is called. The runner syncs before each
checkpoint, the only point a resumed run goes back to, so that a sample costs neither a disk round
trip (a third of a millisecond on a local disk, far more on a cluster's network file system) nor
a rewrite of the manifest, which grows with the chain: for a small network's chains, many samples
a second, these were most of a sample's cost. A resumed run removes the files of samples taken
after its checkpoint, listed or not, and takes them again.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save
from torch import Tensor

from bdl.atomic import atomic_file, fsync_path

__all__ = [
    "MANIFEST",
    "PREDICTIVE",
    "SampleStore",
    "StoreError",
    "atomic_write",
    "make_dir",
    "write_error",
    "load_reference",
    "load_samples",
    "read_manifest",
    "save_predictive",
]

MANIFEST = "manifest.json"
PREDICTIVE = "predictive.safetensors"
_RESERVED = ("index", "file", "sha256")
PROB_SUM_TOL = 1e-3  # how far a reference row's sum may be from 1
_REFERENCE_FORMATS = (
    "`reference=` accepts a run directory containing predictive.safetensors, or a file: "
    ".safetensors (tensor under key 'predictive'), .csv (numeric matrix, optional header row, "
    "e.g. the NeurIPS BDL starter kit's probs.csv) or .npy (numeric array, no pickles)"
)


class StoreError(Exception):
    """A corrupt or missing sample/reference file; str() is one message naming the file and the fix.

    A dedicated type lets the runner and the CLI turn storage problems into a one-line message
    rather than a traceback through safetensors or numpy internals.
    """


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_error(path: Path, err: OSError) -> StoreError:
    """One message for a failed write, saying that what was written before is still there."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreError(
            f"no space left on device writing {path} (the previous {path.name}, if any, is "
            "intact); free space and resume"
        )
    return StoreError(
        f"cannot write {path} ({err.strerror or err}); make {path.parent} a writable folder or "
        "choose another output directory (hydra.run.dir=...)"
    )


def make_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(
            f"cannot create the folder {directory} ({e.strerror or e}): a file may stand on its "
            "path or its parent is read-only; choose another output directory "
            "(hydra.run.dir=...) or remove the file in the way"
        ) from None


def atomic_write(path: Path, data: bytes, durable: bool = True) -> None:
    """Write through `bdl.atomic.atomic_file`: readers never see a partial file, and a
    failed write (a full disk) leaves the previous file as it was."""
    try:
        with atomic_file(path, durable) as f:
            f.write(data)
    except OSError as e:
        raise write_error(path, e) from None


def _to_cpu_tensors(tensors: Mapping[str, Any]) -> dict[str, Tensor]:
    """Detached, contiguous CPU copies: safetensors refuses views and shared (tied) storage."""
    out: dict[str, Tensor] = {}
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be strings, got {name!r}")
        t = value if isinstance(value, Tensor) else torch.as_tensor(value)
        out[name] = t.detach().to("cpu", copy=True).contiguous()
    return out


def _jsonable(value: Any) -> Any:
    """Unwrap 0-d tensors and numpy scalars, which runners naturally pass as metadata."""
    if isinstance(value, Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _read_manifest(directory: Path) -> list[dict]:
    path = directory / MANIFEST
    fix = "re-run the sampling, or point at the directory the samples were written to"
    if not path.is_file():
        raise StoreError(f"{path} is missing; no samples were recorded there ({fix})")
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"{path} is not a readable JSON manifest ({e}); {fix}") from None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict)
        and isinstance(e.get("index"), int)
        and isinstance(e.get("file"), str)
        and isinstance(e.get("sha256"), str)
        for e in entries
    ):
        raise StoreError(
            f"{path} is not a sample manifest (expected a list of entries with 'index', 'file' "
            f"and 'sha256'); {fix}"
        )
    for e in entries:
        # A manifest names files relative to its directory; anything else could read elsewhere.
        if Path(e["file"]).name != e["file"] or e["file"] in ("", ".", ".."):
            raise StoreError(f"{path} names an invalid sample file {e['file']!r}; {fix}")
    return sorted(entries, key=lambda e: e["index"])


class SampleStore:
    """Appends posterior samples to a directory one file at a time.

    Holds no tensors, so memory stays flat however long the chain runs. Re-opening a directory
    with a manifest continues its numbering; a resumed run first cuts it back to its checkpoint
    (`truncate`).

    Args:
        directory: where samples go; created with its parents if needed.
        fsync_each: flush every sample to disk and list it in the manifest as it is added; if
            False, both wait for `sync`.
    """

    def __init__(self, directory: str | Path, fsync_each: bool = True) -> None:
        self.directory = Path(directory)
        self.fsync_each = fsync_each
        make_dir(self.directory)
        if (self.directory / MANIFEST).exists():
            self._entries = _read_manifest(self.directory)
        else:
            self._entries = []
        # each entry's JSON, encoded once: re-encoding the whole manifest at every sample made a
        # long chain's sampling quadratic in its number of samples
        self._lines = [json.dumps(entry) for entry in self._entries]
        self._next = max((e["index"] for e in self._entries), default=-1) + 1
        self._listed = len(self._entries)  # the entries before it are flushed and listed on disk

    def add(self, params: Mapping[str, Tensor], **metadata: Any) -> Path:
        """Write one sample and record it; returns the sample file's path.

        The sample file is complete before the manifest mentions it (with ``fsync_each=False``,
        from the next `sync`), so a crash in between leaves at worst an unlisted file that
        the next ``add`` overwrites.
        """
        clash = [k for k in metadata if k in _RESERVED]
        if clash:
            raise ValueError(f"metadata keys {clash} are reserved for the manifest")
        metadata = {k: _jsonable(v) for k, v in metadata.items()}
        try:
            json.dumps(metadata, allow_nan=True)
        except (TypeError, ValueError) as e:
            raise TypeError(f"sample metadata must be JSON-serialisable: {e}") from None

        index = self._next
        name = f"sample_{index:05d}.safetensors"
        path = self.directory / name
        data = _st_save(_to_cpu_tensors(params), metadata={"index": str(index)})
        atomic_write(path, data, self.fsync_each)
        entry = {"index": index, "file": name, "sha256": _sha256(data), **metadata}
        del data
        line = json.dumps(entry)
        if self.fsync_each:
            self._write_manifest([*self._lines, line])
            self._listed += 1
        self._entries.append(entry)
        self._lines.append(line)
        self._next = index + 1
        return path

    def truncate(self, count: int) -> None:
        """Keep the first ``count`` samples and delete every other file of the store: the samples
        a killed run wrote after its last checkpoint, which the resumed run takes again, and
        temporary files of an interrupted write."""
        fix = (
            "restore it, or run it again from the beginning: delete the run's "
            "checkpoint.safetensors (resume=true then starts over)"
        )
        if count > len(self._entries):
            raise StoreError(
                f"{self.directory / MANIFEST} lists {len(self._entries)} samples, fewer than the "
                f"{count} its run's checkpoint recorded: samples were removed since; {fix}"
            )
        kept = self._entries[:count]
        for entry in kept:  # what the resumed run keeps is what its checkpoint counted
            _read_checked(self.directory, entry, fix)
        if count < self._listed:  # the manifest never lists a sample that sync has not flushed
            self._write_manifest(self._lines[:count])
        listed = {entry["file"] for entry in kept} | {MANIFEST}
        for path in self.directory.iterdir():
            if path.name not in listed and path.is_file():
                path.unlink()
        self._entries, self._lines = kept, self._lines[:count]
        self._listed = min(self._listed, count)
        self._next = max((e["index"] for e in kept), default=-1) + 1

    def sync(self) -> None:
        """Flush to disk the samples added since the last sync, then list them in the manifest
        (flushed too, with the folder's entries); a no-op for a store that does so at each add.
        On an error nothing is listed that is not on disk, and a later sync tries again."""
        if self._listed == len(self._entries):
            return
        for entry in self._entries[self._listed :]:
            self._fsync(self.directory / entry["file"])
        self._write_manifest(self._lines)
        self._fsync(self.directory)
        self._listed = len(self._entries)

    def _fsync(self, path: Path) -> None:
        try:
            fsync_path(path)
        except OSError as e:
            raise StoreError(
                f"could not flush {path} to disk ({e.strerror or e}); the samples of "
                f"{self.directory} taken since its last sync are not listed yet (a resumed run "
                "takes them again): free space (or make the folder writable) and resume"
            ) from None

    def _write_manifest(self, lines: list[str]) -> None:
        """Replace the manifest by the entries encoded as ``lines``, one entry per line."""
        text = "[\n" + ",\n".join(lines) + "\n]\n"
        atomic_write(self.directory / MANIFEST, text.encode("utf-8"))

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def manifest(self) -> list[dict]:
        """A copy of the manifest entries in index order (mutating it cannot corrupt the store)."""
        return [dict(e) for e in self._entries]

    def __repr__(self) -> str:
        return f"SampleStore({str(self.directory)!r}, n={len(self)})"


def load_samples(directory: str | Path) -> Iterator[tuple[dict[str, Tensor], dict]]:
    """Yield ``(tensors, manifest entry)`` in index order, one file in memory at a time.

    The tensors come in the order of their names, the same for every sample: a safetensors file
    keeps none of its own, and its reader's order changed from one file to the next, so that
    ``torch.cat(list(tensors.values()))`` lined up different parameters across samples.

    The manifest is checked now, so a wrong directory fails at the call; each sample file is read,
    checked against its SHA-256 and parsed only when the iterator reaches it.
    """
    directory = Path(directory)
    entries = _read_manifest(directory)
    return _iter_samples(directory, entries)


def read_manifest(directory: str | Path) -> list[dict]:
    """The manifest entries of the store in ``directory``, in index order (checked as
    `load_samples` checks them, without reading any sample)."""
    return _read_manifest(Path(directory))


#: The largest safetensors header read (its JSON: the tensors' names, shapes and offsets).
MAX_HEADER_BYTES = 100_000_000


def read_safetensors(path: Path) -> bytes:
    """The bytes of the safetensors file ``path``, read only once its size is the one its
    header declares (8 bytes of length, that JSON, then the tensors' data up to the last
    offset): a file grown to gigabytes (a sparse file, another file renamed) is refused by name
    before it is read, not read whole. The `StoreError` says what is wrong, for the caller
    to name the file; an ``OSError`` propagates for the caller to word."""
    size = path.stat().st_size
    with path.open("rb") as file:
        length = int.from_bytes(file.read(8), "little")
        if not 0 < length <= min(MAX_HEADER_BYTES, size - 8):
            raise StoreError(f"not safetensors: a header of {length} bytes")
        try:
            header = json.loads(file.read(length))
            end = max(
                (t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0
            )
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise StoreError(f"not safetensors: its header fails ({e})") from None
        if size != 8 + length + end:
            raise StoreError(f"it holds {size} bytes where its header declares {8 + length + end}")
        file.seek(0)
        return file.read()


def _read_checked(directory: Path, entry: dict, fix: str) -> bytes:
    """The bytes of the sample file of manifest ``entry``, checked against its SHA-256."""
    path = directory / entry["file"]
    try:
        data = read_safetensors(path)
    except FileNotFoundError:
        raise StoreError(f"sample file {path} is missing; {fix}") from None
    except OSError as e:
        raise StoreError(f"sample file {path} cannot be read ({e}); {fix}") from None
    except StoreError as e:
        raise StoreError(f"sample file {path} is corrupt or incomplete ({e}); {fix}") from None
    if _sha256(data) != entry["sha256"]:
        raise StoreError(f"sample file {path} is corrupt or incomplete (sha256 mismatch); {fix}")
    return data


def _iter_samples(directory: Path, entries: list[dict]) -> Iterator[tuple[dict[str, Tensor], dict]]:
    fix = "delete it and its manifest entry or re-run"
    for entry in entries:
        path = directory / entry["file"]
        data = _read_checked(directory, entry, fix)
        try:
            tensors = _st_load(data)
        except (SafetensorError, ValueError, RuntimeError) as e:
            raise StoreError(
                f"sample file {path} is corrupt or incomplete (not safetensors: {e}); {fix}"
            ) from None
        del data
        for name, tensor in tensors.items():
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                raise StoreError(
                    f"sample file {path} holds non-finite weights ({name}): a chain that "
                    f"diverged wrote it; {fix}"
                )
        yield dict(sorted(tensors.items())), dict(entry)


def save_predictive(path: str | Path, predictive: Tensor, **tensors: Tensor) -> None:
    """Save a predictive distribution (plus e.g. ``targets=``) for later comparison runs.

    A directory ``path`` receives ``predictive.safetensors``, which is what
    `load_reference` looks for in a run directory.
    """
    path = Path(path)
    if path.is_dir():
        path = path / PREDICTIVE
    make_dir(path.parent)
    atomic_write(path, _st_save(_to_cpu_tensors({"predictive": predictive, **tensors})))


def load_reference(path: str | Path) -> Tensor:
    """Load a reference predictive (e.g. HMC probabilities) as a float32 tensor.

    A single-column CSV gives a 1-D tensor (one value per test point), so that it lines up
    with a 1-D predictive instead of broadcasting against it.
    """
    path = Path(path)
    if path.is_dir():
        candidate = path / PREDICTIVE
        if not candidate.is_file():
            raise StoreError(f"{path} is a directory without {PREDICTIVE}; {_REFERENCE_FORMATS}")
        path = candidate
    if not path.exists():
        raise StoreError(f"reference {path} does not exist; {_REFERENCE_FORMATS}")
    suffix = path.suffix.lower()
    first_line = None  # a CSV's line number of its first data row, to name the faulty row
    try:
        if suffix == ".safetensors":
            array = _reference_safetensors(path)
        elif suffix == ".csv":
            array, first_line = _reference_csv(path)
        elif suffix == ".npy":
            array = _reference_npy(path)
        else:
            raise StoreError(
                f"reference {path} has unsupported suffix {path.suffix!r}; {_REFERENCE_FORMATS}"
            )
    except StoreError:
        raise
    except (OSError, ValueError, RuntimeError, TypeError, SafetensorError) as e:
        raise StoreError(f"reference {path} cannot be parsed ({e}); {_REFERENCE_FORMATS}") from None
    _check_reference_values(path, array, first_line)
    return array


def _check_reference_values(path: Path, array: Tensor, first_line: int | None) -> None:
    """Refuse values that would make agreement and total variation meaningless.

    A matrix is one row of class probabilities per test point: every entry finite and
    non-negative, every row summing to 1 within ``PROB_SUM_TOL`` (float32 rounding of a sum is
    about 1e-7; the tolerance also admits probabilities printed with four decimals). Anything
    else gave a total variation of 24.5 or NaN with nothing said. Other shapes (a 1-D vector of
    regression predictions) are only required to be finite; the runner checks their shape.
    """

    def row(i: int) -> str:
        if first_line is None:
            return f"row {i} (0-based)"
        return f"row {i} (0-based; line {first_line + i} of the file)"

    values = array.double()
    flat = values.reshape(values.shape[0], -1) if values.ndim else values.reshape(1, 1)
    bad = (~torch.isfinite(flat)).any(dim=1).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise StoreError(
            f"reference {path}: {row(i)} holds a NaN or infinite value; a reference must be "
            "finite. Regenerate it or fix that row."
        )
    if values.ndim != 2:
        return
    bad = (values < 0).any(dim=1).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise StoreError(
            f"reference {path}: {row(i)} has a negative entry ({float(values[i].min()):g}); a "
            "reference matrix holds class probabilities (one row per test point). Point "
            "reference= at a classification run or its probabilities."
        )
    sums = values.sum(dim=1)
    bad = ((sums - 1).abs() > PROB_SUM_TOL).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise StoreError(
            f"reference {path}: {row(i)} sums to {float(sums[i]):.6g}, not 1 (tolerance "
            f"{PROB_SUM_TOL:g}); a reference matrix holds class probabilities (one row per test "
            "point, e.g. a softmax output, not logits). Point reference= at a classification run "
            "or normalise the rows."
        )


def _reference_safetensors(path: Path) -> Tensor:
    tensors = _st_load(path.read_bytes())
    if "predictive" not in tensors:
        raise StoreError(
            f"reference {path} has no 'predictive' tensor (keys: {sorted(tensors)}); "
            f"{_REFERENCE_FORMATS}"
        )
    t = tensors["predictive"]
    if t.is_complex() or t.dtype == torch.bool:
        raise StoreError(f"reference {path} holds a {t.dtype} tensor; {_REFERENCE_FORMATS}")
    return t.to(torch.float32)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _reference_csv(path: Path) -> tuple[Tensor, int | None]:
    text = path.read_text(encoding="utf-8-sig")
    numbered = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    lines = [line for _, line in numbered]
    if not lines:
        raise StoreError(f"reference {path} is empty; {_REFERENCE_FORMATS}")
    delimiter = "," if "," in lines[0] else None
    first = next(csv.reader([lines[0]])) if delimiter else lines[0].split()
    skip = 0 if all(_is_number(c.strip()) for c in first) else 1
    if skip == len(lines):
        raise StoreError(f"reference {path} has a header but no rows; {_REFERENCE_FORMATS}")
    array = np.loadtxt(
        io.StringIO("\n".join(lines[skip:])), delimiter=delimiter, dtype=np.float64, ndmin=2
    )
    if array.shape[1] == 1:
        array = array[:, 0]
    # Line numbers name a row only when no blank line sits between data rows.
    contiguous = numbered[-1][0] - numbered[skip][0] == len(numbered) - 1 - skip
    return torch.from_numpy(array.astype(np.float32)), (numbered[skip][0] if contiguous else None)


def _reference_npy(path: Path) -> Tensor:
    array = np.load(path, allow_pickle=False)
    if not np.issubdtype(array.dtype, np.number) or np.issubdtype(array.dtype, np.complexfloating):
        raise StoreError(f"reference {path} holds a {array.dtype} array; {_REFERENCE_FORMATS}")
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
