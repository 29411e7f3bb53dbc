r"""Data parallelism for the full-data kernels: the training set split across processes.

Started under ``torchrun`` (which sets ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK``), every process
(rank) of ``bdl-run`` reads the whole dataset but evaluates the potential's data term on its own
contiguous shard of the training points only; the shards' sums of $-\log p(y\mid x,\theta)$
and of their gradients are added by an all-reduce (`Group.all_reduce`, called by
`bdl.potential.Potential`), and the prior term is added after it, once. This is how
Izmailov et al. (2021) ran full-batch HMC on CIFAR-10 across 512 TPU devices: the data sharded,
the gradients summed.

Every rank holds the whole chain. Its random generators are seeded alike on every rank, and an
all-reduce hands every rank bitwise the same sum, so the momenta, proposals and Metropolis
decisions are the same everywhere without any broadcast of the state. Rank 0 alone writes the
run's directory (outputs, samples, checkpoints); on resume every rank reads the checkpoint.

Only kernels whose every step reads the full training set are split (`SUPPORTED`): a
minibatch sampler's steps are too small for the all-reduce to pay for itself on one machine, and
their per-rank minibatch order would need its own bookkeeping.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from bdl.composition.config import ConfigError

#: Sampler options whose steps read the full training set, so that splitting it is exact.
SUPPORTED = ("hmc", "mala", "rwmh")


def world_size() -> int:
    """The number of processes ``torchrun`` started (1 without it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


@dataclass
class Group:
    """This process's place among the ranks of one run."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def leader(self) -> bool:
        """Rank 0: the one that writes."""
        return self.rank == 0

    def shard(self, num: int, chunk: int) -> slice:
        """This rank's contiguous share of ``num`` points: whole chunks of the ``chunk`` points
        that one process would evaluate together, so that every chunk's value and gradient are
        bitwise one process's (`bdl.potential.Potential.full_closure`)."""
        chunks = -(-num // chunk)
        first = self.rank * chunks // self.world_size
        last = (self.rank + 1) * chunks // self.world_size
        return slice(first * chunk, min(last * chunk, num))

    def all_reduce(self, tensors: list[Tensor]) -> None:
        """Replace each tensor, in place, by its sum over the ranks: one collective per dtype
        (the float64 potential, the gradients in the parameters' dtype)."""
        by_dtype: dict[torch.dtype, list[Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        for group in by_dtype.values():
            flat = torch.cat([t.reshape(-1) for t in group])
            dist.all_reduce(flat)
            for t, part in zip(group, flat.split([t.numel() for t in group]), strict=True):
                t.copy_(part.view_as(t))

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank (all ranks get the same answer)."""
        value = torch.tensor([int(flag)], device=self.device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def join(backend: str, device: torch.device) -> Group | None:
    """This process's group when ``torchrun`` started several, else None (one process, as
    without ``torchrun``). ``device`` is the run's device type; a GPU rank takes the GPU
    ``LOCAL_RANK``."""
    size = world_size()
    if size <= 1:
        return None
    if backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError(
            "distributed.backend=nccl needs GPUs, and none is visible here: use "
            "distributed.backend=gloo (or auto, which picks gloo on the CPU)"
        )
    if backend == "nccl" and device.type != "cuda":
        raise ConfigError("distributed.backend=nccl reduces on GPUs: use device=cuda, or gloo")
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(
                f"LOCAL_RANK={local_rank} but this node has {torch.cuda.device_count()} GPU(s): "
                "start at most that many processes per node (torchrun --nproc_per_node)"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    return Group(rank=dist.get_rank(), world_size=size, local_rank=local_rank, device=device)


class LeaderStopped(ConfigError):
    """Rank 0 failed (and said why); the other ranks stop with it rather than wait for it."""


def on_leader(group: Group | None, work: Callable[[], object]) -> None:
    """Run ``work`` on rank 0 alone (e.g. claiming the run's directory); if it fails there,
    every rank stops instead of waiting for rank 0 in the next all-reduce."""
    if group is None:
        work()
        return
    failed = True
    try:
        if group.leader:
            work()
        failed = False
    finally:
        if group.any(failed) and not failed:
            raise LeaderStopped("rank 0 stopped; its message says why")


def check_supported(
    group: Group | None, sampler_name: str, full_batch: bool, num: int, chunk: int
) -> None:
    """Refuse what cannot be split: a minibatch sampler, fewer points than ranks. (A full-batch
    kernel's chunks are made small enough for every rank to hold some:
    `bdl.runner.experiment.build`.)"""
    if group is None:
        return
    if not full_batch:
        raise ConfigError(
            f"sampler {sampler_name} does not run data-parallel under torchrun: its steps read "
            f"minibatches. Data-parallel samplers: {', '.join(SUPPORTED)} (with "
            "sampler.approximate=false); run others as one process, or sweep them with a launcher"
        )
    if num < group.world_size:
        raise ConfigError(
            f"{group.world_size} ranks but only {num} training points: start at most {num} "
            "processes (torchrun --nproc_per_node)"
        )
