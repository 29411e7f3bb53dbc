"""Benchmark: ResNet-20-FRN (Izmailov et al. 2021's CIFAR-10 network) sampled by SGHMC, training
images per second through the runner's own epoch (``Sampling.step_epoch``, burn-in: steps only),
eager and compiled (``compile=true``), alternating in this one process so that machine noise hits
both alike. The images are generated in CIFAR-10's on-disk format (the test suite's writer, the
md5 check passed over as its ``no_cifar_md5`` fixture does): what is timed is the network's
arithmetic, which does not depend on the pixels. The first epoch of each, which holds the compile,
is timed apart and left out of the medians.

    python scripts/bench_resnet.py [--device cuda] [--images 5000] [--rounds 3] [--width 16]
        [--batch-size 80] [--modes eager compiled]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch
from benchtools import alternating_medians, composed, machine_load, sampling, timed

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from conftest import write_fake_cifar10  # noqa: E402

#: compile=false and compile=true
MODES = {"eager": "false", "compiled": "true"}


def exists_only(fpath: str, md5: str | None = None) -> bool:
    return os.path.isfile(fpath)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--images", type=int, default=5000, help="training images (5 batches)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=16, help="the network's first width")
    parser.add_argument("--batch-size", type=int, default=80)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    args = parser.parse_args()

    import torchvision.datasets.cifar

    import bdl.data.cifar10

    torchvision.datasets.cifar.check_integrity = exists_only
    bdl.data.cifar10.check_integrity = exists_only
    with tempfile.TemporaryDirectory() as directory:
        root = write_fake_cifar10(Path(directory) / "data", per_batch=args.images // 5, n_test=100)
        base = [
            "dataset=cifar10",
            f"dataset.root={root}",
            "dataset.download=false",
            f"model.width={args.width}",
            "sampler=sghmc",
            "epochs=100",
            "burn_in=99",
            f"batch_size={args.batch_size}",
            f"device={args.device}",
        ]
        loops = [
            sampling(composed([*base, f"compile={MODES[mode]}"]), Path(directory) / mode)
            for mode in args.modes
        ]
        first = []
        for mode, loop in zip(args.modes, loops, strict=True):
            first.append(timed(loop.step_epoch))
            # printed as it comes: a compile can outlast a time budget (the GPU check's)
            print(f"{mode}: first epoch {first[-1]:.2f} s", flush=True)
        seconds = alternating_medians([loop.step_epoch for loop in loops], args.rounds)
        run = loops[0].experiment.run
        images = run.steps_per_epoch * run.batch_size

    print(
        f"device {run.device}, ResNet-20-FRN width {args.width}, {images} images an epoch in "
        f"minibatches of {run.batch_size}, {args.rounds} rounds, torch threads "
        f"{torch.get_num_threads()}"
    )
    for name, median, start in zip(args.modes, seconds, first, strict=True):
        print(
            f"SGHMC {name + ':':10s} {images / median:10.0f} images/s (median epoch "
            f"{median:.3f} s; first epoch {start:.2f} s)"
        )
    if len(seconds) == 2:
        print(f"{args.modes[1]}/{args.modes[0]} epoch: {seconds[1] / seconds[0]:.3f}")


if __name__ == "__main__":
    with machine_load(torch.get_num_threads()):
        main()
