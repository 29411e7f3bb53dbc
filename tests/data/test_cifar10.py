"""CIFAR-10 through torchvision on tiny fake files in the exact on-disk format."""

from __future__ import annotations

import json
import os
import pickle
import tarfile
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.error import URLError

import numpy as np
import pytest
import torch

from bdl.data import DataError
from bdl.data.cifar10 import MEAN, STD, load

pytestmark = pytest.mark.usefixtures("isolated_cache")

FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def _raw(root: Path, names: list[str]) -> tuple[np.ndarray, list[int]]:
    """Read the batches back with the dataset website's recipe (encoding="bytes")."""
    data, labels = [], []
    for name in names:
        with open(root / "cifar-10-batches-py" / name, "rb") as f:
            entry = pickle.load(f, encoding="bytes")
        data.append(entry[b"data"])
        labels.extend(entry[b"labels"])
    return np.concatenate(data), labels


def _expected(flat: np.ndarray) -> torch.Tensor:
    x = torch.from_numpy(flat.reshape(-1, 3, 32, 32).astype(np.float64) / 255.0)
    mean = torch.tensor(MEAN, dtype=torch.float64).view(1, 3, 1, 1)
    std = torch.tensor(STD, dtype=torch.float64).view(1, 3, 1, 1)
    return ((x - mean) / std).float()


def test_fake_files_have_the_original_format(cifar_root: Path):
    folder = cifar_root / "cifar-10-batches-py"
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)
    with open(folder / "data_batch_1", "rb") as f:
        entry = pickle.load(f, encoding="bytes")
    assert set(entry) == {b"batch_label", b"labels", b"data", b"filenames"}
    assert entry[b"data"].dtype == np.uint8 and entry[b"data"].shape[1] == 3072
    with open(folder / "batches.meta", "rb") as f:
        meta = pickle.load(f, encoding="latin1")  # how torchvision reads it
    assert meta["label_names"][0] == "airplane" and len(meta["label_names"]) == 10


def test_round_trip(cifar_root: Path, isolated_cache: Path):
    before = _snapshot(cifar_root)
    ds = load(root=cifar_root, download=False)
    assert ds.name == "cifar10" and ds.task == "classification"
    assert ds.num_classes == 10 and ds.out_features == 10
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (6, 3, 32, 32)
    assert ds.input_shape == (3, 32, 32) and ds.num_train == 20
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert ds.x_train.is_contiguous()

    flat, labels = _raw(cifar_root, FILES[:5])
    torch.testing.assert_close(ds.x_train, _expected(flat), rtol=0, atol=1e-5)
    assert ds.y_train.tolist() == labels
    flat_test, labels_test = _raw(cifar_root, ["test_batch"])
    torch.testing.assert_close(ds.x_test, _expected(flat_test), rtol=0, atol=1e-5)
    assert ds.y_test.tolist() == labels_test

    # Channel planes in the file are R, G, B: pixel (0, 0) of image 0 is bytes 0, 1024, 2048.
    px = flat[0, [0, 1024, 2048]] / 255.0
    want = torch.tensor([(px[c] - MEAN[c]) / STD[c] for c in range(3)], dtype=torch.float32)
    torch.testing.assert_close(ds.x_train[0, :, 0, 0], want, rtol=0, atol=1e-5)

    assert _snapshot(cifar_root) == before
    assert not isolated_cache.exists()  # read in place, nothing staged


def test_tarball_in_read_only_root_is_extracted_into_cache(
    tmp_path: Path, isolated_cache: Path, make_fake_cifar10: Callable, no_cifar_md5: None
):
    src = make_fake_cifar10(tmp_path / "src", seed=3)
    root = tmp_path / "root"
    root.mkdir()
    with tarfile.open(root / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    before = _snapshot(root)

    ds = load(root=root, download=False)
    flat, labels = _raw(src, FILES[:5])
    torch.testing.assert_close(ds.x_train, _expected(flat), rtol=0, atol=1e-5)
    assert ds.y_train.tolist() == labels
    assert _snapshot(root) == before
    assert sorted(p.name for p in (isolated_cache / "cifar-10-batches-py").iterdir()) == sorted(
        FILES
    )
    # Only the final folder and the lock file (never removed: that would race) are left in the
    # cache, no temporary extraction.
    assert sorted(p.name for p in isolated_cache.iterdir()) == [".lock", "cifar-10-batches-py"]
    assert load(root=root, download=False).y_test.tolist() == _raw(src, ["test_batch"])[1]


def test_md5_mismatch_is_a_data_error(tmp_path: Path, make_fake_cifar10: Callable):
    """Without the test-only bypass the real md5 check rejects the fake files."""
    root = make_fake_cifar10(tmp_path / "root")
    with pytest.raises(DataError) as err:
        load(root=root, download=False)
    msg = str(err.value)
    assert "corrupted" in msg and str(root / "cifar-10-batches-py") in msg
    assert "data_batch_1" in msg and "BDL_DATA_DIR" in msg


def test_missing_offline_names_path(tmp_path: Path, isolated_cache: Path):
    root = tmp_path / "empty"
    with pytest.raises(DataError) as err:
        load(root=root, download=False)
    msg = str(err.value)
    assert str(root) in msg and "cifar-10-python.tar.gz" in msg
    assert str(isolated_cache / "cifar-10-batches-py") in msg
    assert "BDL_DATA_DIR" in msg and "dataset.root" in msg
    assert not root.exists()


def test_failed_download_is_a_data_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def offline(*args, **kwargs):
        raise URLError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    root = tmp_path / "empty"
    with pytest.raises(DataError) as err:
        load(root=root, download=True)
    assert "network unreachable" in str(err.value) and "BDL_DATA_DIR" in str(err.value)
    assert not root.exists()


def test_corrupt_tarball_is_a_data_error(tmp_path: Path, isolated_cache: Path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "cifar-10-python.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(DataError) as err:
        load(root=root, download=False)
    assert str(root / "cifar-10-python.tar.gz") in str(err.value)
    assert not (isolated_cache / "cifar-10-batches-py").exists()


def _tarball(src: Path, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(root / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return root / "cifar-10-python.tar.gz"


def test_named_root_is_the_one_read(
    tmp_path: Path,
    isolated_cache: Path,
    make_fake_cifar10: Callable,
    no_cifar_md5: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
):
    """Once the cache holds CIFAR-10, a named root lacking it is refused offline, not served."""
    monkeypatch.delenv("BDL_DATA_DIR", raising=False)
    _tarball(make_fake_cifar10(tmp_path / "src", seed=4), tmp_path / "root")
    first = load(root=tmp_path / "root", download=False)
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for download in (False, True):
        with pytest.raises(DataError, match=rf"data root {a_file} .*is a file, not a folder"):
            load(root=a_file, download=download)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=r"dataset.download=false") as err:
        load(root=empty, download=False)
    assert str(empty / "cifar-10-batches-py") in str(err.value)
    monkeypatch.setenv("BDL_DATA_DIR", str(empty))
    with pytest.raises(DataError, match=r"dataset.download=false"):
        load(download=False)
    monkeypatch.delenv("BDL_DATA_DIR")
    # download=true: the cache (md5-checked by torchvision) stands in, with a warning; so it
    # does for the default root, where downloads land.
    with caplog.at_level("WARNING", logger="bdl.data.cifar10"):
        assert load(root=empty, download=True).y_test.tolist() == first.y_test.tolist()
    assert f"the data root {empty} holds no CIFAR-10" in caplog.text
    assert load(download=False).y_test.tolist() == first.y_test.tolist()


def test_tarball_that_is_not_the_original_is_refused(
    tmp_path: Path, isolated_cache: Path, make_fake_cifar10: Callable
):
    tarball = _tarball(make_fake_cifar10(tmp_path / "src"), tmp_path / "root")
    with pytest.raises(DataError, match=rf"{tarball} is not the original .*md5 check failed"):
        load(root=tmp_path / "root", download=False)
    assert not (isolated_cache / "cifar-10-batches-py").exists()


_SETUP = """
import os, sys
import torchvision.datasets.cifar as tv_cifar
import bdl.data.cifar10 as cifar10

def exists_only(fpath, md5=None):  # the fake files' md5s differ from the originals'
    return os.path.isfile(fpath)

tv_cifar.check_integrity = cifar10.check_integrity = exists_only
"""


def test_concurrent_first_extraction(tmp_path: Path, make_fake_cifar10: Callable, race):
    """Two processes extracting one tarball into one empty cache at once both load it."""
    src = make_fake_cifar10(tmp_path / "src", per_batch=200, seed=5)
    _tarball(src, tmp_path / "root")
    cache = tmp_path / "cache"
    load_ = "print(cifar10.load(root=sys.argv[1], download=False).y_train.tolist())"
    env = {**os.environ, "BDL_CACHE_DIR": str(cache)}
    outputs = race(_SETUP, load_, [str(tmp_path / "root")], env)
    labels = _raw(src, FILES[:5])[1]
    assert [json.loads(out) for out in outputs] == [labels, labels]
    assert sorted(p.name for p in cache.iterdir()) == [".lock", "cifar-10-batches-py"]


#: The original python version's files (Krizhevsky 2009), as its tarball holds them.
CIFAR_FILES = (
    "data_batch_1, data_batch_2, data_batch_3, data_batch_4, data_batch_5, test_batch, batches.meta"
)


def test_cifar10_that_cannot_be_loaded_says_why_and_where_its_files_go(
    tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
):
    root = tmp_path / "empty"
    way_out = (
        f"Expected the files {CIFAR_FILES} of the original python version in "
        f"{root}/cifar-10-batches-py/ (or {isolated_cache}/cifar-10-batches-py/), or the tarball "
        f"cifar-10-python.tar.gz in {root}/. Put them there, or set BDL_DATA_DIR / dataset.root "
        "to a folder containing cifar-10-batches-py/ or cifar-10-python.tar.gz, or allow "
        "dataset.download=true with network access."
    )
    with pytest.raises(DataError) as err:
        load(root=root, download=False)
    assert str(err.value) == f"CIFAR-10 could not be loaded (dataset.download=false). {way_out}"

    def offline(*args, **kwargs):
        raise URLError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataError) as err:
        load(root=root, download=True)
    text = str(err.value)
    assert text.startswith("CIFAR-10 could not be loaded (") and "network unreachable" in text
    assert text.endswith(f"). {way_out}")
    (isolated_cache / "cifar-10-batches-py").mkdir(parents=True)  # a damaged extraction
    with pytest.raises(DataError) as err:
        load(root=root, download=False)
    assert str(err.value) == (
        f"CIFAR-10 could not be loaded (dataset.download=false). {way_out} If "
        f"{isolated_cache}/cifar-10-batches-py is a damaged extraction, delete it so it is rebuilt."
    )


def test_a_tarball_that_is_not_cifar10s_is_named(tmp_path: Path, isolated_cache: Path):
    root = tmp_path / "root"
    root.mkdir()
    tarball = root / "cifar-10-python.tar.gz"
    tarball.write_bytes(b"not a tarball")
    with pytest.raises(DataError) as err:
        load(root=root, download=False)
    assert str(err.value) == (
        f"{tarball} is not the original CIFAR-10 python tarball (md5 check failed, expected "
        "c58f30108f718f92721af3b95e74349a); replace it with the original cifar-10-python.tar.gz."
    )
