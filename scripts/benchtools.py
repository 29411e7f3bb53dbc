"""What the benchmark scripts share: a composed bdl config, the runner's sampling loop on it, a
bare copy of its network with the bare PyTorch loop that trains it, and a device-synchronised
timer."""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_module
from omegaconf import DictConfig
from torch import nn

import bdl.composition.config  # noqa: F401  (registers the root schema)
from bdl.runner.checkpoint import resumable_config
from bdl.runner.experiment import Experiment, build_chains
from bdl.runner.interrupts import Signals
from bdl.runner.loop import Loop
from bdl.runner.sampling import Sampling
from bdl.storage.outputs import RunDirectory


def sampling(cfg: DictConfig, directory: Path, start_epoch: int = 0) -> Sampling:
    """The runner's loop on ``cfg``, writing into ``directory``; ``step_epoch()`` runs one epoch
    of every chain exactly as ``bdl-run`` does (steps, Gibbs steps, the sample kept, the curve
    row)."""
    experiments = build_chains(cfg)
    output = RunDirectory(directory)
    output.claim(cfg, resume=False)
    loops = [Loop.start(experiment) for experiment in experiments]
    for loop in loops:
        loop.epoch = start_epoch
    return Sampling(experiments, loops, output, resumable_config(cfg), Signals())


def bare_model(experiment: Experiment) -> nn.Module:
    """A freshly initialised network of the run's architecture, for the bare PyTorch loops."""
    model = copy.deepcopy(experiment.potential.model)
    torch.manual_seed(0)
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return model


def bare_sgd_epoch(experiment: Experiment) -> Callable[[], None]:
    """An epoch of the loop every PyTorch tutorial writes, on a bare copy of ``experiment``'s
    network and its training tensors already in memory, minibatches of its size: SGD with
    momentum 0.99 at learning rate 0.1, Chen et al. (2014)'s SGHMC setting without its noise.
    Each call runs one more epoch."""
    model = bare_model(experiment)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.99)
    run = experiment.run
    generator = torch.Generator(run.device).manual_seed(0)
    x_train, y_train, batch_size = run.x_train, run.y_train, run.batch_size

    def epoch() -> None:
        order = torch.randperm(x_train.shape[0], generator=generator, device=x_train.device)
        for start in range(0, x_train.shape[0] - batch_size + 1, batch_size):
            index = order[start : start + batch_size]
            loss = F.cross_entropy(model(x_train[index]), y_train[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return epoch


def composed(overrides: list[str]) -> DictConfig:
    """The config `bdl-run <overrides>` would run, at torch's thread count of this process
    (OMP_NUM_THREADS) unless the overrides set one: a benchmark states its thread count."""
    threads = (
        []
        if any(o.startswith("threads=") for o in overrides)
        else [f"threads={torch.get_num_threads()}"]
    )
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return compose("config", overrides=[*overrides, *threads])


def timed(fn: Callable[[], object]) -> float:
    """Seconds ``fn`` takes, with queued GPU work drained before and after."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def alternating_times(fns: Sequence[Callable[[], object]], rounds: int) -> list[list[float]]:
    """Seconds of each of ``fns`` in each round, run in turn round after round after one warm-up
    each, so that machine noise hits all alike."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, fn_times in zip(fns, times, strict=True):
            fn_times.append(timed(fn))
    return times


def alternating_medians(fns: Sequence[Callable[[], object]], rounds: int) -> list[float]:
    """Median seconds of each of ``fns`` over `alternating_times`' rounds."""
    return [statistics.median(fn_times) for fn_times in alternating_times(fns, rounds)]
