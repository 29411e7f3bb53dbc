"""Benchmark: effective samples of the test predictive per second of wall time, for one run of
one chain against one run of K chains stacked as one (``chains=K``, `bdl.runner.steppers`), on the
same sampler and iterations; full-batch HMC on yacht (277 training points, 401 parameters) by
default, the small model where per-step overhead dominates and stacking pays most.

ESS is arviz's bulk ESS of each test point's log predictive density over all chains' draws
(``diagnostics.csv``), summarised by its median and minimum over the points; seconds are the
run's own ``wall_time_s`` (sampling, evaluation and sample files). With ``compile=true`` the first
epoch also holds ``torch.compile``'s one-off compile, seconds that a run of hours does not notice:
the ``steady`` columns replace the first epoch's time by the mean of the others' (from
``curve.csv``), and the ratios are printed on both. One chain's ESS varies from seed to seed by
a third or more, so one chain's rate is the mean over ``--singles`` runs of one chain, by default
the K chains of the stacked run each run alone (seeds 0 to K - 1). The goal for K = 8 is a ratio
of ESS per second >= 6.

    python scripts/bench_ess.py [--chains 8] [--singles 8] [--epochs 300] [--burn-in 100]
        [--device auto] [overrides ...]
    python scripts/bench_ess.py compile=true
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
from pathlib import Path

from benchtools import composed

from bdl import diagnostics
from bdl.runner.run import run
from bdl.storage.outputs import CURVE

# thin=2: a draw every other iteration, 100 per chain at the default length
BASE = ["sampler=hmc", "dataset=yacht", "batch_size=100000", "thin=2", "wandb.mode=disabled"]


def ess_and_seconds(overrides: list[str], directory: Path) -> tuple[float, float, float, float]:
    """Median and minimum bulk ESS over test points, the run's wall time in seconds, and that
    time with its first epoch counted as long as the mean of the others."""
    metrics = run(composed(overrides), directory)
    with (directory / diagnostics.FILE).open() as file:
        bulk = [float(row["ess_bulk"]) for row in csv.DictReader(file)]
    with (directory / CURVE).open() as file:
        first_epoch = max(
            float(row["wall_time_s"]) for row in csv.DictReader(file) if row["epoch"] == "1"
        )
    seconds, epochs = metrics["wall_time_s"], metrics["epochs"]
    steady = (seconds - first_epoch) * epochs / (epochs - 1)
    return statistics.median(bulk), min(bulk), seconds, steady


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument(
        "--singles", type=int, help="runs of one chain, seeds 0, 1, ... (default: --chains)"
    )
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--burn-in", type=int, default=100)
    parser.add_argument("--device", default="auto", help="bdl-run's device: auto, cpu, cuda")
    parser.add_argument("overrides", nargs="*", help="more bdl-run overrides, for every run")
    args = parser.parse_args()
    args.singles = args.singles or args.chains
    common = [*BASE, f"epochs={args.epochs}", f"burn_in={args.burn_in}", f"device={args.device}"]
    common += args.overrides
    print(f"{' '.join(common)}: ESS of the test predictive (median / min over points)")
    print(
        f"{'chains':>6} {'seed':>4} {'ESS med':>8} {'ESS min':>8} {'seconds':>8} {'steady':>8} "
        f"{'med/s':>7} {'min/s':>7}"
    )
    runs = [(1, seed) for seed in range(args.singles)] + [(args.chains, 0)]
    rates = []  # per run: ESS per second, median and min, on the total and the steady seconds
    with tempfile.TemporaryDirectory() as root:
        for chains, seed in runs:
            overrides = [*common, f"chains={chains}", f"seed={seed}"]
            median, least, seconds, steady = ess_and_seconds(
                overrides, Path(root) / f"{chains}_{seed}"
            )
            rates.append([median / seconds, least / seconds, median / steady, least / steady])
            print(
                f"{chains:>6} {seed:>4} {median:>8.0f} {least:>8.0f} {seconds:>8.1f} "
                f"{steady:>8.1f} {median / steady:>7.2f} {least / steady:>7.2f}"
            )
    # one chain's rate: the mean over the single runs, whose ESS varies from seed to seed
    one = [statistics.mean(column) for column in zip(*rates[:-1], strict=True)]
    many = rates[-1]
    for offset, name in ((0, "seconds"), (2, "steady")):
        print(
            f"ESS per second ({name}), {args.chains} chains / mean of {args.singles} runs of 1: "
            f"{many[offset] / one[offset]:.2f} (median), "
            f"{many[offset + 1] / one[offset + 1]:.2f} (min)"
        )


if __name__ == "__main__":
    main()
