"""What the benchmark scripts share: a composed bdl config, the runner's sampling loop on it, a
bare copy of its network with the bare PyTorch loop that trains it, a device-synchronised
timer, and the report of the machine's load and the CPU time beside the wall time that every
benchmark prints."""

from __future__ import annotations

import contextlib
import copy
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
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


def one_by_one(loop: Sampling) -> Sampling:
    """``loop`` with its minibatch steps taken one by one, each a call of the compiled gradient,
    instead of an epoch as one compiled program (``compile=true``'s steps before the programs,
    `bdl.runner.steppers`)."""
    for stepper in loop.steppers:
        stepper.program = None
    return loop


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


#: the words of the warning printed when other work shared the machine
UNDER_LOAD = "machine under load: ratios are not evidence; rerun on a quiet machine"


def _live_children_seconds(pid: int) -> float:
    """CPU seconds of the live descendants of process ``pid`` and of the children they have
    reaped (Linux's /proc; 0 elsewhere): Inductor's compile workers, say, which ``os.times``
    counts only once they have ended and been waited for."""
    seconds = 0.0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as file:
                children = [int(child) for child in file.read().split()]
        except OSError:
            continue
        for child in children:
            try:
                with open(f"/proc/{child}/stat") as file:
                    # the fields after the command's closing parenthesis, from the state on:
                    # utime, stime, cutime and cstime are the 12th to 15th
                    fields = file.read().rpartition(")")[2].split()
            except OSError:  # ended since the listing
                continue
            ticks = sum(int(field) for field in fields[11:15])
            seconds += ticks / os.sysconf("SC_CLK_TCK") + _live_children_seconds(child)
    return seconds


def cpu_seconds() -> float:
    """CPU seconds (user and system) of this process, every thread of it (XLA's and JAX's
    compile threads included), and of its child processes, ended or live (Inductor's compile
    workers)."""
    times = os.times()
    ended = times.children_user + times.children_system
    return times.user + times.system + ended + _live_children_seconds(os.getpid())


def load_report(cores: int, before: float, after: float, wall: float, cpu: float) -> list[str]:
    """The lines that state how a benchmark ran: the cores (threads) it uses, the machine's
    1-minute load average before and after it, its wall and CPU seconds; and a warning when the
    load before or after exceeds the benchmark's own cores by more than half a core, which says
    that other work shared the machine and that the timings' ratios are not evidence."""
    lines = [
        f"{cores} thread{'s' if cores != 1 else ''} on {os.cpu_count()} cores; load average "
        f"(1 minute) {before:.2f} before, {after:.2f} after; {wall:.1f} s wall, {cpu:.1f} s CPU "
        "(child processes included)"
    ]
    if under_load(cores, before, after):
        lines.append(f"WARNING: {UNDER_LOAD}")
    return lines


def under_load(cores: int, before: float, after: float) -> bool:
    """Whether the 1-minute load before or after a benchmark on ``cores`` threads exceeds them
    by more than half a core: other work shared the machine."""
    return max(before, after) > cores + 0.5


@contextlib.contextmanager
def machine_load(cores: int) -> Iterator[None]:
    """Prints `load_report` of the block, run on ``cores`` threads, when it ends."""
    before = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), cpu_seconds()
    yield
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    print("\n".join(load_report(cores, before, os.getloadavg()[0], wall, cpu)))
