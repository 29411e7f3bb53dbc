"""Benchmark: bdl's full-batch HMC, seconds per leapfrog step, against one bare full-batch forward
and backward pass over the same chunks (``experiment=hmc_mnist``: MNIST's 50,000 training images
in chunks of 10,000, 784-100-10 MLP; ``--set batch_size=500`` for the SG runs' chunks).

A leapfrog step costs one full-data gradient; what bdl adds is the chunked float64 accumulation
of U and ∇U (Potential.full_closure), the prior's term, the kick and drift, and once per
iteration the momentum draw and the Metropolis test. Both loops run in this one process on the
same in-memory tensors, alternating, so that machine noise hits both alike. The ratio
(HMC seconds per leapfrog step) / (bare seconds per pass) is the figure of merit (goal <= 1.05).

    python scripts/bench_hmc.py [--rounds 5] [--device cpu] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from benchtools import alternating_medians, bare_model, composed, machine_load, sampling


def bare_full_pass(model, x_train, y_train, chunk_size) -> None:
    """The loop every PyTorch tutorial writes, over the training set in chunks."""
    model.zero_grad(set_to_none=False)
    for x, y in zip(x_train.split(chunk_size), y_train.split(chunk_size), strict=True):
        F.cross_entropy(model(x), y, reduction="sum").backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--set", nargs="*", default=[], help="extra bdl-run overrides (e.g. sampler.num_steps=50)"
    )
    args = parser.parse_args()

    overrides = ["experiment=hmc_mnist", "sampler.num_steps=10", f"device={args.device}"]
    cfg = composed([*overrides, *args.set])
    with tempfile.TemporaryDirectory() as directory:
        # from the end of burn-in: no step-size adaptation, the kernel as it samples
        loop = sampling(cfg, Path(directory), start_epoch=cfg.burn_in)
        experiment = loop.experiment
        run = experiment.run
        steps = experiment.sampler.num_steps
        baseline = bare_model(experiment)

        def hmc_iteration():
            loop.step_epoch()

        def bare_pass():
            bare_full_pass(baseline, run.x_train, run.y_train, run.batch_size)

        # The warm-up also fills HMC's cache of (U, ∇U).
        iteration, bare_median = alternating_medians([hmc_iteration, bare_pass], args.rounds)
        hmc_median = iteration / steps

    print(
        f"device {run.device}, N = {run.data.num_train}, chunks of {run.batch_size}, "
        f"L = {steps}, {args.rounds} rounds, torch threads {torch.get_num_threads()}"
    )
    print(f"bare forward+backward over the data: {bare_median * 1e3:8.1f} ms (median)")
    print(f"bdl HMC, per leapfrog step:          {hmc_median * 1e3:8.1f} ms (median)")
    print(f"ratio HMC step / bare pass: {hmc_median / bare_median:.3f}  (goal <= 1.05)")


if __name__ == "__main__":
    with machine_load(torch.get_num_threads()):
        main()
