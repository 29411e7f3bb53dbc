"""Benchmark: seconds per epoch of K chains in one run (``chains=K``), stacked as one
(``vectorise=true``, `bdl.runner.steppers`), stacked on minibatches the chains share
(``shared_minibatches=true``) and stepped in turn (``vectorise=false``), against K runs of one
chain (seeds 0..K-1), all through the runner's own epoch (``Sampling.step_epoch``), in this one
process, alternating, so that machine noise hits all alike.

The figure of merit is (one run of K chains) / (K runs of one chain); the goal for K = 8 is
<= 0.7 on the CPU and <= 0.2 on a GPU.

    python scripts/bench_chains.py [overrides ...] [--chains 1 4 8] [--rounds 3]
        [--dataset mnist|boston|yacht] [--sampler sghmc|sghmc_uci|hmc]

Overrides, before the options, go to every run (``compile=true``: each run's compile falls in its
warm-up epoch).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from benchtools import alternating_medians, composed, machine_load, sampling

# Burn-in epochs only (the benchmark runs a few): stepping, without evaluating a kept sample.
# Boston on minibatches of 32, where each chain draws its own (the UCI protocol's full batch
# would leave nothing for shared minibatches to share).
DATASETS = {
    "mnist": ["dataset=mnist", "burn_in=99", "epochs=100", "thin=1"],
    "boston": ["dataset=boston", "batch_size=32", "burn_in=99", "epochs=100", "thin=1"],
    "yacht": ["dataset=yacht", "burn_in=99", "epochs=100", "thin=1"],
}
SAMPLERS = {
    "sghmc": ["sampler=sghmc"],
    "sghmc_uci": ["sampler=sghmc_uci"],
    # an HMC epoch is one iteration: 10 leapfrog steps, no adaptation (burn-in would adapt), the
    # training set in one chunk (batch_size is a full-batch kernel's chunk size)
    "hmc": ["sampler=hmc", "sampler.num_steps=10", "sampler.adapt=false", "batch_size=100000"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dataset", choices=DATASETS, default="mnist")
    parser.add_argument("--sampler", choices=SAMPLERS, default="sghmc")
    parser.add_argument("--device", default="auto")
    parser.add_argument("overrides", nargs="*", help="more bdl-run overrides, for every run")
    args = parser.parse_args()

    base = [*DATASETS[args.dataset], *SAMPLERS[args.sampler]]
    base += [f"device={args.device}", "wandb.mode=disabled", *args.overrides]
    print(
        f"{args.dataset}, {args.sampler} {' '.join(args.overrides)}, seconds per epoch "
        f"(median of {args.rounds})"
    )
    print(
        f"{'K':>3} {'stacked':>9} {'shared':>9} {'in turn':>9} {'singles':>9} "
        f"{'stacked/singles':>16} {'shared/singles':>15}"
    )
    runs = {  # one run of K chains: stacked, stacked on shared minibatches, stepped in turn
        "stacked": ["vectorise=true"],
        "shared": ["vectorise=true", "shared_minibatches=true"],
        "in_turn": ["vectorise=false"],
    }
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        for k, chains in enumerate(args.chains):
            stacked, shared, in_turn = (
                sampling(composed([*base, f"chains={chains}", *options]), root / f"{name}{k}")
                for name, options in runs.items()
            )
            singles = [
                sampling(composed([*base, f"seed={seed}"]), root / f"single{k}_{seed}")
                for seed in range(chains)
            ]

            def one_after_another(runs=singles) -> None:
                for run in runs:
                    run.step_epoch()

            joint, joint_shared, turns, separate = alternating_medians(
                [stacked.step_epoch, shared.step_epoch, in_turn.step_epoch, one_after_another],
                args.rounds,
            )
            print(
                f"{chains:>3} {joint:>9.4f} {joint_shared:>9.4f} {turns:>9.4f} {separate:>9.4f} "
                f"{joint / separate:>16.3f} {joint_shared / separate:>15.3f}"
            )


if __name__ == "__main__":
    with machine_load(torch.get_num_threads()):
        main()
