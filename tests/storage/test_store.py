"""The sample store must round-trip exactly, fail loudly on damaged files, and never unpickle."""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import os
import pickle
import stat
import types
import weakref

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save, save_file

import bdl.atomic
from bdl.storage.store import (
    PREDICTIVE,
    SampleStore,
    StoreError,
    count_samples,
    load_reference,
    load_samples,
    read_manifest,
    save_predictive,
)


def _params(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(4, 3, generator=g)
    return {
        "layer.weight": w.t(),  # a non-contiguous view must still be stored
        "layer.bias": torch.randn(3, generator=g, dtype=torch.float64),
        "count": torch.tensor([seed], dtype=torch.int64),
    }


#: The bytes of a draw of `_params`: 12 float32, 3 float64, 1 int64.
DRAW_BYTES = 12 * 4 + 3 * 8 + 8
#: The shards of `store_dir`'s three draws, two a shard.
SHARDS = ["draws_0000000-0000002.safetensors", "draws_0000002-0000003.safetensors"]


@pytest.fixture
def store_dir(tmp_path):
    store = SampleStore(tmp_path / "a" / "samples", shard_bytes=2 * DRAW_BYTES + 1)
    for i in range(3):
        store.add(_params(i), epoch=i, step=10 * i)
    return tmp_path / "a" / "samples"


def write_store_of_a_file_per_draw(directory, draws: list[dict[str, torch.Tensor]]) -> None:
    """A store as bdl wrote it before shards: a safetensors file per draw, and a manifest listing
    each with its index, SHA-256 and epoch."""
    directory.mkdir(parents=True)
    entries = []
    for i, draw in enumerate(draws):
        name = f"sample_{i:05d}.safetensors"
        data = save({k: v.contiguous() for k, v in draw.items()}, metadata={"index": str(i)})
        (directory / name).write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        entries.append({"index": i, "file": name, "sha256": sha, "epoch": 10 + i})
    (directory / "manifest.json").write_text(json.dumps(entries))


def test_round_trip_and_manifest(store_dir):
    loaded = list(load_samples(store_dir))
    assert len(loaded) == 3
    for i, (tensors, entry) in enumerate(loaded):
        expected = _params(i)
        assert tensors.keys() == expected.keys()
        for k, v in expected.items():
            assert tensors[k].dtype == v.dtype
            assert torch.equal(tensors[k], v)
        assert entry["index"] == i
        assert entry["file"] == SHARDS[i // 2]
        assert entry["epoch"] == i and entry["step"] == 10 * i
        shard = (store_dir / SHARDS[i // 2]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(shard).hexdigest()
    assert read_manifest(store_dir) == [entry for _, entry in loaded]
    manifest = json.loads((store_dir / "manifest.json").read_text())
    assert manifest["draws_per_shard"] == 2
    assert [(s["first"], s["count"]) for s in manifest["shards"]] == [(0, 2), (2, 1)]
    assert count_samples(store_dir) == 3
    # No temporary files are left behind by the atomic writes.
    assert sorted(p.name for p in store_dir.iterdir()) == [*SHARDS, "manifest.json"]


def test_a_shard_holds_each_tensor_stacked_over_its_draws(store_dir):
    shard = load_file(store_dir / SHARDS[0])
    assert torch.equal(
        shard["layer.weight"], torch.stack([_params(i)["layer.weight"] for i in (0, 1)])
    )
    assert shard["count"].tolist() == [[0], [1]]


def test_a_store_of_a_file_per_draw_reads_and_is_moved_into_shards_when_resumed(tmp_path):
    draws = [_params(i) for i in range(5)]
    folder = tmp_path / "samples"
    write_store_of_a_file_per_draw(folder, draws)
    assert [e["epoch"] for e in read_manifest(folder)] == [10, 11, 12, 13, 14]
    for (tensors, entry), draw in zip(load_samples(folder), draws, strict=True):
        assert entry["file"] == f"sample_{entry['index']:05d}.safetensors"
        assert all(torch.equal(tensors[k], v) for k, v in draw.items())
    target = folder / "sample_00003.safetensors"
    kept = target.read_bytes()
    target.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))
    with pytest.raises(StoreError, match=r"sample_00003\.safetensors is corrupt .*sha256 mismatch"):
        list(load_samples(folder))
    target.write_bytes(kept)
    # resumed after its fourth draw: the fifth is taken again, into shards of three draws
    store = SampleStore(folder, shard_bytes=3 * DRAW_BYTES)
    store.truncate(4)
    store.add(draws[4], epoch=14)
    store.sync()
    assert sorted(p.name for p in folder.iterdir()) == [
        "draws_0000000-0000003.safetensors",
        "draws_0000003-0000005.safetensors",
        "manifest.json",
    ]
    for (tensors, _), draw in zip(load_samples(folder), draws, strict=True):
        assert all(torch.equal(tensors[k], v) for k, v in draw.items())
    assert [e["epoch"] for e in read_manifest(folder)] == [10, 11, 12, 13, 14]


def test_a_store_cut_back_and_filled_again_is_bitwise_the_store_never_cut(tmp_path):
    """What a resumed run's stores do: cut back to the checkpoint, inside a full shard or a
    shard being filled, then given the same draws again."""
    whole = SampleStore(tmp_path / "whole", fsync_each=False, shard_bytes=3 * DRAW_BYTES)
    for i in range(8):
        whole.add(_params(i), epoch=i)
    whole.sync()
    for cut in (0, 2, 3, 4, 7, 8):
        folder = tmp_path / f"cut{cut}"
        store = SampleStore(folder, fsync_each=False, shard_bytes=3 * DRAW_BYTES)
        for i in range(8):
            store.add(_params(i), epoch=i)
            if i in (1, 4):
                store.sync()
        store.sync()
        (folder / ".draws_x.safetensors.0badf00d.tmp").write_bytes(b"a kill's temporary")
        store = SampleStore(folder, fsync_each=False)  # draws per shard from the manifest
        store.truncate(cut)
        assert count_samples(folder) == cut if cut else not list(folder.iterdir())
        for i in range(cut, 8):
            store.add(_params(i), epoch=i)
        store.sync()
        files = {p.name: p.read_bytes() for p in folder.iterdir()}
        assert files == {p.name: p.read_bytes() for p in whole.directory.iterdir()}, cut


def test_every_sample_lists_its_tensors_in_the_same_order(tmp_path):
    """A network's parameters, written in the network's order, come back in one order for every
    sample, so that samples flattened by ``torch.cat(list(tensors.values()))`` line up."""
    names = [f"layers.{i}.{kind}" for i in (4, 0, 2) for kind in ("weight", "bias")]
    store = SampleStore(tmp_path)
    for seed in range(6):
        store.add({name: torch.full((2,), float(seed)) for name in names})
    orders = [list(tensors) for tensors, _ in load_samples(tmp_path)]
    assert orders == [sorted(names)] * 6


def test_reopening_continues_numbering(store_dir):
    (store_dir / "notes.txt").write_text("not the store's: left alone")
    store = SampleStore(store_dir)
    assert len(store) == 3
    assert store.add(_params(3), epoch=3, step=np.int64(30), lr=torch.tensor(0.5)) == 3
    assert len(store) == 4
    assert [e["index"] for e in read_manifest(store_dir)] == [0, 1, 2, 3]
    entries = [e for _, e in load_samples(store_dir)]
    assert entries[-1]["step"] == 30 and entries[-1]["lr"] == 0.5
    # the shard being filled grew into a full one, under its new name
    assert store.files == [SHARDS[0], "draws_0000002-0000004.safetensors"]
    names = sorted(p.name for p in store_dir.iterdir())
    assert names == [*store.files, "manifest.json", "notes.txt"]


def test_bad_metadata_rejected(tmp_path):
    store = SampleStore(tmp_path)
    with pytest.raises(ValueError, match="reserved"):
        store.add(_params(0), sha256="abc")
    with pytest.raises(TypeError, match="JSON"):
        store.add(_params(0), thing=object())
    assert len(store) == 0


def test_tampered_file_is_named(store_dir):
    target = store_dir / SHARDS[0]
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"draws_0000000-0000002\.safetensors.*sha256 mismatch"):
        list(load_samples(store_dir))


def test_truncated_file(store_dir):
    target = store_dir / SHARDS[1]
    target.write_bytes(target.read_bytes()[:20])
    with pytest.raises(StoreError, match=r"draws_0000002-0000003\.safetensors.*corrupt or incompl"):
        list(load_samples(store_dir))


def test_missing_sample_file(store_dir):
    (store_dir / SHARDS[0]).unlink()
    with pytest.raises(StoreError, match=r"draws_0000000-0000002\.safetensors.*missing"):
        list(load_samples(store_dir))


def test_missing_manifest(tmp_path):
    with pytest.raises(StoreError, match="manifest.json"):
        load_samples(tmp_path)


def test_invalid_manifest(store_dir):
    (store_dir / "manifest.json").write_text("{not json")
    with pytest.raises(StoreError, match="manifest.json"):
        load_samples(store_dir)
    with pytest.raises(StoreError, match="manifest.json"):
        SampleStore(store_dir)
    (store_dir / "manifest.json").write_text(
        json.dumps([{"index": 0, "file": "../evil.safetensors", "sha256": "0" * 64}])
    )
    with pytest.raises(StoreError, match="invalid sample file"):
        load_samples(store_dir)


def test_pickle_is_never_loaded(tmp_path, monkeypatch):
    """A pickle whose unpickling would run code must be rejected, not executed."""

    class Boom:
        def __reduce__(self):
            return (pytest.fail, ("pickle was executed",))

    payload = pickle.dumps({"w": Boom()})
    sample = tmp_path / "sample_00000.safetensors"
    sample.write_bytes(payload)
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            [{"index": 0, "file": sample.name, "sha256": hashlib.sha256(payload).hexdigest()}]
        )
    )
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load called"))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("pickle.loads called"))
    with pytest.raises(StoreError, match="corrupt or incomplete"):
        list(load_samples(tmp_path))

    ref = tmp_path / "ref.safetensors"
    ref.write_bytes(payload)
    with pytest.raises(StoreError, match="reference="):
        load_reference(ref)
    obj = tmp_path / "ref.npy"
    np.save(obj, np.array([Boom()], dtype=object), allow_pickle=True)
    with pytest.raises(StoreError, match="reference="):
        load_reference(obj)


def test_load_samples_is_lazy(store_dir):
    it = load_samples(store_dir)
    assert isinstance(it, types.GeneratorType)
    first, entry = next(it)
    assert entry["index"] == 0
    # A shard damaged after iteration started is only noticed when it is reached.
    (store_dir / SHARDS[1]).write_bytes(b"")
    _, entry = next(it)
    assert entry["index"] == 1
    with pytest.raises(StoreError, match=SHARDS[1]):
        next(it)


def test_store_keeps_no_tensors(tmp_path):
    store = SampleStore(tmp_path)
    params = {"w": torch.zeros(1000)}
    ref = weakref.ref(params["w"])
    store.add(params)
    del params
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("as_dir", [True, False])
def test_predictive_round_trip(tmp_path, as_dir):
    probs = torch.softmax(torch.randn(5, 3), dim=-1)
    targets = torch.tensor([0, 1, 2, 0, 1])
    if as_dir:
        save_predictive(tmp_path, probs, targets=targets)
        assert (tmp_path / "predictive.safetensors").is_file()
        ref = load_reference(tmp_path)
    else:
        path = tmp_path / "sub" / "hmc.safetensors"
        save_predictive(path, probs.double(), targets=targets)
        ref = load_reference(path)
    assert ref.dtype == torch.float32
    assert torch.equal(ref, probs)
    assert [p.name for p in tmp_path.rglob("*.tmp")] == []


def test_reference_csv_with_and_without_header(tmp_path):
    probs = np.random.default_rng(0).dirichlet(np.ones(10), size=7).astype(np.float32)
    plain = tmp_path / "probs.csv"
    np.savetxt(plain, probs, delimiter=",")
    headed = tmp_path / "headed.csv"
    header = ",".join(f"class_{i}" for i in range(10))
    np.savetxt(headed, probs, delimiter=",", header=header, comments="")
    for path in (plain, headed):
        ref = load_reference(path)
        assert ref.shape == (7, 10) and ref.dtype == torch.float32
        np.testing.assert_allclose(ref.numpy(), probs, rtol=1e-6)


def test_reference_csv_single_column_is_1d(tmp_path):
    path = tmp_path / "y.csv"
    path.write_text("y\n1.5\n2.5\n")
    assert torch.equal(load_reference(path), torch.tensor([1.5, 2.5]))


def test_reference_npy(tmp_path):
    array = np.arange(1, 13, dtype=np.float64).reshape(4, 3)
    array /= array.sum(axis=1, keepdims=True)
    path = tmp_path / "ref.npy"
    np.save(path, array)
    ref = load_reference(path)
    assert ref.dtype == torch.float32
    assert torch.equal(ref, torch.from_numpy(array).float())


def test_reference_errors(tmp_path):
    with pytest.raises(StoreError, match="does not exist.*reference="):
        load_reference(tmp_path / "nope.csv")
    with pytest.raises(StoreError, match="without predictive.safetensors"):
        load_reference(tmp_path)
    pt = tmp_path / "ref.pt"
    pt.write_bytes(b"x")
    with pytest.raises(StoreError, match="unsupported suffix '.pt'.*reference="):
        load_reference(pt)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,x\n")
    with pytest.raises(StoreError, match="bad.csv cannot be parsed"):
        load_reference(bad)
    other = tmp_path / "other.safetensors"
    save_file({"logits": torch.zeros(2)}, str(other))
    with pytest.raises(StoreError, match="no 'predictive' tensor.*logits"):
        load_reference(other)


def _probs(rows: int = 4, classes: int = 3) -> np.ndarray:
    p = np.arange(1, rows * classes + 1, dtype=np.float64).reshape(rows, classes)
    return p / p.sum(axis=1, keepdims=True)


@pytest.mark.parametrize(
    ("row", "value", "expected"),
    [
        (2, np.nan, r"row 2 \(0-based; line 4 of the file\) holds a NaN or infinite value"),
        (0, np.inf, r"row 0 \(0-based; line 2 of the file\) holds a NaN or infinite value"),
        (3, -0.25, r"row 3 \(0-based; line 5 of the file\) has a negative entry \(-0.25\)"),
        (1, 0.9, r"row 1 \(0-based; line 3 of the file\) sums to 1\.\d+, not 1 \(tolerance"),
    ],
)
def test_reference_csv_that_is_not_probabilities_names_row(tmp_path, row, value, expected):
    array = _probs()
    array[row, 1] = value
    path = tmp_path / "probs.csv"
    np.savetxt(path, array, delimiter=",", header="a,b,c", comments="")
    with pytest.raises(StoreError, match=expected) as err:
        load_reference(path)
    assert str(path) in str(err.value)


def test_reference_logits_and_regression_predictive_are_refused(tmp_path):
    logits = tmp_path / "logits.npy"
    np.save(logits, np.log(_probs()))  # finite but negative: logits rather than probabilities
    with pytest.raises(StoreError, match=r"logits.npy: row 0 \(0-based\) has a negative entry"):
        load_reference(logits)
    run = tmp_path / "regression_run"
    run.mkdir()
    # A regression run's predictive is (mean, variance) per test point, not probabilities.
    save_predictive(run, torch.tensor([[0.3, 2.0], [0.1, 0.5]]))
    with pytest.raises(StoreError, match=r"row 0 \(0-based\) sums to 2.3, not 1"):
        load_reference(run)


def test_reference_row_sum_tolerance(tmp_path):
    """Rows within 1e-3 of 1 pass (probabilities printed with four decimals), beyond fail."""
    path = tmp_path / "ref.npy"
    array = _probs()
    array[1, 0] += 9e-4
    np.save(path, array.astype(np.float32))
    assert load_reference(path).shape == (4, 3)
    array[1, 0] += 2e-4
    np.save(path, array.astype(np.float32))
    with pytest.raises(StoreError, match=r"row 1 \(0-based\) sums to 1.0011, not 1"):
        load_reference(path)


def test_reference_vector_needs_only_finite_values(tmp_path):
    path = tmp_path / "ref.csv"
    path.write_text("-1.5\n2.0\n0.3\n")  # regression values: negative, not summing to 1
    assert torch.equal(load_reference(path), torch.tensor([-1.5, 2.0, 0.3]))
    path.write_text("-1.5\n\nnan\n")
    with pytest.raises(StoreError, match=r"ref.csv: row 1 \(0-based\) holds a NaN"):
        load_reference(path)


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_written_files_respect_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        store = SampleStore(tmp_path / "samples")
        store.add(_params(0))
        sample = store.directory / store.files[0]
        save_predictive(tmp_path, torch.full((2, 2), 0.5))
    finally:
        os.umask(old)
    for path in (sample, tmp_path / "samples" / "manifest.json", tmp_path / PREDICTIVE):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


def _fail_fsync_after(monkeypatch, calls_ok: int, err: int = errno.ENOSPC) -> None:
    """Make the ``calls_ok + 1``-th fsync of an atomic write fail as a full disk would."""
    real = os.fsync
    count = {"n": 0}

    def fsync(fd):
        count["n"] += 1
        if count["n"] > calls_ok:
            raise OSError(err, os.strerror(err))
        real(fd)

    monkeypatch.setattr(bdl.atomic.os, "fsync", fsync)


@pytest.mark.parametrize(
    ("calls_ok", "failing"), [(0, "draws_0000002-0000004"), (1, "manifest.json")]
)
def test_full_disk_keeps_what_was_written(store_dir, monkeypatch, calls_ok, failing):
    manifest = (store_dir / "manifest.json").read_bytes()
    samples = {p.name: p.read_bytes() for p in store_dir.glob("draws_*")}
    store = SampleStore(store_dir)
    store.truncate(3)  # what a resumed run does first (it reads and writes nothing here)
    _fail_fsync_after(monkeypatch, calls_ok)
    with pytest.raises(StoreError, match=rf"no space left on device writing \S*{failing}") as err:
        store.add(_params(3))
    assert "free space and resume" in str(err.value)
    assert (store_dir / "manifest.json").read_bytes() == manifest
    for name, data in samples.items():
        assert (store_dir / name).read_bytes() == data
    assert not [p for p in store_dir.iterdir() if p.name.startswith(".")]  # no temporaries
    monkeypatch.undo()
    # Once space is freed the same store carries on where it stopped: the draw is taken again
    # where its shard could not be written, listed where the manifest could not be.
    if failing == "manifest.json":
        store.sync()
    else:
        store.add(_params(3))
    assert [e["index"] for _, e in load_samples(store_dir)] == [0, 1, 2, 3]


def test_a_store_that_defers_flushing_flushes_at_sync(tmp_path, monkeypatch):
    flushed = []  # inodes of the files and folders flushed to disk, in order
    real = os.fsync
    monkeypatch.setattr(bdl.atomic.os, "fsync", lambda fd: flushed.append(os.fstat(fd).st_ino))
    folder = tmp_path / "samples"
    store = SampleStore(folder, fsync_each=False)
    for i in range(2):
        store.add(_params(i), epoch=i)
    assert flushed == [] and list(folder.iterdir()) == []  # the draws wait in memory
    store.sync()
    shard = folder / "draws_0000000-0000002.safetensors"
    assert flushed == [p.stat().st_ino for p in [shard, folder / "manifest.json", folder]]
    store.sync()  # nothing added since
    assert len(flushed) == 3
    store.add(_params(2), epoch=2)
    assert [e["epoch"] for _, e in load_samples(folder)] == [0, 1]
    store.sync()
    grown = folder / "draws_0000000-0000003.safetensors"
    assert flushed[3:] == [p.stat().st_ino for p in [grown, folder / "manifest.json", folder]]
    assert not shard.exists()  # removed once the manifest lists its successor
    monkeypatch.setattr(bdl.atomic.os, "fsync", real)
    assert [e["epoch"] for _, e in load_samples(folder)] == [0, 1, 2]


def test_a_failed_sync_is_named_and_can_be_retried(tmp_path, monkeypatch):
    store = SampleStore(tmp_path / "samples", fsync_each=False)
    store.add(_params(0))
    _fail_fsync_after(monkeypatch, 0)
    match = r"no space left on device writing \S*draws_0000000-0000001.safetensors"
    with pytest.raises(StoreError, match=match) as err:
        store.sync()
    assert "free space" in str(err.value)
    assert not (tmp_path / "samples" / "manifest.json").exists()
    monkeypatch.undo()
    _fail_fsync_after(monkeypatch, 1)  # the sample flushes, the manifest does not
    with pytest.raises(StoreError, match=r"no space left on device writing \S*manifest.json"):
        store.sync()
    assert not (tmp_path / "samples" / "manifest.json").exists()
    monkeypatch.undo()
    store.sync()
    assert len(list(load_samples(tmp_path / "samples"))) == 1


def test_unwritable_output_is_named(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match=rf"cannot create the folder {blocker}/samples"):
        SampleStore(blocker / "samples")
    with pytest.raises(StoreError, match=rf"cannot create the folder {blocker}"):
        save_predictive(blocker / "predictive.safetensors", torch.ones(2, 1))
    store = SampleStore(tmp_path / "samples")
    _fail_fsync_after(monkeypatch, 0, errno.EROFS)
    with pytest.raises(StoreError, match=r"cannot write \S*draws_0000000-0000001\.\S* \(Read-only"):
        store.add(_params(0))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_output_folder_is_named(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(StoreError, match=rf"cannot create the folder {folder}/samples"):
            SampleStore(folder / "samples")
    finally:
        folder.chmod(0o755)


#: What every refused ``reference=`` says it accepts (the user's way out, in full).
ACCEPTS = (
    "`reference=` accepts a run directory containing predictive.safetensors, or a file: "
    ".safetensors (tensor under key 'predictive'), .csv (numeric matrix, optional header row, "
    "e.g. the NeurIPS BDL starter kit's probs.csv) or .npy (numeric array, no pickles)"
)
SAMPLING = "re-run the sampling, or point at the directory the samples were written to"
DAMAGED = "delete it and its manifest entry or re-run"


def _manifest(directory, text: str) -> None:
    (directory / "manifest.json").write_text(text)


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda d: (d / "manifest.json").unlink(),
            f"D/manifest.json is missing; no samples were recorded there ({SAMPLING})",
        ),
        (
            lambda d: _manifest(d, '{"index": 0}'),
            "D/manifest.json is not a sample manifest (expected {'format': 'bdl-sample-shards', "
            "'draws_per_shard', 'shards': [{'file', 'sha256', 'first', 'count'}, …]}); "
            f"{SAMPLING}",
        ),
        (
            lambda d: _manifest(d, '[{"index": 0}]'),
            "D/manifest.json is not a sample manifest (expected a list of entries with 'index', "
            f"'file' and 'sha256'); {SAMPLING}",
        ),
        (
            lambda d: _manifest(d, '[{"index": 0, "file": "..", "sha256": "0"}]'),
            f"D/manifest.json names an invalid sample file '..'; {SAMPLING}",
        ),
        (
            lambda d: (d / SHARDS[1]).unlink(),
            f"sample file D/{SHARDS[1]} is missing; {DAMAGED}",
        ),
        (
            lambda d: (d / SHARDS[1]).write_bytes((d / SHARDS[0]).read_bytes()),
            f"sample file D/{SHARDS[1]} is corrupt or incomplete (sha256 mismatch); {DAMAGED}",
        ),
        (
            lambda d: (d / SHARDS[0]).write_bytes(b"\x10" + bytes(7) + b"{}"),
            f"sample file D/{SHARDS[0]} is corrupt or incomplete (not safetensors: a "
            f"header of 16 bytes); {DAMAGED}",
        ),
        (
            lambda d: (d / SHARDS[0]).write_bytes(b"\x02" + bytes(7) + b"{}xy"),
            f"sample file D/{SHARDS[0]} is corrupt or incomplete (it holds 12 bytes "
            f"where its header declares 10); {DAMAGED}",
        ),
    ],
    ids=[
        "no manifest",
        "not shards",
        "not a list",
        "a file outside",
        "missing",
        "swapped",
        "header",
        "size",
    ],
)
def test_a_damaged_store_is_one_line_naming_the_file_and_the_fix(store_dir, damage, message):
    damage(store_dir)
    with pytest.raises(StoreError) as err:
        for _ in load_samples(store_dir):
            pass
    assert str(err.value).replace(str(store_dir), "D") == message


def test_a_store_refuses_what_it_cannot_keep_by_name(tmp_path):
    store = SampleStore(tmp_path / "samples")
    with pytest.raises(ValueError) as err:
        store.add(_params(0), file="x", epoch=1)
    assert str(err.value) == "metadata keys ['file'] are reserved for the manifest"
    with pytest.raises(TypeError) as err:
        store.add(_params(0), thing={1, 2})
    assert str(err.value).startswith("sample metadata must be JSON-serialisable: ")
    with pytest.raises(TypeError) as err:
        store.add({3: torch.ones(1)})
    assert str(err.value) == "tensor names must be strings, got 3"
    store.add({"w": torch.tensor([1.0, 2.0])})
    store.add({"w": torch.tensor([1.0, float("nan")])})
    with pytest.raises(StoreError) as err:
        list(load_samples(tmp_path / "samples"))
    assert str(err.value) == (
        f"sample file {tmp_path / 'samples' / 'draws_0000000-0000002.safetensors'} holds "
        f"non-finite weights (w, draw 1): a chain that diverged wrote it; {DAMAGED}"
    )
    with pytest.raises(ValueError) as err:
        store.add({"w": torch.ones(3)})
    assert str(err.value) == (
        f"a draw's tensors differ from those of the draws before it in {tmp_path / 'samples'} "
        "(names, shapes or dtypes): one store holds one network"
    )
    with pytest.raises(StoreError) as err:
        store.truncate(3)
    assert str(err.value) == (
        f"{tmp_path / 'samples' / 'manifest.json'} lists 2 samples, fewer than the 3 its run's "
        "checkpoint recorded: samples were removed since; restore it, or run it again from the "
        "beginning: delete the run's checkpoint.safetensors (resume=true then starts over)"
    )


def _reference_file(folder, name: str, content) -> None:
    path = folder / name
    if isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, np.ndarray):
        np.save(path, content)
    else:
        save_file(content, str(path))


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("nope.csv", None, f"reference D/nope.csv does not exist; {ACCEPTS}"),
        ("ref.pt", "x", f"reference D/ref.pt has unsupported suffix '.pt'; {ACCEPTS}"),
        ("ref.csv", "\n\n", f"reference D/ref.csv is empty; {ACCEPTS}"),
        ("ref.csv", "a,b\n", f"reference D/ref.csv has a header but no rows; {ACCEPTS}"),
        (
            "ref.safetensors",
            {"logits": torch.zeros(2), "targets": torch.zeros(2)},
            f"reference D/ref.safetensors has no 'predictive' tensor (keys: ['logits', "
            f"'targets']); {ACCEPTS}",
        ),
        (
            "ref.safetensors",
            {"predictive": torch.ones(2, dtype=torch.bool)},
            f"reference D/ref.safetensors holds a torch.bool tensor; {ACCEPTS}",
        ),
        ("ref.npy", np.array(["a", "b"]), f"reference D/ref.npy holds a <U1 array; {ACCEPTS}"),
        (
            "ref.npy",
            np.array([[0.5, 0.5], [0.2, np.inf]]),
            "reference D/ref.npy: row 1 (0-based) holds a NaN or infinite value; a reference must "
            "be finite. Regenerate it or fix that row.",
        ),
        (
            "ref.csv",
            "a,b\n0.5,0.5\n-0.5,1.5\n",
            "reference D/ref.csv: row 1 (0-based; line 3 of the file) has a negative entry (-0.5); "
            "a reference matrix holds class probabilities (one row per test point). Point "
            "reference= at a classification run or its probabilities.",
        ),
        (
            "ref.npy",
            np.array([[0.5, 0.5], [0.25, 0.5]]),
            "reference D/ref.npy: row 1 (0-based) sums to 0.75, not 1 (tolerance 0.001); a "
            "reference matrix holds class probabilities (one row per test point, e.g. a softmax "
            "output, not logits). Point reference= at a classification run or normalise the rows.",
        ),
    ],
)
def test_a_refused_reference_says_what_reference_accepts(tmp_path, name, content, message):
    if content is not None:
        _reference_file(tmp_path, name, content)
    with pytest.raises(StoreError) as err:
        load_reference(tmp_path / name)
    assert str(err.value).replace(str(tmp_path), "D") == message


def test_a_reference_folder_without_a_predictive_or_unparsable_file_says_so(tmp_path):
    with pytest.raises(StoreError) as err:
        load_reference(tmp_path)
    assert str(err.value) == f"{tmp_path} is a directory without predictive.safetensors; {ACCEPTS}"
    (tmp_path / "bad.csv").write_text("a,b\n1,x\n")
    with pytest.raises(StoreError) as err:
        load_reference(tmp_path / "bad.csv")
    text = str(err.value)
    assert text.startswith(f"reference {tmp_path / 'bad.csv'} cannot be parsed (")
    assert text.endswith(f"); {ACCEPTS}") and "\n" not in text


def test_a_failed_write_says_what_is_left_and_the_way_out(tmp_path):
    from bdl.storage.store import write_error

    path = tmp_path / "run" / "manifest.json"
    for code in (errno.ENOSPC, errno.EDQUOT):
        error = write_error(path, OSError(code, os.strerror(code)))
        assert str(error) == (
            f"no space left on device writing {path} (the previous manifest.json, if any, is "
            "intact); free space and resume"
        )
    error = write_error(path, OSError(errno.EROFS, "Read-only file system"))
    assert str(error) == (
        f"cannot write {path} (Read-only file system); make {tmp_path / 'run'} a writable folder "
        "or choose another output directory (hydra.run.dir=...)"
    )
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(StoreError) as refused:
        SampleStore(blocker / "samples")
    assert str(refused.value) == (
        f"cannot create the folder {blocker / 'samples'} (Not a directory): a file may stand on "
        "its path or its parent is read-only; choose another output directory "
        "(hydra.run.dir=...) or remove the file in the way"
    )
