"""The run directory's writers: strict JSON, and a wandb mirror that fails in one line."""

from __future__ import annotations

import json
import math

import pytest
from omegaconf import OmegaConf

from bdl.config import ConfigError
from bdl.outputs import RunDirectory, start_wandb, strict_json


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
    with pytest.raises(ConfigError, match="wandb login.*wandb.mode=offline"):
        start_wandb(cfg, tmp_path, None)


def test_wandb_disabled_starts_nothing(tmp_path):
    cfg = OmegaConf.create({"wandb": {"mode": "disabled"}})
    assert start_wandb(cfg, tmp_path, None) is None
