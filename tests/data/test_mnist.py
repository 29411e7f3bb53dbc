"""MNIST through torchvision from a read-only folder holding only the original .gz files."""

from __future__ import annotations

import gzip
import os
import shutil
import urllib.request
from pathlib import Path
from urllib.error import URLError

import numpy as np
import pytest
import torch

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
