"""Posterior samples and predictive distributions on disk, in formats that never execute code.

A chain of millions of network samples neither fits in memory nor belongs in a million files, so
`SampleStore` appends the draws of a chain to shards: safetensors files of many draws each, one
stacked tensor ``[draws, *shape]`` per parameter, the draws' metadata (their epochs) in the
file's header. A shard holds `SHARD_BYTES` of weights (at least one draw), so that 10^5 draws of
a small network make a few dozen files, while a network of tens of megabytes still keeps one
draw a file. A small JSON manifest lists the shards, each with its SHA-256: a run killed while
writing, a partial copy or a file from another run is then reported by name instead of silently
feeding garbage into an evaluation. Safetensors (and ``np.load(allow_pickle=False)``) are used
throughout because ``torch.load``/pickle can run arbitrary code from a downloaded or shared file.

The manifest (``{"format": "bdl-sample-shards", "draws_per_shard", "shards": [{"file",
"sha256", "first", "count"}, …]}``) is rewritten atomically, so that a crash leaves either the
old or the new manifest, never half of one, and it lists a shard only once the shard's file is
complete on disk. A shard's file is never changed once listed: the shard still filling is
written, when the store is synced, under a new name that says its draws
(``draws_<first>-<end>.safetensors``), listed in its predecessor's place, and the predecessor is
removed only then. A kill at any moment so loses nothing synced, and the shards' names and bytes
depend only on the draws: a resumed run's store is the one of a run never stopped.

The draws of the shard being filled are kept in memory (at most `SHARD_BYTES` a chain) and go to
disk when it is full or when `SampleStore.sync` is called, at each checkpoint of the runner (the
only point a resumed run goes back to); opened with ``fsync_each=True``, a store syncs at each
draw instead, at a cost that grows with the shard. A resumed run cuts its stores back to its
checkpoint, removing every file they no longer list, and takes the later draws again.

Run directories written before shards (a ``sample_NNNNN.safetensors`` file per draw, the
manifest a JSON list of ``{"index", "file", "sha256", **metadata}``) still read; resumed, their
draws are moved into shards.
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
    "SHARD_BYTES",
    "SampleStore",
    "StoreError",
    "atomic_write",
    "count_samples",
    "make_dir",
    "write_error",
    "load_reference",
    "load_samples",
    "read_manifest",
    "save_predictive",
]

MANIFEST = "manifest.json"
PREDICTIVE = "predictive.safetensors"
FORMAT = "bdl-sample-shards"
#: The weights a shard holds, in bytes: it then holds ``SHARD_BYTES // (a draw's bytes)`` draws
#: (at least one). Also the most a store keeps in memory.
SHARD_BYTES = 4 * 1024 * 1024
_DRAWS = "draws"  # the shard header's metadata key holding its draws' metadata, a JSON list
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


_FIX = "re-run the sampling, or point at the directory the samples were written to"
_DAMAGED = "delete it and its manifest entry or re-run"  # a sample file that fails its checks


def shard_name(first: int, end: int) -> str:
    """The file of the shard of draws ``first`` to ``end`` (excluded)."""
    return f"draws_{first:07d}-{end:07d}.safetensors"


def _legacy_shards(path: Path, entries: Any) -> list[dict]:
    """A store of a file per draw (before shards), each file as a shard of one unstacked draw."""
    if not all(
        isinstance(e, dict)
        and isinstance(e.get("index"), int)
        and isinstance(e.get("file"), str)
        and isinstance(e.get("sha256"), str)
        for e in entries
    ):
        raise StoreError(
            f"{path} is not a sample manifest (expected a list of entries with 'index', 'file' "
            f"and 'sha256'); {_FIX}"
        )
    shards = [
        {
            "file": e["file"],
            "sha256": e["sha256"],
            "first": e["index"],
            "count": 1,
            "stacked": False,
            _DRAWS: [{k: v for k, v in e.items() if k not in _RESERVED}],
        }
        for e in sorted(entries, key=lambda e: e["index"])
    ]
    if len({s["first"] for s in shards}) < len(shards):
        raise StoreError(f"{path} lists a sample index twice; {_FIX}")
    return shards


def _read_manifest(directory: Path) -> tuple[list[dict], int | None]:
    """The shards the manifest of ``directory`` lists, in order, and its draws per shard (None
    for a store of a file per draw)."""
    path = directory / MANIFEST
    if not path.is_file():
        raise StoreError(f"{path} is missing; no samples were recorded there ({_FIX})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"{path} is not a readable JSON manifest ({e}); {_FIX}") from None
    if isinstance(manifest, list):
        shards, capacity = _legacy_shards(path, manifest), None
    else:
        shards = manifest.get("shards") if isinstance(manifest, dict) else None
        capacity = manifest.get("draws_per_shard") if isinstance(manifest, dict) else None
        valid = (
            manifest.get("format") == FORMAT
            and isinstance(capacity, int)
            and capacity > 0
            and isinstance(shards, list)
            and all(
                isinstance(s, dict)
                and set(s) == {"file", "sha256", "first", "count"}
                and isinstance(s["file"], str)
                and isinstance(s["sha256"], str)
                and isinstance(s["first"], int)
                and isinstance(s["count"], int)
                and 0 < s["count"] <= capacity
                for s in shards
            )
        )
        if not valid:
            raise StoreError(
                f"{path} is not a sample manifest (expected {{'format': '{FORMAT}', "
                f"'draws_per_shard', 'shards': [{{'file', 'sha256', 'first', 'count'}}, …]}}); "
                f"{_FIX}"
            )
        shards = [{**s, "stacked": True} for s in shards]
        ends = [0] + [s["first"] + s["count"] for s in shards]
        if any(s["first"] < end for s, end in zip(shards, ends, strict=False)):
            raise StoreError(f"{path} lists shards out of order or overlapping; {_FIX}")
    for s in shards:
        # A manifest names files relative to its directory; anything else could read elsewhere.
        if Path(s["file"]).name != s["file"] or s["file"] in ("", ".", "..", MANIFEST):
            raise StoreError(f"{path} names an invalid sample file {s['file']!r}; {_FIX}")
    return shards, capacity


def _listed(shard: dict) -> dict:
    """A shard's record as the manifest lists it."""
    return {key: shard[key] for key in ("file", "sha256", "first", "count")}


class SampleStore:
    """Appends posterior samples to a directory, a shard of many draws at a time.

    Holds the draws of the shard being filled only, so memory stays flat however long the chain
    runs. Re-opening a directory with a manifest continues its numbering; a resumed run first cuts
    it back to its checkpoint (`truncate`).

    Args:
        directory: where samples go; created with its parents if needed.
        fsync_each: write every draw to disk and list it in the manifest as it is added; if
            False, both wait for `sync` (or for its shard to fill).
        shard_bytes: the weights a shard holds (`SHARD_BYTES` by default); the first draw sets
            how many draws that is, for good: a store reopened keeps its manifest's number.
    """

    def __init__(
        self, directory: str | Path, fsync_each: bool = True, shard_bytes: int | None = None
    ) -> None:
        self.directory = Path(directory)
        self.fsync_each = fsync_each
        self.shard_bytes = SHARD_BYTES if shard_bytes is None else shard_bytes
        make_dir(self.directory)
        if (self.directory / MANIFEST).exists():
            self._shards, self._capacity = _read_manifest(self.directory)
        else:
            self._shards, self._capacity = [], None
        self._on_disk = [_listed(s) for s in self._shards]  # what the manifest on disk lists
        self._opened = False  # whether the last shard, if it is not full, is reopened for draws
        self._draws: list[dict[str, Tensor]] = []  # the shard being filled
        self._metadata: list[dict[str, Any]] = []
        self._written: dict | None = None  # the file written of the shard being filled

    @property
    def _first(self) -> int:
        """The index of the first draw of the shard being filled."""
        return self._shards[-1]["first"] + self._shards[-1]["count"] if self._shards else 0

    def add(self, params: Mapping[str, Tensor], **metadata: Any) -> int:
        """Add one draw; returns its index. It is on disk and listed once its shard is full or
        the store is synced (at once with ``fsync_each``)."""
        clash = [k for k in metadata if k in _RESERVED]
        if clash:
            raise ValueError(f"metadata keys {clash} are reserved for the manifest")
        metadata = {k: _jsonable(v) for k, v in metadata.items()}
        try:
            json.dumps(metadata, allow_nan=True)
        except (TypeError, ValueError) as e:
            raise TypeError(f"sample metadata must be JSON-serialisable: {e}") from None
        tensors = dict(sorted(_to_cpu_tensors(params).items()))
        if not self._opened:
            self._cut(len(self), check=False)
        index = self._first + len(self._draws)
        self._append(tensors, metadata)
        if self.fsync_each:
            self.sync()
        return index

    def _append(self, tensors: dict[str, Tensor], metadata: dict[str, Any]) -> None:
        if self._draws:
            layout = {n: (t.shape, t.dtype) for n, t in self._draws[0].items()}
            if {n: (t.shape, t.dtype) for n, t in tensors.items()} != layout:
                raise ValueError(
                    f"a draw's tensors differ from those of the draws before it in "
                    f"{self.directory} (names, shapes or dtypes): one store holds one network"
                )
        if self._capacity is None:
            size = sum(t.numel() * t.element_size() for t in tensors.values())
            self._capacity = max(1, self.shard_bytes // max(size, 1))
        self._draws.append(tensors)
        self._metadata.append(metadata)
        if len(self._draws) == self._capacity:
            try:
                shard = self._write_shard(durable=True)
            except BaseException:  # a full disk: the draw is not added
                self._draws.pop()
                self._metadata.pop()
                raise
            self._shards.append(shard)
            self._draws, self._metadata, self._written = [], [], None

    def _write_shard(self, durable: bool) -> dict:
        """Write the draws being filled to their own file; returns its shard record."""
        first, count = self._first, len(self._draws)
        names = list(self._draws[0])
        stacked = {name: torch.stack([draw[name] for draw in self._draws]) for name in names}
        data = _st_save(stacked, metadata={_DRAWS: json.dumps(self._metadata)})
        del stacked
        name = shard_name(first, first + count)
        atomic_write(self.directory / name, data, durable)
        shard = {"file": name, "sha256": _sha256(data), "first": first, "count": count}
        return {**shard, "stacked": True}

    def truncate(self, count: int) -> None:
        """Keep the first ``count`` draws and delete every other file of the store: the draws
        a killed run wrote after its last checkpoint, which the resumed run takes again, and
        temporary files of an interrupted write. The draws kept are checked against their
        SHA-256; a shard not full is reopened to be filled, and a store of a file per draw moved
        into shards."""
        fix = (
            "restore it, or run it again from the beginning: delete the run's "
            "checkpoint.safetensors (resume=true then starts over)"
        )
        if count > len(self):
            raise StoreError(
                f"{self.directory / MANIFEST} lists {len(self)} samples, fewer than the "
                f"{count} its run's checkpoint recorded: samples were removed since; {fix}"
            )
        self._cut(count, check=True, fix=fix)
        listed = {shard["file"] for shard in self._on_disk} | {MANIFEST}
        for path in self.directory.iterdir():
            if path.name not in listed and path.is_file():
                path.unlink()

    def _cut(self, count: int, check: bool, fix: str = _DAMAGED) -> None:
        """Keep the first ``count`` draws, reopening the shard they end in unless it is full
        (and moving draws of a file each into shards); ``check``: every kept shard against its
        SHA-256, not only those read."""
        shards, draws, metadata = self._shards, self._draws, self._metadata
        self._shards, self._draws, self._metadata, self._written = [], [], [], None
        kept = 0
        for shard in shards:
            if kept == count:
                break
            whole = shard["stacked"] and shard["count"] == self._capacity and not self._draws
            if whole and kept + shard["count"] <= count:
                if check:
                    _read_checked(self.directory, shard, fix)
                self._shards.append(shard)
                kept += shard["count"]
                continue
            for tensors, info in _shard_draws(self.directory, shard, fix):
                if kept == count:
                    break
                self._append(tensors, {k: v for k, v in info.items() if k not in _RESERVED})
                kept += 1
            reopened = (self._first, len(self._draws)) == (shard["first"], shard["count"])
            if shard["stacked"] and reopened:
                # reopened as it was: its file stays until the shard grows
                self._written = shard
        for tensors, info in zip(draws, metadata, strict=True):
            if kept == count:
                break
            self._append(tensors, info)
            kept += 1
        self._opened = True
        self.sync()

    def sync(self) -> None:
        """Write to disk the draws added since the last sync, then list them in the manifest
        (flushed too, with the folder's entries), then remove the file of the shard they extend;
        a no-op when nothing was added. On an error nothing is listed that is not on disk, and
        a later sync tries again."""
        if self._draws and (self._written or {}).get("count") != len(self._draws):
            self._written = self._write_shard(durable=True)
        shards = [_listed(s) for s in self._shards]
        if self._draws:
            shards.append(_listed(self._written))
        if shards == self._on_disk:
            return
        if shards:
            manifest = {"format": FORMAT, "draws_per_shard": self._capacity, "shards": shards}
            text = json.dumps(manifest, indent=1) + "\n"
            atomic_write(self.directory / MANIFEST, text.encode("utf-8"))
        else:  # a store cut back to nothing is one that has not begun (no draws per shard yet)
            (self.directory / MANIFEST).unlink()
        self._fsync(self.directory)
        files = {shard["file"] for shard in shards}
        for shard in self._on_disk:
            if shard["file"] not in files:
                (self.directory / shard["file"]).unlink(missing_ok=True)
        self._on_disk = shards

    def _fsync(self, path: Path) -> None:
        try:
            fsync_path(path)
        except OSError as e:
            raise StoreError(
                f"could not flush {path} to disk ({e.strerror or e}); the samples of "
                f"{self.directory} taken since its last sync are not listed yet (a resumed run "
                "takes them again): free space (or make the folder writable) and resume"
            ) from None

    def __len__(self) -> int:
        return sum(shard["count"] for shard in self._shards) + len(self._draws)

    @property
    def files(self) -> list[str]:
        """The files the manifest on disk lists, in order."""
        return [shard["file"] for shard in self._on_disk]

    def __repr__(self) -> str:
        return f"SampleStore({str(self.directory)!r}, n={len(self)})"


def load_samples(directory: str | Path) -> Iterator[tuple[dict[str, Tensor], dict]]:
    """Yield ``(tensors, manifest entry)`` in index order, one shard in memory at a time.

    The tensors come in the order of their names, the same for every sample; the entry is
    ``{"index", "file", "sha256", **metadata}`` (the file and SHA-256 of the draw's shard).

    The manifest is checked now, so a wrong directory fails at the call; each shard is read,
    checked against its SHA-256 and parsed only when the iterator reaches it.
    """
    directory = Path(directory)
    shards, _ = _read_manifest(directory)
    return _iter_samples(directory, shards)


def count_samples(directory: str | Path) -> int:
    """The number of draws the store in ``directory`` lists (its manifest alone is read)."""
    shards, _ = _read_manifest(Path(directory))
    return sum(shard["count"] for shard in shards)


def read_manifest(directory: str | Path) -> list[dict]:
    """The entries ``{"index", "file", "sha256", **metadata}`` of the draws of the store in
    ``directory``, in index order: its manifest checked as `load_samples` checks it, and of each
    shard the header only (not checked against its SHA-256, which `load_samples` does)."""
    directory = Path(directory)
    shards, _ = _read_manifest(directory)
    entries = []
    for shard in shards:
        metadata = shard.get(_DRAWS)
        if metadata is None:
            path = directory / shard["file"]
            try:
                with path.open("rb") as file:
                    header = _header(path, file.read(8 + MAX_HEADER_BYTES))
            except OSError as e:
                raise StoreError(f"sample file {path} cannot be read ({e}); {_FIX}") from None
            metadata = _draws_metadata(path, header, shard["count"])
        entries += _entries(shard, metadata)
    return entries


def _entries(shard: dict, metadata: list[dict]) -> list[dict]:
    base = {"file": shard["file"], "sha256": shard["sha256"]}
    return [{"index": shard["first"] + i, **base, **info} for i, info in enumerate(metadata)]


#: The largest safetensors header read (its JSON: the tensors' names, shapes and offsets).
MAX_HEADER_BYTES = 100_000_000


def _header(path: Path, data: bytes) -> dict:
    """The JSON header of the safetensors bytes ``data`` (at least its first 8 + header bytes)."""
    length = int.from_bytes(data[:8], "little")
    try:
        if not 0 < length <= min(MAX_HEADER_BYTES, len(data) - 8):
            raise ValueError(f"a header of {length} bytes")
        header = json.loads(data[8 : 8 + length])
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
        raise StoreError(
            f"sample file {path} is corrupt or incomplete (not safetensors: {e}); {_FIX}"
        ) from None
    return header


def _draws_metadata(path: Path, header: dict, count: int) -> list[dict]:
    """The metadata of each draw of a shard, from its header."""
    try:
        metadata = json.loads(header["__metadata__"][_DRAWS])
    except (KeyError, TypeError, ValueError):
        metadata = None
    if not (
        isinstance(metadata, list)
        and len(metadata) == count
        and all(isinstance(m, dict) for m in metadata)
    ):
        raise StoreError(
            f"sample file {path} is not a shard of {count} draws (its header does not list "
            f"their metadata); {_FIX}"
        )
    return metadata


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


def _read_checked(directory: Path, shard: dict, fix: str) -> bytes:
    """The bytes of the file of ``shard``, checked against its SHA-256."""
    path = directory / shard["file"]
    try:
        data = read_safetensors(path)
    except FileNotFoundError:
        raise StoreError(f"sample file {path} is missing; {fix}") from None
    except OSError as e:
        raise StoreError(f"sample file {path} cannot be read ({e}); {fix}") from None
    except StoreError as e:
        raise StoreError(f"sample file {path} is corrupt or incomplete ({e}); {fix}") from None
    if _sha256(data) != shard["sha256"]:
        raise StoreError(f"sample file {path} is corrupt or incomplete (sha256 mismatch); {fix}")
    return data


def _shard_draws(
    directory: Path, shard: dict, fix: str
) -> Iterator[tuple[dict[str, Tensor], dict]]:
    """The draws of ``shard``, checked, each with its manifest entry; the shard's file is read
    at the first."""
    path, count = directory / shard["file"], shard["count"]
    data = _read_checked(directory, shard, fix)
    try:
        tensors = dict(sorted(_st_load(data).items()))
    except (SafetensorError, ValueError, RuntimeError) as e:
        raise StoreError(
            f"sample file {path} is corrupt or incomplete (not safetensors: {e}); {fix}"
        ) from None
    stacked = shard["stacked"]
    metadata = _draws_metadata(path, _header(path, data), count) if stacked else shard[_DRAWS]
    del data
    if stacked and any(t.dim() == 0 or t.shape[0] != count for t in tensors.values()):
        raise StoreError(f"sample file {path} does not hold {count} draws of each tensor; {fix}")
    for name, tensor in tensors.items():
        if tensor.is_floating_point():
            finite = torch.isfinite(tensor.reshape(count if stacked else 1, -1)).all(dim=1)
            if not finite.all():
                index = shard["first"] + int((~finite).nonzero()[0])
                raise StoreError(
                    f"sample file {path} holds non-finite weights ({name}, draw {index}): a "
                    f"chain that diverged wrote it; {fix}"
                )
    entries = _entries(shard, metadata)
    if not stacked:
        yield tensors, entries[0]
        return
    for i, entry in enumerate(entries):
        # copies, so that a draw kept does not keep its whole shard in memory
        yield {name: tensor[i].clone() for name, tensor in tensors.items()}, entry


def _iter_samples(directory: Path, shards: list[dict]) -> Iterator[tuple[dict[str, Tensor], dict]]:
    for shard in shards:
        yield from _shard_draws(directory, shard, _DAMAGED)


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
