"""Benchmark: one bdl SGHMC epoch against a bare PyTorch SGD-with-momentum epoch on MNIST.

All loops run in this one process on the same in-memory tensors, model architecture, batch size
and device, in turn round after round, so that machine noise hits them alike. The ratio bdl SGHMC
/ bare is the figure of merit (goal <= 1.0: sampling costs no more than optimising). bdl's
SGD with momentum, SGHMC with its injected noise switched off, is timed too: it splits the excess
into the runner's overhead and the cost of drawing the Gaussian noise. So is the draw alone (one
standard normal per parameter per step from a torch generator): bare + draws is the least any
sampler that draws its noise from torch's generator can cost.

    python scripts/bench.py [--rounds 5] [--device cpu] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from benchtools import alternating_medians, bare_model, composed

from bdl.run import Run


def bare_sgd_epoch(model, optimizer, x_train, y_train, batch_size, generator):
    """The loop every PyTorch tutorial writes, on tensors already in memory."""
    order = torch.randperm(x_train.shape[0], generator=generator, device=x_train.device)
    for start in range(0, x_train.shape[0] - batch_size + 1, batch_size):
        index = order[start : start + batch_size]
        loss = F.cross_entropy(model(x_train[index]), y_train[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--set", nargs="*", default=[], help="extra bdl-run overrides")
    args = parser.parse_args()

    overrides = ["dataset=mnist", f"device={args.device}", *args.set]
    with tempfile.TemporaryDirectory() as directory:
        runs = {
            sampler: Run(composed([f"sampler={sampler}", *overrides]), Path(directory) / sampler)
            for sampler in ("sghmc", "sgd_momentum")
        }
        states = {sampler: run.sampler.init(run.potential.params) for sampler, run in runs.items()}
        sghmc = runs["sghmc"]
        baseline = bare_model(sghmc)
        optimizer = torch.optim.SGD(baseline.parameters(), lr=0.1, momentum=0.99)
        generator = torch.Generator(sghmc.device).manual_seed(0)
        noise = torch.empty(sum(p.numel() for p in baseline.parameters()), device=sghmc.device)

        def bdl_epoch(sampler: str) -> None:
            states[sampler], _ = runs[sampler]._epoch(0, states[sampler])

        def bare_epoch() -> None:
            bare_sgd_epoch(
                baseline, optimizer, sghmc.x_train, sghmc.y_train, sghmc.batch_size, generator
            )

        def draws() -> None:
            for _ in range(sghmc.steps_per_epoch):
                noise.normal_(generator=generator)

        bare, with_noise, without_noise, drawing = alternating_medians(
            [bare_epoch, lambda: bdl_epoch("sghmc"), lambda: bdl_epoch("sgd_momentum"), draws],
            args.rounds,
        )

    print(
        f"device {sghmc.device}, {sghmc.steps_per_epoch} steps/epoch, batch {sghmc.batch_size}, "
        f"{args.rounds} rounds, torch threads {torch.get_num_threads()}"
    )
    print(f"bare PyTorch SGD-momentum epoch:        {bare * 1e3:8.1f} ms (median)")
    print(
        f"bdl SGD-momentum (SGHMC without noise): {without_noise * 1e3:8.1f} ms   ratio "
        f"{without_noise / bare:.3f}"
    )
    print(
        f"bdl SGHMC epoch:                        {with_noise * 1e3:8.1f} ms   ratio "
        f"{with_noise / bare:.3f}  (goal <= 1.0)"
    )
    label = f"draws alone ({noise.numel()} normals a step):"
    print(
        f"{label:40s}{drawing * 1e3:8.1f} ms   bare + draws {(bare + drawing) / bare:.3f}  "
        "(the floor with torch's generator)"
    )


if __name__ == "__main__":
    main()
