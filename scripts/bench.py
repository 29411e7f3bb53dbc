"""Benchmark: one bdl SGHMC epoch against a bare PyTorch SGD-with-momentum epoch on MNIST.

Both loops run in this one process on the same in-memory tensors, model architecture, batch size
and device, alternating, so that machine noise hits both alike. The ratio bdl / bare is the
figure of merit (goal <= 1.0: sampling costs no more than optimising).

    python scripts/bench.py [--rounds 5] [--device cpu] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from benchtools import alternating_medians, composed

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

    overrides = ["sampler=sghmc", "dataset=mnist", f"device={args.device}", *args.set]
    cfg = composed(overrides)
    with tempfile.TemporaryDirectory() as directory:
        run = Run(cfg, Path(directory))
        state = run.sampler.init(run.potential.params)

        torch.manual_seed(0)
        baseline = type(run.potential.model)(
            input_shape=run.data.input_shape,
            out_features=run.data.out_features,
            hidden=list(cfg.dataset.mlp.hidden),
            activation=cfg.dataset.mlp.activation,
        ).to(run.device)
        optimizer = torch.optim.SGD(baseline.parameters(), lr=0.1, momentum=0.99)
        generator = torch.Generator(run.device).manual_seed(0)

        def bdl_epoch():
            nonlocal state
            state, _ = run._epoch(0, state)

        def bare_epoch():
            bare_sgd_epoch(baseline, optimizer, run.x_train, run.y_train, run.batch_size, generator)

        bdl_median, bare_median = alternating_medians(bdl_epoch, bare_epoch, args.rounds)

    print(
        f"device {run.device}, {run.steps_per_epoch} steps/epoch, batch {run.batch_size}, "
        f"{args.rounds} rounds, torch threads {torch.get_num_threads()}"
    )
    print(f"bare PyTorch SGD-momentum epoch: {bare_median * 1e3:8.1f} ms (median)")
    print(f"bdl SGHMC epoch:                 {bdl_median * 1e3:8.1f} ms (median)")
    print(f"ratio bdl / bare: {bdl_median / bare_median:.3f}  (goal <= 1.0)")


if __name__ == "__main__":
    main()
