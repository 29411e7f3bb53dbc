"""How many CPU threads torch computes with: ``threads=auto`` (the default) or a number.

torch takes every core by default, which pays on an idle machine for large matrix products and
costs dearly otherwise: a small network's operations are too short to split, and on a machine
where other work runs, threads that wait for each other's cores stall every operation. Measured
on a 2-core machine with other jobs running, a UCI network's run at torch's default two threads
took 4 to 15 times as long as at one, with identical draws. ``auto`` therefore takes
``OMP_NUM_THREADS`` where the environment sets it (a job script's choice; ``torchrun`` sets one
per rank), else one thread for a network below `SMALL_NETWORK` parameters or when fewer
than two cores are free, and otherwise the free cores (those the load average leaves idle, of
those this process may use), shared between ``torchrun``'s ranks on the machine. On a GPU the
setting is left alone: the CPU only feeds the device.
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger("bdl")

#: Parameters below which a network's operations are too small to split over threads: the UCI
#: benchmarks' networks (hundreds to a few thousand). MNIST's MLP (79 510) keeps the free cores,
#: as torch's default gave it.
SMALL_NETWORK = 10_000


def free_cores() -> int:
    """The cores this process may use that the one-minute load average leaves idle (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores, round(cores - os.getloadavg()[0])))


def choose(setting: str | int, parameters: int) -> int:
    """The thread count of ``threads=setting`` for a network of ``parameters`` parameters (under
    ``torchrun``, for one of this machine's ranks)."""
    if setting != "auto":
        return int(setting)
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    free = free_cores() // int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    return 1 if parameters < SMALL_NETWORK or free < 2 else free


def apply(setting: str | int, parameters: int, device: torch.device) -> None:
    """Set torch's thread count for a run on ``device`` (a GPU's runs keep torch's own). A resumed
    run passes the count its checkpoint recorded, since sums over threads round
    differently with another count and the resumed run would not be the uninterrupted one."""
    if device.type == "cpu":
        threads = choose(setting, parameters)
        torch.set_num_threads(threads)
        log.info("%d CPU thread%s (threads=%s)", threads, "s" * (threads > 1), setting)
