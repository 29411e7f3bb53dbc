"""Benchmark: seconds per epoch with the data term's gradient compiled (``compile=true``,
`bdl.potential.Potential`) against eager autograd, for one chain and for K chains stacked
as one, through the runner's own epoch (``Sampling.step_epoch``), in this one process,
alternating, so that machine noise hits both alike. Each run's first epoch, which holds its
compile, is timed apart ("first"), from Inductor's on-disk cache as this machine holds it
(``--fresh-cache``: an empty one, as on a new machine), and left out of the medians. Where the
training set is one chunk (the default, yacht's), ``compile=true`` runs HMC's trajectories as one
program (``bdl.samplers.metropolis.leapfrog_program``); for SGLD, SGHMC and SGD,
``compile=true`` runs each epoch as one program (`bdl.runner.steppers`), timed here also against
its steps taken one by one, each a call of the compiled gradient ("steps").

    python scripts/bench_compile.py [--chains 1 8] [--rounds 5] [--dataset yacht|boston|mnist]
        [--sampler hmc|sghmc|sghmc_uci] [--fresh-cache]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

import torch
from bench_chains import DATASETS, SAMPLERS
from benchtools import alternating_medians, composed, one_by_one, sampling, timed
from torch._inductor.utils import fresh_cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dataset", choices=DATASETS, default="yacht")
    parser.add_argument("--sampler", choices=SAMPLERS, default="hmc")
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--fresh-cache", action="store_true", help="each compile from an empty Inductor cache"
    )
    args = parser.parse_args()

    base = [*DATASETS[args.dataset], *SAMPLERS[args.sampler]]
    base += [f"device={args.device}", "wandb.mode=disabled"]
    print(f"{args.dataset}, {args.sampler}, seconds per epoch (median of {args.rounds})")
    print(
        f"{'K':>3} {'eager':>9} {'compiled':>9} {'compiled/eager':>15} {'first, eager':>13} "
        f"{'first, compiled':>16} {'steps':>9} {'compiled/steps':>15}"
    )
    with tempfile.TemporaryDirectory() as directory:
        for chains in args.chains:
            eager, compiled, steps = (
                sampling(
                    composed([*base, f"chains={chains}", f"compile={flag}"]),
                    Path(directory) / f"{chains}_{name}",
                )
                for name, flag in (("eager", "false"), ("compiled", "true"), ("steps", "true"))
            )
            # an epoch as one program where the sampler has one; else no column of steps
            programs = compiled.steppers[0].program is not None
            contenders = [eager.step_epoch, compiled.step_epoch]
            if programs:
                contenders.append(one_by_one(steps).step_epoch)
            torch._dynamo.reset()  # this run's compile is its own, not an earlier run's
            with fresh_cache() if args.fresh_cache else contextlib.nullcontext():
                first = [timed(contender) for contender in contenders]
            seconds = alternating_medians(contenders, args.rounds)
            line = (
                f"{chains:>3} {seconds[0]:>9.4f} {seconds[1]:>9.4f} "
                f"{seconds[1] / seconds[0]:>15.3f} {first[0]:>13.2f} {first[1]:>16.2f}"
            )
            if programs:
                line += f" {seconds[2]:>9.4f} {seconds[1] / seconds[2]:>15.3f}"
            print(line)


if __name__ == "__main__":
    main()
