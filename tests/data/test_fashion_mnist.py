"""Fashion-MNIST (Xiao et al. 2017) from a read-only folder of recompressed .gz archives, and from
generated files in the same IDX format."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

import bdl.data.fashion_mnist as fashion
import bdl.data.mnist as mnist_module
from bdl.data import DataError
from bdl.data.fashion_mnist import load

from .test_mnist import GZ, _offline, _snapshot, write_fake_mnist


@pytest.fixture(scope="module")
def fashion_mnist(tmp_path_factory: pytest.TempPathFactory, data_dir: Path):
    """The real Fashion-MNIST loaded once for the module, offline, caches in a temporary folder."""
    tmp = tmp_path_factory.mktemp("fashion-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp / "xdg"))
        mp.setenv("BDL_CACHE_DIR", str(tmp / "bdl"))
        mp.setattr(urllib.request, "urlopen", _offline)
        before = _snapshot(data_dir / "FashionMNIST")
        ds = load(root=data_dir, download=False)
        after = _snapshot(data_dir / "FashionMNIST")
    return ds, data_dir, tmp / "bdl", before, after


def test_real_files_load_as_published(fashion_mnist):
    """60 000 training images, 6000 of each class (Xiao et al. 2017), the last 10 000 held out;
    1000 test images of each class; pixels exactly the IDX file's uint8 / 255."""
    ds, root, cache, before, after = fashion_mnist
    assert ds.name == "fashion_mnist" and ds.num_classes == 10
    assert ds.x_train.shape == (50000, 1, 28, 28) and ds.x_validation.shape == (10000, 1, 28, 28)
    labels = torch.cat([ds.y_train, ds.y_validation])
    assert torch.bincount(labels, minlength=10).tolist() == [6000] * 10
    assert torch.bincount(ds.y_test, minlength=10).tolist() == [1000] * 10
    with gzip.open(root / "FashionMNIST" / "raw" / "t10k-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 28, 28)
    want = torch.from_numpy(images[[0, 4321, 9999]].astype(np.float32) / 255)
    assert torch.equal(ds.x_test[[0, 4321, 9999], 0], want)
    # the read-only root is untouched; the cache holds the archives and what they extract to
    assert before == after
    assert sorted(p.name for p in (cache / "FashionMNIST" / "raw").iterdir()) == sorted(
        GZ + [name[:-3] for name in GZ]
    )


@pytest.fixture
def recompressed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Generated archives (100 + 20 images) whose decompressed md5 sums stand in for the
    originals', while no archive has torchvision's md5: a packager's recompression."""
    root = tmp_path / "root"
    arrays = write_fake_mnist(root, 100, 20, seed=3, folder="FashionMNIST")
    raw = root / "FashionMNIST" / "raw"
    extracted = {}
    for name in GZ:
        with gzip.open(raw / name) as f:
            extracted[name[:-3]] = hashlib.md5(f.read()).hexdigest()
    monkeypatch.setattr(
        fashion, "SOURCE", dataclasses.replace(fashion.SOURCE, extracted_md5=extracted)
    )
    monkeypatch.setattr(mnist_module, "NUM_TRAIN_TOTAL", 100)
    return root, arrays


def test_recompressed_archives_pass_by_their_contents(recompressed, isolated_cache: Path):
    root, arrays = recompressed
    ds = load(root=root, validation=10, download=False)
    want = arrays["train-images-idx3-ubyte.gz"][:90].astype(np.float32) / 255
    assert torch.equal(ds.x_train[:, 0], torch.from_numpy(want))
    assert ds.y_validation.tolist() == arrays["train-labels-idx1-ubyte.gz"][90:].tolist()
    assert ds.y_test.tolist() == arrays["t10k-labels-idx1-ubyte.gz"].tolist()
    assert (isolated_cache / "FashionMNIST" / "raw" / "t10k-images-idx3-ubyte").is_file()


def test_other_contents_are_refused_by_name(recompressed, isolated_cache: Path):
    root, _ = recompressed
    damaged = root / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte.gz"
    damaged.write_bytes(gzip.compress(b"not the labels"))
    with pytest.raises(DataError, match="Fashion-MNIST could not be loaded") as err:
        load(root=root, validation=10, download=False)
    assert "md5" in str(err.value) and str(damaged) in str(err.value)
    assert not (isolated_cache / "FashionMNIST" / "raw" / damaged.name).exists()


def test_missing_offline_names_the_folder(tmp_path: Path, isolated_cache: Path):
    with pytest.raises(DataError) as err:
        load(root=tmp_path / "empty", download=False)
    assert str(tmp_path / "empty" / "FashionMNIST" / "raw") in str(err.value)
    assert all(name in str(err.value) for name in GZ)


def test_generated_extracted_root_is_read_in_place(fake_data_root: Path, isolated_cache: Path):
    """The session's generated root (extracted IDX files beside the archives) is read where it
    is; its images light columns, MNIST's rows."""
    ds = load(root=fake_data_root, download=False)
    assert ds.x_train.shape == (50000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    first = ds.x_test[0, 0]
    k = int(ds.y_test[0])
    assert bool((first[4:24, 2 * k + 4] == 1).all())
    assert not isolated_cache.exists()


@pytest.mark.parametrize(
    ("module", "folder"),
    [(mnist_module, "MNIST"), (fashion, "FashionMNIST")],
    ids=["mnist", "fashion"],
)
def test_every_split_is_the_idx_pixels_over_the_pixel_divisor(
    module, folder, fake_data_root: Path, isolated_cache: Path
):
    """``pixel_divisor=126`` (Blundell et al. 2015) divides the training, held-out and test
    images alike, MNIST's and Fashion-MNIST's (the OOD set of a Blundell run is scaled as its
    training set is): each is the IDX file's bytes, read here by NumPy, over 126."""
    ds = module.load(root=fake_data_root, download=False, validation=1000, pixel_divisor=126.0)
    raw = fake_data_root / folder / "raw"

    def pixels(name: str) -> torch.Tensor:
        data = np.frombuffer((raw / name).read_bytes(), dtype=np.uint8, offset=16)
        return torch.from_numpy(data.reshape(-1, 1, 28, 28) / 126.0).float()

    train, test = pixels("train-images-idx3-ubyte"), pixels("t10k-images-idx3-ubyte")
    for got, expected in (
        (ds.x_train, train[:59000]),
        (ds.x_validation, train[59000:]),
        (ds.x_test, test),
    ):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)
    assert ds.x_test.max().item() == pytest.approx(255 / 126, rel=1e-6)
