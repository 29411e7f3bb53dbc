"""What bdl reads from a run directory is bounded and checked before it is used: a YAML alias bomb
ends in one line (no hang), an edited checkpoint header fails its hash, a sample or checkpoint
file whose size is not its header's is refused before it is read (an 8 GB sparse file is never
read whole), and a sample of non-finite weights is refused by name (``bdl-eval`` writes
nothing)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from runner.test_resume import config, write_tiny_uci
from safetensors.torch import save

import bdl.runner.checkpoint
from bdl import load_run
from bdl.analysis.evaluate import main as bdl_eval
from bdl.analysis.posterior import RunError
from bdl.analysis.report import main as bdl_report
from bdl.composition.config import ConfigError
from bdl.composition.instantiation import load_yaml
from bdl.composition.overrides import check
from bdl.data import DataError, uci
from bdl.runner import run as runner
from bdl.runner.checkpoint import CheckpointError
from bdl.storage.store import SampleStore, StoreError, load_samples

GIGABYTES_8 = 8 * 1024**3


def alias_bomb(path: Path, levels: int = 9) -> None:
    """Nine lists of nine aliases of the level below, nine deep: 9**9 (387 million) values."""
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def test_an_alias_bomb_ends_in_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    alias_bomb(run / ".hydra" / "config.yaml")
    (run / "metrics.json").write_text(json.dumps({"test_accuracy": 0.9}))
    start = time.monotonic()
    with pytest.raises(ConfigError, match="expands to more than 200000 values .* alias bomb"):
        load_yaml(run / ".hydra" / "config.yaml")
    assert bdl_report([str(run)]) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err
    assert f"skipped {run}: ConfigError: {run / '.hydra' / 'config.yaml'} expands to" in err


def test_a_small_config_with_aliases_reads_as_written(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("base: &base {lr: 0.1, hidden: [8, 8]}\nsampler: *base\n")
    assert load_yaml(path).sampler.hidden == [8, 8]


def test_damaged_yaml_ends_in_one_line_naming_the_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("sampler: {lr: [\n")
    with pytest.raises(ConfigError, match=f"^{path} is not YAML: "):
        load_yaml(path)


@pytest.mark.parametrize(
    ("field", "value"), [("epoch", 10**12), ("num_samples", -3), ("chains", [])]
)
def test_an_edited_checkpoint_header_fails_its_hash(tmp_path, field, value):
    path = tmp_path / bdl.storage.outputs.CHECKPOINT
    bdl.runner.checkpoint.save(path, {"x": torch.arange(4.0)}, {"epoch": 3, "num_samples": 2})
    tensors, header = bdl.runner.checkpoint.load(path)
    header[field] = value
    path.write_bytes(save(tensors, metadata={"bdl_checkpoint": json.dumps(header)}))
    with pytest.raises(CheckpointError, match="tensors or header fail their sha256 check"):
        bdl.runner.checkpoint.load(path)


def test_a_sparse_8_gb_sample_is_refused_before_it_is_read(tmp_path):
    store = SampleStore(tmp_path / "samples")
    store.add({"w": torch.ones(3)})
    sample = store.directory / store.files[0]
    size = sample.stat().st_size
    os.truncate(sample, GIGABYTES_8)  # sparse: no disk used, 8 GB to read
    start = time.monotonic()
    with pytest.raises(
        StoreError, match=f"incomplete \\(it holds {GIGABYTES_8} bytes where its header declares "
    ):
        list(load_samples(tmp_path / "samples"))
    assert time.monotonic() - start < 2  # a whole read would take far longer
    os.truncate(sample, size)
    assert torch.equal(next(load_samples(tmp_path / "samples"))[0]["w"], torch.ones(3))


def test_a_sparse_8_gb_checkpoint_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / bdl.storage.outputs.CHECKPOINT
    bdl.runner.checkpoint.save(path, {"x": torch.arange(4.0)}, {"epoch": 3})
    os.truncate(path, GIGABYTES_8)
    with pytest.raises(
        CheckpointError,
        match=f"truncated or corrupt \\(it holds {GIGABYTES_8} bytes where its header",
    ):
        bdl.runner.checkpoint.load(path)


def test_a_sample_of_non_finite_weights_is_refused_by_name(tmp_path, capsys):
    run = tmp_path / "run"
    runner.run(config(write_tiny_uci(tmp_path / "data"), "epochs=4"), run)
    first = next(load_samples(run / "samples"))[0]
    nan = {name: torch.full_like(t, float("nan")) for name, t in first.items()}
    store = SampleStore(run / "samples")
    store.add(nan)
    path = store.directory / store.files[-1]  # the shard the draw was added to
    with pytest.raises(StoreError, match=f"sample file {path} holds non-finite weights"):
        list(load_samples(run / "samples"))
    capsys.readouterr()
    assert bdl_eval([str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bdl-eval: error: sample file {path} holds non-finite weights")
    assert len(err.splitlines()) == 1
    assert not (run / "eval").exists()


@pytest.fixture
def uci_folder(tmp_path) -> Path:
    write_tiny_uci(tmp_path)
    return tmp_path / "uci" / "tiny"


def test_a_uci_cell_beyond_range_is_named_by_file_line_and_column(uci_folder):
    data = np.loadtxt(uci_folder / "data.txt")
    data[6, 3] = 1e200  # the target of the 7th row
    np.savetxt(uci_folder / "data.txt", data)
    with pytest.raises(
        DataError, match=f"^{uci_folder / 'data.txt'}: line 7, column 4 is 1e\\+200, beyond"
    ):
        uci.load("tiny", root=uci_folder.parent.parent, download=False)


def test_a_split_that_tests_on_training_rows_is_refused(uci_folder):
    train = np.loadtxt(uci_folder / "index_train_0.txt", dtype=int)
    np.savetxt(uci_folder / "index_test_0.txt", train[:5], fmt="%d")
    with pytest.raises(DataError, match=f"{uci_folder / 'index_test_0.txt'}: line 1 holds row"):
        uci.load("tiny", root=uci_folder.parent.parent, download=False)


def test_features_that_include_the_target_are_refused(uci_folder):
    np.savetxt(uci_folder / "index_features.txt", [0, 1, 2, 3], fmt="%d")
    with pytest.raises(
        DataError, match=f"{uci_folder / 'index_features.txt'}: line 4 lists column 3, the target"
    ):
        uci.load("tiny", root=uci_folder.parent.parent, download=False)


@pytest.mark.parametrize(
    ("override", "shown"), [("prior.scale=1e-30", "1e-30"), ("prior.scale=1e30", "1e\\+30")]
)
def test_a_prior_scale_beyond_float32_is_refused_by_key(override, shown):
    with pytest.raises(ConfigError, match=f"^prior.scale={shown} is outside \\[1e-12, 1e\\+12\\]"):
        check([override])


def test_a_recursive_interpolation_is_named_by_key_and_file(tmp_path):
    run = tmp_path / "run"
    runner.run(config(write_tiny_uci(tmp_path / "data"), "epochs=3"), run)
    path = run / ".hydra" / "config.yaml"
    text = path.read_text().replace("seed: 0\n", "seed: ${epochs}\n", 1)
    path.write_text(text.replace("\nepochs: 3\n", "\nepochs: ${seed}\n"))
    with pytest.raises(RunError, match=f"{path}: seed=\\$\\{{epochs\\}} refers back to itself"):
        _ = load_run(run).data
