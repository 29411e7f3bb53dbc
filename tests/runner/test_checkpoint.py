"""A checkpoint that cannot be resumed is refused in one line that says why and the way out
(`bdl.runner.checkpoint`); the resuming runs themselves are tested in test_resume.py."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import save

from bdl.composition.config import ConfigError
from bdl.runner import checkpoint
from bdl.runner.checkpoint import CheckpointError
from bdl.runner.curve import Curve

from .test_curve import long_curve

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


def test_a_long_curve_is_kept_outside_the_header(tmp_path):
    """Four chains' curves of 30 000 epochs (as JSON, about 25 MB of a header that safetensors
    caps at 100 MB: a run of 100 000 epochs could not checkpoint) go through a checkpoint
    exactly, with a header of a few hundred bytes."""
    curve = Curve.of(long_curve(30_000))
    values, kinds = curve.tensors()
    path = tmp_path / "checkpoint.safetensors"
    tensors = {
        f"chain_{k}/loop/{n}": t
        for k in range(4)
        for n, t in (("curve", values), ("curve_kinds", kinds))
    }
    checkpoint.save(path, tensors, {"chains": [{"curve_fields": curve.fields}] * 4})
    loaded, header = checkpoint.load(path)
    assert len(json.dumps(header)) < 1_000
    back = Curve.from_tensors(
        header["chains"][3]["curve_fields"],
        loaded["chain_3/loop/curve"],
        loaded["chain_3/loop/curve_kinds"],
    )
    assert list(back) == list(curve) == long_curve(30_000)
