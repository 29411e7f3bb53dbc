"""The sample store must round-trip exactly, fail loudly on damaged files, and never unpickle."""

from __future__ import annotations

import gc
import hashlib
import json
import pickle
import types
import weakref

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from bdl.store import (
    SampleStore,
    StoreError,
    load_reference,
    load_samples,
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


@pytest.fixture
def store_dir(tmp_path):
    store = SampleStore(tmp_path / "a" / "samples")
    for i in range(3):
        store.add(_params(i), epoch=i, step=10 * i)
    return tmp_path / "a" / "samples"


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
        assert entry["file"] == f"sample_{i:05d}.safetensors"
        assert entry["epoch"] == i and entry["step"] == 10 * i
        assert len(entry["sha256"]) == 64
    manifest = json.loads((store_dir / "manifest.json").read_text())
    assert [e["index"] for e in manifest] == [0, 1, 2]
    # No temporary files are left behind by the atomic writes.
    assert sorted(p.name for p in store_dir.iterdir()) == [
        "manifest.json",
        "sample_00000.safetensors",
        "sample_00001.safetensors",
        "sample_00002.safetensors",
    ]


def test_reopening_continues_numbering(store_dir):
    store = SampleStore(store_dir)
    assert len(store) == 3
    path = store.add(_params(3), epoch=3, step=np.int64(30), lr=torch.tensor(0.5))
    assert path.name == "sample_00003.safetensors"
    assert len(store) == 4
    assert [e["index"] for e in store.manifest] == [0, 1, 2, 3]
    entries = [e for _, e in load_samples(store_dir)]
    assert entries[-1]["step"] == 30 and entries[-1]["lr"] == 0.5


def test_manifest_property_is_a_copy(store_dir):
    store = SampleStore(store_dir)
    store.manifest[0]["sha256"] = "x"
    assert store.manifest[0]["sha256"] != "x"


def test_bad_metadata_rejected(tmp_path):
    store = SampleStore(tmp_path)
    with pytest.raises(ValueError, match="reserved"):
        store.add(_params(0), sha256="abc")
    with pytest.raises(TypeError, match="JSON"):
        store.add(_params(0), thing=object())
    assert len(store) == 0


def test_tampered_file_is_named(store_dir):
    target = store_dir / "sample_00001.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"sample_00001\.safetensors.*sha256 mismatch"):
        list(load_samples(store_dir))


def test_truncated_file(store_dir):
    target = store_dir / "sample_00002.safetensors"
    target.write_bytes(target.read_bytes()[:20])
    with pytest.raises(StoreError, match=r"sample_00002\.safetensors.*corrupt or incomplete"):
        list(load_samples(store_dir))


def test_missing_sample_file(store_dir):
    (store_dir / "sample_00000.safetensors").unlink()
    with pytest.raises(StoreError, match=r"sample_00000\.safetensors.*missing"):
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
    # A file damaged after iteration started is only noticed when it is reached.
    (store_dir / "sample_00002.safetensors").write_bytes(b"")
    _, entry = next(it)
    assert entry["index"] == 1
    with pytest.raises(StoreError, match="sample_00002"):
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
    array = np.arange(12, dtype=np.float64).reshape(4, 3)
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
