"""A checkpoint that cannot be resumed is refused in one line that says why and the way out
(`bdl.runner.checkpoint`); the resuming runs themselves are tested in test_resume.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import save

from bdl.composition.config import ConfigError
from bdl.runner import checkpoint
from bdl.runner.checkpoint import CheckpointError

FIX = (
    "delete checkpoint.safetensors to run it again from the beginning (resume=true then starts "
    "over), or start afresh in another directory (hydra.run.dir=...), which leaves the samples "
    "here readable"
)


@pytest.fixture
def path(tmp_path):
    path = tmp_path / "checkpoint.safetensors"
    checkpoint.save(path, {"x": torch.arange(4.0)}, {"epoch": 3})
    checkpoint.save(path.with_name("good.safetensors"), {"x": torch.arange(4.0)}, {"epoch": 3})
    return path


def _rewrite(path, version: int) -> None:
    tensors, header = checkpoint.load(path.with_name("good.safetensors"))
    header["format_version"] = version
    path.write_bytes(save(tensors, metadata={"bdl_checkpoint": json.dumps(header)}))


def test_a_checkpoint_round_trips_its_tensors_and_header(path):
    tensors, header = checkpoint.load(path)
    assert torch.equal(tensors["x"], torch.arange(4.0)) and header["epoch"] == 3
    assert header["format_version"] == checkpoint.FORMAT_VERSION


def test_a_checkpoint_of_another_format_names_the_formats_and_the_way_out(path):
    now = checkpoint.FORMAT_VERSION
    _rewrite(path, now + 1)
    with pytest.raises(CheckpointError) as error:
        checkpoint.load(path)
    assert str(error.value) == (
        f"{path} was written by a newer bdl (checkpoint format {now + 1}, this bdl reads up to "
        f"{now}): upgrade bdl to resume it"
    )
    oldest = checkpoint.OLDEST_FORMAT
    _rewrite(path, oldest - 1)
    with pytest.raises(CheckpointError) as error:
        checkpoint.load(path)
    assert str(error.value) == (
        f"{path} was written by an older bdl (checkpoint format {oldest - 1}; this bdl resumes "
        f"formats {oldest} to {now}): finish it with the bdl that started it, or {FIX}"
    )


def test_a_damaged_checkpoint_names_the_damage_and_the_way_out(path):
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # one flipped bit in the tensors' data
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as error:
        checkpoint.load(path)
    assert str(error.value) == (
        f"{path} is corrupt (its tensors or header fail their sha256 check); {FIX}"
    )
    path.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(CheckpointError) as error:
        checkpoint.load(path)
    assert str(error.value).startswith(f"{path} is truncated or corrupt (")
    assert str(error.value).endswith(f"); {FIX}")


def test_another_config_names_up_to_six_differences_there_and_now(tmp_path):
    path = tmp_path / "checkpoint.safetensors"
    saved = {f"k{i}": i for i in range(8)}
    now = OmegaConf.create({**saved, "k1": 10, "k2": "a"})
    with pytest.raises(ConfigError) as error:
        checkpoint.check_same_config(now, {"config": saved}, path)
    assert str(error.value) == (
        f"{path} belongs to another config: k1 (1 there, 10 now), k2 (2 there, 'a' now). Resume "
        "with the run's own overrides (see .hydra/overrides.yaml there), or start afresh in a new "
        "directory"
    )
    many = OmegaConf.create({f"k{i}": -i - 1 for i in range(8)})
    with pytest.raises(ConfigError) as error:
        checkpoint.check_same_config(many, {"config": saved}, path)
    shown = ", ".join(f"k{i} ({i} there, {-i - 1} now)" for i in range(6))
    assert str(error.value).startswith(f"{path} belongs to another config: {shown} .... Resume")
    checkpoint.check_same_config(OmegaConf.create(saved), {"config": saved}, path)


def test_a_long_curve_is_kept_exactly_and_outside_the_header(tmp_path):
    """Four chains' curves of 30 000 epochs each (the JSON of about 25 MB that a header of
    safetensors, capped at 100 MB, could not hold at 100 000) round-trip exactly, every cell's
    value and type, ints, floats, subnormals and both blanks, with a header of a few hundred
    bytes."""
    rows = [
        {
            "chain": 3,
            "epoch": epoch + 1,
            "potential": None if epoch % 7 == 0 else -0.1 * epoch / 3,
            "lr_scale": 1.0 / (epoch + 1),
            "num_samples": epoch // 20,
            "test_metric": "" if epoch < 100 else 1 / 3 + epoch * 1e-12,
            "accept_rate": "",
            "divergences": epoch % 2,
            "noise_precision": 5e-324 if epoch == 5 else 2.0**epoch if epoch < 1000 else 0.5,
        }
        for epoch in range(30_000)
    ]
    rates = [0.1 + i * 1e-9 for i in range(30_000)]
    tensors, fields = checkpoint._curve_state(rows, rates)
    path = tmp_path / "checkpoint.safetensors"
    chains = [{"curve_fields": fields}] * 4
    checkpoint.save(
        path,
        {f"chain_{k}/{n}": t for k in range(4) for n, t in tensors.items()},
        {"chains": chains},
    )
    assert len(json.dumps(checkpoint.load(path)[1])) < 1_000
    loaded, header = checkpoint.load(path)
    back = checkpoint._curve_rows(
        header["chains"][3]["curve_fields"],
        loaded["chain_3/loop/curve"],
        loaded["chain_3/loop/curve_kinds"],
    )
    assert back == rows
    assert [[type(v) for v in row.values()] for row in back] == [
        [type(v) for v in row.values()] for row in rows
    ]
    assert loaded["chain_3/loop/accept_rates"].tolist() == rates
    # NumPy's numbers, which JSON took as Python's, come back as Python's of the same value
    numpy_row = {"epoch": np.int64(7), "potential": np.float64(0.1), "accept_rate": np.float32(0.5)}
    tensors, fields = checkpoint._curve_state([numpy_row], [])
    (back,) = checkpoint._curve_rows(fields, tensors["loop/curve"], tensors["loop/curve_kinds"])
    assert back == {"epoch": 7, "potential": 0.1, "accept_rate": 0.5}
    assert [type(v) for v in back.values()] == [int, float, float]
    with pytest.raises(TypeError, match="a curve cell holds a bool: True"):
        checkpoint._curve_state([{"epoch": 1, "converged": True}], [])
    with pytest.raises(TypeError, match="a curve cell holds a str: 'n/a'"):
        checkpoint._curve_state([{"epoch": 1, "test_metric": "n/a"}], [])
    with pytest.raises(ValueError, match="a curve row of other fields"):
        checkpoint._curve_state([{"epoch": 1}, {"epoch": 2, "chain": 0}], [])
