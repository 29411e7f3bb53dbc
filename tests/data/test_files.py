"""``dataset=files``: the user's own CSV, NPZ or safetensors files, no code, never a pickle."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from safetensors.numpy import save_file

from bdl.composition.config import ConfigError, validate
from bdl.data import DataError
from bdl.data.files import load
from bdl.runner.run import run


def write_split_csvs(uci_root: Path, name: str, split: int, out: Path) -> tuple[Path, Path]:
    """Split ``split`` of the UCI set ``name`` (the standard splits' layout) as two CSV files with
    a header, every value written to full float64 precision."""
    folder = uci_root / "uci" / name
    data = np.loadtxt(folder / "data.txt", ndmin=2)
    features = np.loadtxt(folder / "index_features.txt", dtype=int, ndmin=1)
    target = int(np.loadtxt(folder / "index_target.txt", dtype=int))
    header = ",".join([*(f"x{j}" for j in features), "price"])
    paths = []
    for part in ("train", "test"):
        rows = np.loadtxt(folder / f"index_{part}_{split}.txt", dtype=int, ndmin=1)
        table = np.column_stack([data[rows][:, features], data[rows, target]])
        path = out / f"{part}.csv"
        np.savetxt(path, table, delimiter=",", header=header, comments="", fmt="%.17g")
        paths.append(path)
    return paths[0], paths[1]


SHORT = ["protocol.mlp.hidden=[8]", "epochs=6", "burn_in=2", "thin=1", "log_every=100"]


def uci_against_files(uci_root: Path, name: str, option: str, tmp_path: Path) -> None:
    """The same short run on split 0 read by the UCI loader and, from CSV files written from
    it, by ``dataset=files``: the same standardisation, so the same test RMSE and LL."""
    train, test = write_split_csvs(uci_root, name, 0, tmp_path)
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        builtin = compose(
            "config",
            [f"dataset={option}", f"dataset.root={uci_root}", "dataset.download=false", *SHORT],
        )
        files = compose(
            "config",
            ["dataset=files", f"dataset.train={train}", f"dataset.test={test}"]
            + ["dataset.target=price", *SHORT],
        )
    expected = run(builtin, tmp_path / "builtin")
    got = run(files, tmp_path / "files")
    assert expected["status"] == got["status"] == "completed"
    for key in ("test_rmse", "test_ll"):
        assert got[key] == pytest.approx(expected[key], rel=1e-5), key


def test_a_csv_of_a_uci_split_gives_the_uci_loaders_test_rmse(fake_data_root, tmp_path):
    uci_against_files(fake_data_root, "bostonHousing", "boston", tmp_path)


def test_a_csv_of_the_real_boston_split_gives_the_uci_loaders_test_rmse(data_dir, tmp_path):
    uci_against_files(data_dir, "bostonHousing", "boston", tmp_path)


def test_standardisation_uses_the_training_rows_alone_and_holds_out_validation_rows(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(3.0, 2.0, size=(40, 2)), rng.normal(5.0, 4.0, size=40)
    save_file({"x": x[:30], "y": y[:30]}, tmp_path / "train.safetensors")
    np.savez(tmp_path / "test.npz", x=x[30:], y=y[30:])
    data = load(str(tmp_path / "train.safetensors"), str(tmp_path / "test.npz"), validation=0.2)
    assert data.task == "regression" and data.num_train == 24 and len(data.x_validation) == 6
    kept = np.random.default_rng(0).permutation(30)[6:]  # the rows the loader keeps for training
    mean, std = x[kept].mean(axis=0), x[kept].std(axis=0)
    torch.testing.assert_close(
        data.x_test, torch.tensor((x[30:] - mean) / std, dtype=torch.float32)
    )
    assert data.target_mean == pytest.approx(y[kept].mean())
    assert data.target_std == pytest.approx(y[kept].std())


def test_classes_are_inferred_from_text_or_0_to_k_minus_1_and_said(tmp_path, caplog):
    (tmp_path / "a.csv").write_text("u,v,label\n1,2,cat\n3,4,dog\n5,6,cat\n")
    (tmp_path / "b.csv").write_text("u,v,label\n1,1,dog\n")
    with caplog.at_level("INFO", logger="bdl"):
        data = load(str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), target="label")
    assert data.task == "classification" and data.num_classes == 2
    assert data.y_train.tolist() == [0, 1, 0] and data.y_test.tolist() == [1]
    assert "read as classification" in caplog.text
    (tmp_path / "n.csv").write_text("u,label\n1,0\n2,2\n3,1\n")
    caplog.clear()
    with caplog.at_level("INFO", logger="bdl"):
        assert load(str(tmp_path / "n.csv"), str(tmp_path / "n.csv"), target="label").task == (
            "classification"
        )
    assert "label holds the integers 0..2 alone: read as classification" in caplog.text
    (tmp_path / "c.csv").write_text("u,y\n1,3\n2,4\n3,8\n")
    assert load(str(tmp_path / "c.csv"), str(tmp_path / "c.csv")).task == "regression"
    declared = load(str(tmp_path / "c.csv"), str(tmp_path / "c.csv"), task="regression")
    assert declared.task == "regression"


@pytest.mark.parametrize(
    "train, message",
    [
        ("u,y\n1,2\n3,oops\n", "line 3, column 'y' is 'oops'"),
        ("u,y\n1,2\nnan,3\n", "line 3, column 'u' is 'nan', not a finite number"),
        ("u,y\n1,2\n3\n", "line 3 has 1 cells where the header has 2"),
        ("u,v\n1,2\n", "has no column 'y' (its columns: u, v)"),
    ],
)
def test_a_bad_csv_is_named_with_its_line_and_column(tmp_path, train, message):
    (tmp_path / "train.csv").write_text(train)
    with pytest.raises(DataError, match=re.escape(message)) as error:
        load(str(tmp_path / "train.csv"), str(tmp_path / "train.csv"))
    assert str(tmp_path / "train.csv") in str(error.value) and "\n" not in str(error.value)


def test_a_pickle_is_never_loaded_whatever_its_name(tmp_path):
    class Payload:
        def __reduce__(self):
            return (Path.touch, (tmp_path / "pwned",))

    for name in ("train.npz", "train.csv", "train.pkl"):
        (tmp_path / name).write_bytes(pickle.dumps({"x": Payload()}))
        with pytest.raises(DataError, match="pickle"):
            load(str(tmp_path / name), str(tmp_path / name))
    np.save(tmp_path / "objects.npy", np.array([Payload()], dtype=object), allow_pickle=True)
    (tmp_path / "objects.npy").rename(tmp_path / "objects.npz")
    with pytest.raises(DataError):
        load(str(tmp_path / "objects.npz"), str(tmp_path / "objects.npz"))
    np.savez(tmp_path / "inner.npz", x=np.array([[Payload()]], dtype=object), y=np.zeros(1))
    with pytest.raises(DataError, match="pickled data"):
        load(str(tmp_path / "inner.npz"), str(tmp_path / "inner.npz"))
    assert not (tmp_path / "pwned").exists()


def test_dataset_files_without_its_files_is_refused_before_anything_runs():
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", ["dataset=files", *SHORT])
    with pytest.raises(ConfigError, match=r"^dataset.train=null must be a string$"):
        validate(cfg)
