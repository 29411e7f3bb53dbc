"""Benchmark: seconds per epoch of K chains in one run (``chains=K``) against K runs of one chain
(seeds 0..K-1), both through the runner's own epoch (``Sampling.step_epoch``), in this one
process, alternating, so that machine noise hits both alike.

The figure of merit is (one run of K chains) / (K runs of one chain): the issue's goal for a
vectorised implementation is <= 0.7 at K = 8 on the CPU (<= 0.2 on a GPU). bdl's chains are
stepped one after the other, so the ratio measures what sharing one process and one copy of the
data saves, and is the yardstick a vectorised implementation would be judged by.

    python scripts/bench_chains.py [--chains 1 4 8] [--rounds 3] [--dataset mnist|boston]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchtools import alternating_medians, composed, sampling

# Burn-in epochs only (the benchmark runs a few): stepping, without evaluating a kept sample
DATASETS = {
    "mnist": ["dataset=mnist", "burn_in=99", "epochs=100", "thin=1"],
    "boston": ["dataset=boston", "burn_in=99", "epochs=100", "thin=1", "sampler.lr=3e-4"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dataset", choices=DATASETS, default="mnist")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    base = [*DATASETS[args.dataset], f"device={args.device}", "wandb.mode=disabled"]
    print(f"{args.dataset}, SGHMC, seconds per epoch (median of {args.rounds})")
    print(f"{'K':>3} {'K chains':>10} {'K singles':>10} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        for k in args.chains:
            together = sampling(composed([*base, f"chains={k}"]), root / f"chains{k}")
            singles = [
                sampling(composed([*base, f"seed={seed}"]), root / f"single{k}_{seed}")
                for seed in range(k)
            ]

            def one_after_another(runs=singles) -> None:
                for run in runs:
                    run.step_epoch()

            joint, separate = alternating_medians(
                [together.step_epoch, one_after_another], args.rounds
            )
            print(f"{k:>3} {joint:>10.3f} {separate:>10.3f} {joint / separate:>6.3f}")


if __name__ == "__main__":
    main()
