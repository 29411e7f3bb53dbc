"""What the benchmark scripts share: a composed bdl config and a device-synchronised timer."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from hydra import compose, initialize_config_module
from omegaconf import DictConfig

import bdl.config  # noqa: F401  (registers the root schema)


def composed(overrides: list[str]) -> DictConfig:
    """The config `bdl-run <overrides>` would run."""
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return compose("config", overrides=overrides)


def timed(fn: Callable[[], object]) -> float:
    """Seconds ``fn`` takes, with queued GPU work drained before and after."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start
