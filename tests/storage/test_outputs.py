"""The run directory's writers: strict JSON, and a wandb mirror that fails in one line and, when it
runs, labels the run and logs its metrics under their own names."""

from __future__ import annotations

import json
import math
import struct
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from runner.test_resume import config, write_tiny_uci

from bdl.composition.config import ConfigError
from bdl.runner.run import run
from bdl.storage.outputs import RunDirectory, start_wandb, strict_json


def test_metrics_are_strict_json_with_null_for_what_is_not_finite(tmp_path):
    directory = RunDirectory(tmp_path)
    directory.write_metrics({"status": "diverged", "test_ll": -math.inf, "rmse": [1.0, math.nan]})
    text = (tmp_path / "metrics.json").read_text()
    assert json.loads(text) == {"status": "diverged", "test_ll": None, "rmse": [1.0, None]}
    assert "Infinity" not in text and "NaN" not in text
    assert strict_json({"a": (2.5, math.inf)}) == {"a": [2.5, None]}


def test_wandb_online_without_an_account_is_refused_before_any_network(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    cfg = OmegaConf.create({"wandb": {"mode": "online", "project": "bdl", "entity": None}})
    with pytest.raises(ConfigError) as error:
        start_wandb(cfg, tmp_path, None)
    assert str(error.value) == (
        "wandb.mode=online needs a W&B account: run `wandb login` (or set WANDB_API_KEY), or use "
        "wandb.mode=offline (no account or network; `wandb sync` later)"
    )


def test_wandb_online_with_a_key_in_the_environment_starts(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_API_KEY", "a-key")
    monkeypatch.setenv("HOME", str(tmp_path))  # and no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    started = {}
    monkeypatch.setattr(wandb, "init", lambda **kwargs: started.update(kwargs) or "a run")
    wandb_config = {"mode": "online", "project": "bdl", "entity": None, "name": None}
    wandb_config |= {"group": None, "tags": ["mine"], "job_type": None}
    cfg = OmegaConf.create(
        {
            "seed": 3,
            "dataset": {"_target_": "bdl.data.uci.load", "name": "yacht"},
            "sampler": {"_target_": "bdl.samplers.sgld.SGLD"},
            "wandb": wandb_config,
        }
    )
    assert start_wandb(cfg, tmp_path, None) == "a run"
    assert (started["mode"], started["name"]) == ("online", "yacht-sgld-seed3")
    assert started["tags"] == ["yacht", "sgld", "mine"] and started["group"] is None


def test_wandb_disabled_starts_nothing(tmp_path):
    cfg = OmegaConf.create({"wandb": {"mode": "disabled"}})
    assert start_wandb(cfg, tmp_path, None) is None


def wandb_records(directory: Path) -> list:
    """The records of the offline wandb run under ``directory``: its ``run-<id>.wandb`` file is a
    LevelDB log (a 7-byte header, then in 32 KiB blocks records of checksum, length and type:
    1 whole, 2-4 first, middle and last fragment) of wandb's protobuf ``Record`` messages."""
    from wandb.proto import wandb_internal_pb2

    (path,) = directory.glob("wandb/offline-run-*/run-*.wandb")
    data, block = path.read_bytes(), 32768
    position, fragments, records = 7, b"", []
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        length, kind = struct.unpack("<HB", data[position + 4 : position + 7])
        if position + 7 + length > len(data):  # a record still being written
            break
        fragments += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(fragments)
            records.append(record)
            fragments = b""
    return records


def test_an_offline_wandb_run_has_its_labels_and_the_metrics_real_names(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    root = write_tiny_uci(tmp_path / "data")
    overrides = ["wandb.mode=offline", "wandb.tags=[first,second]", "wandb.job_type=check"]
    run(config(root, *overrides, "chains=2"), tmp_path / "run")
    for _ in range(40):  # wandb's service may still be flushing the file on a busy machine
        records = wandb_records(tmp_path / "run")
        if any(item.key == "status" for r in records for item in r.summary.update):
            break
        time.sleep(0.25)
    (labels,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert labels.display_name == "tiny-sghmc-seed0"
    assert list(labels.tags) == ["tiny", "sghmc", "first", "second"]
    assert labels.job_type == "check"
    logged, summary = set(), {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            logged |= {item.key or "/".join(item.nested_key) for item in record.history.item}
        if record.WhichOneof("record_type") == "summary":
            summary |= {item.key: item.value_json for item in record.summary.update}
    assert {"epoch", "potential", "test_rmse"} <= logged and "test_metric" not in logged
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert json.loads(summary["status"]) == metrics["status"]
    assert json.loads(summary["rhat_max"]) == pytest.approx(metrics["rhat_max"])


def test_a_directory_another_run_holds_is_refused_with_the_way_out(tmp_path):
    """A second writer, a run already there without resume=true, and a completed run whose
    checkpoint is gone: each refused in one line naming the option that gets past it."""
    cfg = OmegaConf.create({"seed": 0})
    first = RunDirectory(tmp_path)
    first.claim(cfg, resume=False)
    try:
        with pytest.raises(ConfigError) as error:
            RunDirectory(tmp_path).claim(cfg, resume=False)
        assert str(error.value) == (
            f"another bdl-run is writing into {tmp_path}: wait for it, or give this run its own "
            "directory (hydra.run.dir=...)"
        )
    finally:
        first.release()
    (tmp_path / "checkpoint.safetensors").write_bytes(b"")
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "sample_00000.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError) as error:
        RunDirectory(tmp_path).claim(cfg, resume=False)
    assert str(error.value) == (
        f"{tmp_path} already holds a run (checkpoint.safetensors, samples/): add resume=true to "
        "continue it, or give this run a fresh directory (hydra.run.dir=...)"
    )
    (tmp_path / "checkpoint.safetensors").unlink()
    RunDirectory(tmp_path).write_metrics({"status": "completed"})
    with pytest.raises(ConfigError) as error:
        RunDirectory(tmp_path).claim(cfg, resume=True)
    assert str(error.value) == (
        f"{tmp_path} holds a completed run whose checkpoint.safetensors is gone: there is nothing "
        "to resume; give a new run a fresh directory (hydra.run.dir=...)"
    )
