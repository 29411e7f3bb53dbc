"""Where data is read from and written to, and the Dataset conveniences the runner relies on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import bdl.data as data
from bdl.data import DataError, Dataset, cache_dir, data_root


def test_reexports():
    for name in ("DataError", "Dataset", "cache_dir", "data_root", "random_crop_flip"):
        assert hasattr(data, name)
    assert issubclass(DataError, Exception)


def test_data_root_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("BDL_DATA_DIR", raising=False)
    assert data_root(None) == tmp_path / "xdg" / "bdl" / "data"
    monkeypatch.setenv("BDL_DATA_DIR", str(tmp_path / "env"))
    assert data_root(None) == tmp_path / "env"
    assert data_root(tmp_path / "explicit") == tmp_path / "explicit"
    assert data_root(str(tmp_path / "explicit")) == tmp_path / "explicit"


def test_data_root_home_fallback(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("BDL_DATA_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert data_root(None) == Path.home() / ".cache" / "bdl" / "data"


def test_cache_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("BDL_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_dir() == Path.home() / ".cache" / "bdl"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "bdl"
    monkeypatch.setenv("BDL_CACHE_DIR", str(tmp_path / "bdl"))
    assert cache_dir() == tmp_path / "bdl"


def test_dataset_properties():
    clf = Dataset(
        name="toy",
        task="classification",
        x_train=torch.zeros(7, 1, 28, 28),
        y_train=torch.zeros(7, dtype=torch.int64),
        x_test=torch.zeros(3, 1, 28, 28),
        y_test=torch.zeros(3, dtype=torch.int64),
        num_classes=10,
    )
    assert clf.input_shape == (1, 28, 28)
    assert clf.out_features == 10
    assert clf.num_train == 7

    reg = Dataset(
        name="toy",
        task="regression",
        x_train=torch.zeros(5, 13),
        y_train=torch.zeros(5),
        x_test=torch.zeros(2, 13),
        y_test=torch.zeros(2),
    )
    assert reg.input_shape == (13,)
    assert reg.out_features == 1
    assert reg.num_train == 5
    assert reg.num_classes is None and reg.target_mean == 0.0 and reg.target_std == 1.0


def test_a_data_root_or_cache_that_cannot_serve_is_one_line_naming_the_fix(tmp_path: Path):
    from bdl.data.base import cache_lock, check_root_is_folder

    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(DataError) as error:
        check_root_is_folder(a_file, "MNIST/raw/")
    assert str(error.value) == (
        f"The data root {a_file} (dataset.root, else BDL_DATA_DIR) is a file, not a folder. "
        "Point dataset.root or BDL_DATA_DIR at a folder containing MNIST/raw/."
    )
    check_root_is_folder(tmp_path / "not yet", "MNIST/raw/")  # made when first written
    with pytest.raises(DataError) as error, cache_lock(a_file / "cache"):
        pass
    text = str(error.value)
    assert text.startswith(f"Cannot create or lock the cache folder {a_file / 'cache'} (")
    assert text.endswith("); make it writable or point BDL_CACHE_DIR at a writable folder.")
    unlabelled = Dataset("toy", "classification", *[torch.zeros(2, 1)] * 4)
    with pytest.raises(ValueError) as error:
        _ = unlabelled.out_features
    assert str(error.value) == "classification dataset 'toy' has no num_classes"
