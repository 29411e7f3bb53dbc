"""Benchmark: seconds per epoch with the data term's gradient compiled (``compile=true``,
:class:`bdl.potential.Potential`) against eager autograd, for one chain and for K chains stacked
as one, through the runner's own epoch (``Sampling.step_epoch``), in this one process,
alternating, so that machine noise hits both alike. Each run's first epoch, which holds its
compile, is a warm-up and is not timed.

    python scripts/bench_compile.py [--chains 1 8] [--rounds 5] [--dataset yacht|boston|mnist]
        [--sampler hmc|sghmc|sghmc_uci]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench_chains import DATASETS, SAMPLERS
from benchtools import alternating_medians, composed, sampling


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dataset", choices=DATASETS, default="yacht")
    parser.add_argument("--sampler", choices=SAMPLERS, default="hmc")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    base = [*DATASETS[args.dataset], *SAMPLERS[args.sampler]]
    base += [f"device={args.device}", "wandb.mode=disabled"]
    print(f"{args.dataset}, {args.sampler}, seconds per epoch (median of {args.rounds})")
    print(f"{'K':>3} {'eager':>9} {'compiled':>9} {'compiled/eager':>15}")
    with tempfile.TemporaryDirectory() as directory:
        for chains in args.chains:
            eager, compiled = (
                sampling(
                    composed([*base, f"chains={chains}", f"compile={flag}"]),
                    Path(directory) / f"{chains}_{flag}",
                )
                for flag in ("false", "true")
            )
            seconds = alternating_medians([eager.step_epoch, compiled.step_epoch], args.rounds)
            print(
                f"{chains:>3} {seconds[0]:>9.4f} {seconds[1]:>9.4f} "
                f"{seconds[1] / seconds[0]:>15.3f}"
            )


if __name__ == "__main__":
    main()
