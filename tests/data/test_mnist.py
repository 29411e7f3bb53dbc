"""MNIST through torchvision from a read-only folder holding only the original .gz files."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
import os
import shutil
import struct
import urllib.request
from pathlib import Path
from urllib.error import URLError

import numpy as np
import pytest
import torch

import bdl.data.mnist as mnist_module
from bdl.data import DataError
from bdl.data.mnist import load

GZ = [
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
]
# Label counts of the first 50000 training images (the 50k/10k split of Chen et al. 2014).
TRAIN_COUNTS_50K = [4932, 5678, 4968, 5101, 4859, 4506, 4951, 5175, 4842, 4988]
TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def _offline(*args, **kwargs):
    raise URLError("network unreachable")


@pytest.fixture(scope="module")
def mnist(tmp_path_factory: pytest.TempPathFactory, data_dir: Path):
    """Load the real MNIST once for the module, with every cache in a temporary folder."""
    root = data_dir
    tmp = tmp_path_factory.mktemp("mnist-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp / "xdg"))
        mp.setenv("BDL_CACHE_DIR", str(tmp / "bdl"))
        mp.setattr(urllib.request, "urlopen", _offline)  # must work with no network at all
        before = _snapshot(root)
        ds = load(root=root, download=False)
        after = _snapshot(root)
    return ds, root, tmp / "bdl", before, after


def test_shapes_and_range(mnist):
    ds = mnist[0]
    assert ds.name == "mnist" and ds.task == "classification"
    assert ds.num_classes == 10 and ds.out_features == 10
    assert ds.x_train.shape == (50000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert ds.y_train.shape == (50000,) and ds.y_test.shape == (10000,)
    assert ds.input_shape == (1, 28, 28) and ds.num_train == 50000
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert float(ds.x_train.min()) == 0.0 and float(ds.x_train.max()) == 1.0
    assert float(ds.x_test.min()) == 0.0 and float(ds.x_test.max()) == 1.0


def test_label_counts(mnist):
    ds = mnist[0]
    assert torch.bincount(ds.y_train, minlength=10).tolist() == TRAIN_COUNTS_50K
    assert torch.bincount(ds.y_test, minlength=10).tolist() == TEST_COUNTS


def test_pixels_match_the_idx_files(mnist):
    """The held-out images are the last 10000, and pixels are exactly uint8 / 255."""
    ds, root = mnist[0], mnist[1]
    with gzip.open(root / "MNIST" / "raw" / "train-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 28, 28)
    for i in (0, 12345, 49999):
        want = torch.from_numpy(images[i].astype(np.float32) / 255.0)
        assert torch.equal(ds.x_train[i, 0], want)


def test_validation_split_is_the_held_out_tail(mnist):
    """The last 10000 training images, never trained on, are kept as the validation split."""
    ds, root = mnist[0], mnist[1]
    with gzip.open(root / "MNIST" / "raw" / "train-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(root / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    assert ds.x_validation.shape == (10000, 1, 28, 28)
    want = torch.from_numpy(images[50000:].astype(np.float32) / 255.0)
    assert torch.equal(ds.x_validation[:, 0], want)
    assert torch.equal(ds.y_validation, torch.from_numpy(labels[50000:].astype(np.int64)))


def test_read_only_root_untouched_and_cache_used(mnist):
    _, root, cache, before, after = mnist
    assert before == after
    assert not (root / "MNIST" / "processed").exists()
    for name in GZ:
        assert (cache / "MNIST" / "raw" / name).is_file()
        assert (cache / "MNIST" / "raw" / name[:-3]).is_file()
        assert not (root / "MNIST" / "raw" / name[:-3]).exists()


def test_extracted_root_is_read_in_place(
    mnist, tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
):
    """A root that already holds the extracted IDX files is used as is, staging nothing."""
    raw = tmp_path / "root" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in GZ:
        os.symlink(mnist[2] / "MNIST" / "raw" / name[:-3], raw / name[:-3])
    monkeypatch.setattr(urllib.request, "urlopen", _offline)
    ds = load(root=tmp_path / "root", validation=20000, download=True)
    assert ds.x_train.shape == (40000, 1, 28, 28)
    assert torch.equal(ds.x_train, mnist[0].x_train[:40000])
    assert not isolated_cache.exists()


def test_invalid_validation(tmp_path: Path):
    for bad in (-1, 60000, 1.5):
        with pytest.raises(DataError, match="dataset.validation"):
            load(root=tmp_path, validation=bad)


def test_missing_offline_names_files_and_folder(tmp_path: Path, isolated_cache: Path):
    root = tmp_path / "empty"
    with pytest.raises(DataError) as err:
        load(root=root, download=False)
    msg = str(err.value)
    assert str(root / "MNIST" / "raw") in msg
    assert all(name in msg for name in GZ)
    assert "BDL_DATA_DIR" in msg and "dataset.root" in msg
    assert not root.exists()


def test_failed_download_is_a_data_error(
    tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(urllib.request, "urlopen", _offline)
    root = tmp_path / "empty"
    with pytest.raises(DataError) as err:
        load(root=root, download=True)
    assert str(root / "MNIST" / "raw") in str(err.value) and "BDL_DATA_DIR" in str(err.value)
    for mirror in mnist_module.MNIST.mirrors:  # each mirror tried, with why it failed
        assert f"{mirror}: <urlopen error network unreachable>" in str(err.value)
    assert not root.exists()


def test_corrupt_gz_is_named(tmp_path: Path, isolated_cache: Path, data_dir: Path):
    raw = tmp_path / "root" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in GZ:
        shutil.copyfile(data_dir / "MNIST" / "raw" / name, raw / name)
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(b"garbage")
    with pytest.raises(DataError) as err:
        load(root=tmp_path / "root", download=False)
    msg = str(err.value)
    assert "md5" in msg and str(raw / "t10k-labels-idx1-ubyte.gz") in msg
    # The damaged file is not copied into the cache, so fixing the root fixes the next run.
    assert not (isolated_cache / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz").exists()


def _idx(magic: int, array: np.ndarray) -> bytes:
    """An IDX file (LeCun's format): magic, big-endian dimensions, then the uint8 payload."""
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_fake_mnist(
    root: Path, n_train: int, n_test: int, seed: int, folder: str = "MNIST"
) -> dict[str, np.ndarray]:
    """Original-format MNIST archives with random pixels under ``root/<folder>/raw``."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte.gz": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte.gz": rng.integers(0, 10, n_train),
        "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte.gz": rng.integers(0, 10, n_test),
    }
    raw = root / folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        magic = 0x803 if array.ndim == 3 else 0x801
        (raw / name).write_bytes(gzip.compress(_idx(magic, array), mtime=0))
    return arrays


def _md5s(root: Path) -> dict[str, str]:
    raw = root / "MNIST" / "raw"
    return {name: hashlib.md5((raw / name).read_bytes()).hexdigest() for name in GZ}


@pytest.fixture
def fake_originals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A root with 100 + 20 fake images whose md5 sums stand in for the originals'."""
    root = tmp_path / "originals"
    arrays = write_fake_mnist(root, 100, 20, seed=0)
    fakes = dataclasses.replace(mnist_module.SOURCE, md5=_md5s(root))
    monkeypatch.setattr(mnist_module, "SOURCE", fakes)
    monkeypatch.setattr(mnist_module, "NUM_TRAIN_TOTAL", 100)
    return root, arrays


def test_fake_originals_load(fake_originals, isolated_cache: Path):
    root, arrays = fake_originals
    ds = load(root=root, validation=10, download=False)
    want = arrays["train-images-idx3-ubyte.gz"][:90].astype(np.float32) / 255
    assert torch.equal(ds.x_train[:, 0], torch.from_numpy(want))
    assert ds.y_test.tolist() == arrays["t10k-labels-idx1-ubyte.gz"].tolist()
    assert sorted(p.name for p in (isolated_cache / "MNIST" / "raw").iterdir()) == sorted(
        GZ + [name[:-3] for name in GZ]
    )


def test_files_changed_since_a_load_are_read_again(fake_originals, isolated_cache: Path):
    """The parsed files are kept for the next load in the process only while they are the same
    files: other images in their place are the ones the next load returns."""
    root, arrays = fake_originals
    first = load(root=root, validation=10, download=False)
    again = load(root=root, validation=10, download=False)
    assert torch.equal(again.x_train, first.x_train) and again.x_train is not first.x_train
    again.x_train.zero_()  # a run's changes to its copy reach no other load
    assert torch.equal(load(root=root, validation=10, download=False).x_train, first.x_train)
    extracted = isolated_cache / "MNIST" / "raw" / "train-images-idx3-ubyte"
    images = 255 - arrays["train-images-idx3-ubyte.gz"]
    before = extracted.stat().st_mtime_ns
    extracted.write_bytes(_idx(0x803, images))
    # as a copy made a second later would be: a write within the clock's tick keeps the time
    os.utime(extracted, ns=(before + 10**9, before + 10**9))
    changed = load(root=root, validation=10, download=False)
    want = images[:90].astype(np.float32) / 255
    assert torch.equal(changed.x_train[:, 0], torch.from_numpy(want))


def test_named_root_is_the_one_read(
    fake_originals,
    tmp_path: Path,
    isolated_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
):
    """Once the cache holds MNIST, a named root that lacks it or holds other files is refused."""
    root, arrays = fake_originals
    monkeypatch.setattr(urllib.request, "urlopen", _offline)
    monkeypatch.delenv("BDL_DATA_DIR", raising=False)
    load(root=root, validation=10, download=False)
    cached = _snapshot(isolated_cache)

    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    for download in (False, True):
        with pytest.raises(DataError, match=rf"data root {a_file} .*is a file, not a folder"):
            load(root=a_file, validation=10, download=download)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError) as err:
        load(root=empty, validation=10, download=False)
    assert str(empty / "MNIST" / "raw") in str(err.value)
    assert all(name in str(err.value) for name in GZ)
    monkeypatch.setenv("BDL_DATA_DIR", str(empty))  # named through the environment
    with pytest.raises(DataError, match="dataset.download=false"):
        load(validation=10, download=False)

    other = tmp_path / "other"
    write_fake_mnist(other, 100, 20, seed=1)  # not the originals: the md5 sums differ
    for download in (False, True):
        with pytest.raises(DataError, match="md5") as err:
            load(root=other, validation=10, download=download)
        assert str(other / "MNIST" / "raw" / GZ[0]) in str(err.value)

    # download=true lets the cache's md5-checked originals stand in, saying so.
    with caplog.at_level("WARNING", logger="bdl.data.mnist"):
        ds = load(root=empty, validation=10, download=True)
    assert ds.y_test.tolist() == arrays["t10k-labels-idx1-ubyte.gz"].tolist()
    assert f"not in the data root {empty / 'MNIST' / 'raw'}" in caplog.text
    # With no root named, the cache is where downloads land and is read as such.
    monkeypatch.delenv("BDL_DATA_DIR")
    assert load(validation=10, download=False).num_train == 90
    assert _snapshot(isolated_cache) == cached


_SETUP = """
import dataclasses, json, sys
import bdl.data.mnist as mnist
# the fake files stand in for the originals
mnist.SOURCE = dataclasses.replace(mnist.SOURCE, md5=json.loads(sys.argv[1]))
mnist.NUM_TRAIN_TOTAL = int(sys.argv[2])
"""
_LOAD = """
ds = mnist.load(root=sys.argv[3], validation=10, download=False)
print(json.dumps([ds.x_train.double().sum().item(), ds.y_test.tolist()]))
"""


def test_concurrent_first_extraction(tmp_path: Path, race):
    """Two processes extracting into one empty cache at once both load the data."""
    root = tmp_path / "root"
    arrays = write_fake_mnist(root, 3000, 500, seed=2)
    cache = tmp_path / "cache"
    env = {**os.environ, "BDL_CACHE_DIR": str(cache)}
    outputs = race(_SETUP, _LOAD, [json.dumps(_md5s(root)), "3000", str(root)], env)
    want_x = float((arrays["train-images-idx3-ubyte.gz"][:2990] / 255.0).astype(np.float32).sum())
    for out in outputs:
        x_sum, y_test = json.loads(out)
        assert x_sum == pytest.approx(want_x, rel=1e-6)
        assert y_test == arrays["t10k-labels-idx1-ubyte.gz"].tolist()
    staged = cache / "MNIST" / "raw"
    assert sorted(p.name for p in staged.iterdir()) == sorted(GZ + [n[:-3] for n in GZ])
    for name in GZ:
        with gzip.open(root / "MNIST" / "raw" / name) as f:
            assert (staged / name[:-3]).read_bytes() == f.read()


def _way_out(raw: Path) -> str:
    """What every MNIST that cannot be loaded says after its cause: where the originals go."""
    return (
        f"Expected the original files {', '.join(GZ)} in {raw}/. Put the four .gz files there, or "
        "set BDL_DATA_DIR / dataset.root to a folder that contains MNIST/raw/, or allow "
        "dataset.download=true with network access."
    )


def test_mnist_that_cannot_be_loaded_says_why_and_where_the_originals_go(
    fake_originals, tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(urllib.request, "urlopen", _offline)
    empty = tmp_path / "empty"
    with pytest.raises(DataError) as err:
        load(root=empty, validation=10, download=False)
    raw = empty / "MNIST" / "raw"
    assert str(err.value) == f"MNIST could not be loaded (dataset.download=false). {_way_out(raw)}"
    with pytest.raises(DataError) as err:
        load(root=empty, validation=10, download=True)
    tried = "; ".join(
        f"{mirror}: <urlopen error network unreachable>" for mirror in mnist_module.MNIST.mirrors
    )
    assert str(err.value) == (
        f"MNIST could not be loaded (download failed ({tried})). {_way_out(raw)}"
    )
    root, _ = fake_originals
    damaged = root / "MNIST" / "raw" / GZ[1]
    damaged.write_bytes(gzip.compress(b"other labels"))
    with pytest.raises(DataError) as err:
        load(root=root, validation=10, download=False)
    assert str(err.value) == (
        f"MNIST could not be loaded (md5 check failed). {_way_out(root / 'MNIST' / 'raw')}"
    ).replace(
        " Put the four",
        f" These are not the originals (torchvision's md5): {damaged}. Put the four",
    )


def test_mnist_options_out_of_range_are_named(tmp_path: Path):
    for bad in (-1, 60000, 1.5, True):
        with pytest.raises(DataError) as err:
            load(root=tmp_path, validation=bad)
        assert str(err.value) == (
            f"dataset.validation={bad!r} is invalid for MNIST: it must be an integer in "
            "[0, 60000) (the number of training images held out)."
        )
    for bad in (0, -255.0):
        with pytest.raises(DataError) as err:
            load(root=tmp_path, pixel_divisor=bad)
        assert str(err.value) == f"dataset.pixel_divisor must be positive, got {bad!r}"


def test_extracted_files_that_cannot_be_read_are_named_with_the_fix(tmp_path: Path):
    """Extracted files in the root are read in place: damaged, they are the user's to replace."""
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in GZ:
        (raw / name[:-3]).write_bytes(b"\x00\x00\x08\x03 not an IDX file")
    with pytest.raises(DataError) as err:
        load(root=tmp_path, download=False)
    first, shape = raw / GZ[0][:-3], (0x206E6F74, 0x20616E20, 0x49445820)
    assert str(err.value) == (
        f"{first} holds 20 bytes, but its header declares {16 + math.prod(shape)} (shape "
        f"{shape}): a truncated or damaged file. Replace it with the original file."
    )


@pytest.mark.parametrize("index", range(4))
def test_a_truncated_extracted_file_is_named(tmp_path: Path, index: int):
    """A copy cut short (a full disk, an interrupted rsync): torchvision would fail on it
    without saying which of the four files it is."""
    raw = tmp_path / "MNIST" / "raw"
    for name in write_fake_mnist(tmp_path, 20, 10, seed=0):
        (raw / name[:-3]).write_bytes(gzip.decompress((raw / name).read_bytes()))
    victim = raw / GZ[index][:-3]
    size = victim.stat().st_size
    with victim.open("r+b") as handle:
        handle.truncate(size - 5)
    with pytest.raises(DataError) as err:
        load(root=tmp_path, download=False)
    assert str(err.value).startswith(
        f"{victim} holds {size - 5} bytes, but its header declares {size} ("
    )
    assert str(err.value).endswith("Replace it with the original file.")
