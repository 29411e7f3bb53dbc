"""Benchmark: bdl epochs against a bare PyTorch SGD-with-momentum epoch on MNIST.

All loops run in this one process on the same in-memory tensors, model architecture, batch size
and device, in turn round after round, so that machine noise hits them alike. Figures, each as a
ratio to the bare epoch:

- bdl SGHMC epoch of steps (burn-in: no sample kept), goal <= 1.0 (sampling costs no more than
  optimising), and bdl's SGD with momentum (SGHMC with its injected noise switched off), which
  splits the excess into the runner's overhead and the cost of drawing the Gaussian noise;
- the draw alone (one standard normal per parameter per step from a torch generator): bare +
  draws is the least any sampler that draws its noise from torch's generator can cost;
- the whole sampling epoch as ``bdl-run`` runs it (a sample kept every epoch: the test set's
  predictive, the running model average, the sample file and manifest, the curve row), goal <=
  1.15;
- a checkpoint, as a share of the wall time at the default interval (one a minute), goal <= 2%;
- what burn-in's step back-off adds to an epoch (`bdl.runner.stability`): the copy of the chain's
  state it takes at each epoch's end, the rest being a few comparisons of floats, goal <= 0.02.

    python scripts/bench.py [--rounds 5] [--device cpu] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch
from benchtools import (
    alternating_medians,
    bare_sgd_epoch,
    composed,
    machine_load,
    sampling,
    timed,
)

from bdl.runner import stability
from bdl.runner.sampling import CHECKPOINT_SECONDS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--set", nargs="*", default=[], help="extra bdl-run overrides")
    args = parser.parse_args()

    overrides = ["dataset=mnist", f"device={args.device}", *args.set]
    with tempfile.TemporaryDirectory() as directory:
        loops = {
            name: sampling(composed(extra + overrides), Path(directory) / name)
            for name, extra in {
                "sghmc": ["sampler=sghmc"],  # burn-in: steps only
                "sgd_momentum": ["sampler=sgd_momentum"],
                "sghmc_outputs": ["sampler=sghmc", "burn_in=0"],  # a sample every epoch
            }.items()
        }
        sghmc = loops["sghmc"].experiment
        bare_epoch = bare_sgd_epoch(sghmc)
        generator = torch.Generator(sghmc.run.device).manual_seed(0)
        noise = torch.empty(
            sum(p.numel() for p in sghmc.potential.model.parameters()), device=sghmc.run.device
        )

        def draws() -> None:
            for _ in range(sghmc.run.steps_per_epoch):
                noise.normal_(generator=generator)

        epochs = [loop.step_epoch for loop in loops.values()]
        bare, with_noise, without_noise, whole, drawing = alternating_medians(
            [bare_epoch, *epochs, draws], args.rounds
        )
        checkpoint = statistics.median(
            timed(loops["sghmc_outputs"]._checkpoint) for _ in range(args.rounds)
        )
        burning_in = loops["sghmc"].loops[0]
        snapshot = statistics.median(
            timed(lambda: stability.snapshot(burning_in.live_state(sghmc)))
            for _ in range(args.rounds)
        )

    print(
        f"device {sghmc.run.device}, {sghmc.run.steps_per_epoch} steps/epoch, "
        f"batch {sghmc.run.batch_size}, "
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
    print(
        f"bdl SGHMC epoch keeping a sample:       {whole * 1e3:8.1f} ms   ratio "
        f"{whole / bare:.3f}  (goal <= 1.15)"
    )
    print(
        f"burn-in's back-off (a state copy):      {snapshot * 1e3:8.3f} ms   "
        f"{snapshot / bare:.5f} of the bare epoch  (goal <= 0.02)"
    )
    print(
        f"checkpoint:                             {checkpoint * 1e3:8.1f} ms   "
        f"{checkpoint / CHECKPOINT_SECONDS:.2%} of the wall time at one a minute  (goal <= 2%)"
    )


if __name__ == "__main__":
    with machine_load(torch.get_num_threads()):
        main()
