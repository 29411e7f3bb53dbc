"""Benchmark: data-parallel full-batch HMC, seconds per leapfrog step on P = 1, 2, ... ranks.

A leapfrog step costs one full-data potential and gradient (Potential.full_closure); with P ranks
each evaluates its shard's chunks and the sums go through one all-reduce. For each P this starts
P processes with the rendezvous torchrun would set up, each building the run of
``experiment=hmc_mnist`` (MNIST's 50,000 training images; here in chunks of 5,000 so that two
ranks get five each) on its shard with the runner's own ``build``, and times full-data
gradients after a warm-up; rank 0 prints the median. On the CPU the P ranks share the cores
(each gets cores / P threads, or ``--threads``); on GPUs rank k takes GPU k (NCCL), so P is at
most the number of GPUs.

    python scripts/bench_distributed.py [--procs 1 2] [--device cpu] [--steps 10] [--set K=V ...]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics

import torch
import torch.multiprocessing as mp
from benchtools import composed, timed

from bdl.composition.network import resolve_device
from bdl.runner import distributed
from bdl.runner.experiment import build


def worker(
    rank: int, size: int, port: int, overrides: list[str], steps: int, threads: int, results
) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    cfg = composed(overrides)
    device = resolve_device(cfg.device.name)
    if device.type == "cpu":
        torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // size))
    group = distributed.join(cfg.distributed.backend, device)
    try:
        experiment = build(cfg, group)
        run = experiment.run
        closure = experiment.potential.full_closure(run.train_chunks)
        for _ in range(2):  # warm-up: allocator, kernels, the collectives' buffers
            closure()
        seconds = [timed(closure) for _ in range(steps)]
        if rank == 0:
            results.put((len(run.x_train), statistics.median(seconds), str(run.device)))
    finally:
        if group is not None:
            group.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=10, help="timed leapfrog steps per P")
    parser.add_argument("--threads", type=int, default=0, help="per rank (default cores / P)")
    parser.add_argument("--set", nargs="*", default=[], help="extra bdl-run overrides")
    args = parser.parse_args()
    overrides = ["experiment=hmc_mnist", "batch_size=5000", f"device={args.device}", *args.set]

    context = mp.get_context("spawn")
    base = None
    print("| P | device | rank 0's points | s per leapfrog step | speed-up |")
    print("|--:|---|--:|--:|--:|")
    for size in args.procs:
        results = context.SimpleQueue()
        mp.start_processes(
            worker,
            args=(size, free_port(), overrides, args.steps, args.threads, results),
            nprocs=size,
            start_method="spawn",
        )
        points, seconds, device = results.get()
        base = base or seconds
        print(f"| {size} | {device} | {points} | {seconds:.4f} | {base / seconds:.2f}x |")


if __name__ == "__main__":
    main()
