"""What the benchmark scripts share: a composed bdl config and a device-synchronised timer."""

from __future__ import annotations

import statistics
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


def alternating_medians(
    first: Callable[[], object], second: Callable[[], object], rounds: int
) -> tuple[float, float]:
    """Median seconds of ``first`` and ``second``, run alternately after one warm-up each, so
    that machine noise hits both alike."""
    first(), second()
    first_times, second_times = [], []
    for _ in range(rounds):
        first_times.append(timed(first))
        second_times.append(timed(second))
    return statistics.median(first_times), statistics.median(second_times)
