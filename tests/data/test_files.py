"""``dataset=files``: the user's own CSV, NPZ or safetensors files, no code, never a pickle."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from safetensors.numpy import load as safe_load
from safetensors.numpy import save, save_file

from bdl.analysis.evaluate import main as bdl_eval
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
    (tmp_path / "m.csv").write_text("u,label\n4,2\n")
    caplog.clear()
    with caplog.at_level("INFO", logger="bdl"):
        assert load(str(tmp_path / "n.csv"), str(tmp_path / "m.csv"), target="label").task == (
            "classification"
        )
    assert "label holds the integers 0..2 alone: read as classification" in caplog.text
    (tmp_path / "c.csv").write_text("u,y\n1,3\n2,4\n3,8\n")
    (tmp_path / "d.csv").write_text("u,y\n7,4\n")
    assert load(str(tmp_path / "c.csv"), str(tmp_path / "d.csv")).task == "regression"
    declared = load(str(tmp_path / "c.csv"), str(tmp_path / "d.csv"), task="regression")
    assert declared.task == "regression"


def test_integer_classes_other_than_0_to_k_minus_1_are_mapped_in_order_and_said(tmp_path, caplog):
    """A wine's quality scores 3..8 declared a classification: six classes, not nine of which
    three are never seen; the test file's labels map as the training file's."""
    (tmp_path / "a.csv").write_text("u,q\n1,3\n2,8\n3,5\n4,-1\n")
    (tmp_path / "b.csv").write_text("u,q\n9,8\n8,-1\n7,5\n")
    with caplog.at_level("INFO", logger="bdl"):
        data = load(str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "q", "classification")
    assert data.num_classes == 4
    assert data.y_train.tolist() == [1, 3, 2, 0] and data.y_test.tolist() == [3, 0, 2]
    assert caplog.messages == [
        f"dataset=files: {tmp_path / 'a.csv'}'s q holds the classes -1, 3, 5, 8: read as the "
        "classes 0..3 in that order"
    ]


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
        given = compose("config", ["dataset=files", "dataset.train=a.csv", *SHORT])
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    assert str(error.value) == "dataset.train is not set: give it, dataset.train=VALUE (a string)"
    with pytest.raises(ConfigError) as error:
        validate(given)
    assert str(error.value) == "dataset.test is not set: give it, dataset.test=VALUE (a string)"


def _write(folder: Path, name: str, content) -> None:
    """``content``: a CSV's text, raw bytes, or a dict of arrays (saved by its suffix)."""
    path = folder / name
    if isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif name.endswith(".npz"):
        np.savez(path, **content)
    else:
        save_file(content, path)


ROWS = "u,v,y\n1,2,3\n4,5,6\n"
ARRAYS = {"x": np.ones((3, 2)), "y": np.arange(3.0)}


@pytest.mark.parametrize(
    "files, options, message",
    [
        (
            {"train.csv": ""},
            {},
            "D/train.csv is empty: a CSV needs a header row naming its columns",
        ),
        (
            {"train.csv": "u,v\n1,2\n"},
            {},
            "D/train.csv has no column 'y' (its columns: u, v): set dataset.target to the "
            "target's column",
        ),
        (
            {"train.csv": ROWS},
            {"features": ["u", "w"]},
            "D/train.csv has no column 'w' of dataset.features",
        ),
        ({"train.csv": "y\n1\n"}, {}, "D/train.csv has no feature column beside the target 'y'"),
        (
            {"train.csv": "u,y\n"},
            {},
            "D/train.csv has a header and no row: it needs at least one point",
        ),
        (
            {"train.csv": "u,y\n1,2\n3,oops\n"},
            {},
            "D/train.csv: line 3, column 'y' is 'oops', not a number like the column's other "
            "cells: fix the cell",
        ),
        (
            {"train.csv": "u,y\n1,2\n3,inf\n"},
            {},
            "D/train.csv: line 3, column 'y' is 'inf', not a finite number: fix the cell",
        ),
        (
            {"train.csv": "u,y\n1,2\nnan,3\n"},
            {},
            "D/train.csv: line 3, column 'u' is 'nan', not a finite number: fix the cell or leave "
            "the column out (dataset.features)",
        ),
        (
            {"train.txt": ROWS},
            {},
            "D/train.txt: a dataset file is .csv, .npz, .safetensors (never a pickle): convert it",
        ),
        (
            {"train.npz": ARRAYS},
            {"features": ["u"]},
            "dataset.features picks columns of a CSV; D/train.npz holds arrays",
        ),
        (
            {"train.npz": {"x": np.ones((3, 2))}},
            {},
            "D/train.npz has no array 'y' (its arrays: x): it needs the features as x and the "
            "target as dataset.target",
        ),
        (
            {"train.npz": {}},
            {},
            "D/train.npz has no array 'x' (its arrays: none): it needs the features as x and the "
            "target as dataset.target",
        ),
        (
            {"train.npz": {"x": np.ones(3), "y": np.ones(3)}},
            {},
            "D/train.npz: x has shape (3,) and y (3,); x needs one row per point and y one value "
            "per row",
        ),
        (
            {"train.npz": {"x": np.ones((3, 2)), "y": np.ones((3, 1))}},
            {},
            "D/train.npz: x has shape (3, 2) and y (3, 1); x needs one row per point and y one "
            "value per row",
        ),
        (
            {"train.npz": {"x": np.ones((3, 2), dtype=complex), "y": np.ones(3)}},
            {},
            "D/train.npz: x (complex128) and y (float64) must be numbers",
        ),
        (
            {"train.safetensors": {"x": np.array([[1.0, 2], [3, np.inf]]), "y": np.ones(2)}},
            {},
            "D/train.safetensors: row 1 of x holds inf at [1], not a finite number: fix the value",
        ),
        (
            {"train.npz": {"x": np.ones((3, 2)), "y": np.array([0, 1, np.nan])}},
            {},
            "D/train.npz: row 2 of y is nan, not a finite number: fix the value",
        ),
        (
            {"train.csv": ROWS},
            {"task": "classify"},
            "dataset.task='classify': use one of auto, regression, classification",
        ),
        (
            {"train.csv": "u,y\n1,0\n2,0.5\n"},
            {"task": "classification"},
            "D/train.csv: row 1 of y is 0.5; class labels are integers (or text): set "
            "dataset.task=regression for a numeric target",
        ),
        (
            {"train.csv": "u,y\n1,cat\n2,dog\n", "test.csv": "u,y\n1,dog\n2,bird\n"},
            {},
            "D/test.csv: row 1 of y is 'bird', a class the training file does not have (its "
            "classes: cat, dog)",
        ),
        (
            {"train.csv": "u,y\n1,cat\n2,dog\n"},
            {"task": "regression"},
            "dataset.task=regression, but y holds text in D/train.csv: set "
            "dataset.task=classification",
        ),
        (
            {"train.csv": ROWS, "test.csv": "u,w,y\n1,2,3\n"},
            {},
            "D/test.csv's features (u, w) differ from D/train.csv's (u, v): give the same columns",
        ),
        (
            {"train.npz": ARRAYS, "test.npz": {"x": np.ones((2, 3)), "y": np.ones(2)}},
            {},
            "D/test.npz's features ((3,)) differ from D/train.npz's ((2,)): give the same columns",
        ),
        (
            {"train.csv": ROWS},
            {"validation": True},
            "dataset.validation is a file or a fraction in (0, 1) of the train rows",
        ),
        (
            {"train.csv": ROWS},
            {"validation": 1.5},
            "dataset.validation=1.5 must be a fraction in [0, 1) of the training rows, or a file",
        ),
        (
            {"train.csv": ROWS},
            {"validation": 0.1},
            "dataset.validation=0.1 holds out 0 of the 2 training rows: choose a fraction that "
            "leaves rows on both sides",
        ),
    ],
)
def test_a_files_mistake_is_one_line_naming_the_fix(tmp_path, files, options, message):
    """Each mistake in a user's files or their options ends in one line that names the file
    (here ``D``), the place and the fix; the test file is the training file unless given."""
    for name, content in files.items():
        _write(tmp_path, name, content)
    train = next(name for name in files if name.startswith("train"))
    test = next((name for name in files if name.startswith("test")), train)
    with pytest.raises(DataError) as error:
        load(str(tmp_path / train), str(tmp_path / test), **options)
    assert str(error.value).replace(str(tmp_path), "D") == message


@pytest.mark.parametrize(
    "name, content, start, end",
    [
        (
            "train.csv",
            b"u,y\n\xff\xfe,1\n",
            "D/train.csv cannot be read as CSV (",
            "): give a UTF-8 CSV file",
        ),
        (
            "train.npz",
            b"PK\x03\x04 broken",
            "D/train.npz is not an NPZ archive (",
            "): save it by numpy.savez",
        ),
        (
            "train.safetensors",
            b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}",
            "D/train.safetensors is not a safetensors file (",
            "): save it by safetensors.numpy.save_file",
        ),
        (
            "train.pkl",
            pickle.dumps([1]),
            "D/train.pkl is a pickle, which bdl never loads: save it as CSV, NPZ or safetensors",
            "",
        ),
    ],
)
def test_an_unreadable_file_is_one_line_with_the_readers_cause(tmp_path, name, content, start, end):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DataError) as error:
        load(str(tmp_path / name), str(tmp_path / name))
    text = str(error.value).replace(str(tmp_path), "D")
    assert text.startswith(start) and text.endswith(end) and "\n" not in text


def test_a_file_not_there_or_not_given_names_the_option(tmp_path):
    with pytest.raises(DataError) as error:
        load(str(tmp_path / "none.csv"), str(tmp_path / "none.csv"))
    assert str(error.value) == (
        f"{tmp_path / 'none.csv'} does not exist: give the path of a .csv, .npz or "
        ".safetensors file"
    )
    for key, paths in (("train", ("", "b.csv")), ("test", ("a.csv", None))):
        with pytest.raises(DataError) as error:
            load(*paths)
        assert str(error.value) == f"dataset.{key} is not set: give a file, dataset.{key}=FILE.csv"


@pytest.mark.parametrize(
    "csv_text, said",
    [
        (
            "u,y\n1,3\n2,4\n",
            "y holds numbers other than 0..K-1: read as regression "
            "(dataset.task=classification says otherwise)",
        ),
        (
            "u,y\n1,cat\n2,dog\n",
            "y holds text labels: read as classification (dataset.task=regression says otherwise)",
        ),
        (
            "u,y\n1,1\n2,0\n",
            "y holds the integers 0..1 alone: read as classification "
            "(dataset.task=regression says otherwise)",
        ),
        (
            "u,y\n1,1\n2,1\n",
            "y holds numbers other than 0..K-1: read as regression "
            "(dataset.task=classification says otherwise)",
        ),
    ],
)
def test_an_inferred_task_is_said_with_the_option_that_overrides_it(
    tmp_path, caplog, csv_text, said
):
    (tmp_path / "a.csv").write_text(csv_text)
    (tmp_path / "b.csv").write_text("u,y\n" + csv_text.split("\n")[1].replace("1,", "9,", 1))
    with caplog.at_level("INFO", logger="bdl"):
        load(str(tmp_path / "a.csv"), str(tmp_path / "b.csv"))
    assert caplog.messages == [f"dataset=files: {tmp_path / 'a.csv'}'s {said}"]
    caplog.clear()
    with caplog.at_level("INFO", logger="bdl"):
        load(
            str(tmp_path / "a.csv"),
            str(tmp_path / "b.csv"),
            task="classification" if "text" in said else "regression",
        )
    assert caplog.messages == []  # a declared task is not inferred, nor said


def test_a_safetensors_file_whose_header_length_starts_with_0x80_is_read(tmp_path):
    """A header 128 bytes long makes the file's first byte 0x80, the pickle protocol's opcode:
    the file is read by its structure (the length, then JSON), whatever that byte is."""
    rng = np.random.default_rng(0)
    for rows in range(1, 10**6):
        content = save({"x": rng.normal(size=(rows, 3)), "y": rng.normal(size=rows)})
        if content[0] == 0x80:
            break
    (tmp_path / "train.safetensors").write_bytes(content)
    arrays = safe_load(content)
    np.savez(tmp_path / "test.npz", x=arrays["x"][:1] + 1, y=arrays["y"][:1])
    data = load(str(tmp_path / "train.safetensors"), str(tmp_path / "test.npz"))
    assert data.num_train == rows
    torch.testing.assert_close(
        data.y_train.double() * data.target_std + data.target_mean, torch.tensor(arrays["y"])
    )


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".csv"])
@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_a_real_pickle_renamed_is_refused_as_a_pickle_in_one_line(tmp_path, suffix, protocol):
    class Payload:
        def __reduce__(self):
            return (Path.touch, (tmp_path / "pwned",))

    path = tmp_path / f"train{suffix}"
    path.write_bytes(pickle.dumps({"x": Payload(), "y": [1.0, 2.0]}, protocol=protocol))
    with pytest.raises(DataError) as error:
        load(str(path), str(path))
    assert str(error.value) == (
        f"{path} is a pickle, which bdl never loads: save it as CSV, NPZ or safetensors"
    )
    assert not (tmp_path / "pwned").exists()


def test_the_target_is_the_named_column_wherever_it_stands(tmp_path):
    """The target first (``y,u,v``): read from its own column, not the last one."""
    (tmp_path / "a.csv").write_text("y,u,v\n10,1,2\n20,3,5\n60,4,7\n")
    (tmp_path / "b.csv").write_text("y,u,v\n30,8,9\n")
    data = load(str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), standardise=False)
    assert data.x_train.tolist() == [[1, 2], [3, 5], [4, 7]] and data.x_test.tolist() == [[8, 9]]
    assert data.y_train.tolist() == [10, 20, 60] and data.y_test.tolist() == [30]


@pytest.mark.parametrize(
    "files, options, message",
    [
        (
            {"train.csv": ROWS, "test.csv": "u,v,y\n1,2,3\n4,5,6\n7,8,9\n"},
            {},
            "D/test.csv: 2 of its 3 rows are rows of the training file D/train.csv (the first: "
            "row 0): the test metric would be measured on rows trained on; give a file of "
            "held-out rows",
        ),
        (
            {"train.csv": ROWS, "test.csv": ROWS},
            {"features": ["u", "y"]},
            "dataset.features lists the target 'y': the network would read the target from its "
            "inputs; remove it from dataset.features",
        ),
        (
            {"train.csv": "u,y\n1,2\n3,1e300\n"},
            {},
            "D/train.csv: line 3, column 'y' is '1e300', beyond ±1e+30, whose square overflows "
            "the standardisation: fix the cell",
        ),
        (
            {"train.csv": "u,y\n1,2\n-1e300,1\n"},
            {},
            "D/train.csv: line 3, column 'u' is '-1e300', beyond ±1e+30, whose square overflows "
            "the standardisation: fix the cell or leave the column out (dataset.features)",
        ),
        (
            {"train.npz": {"x": np.array([[1.0, 2], [3, 1e300]]), "y": np.ones(2)}},
            {},
            "D/train.npz: row 1 of x holds 1e+300 at [1], beyond ±1e+30, whose square overflows "
            "the standardisation: fix the value",
        ),
        (
            {"train.csv": "u,y\n1,2\n", "test.csv": "u,y\n3,4\n"},
            {},
            "D/train.csv has 1 training row: give at least 2",
        ),
        (
            {"train.csv": "u,Strength\n1,2\n"},
            {"target": "strength"},
            "D/train.csv has no column 'strength' (did you mean 'Strength'?) (its columns: u, "
            "Strength): set dataset.target to the target's column",
        ),
        (
            {"train.csv": "age,cement,y\n1,2,3\n"},
            {"features": ["age", "cemnt"]},
            "D/train.csv has no column 'cemnt' of dataset.features (did you mean 'cement'?)",
        ),
    ],
)
def test_the_uci_loaders_checks_hold_for_a_users_files(tmp_path, files, options, message):
    """The test file mostly training rows, the target among the features, a cell whose square
    overflows, one training row, a column misspelt: one line each, naming the file and fix."""
    test_a_files_mistake_is_one_line_naming_the_fix(tmp_path, files, options, message)


def test_the_training_file_as_the_test_file_is_refused(tmp_path):
    (tmp_path / "a.csv").write_text(ROWS)
    with pytest.raises(DataError) as error:
        load(str(tmp_path / "a.csv"), str(tmp_path / ".." / tmp_path.name / "a.csv"))
    assert str(error.value) == (
        f"dataset.test is the training file {tmp_path / 'a.csv'}: the test metric would be "
        "measured on rows trained on; give a file of held-out rows"
    )


def test_a_few_duplicate_rows_are_said_not_refused(tmp_path, caplog):
    (tmp_path / "a.csv").write_text(ROWS)
    (tmp_path / "b.csv").write_text("u,v,y\n1,2,3\n0,0,0\n9,9,9\n")
    with caplog.at_level("INFO", logger="bdl"):
        load(str(tmp_path / "a.csv"), str(tmp_path / "b.csv"))
    assert f"1 of {tmp_path / 'b.csv'}'s 3 rows are also rows of" in caplog.text


def test_a_refusal_of_50000_columns_is_one_readable_line(tmp_path):
    header = ",".join(f"c{k}" for k in range(50_000))
    (tmp_path / "a.csv").write_text(f"{header},y\n" + (",".join(["1"] * 50_001) + "\n") * 2)
    (tmp_path / "b.csv").write_text("u,y\n1,2\n")
    with pytest.raises(DataError) as error:
        load(str(tmp_path / "a.csv"), str(tmp_path / "b.csv"))
    text = str(error.value)
    assert "\n" not in text and len(text) < 400, text
    assert text.endswith("c6, c7, ... (50000 in all)): give the same columns")


def test_a_files_run_keeps_its_data_and_is_evaluated_from_another_folder(
    fake_data_root, tmp_path, monkeypatch
):
    """Relative paths, as typed in the data's folder: the run copies the files into its
    directory and reads them there, so that ``bdl-eval`` from another folder scores the same
    test rows (its test RMSE equals the run's), and a changed original cannot be resumed on."""
    (tmp_path / "data").mkdir()
    write_split_csvs(fake_data_root, "bostonHousing", 0, tmp_path / "data")
    monkeypatch.chdir(tmp_path / "data")
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose(
            "config",
            ["dataset=files", "dataset.train=train.csv", "dataset.test=test.csv"]
            + ["dataset.target=price", "figures=false", *SHORT],
        )
    metrics = run(cfg, tmp_path / "run")
    assert metrics["status"] == "completed"
    for part in ("train", "test"):
        copy = tmp_path / "run" / "data" / f"{part}.csv"
        assert copy.read_bytes() == (tmp_path / "data" / f"{part}.csv").read_bytes()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert bdl_eval([str(tmp_path / "run")]) == 0
    (evaluated,) = (tmp_path / "run" / "eval").glob("*/metrics.json")
    assert json.loads(evaluated.read_text())["test_rmse"] == pytest.approx(
        metrics["test_rmse"], rel=1e-6
    )
    monkeypatch.chdir(tmp_path / "data")
    (tmp_path / "data" / "test.csv").write_text("x0,price\n1,2\n")
    with pytest.raises(DataError, match="holds other data than .*test.csv: give the run a fresh"):
        run(compose_resumed(cfg), tmp_path / "run")


def compose_resumed(cfg):
    resumed = cfg.copy()
    resumed.resume = True
    return resumed
