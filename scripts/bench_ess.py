"""Benchmark: effective samples of the test predictive per second of wall time, for one run of
one chain against one run of K chains stacked as one (``chains=K``, :mod:`bdl.chains`), on the
same sampler and iterations; full-batch HMC on yacht (277 training points, 401 parameters) by
default, the small model where per-step overhead dominates and stacking pays most.

ESS is arviz's bulk ESS of each test point's log predictive density over all chains' draws
(``diagnostics.csv``), summarised by its median and minimum over the points; seconds are the
run's own ``wall_time_s`` (sampling, evaluation and sample files). The goal for K = 8 is a ratio
of ESS per second >= 6.

    python scripts/bench_ess.py [--chains 8] [--epochs 300] [--burn-in 100] [overrides ...]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
from pathlib import Path

from benchtools import composed

from bdl import diagnostics
from bdl.run import run

# thin=2: a draw every other iteration, 100 per chain at the default length
BASE = ["sampler=hmc", "dataset=yacht", "batch_size=100000", "thin=2", "wandb.mode=disabled"]


def ess_per_second(overrides: list[str], directory: Path) -> tuple[float, float, float]:
    """Median and minimum bulk ESS over test points, and the run's wall time in seconds."""
    metrics = run(composed(overrides), directory)
    with (directory / diagnostics.FILE).open() as file:
        bulk = [float(row["ess_bulk"]) for row in csv.DictReader(file)]
    return statistics.median(bulk), min(bulk), metrics["wall_time_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--burn-in", type=int, default=100)
    parser.add_argument("overrides", nargs="*", help="more bdl-run overrides, for both runs")
    args = parser.parse_args()
    common = [*BASE, f"epochs={args.epochs}", f"burn_in={args.burn_in}", *args.overrides]
    print(f"{' '.join(common)}: ESS of the test predictive (median / min over points)")
    print(f"{'chains':>6} {'ESS med':>8} {'ESS min':>8} {'seconds':>8} {'med/s':>7} {'min/s':>7}")
    rates = []
    with tempfile.TemporaryDirectory() as root:
        for chains in (1, args.chains):
            median, least, seconds = ess_per_second(
                [*common, f"chains={chains}"], Path(root) / f"chains{chains}"
            )
            rates.append((median / seconds, least / seconds))
            print(
                f"{chains:>6} {median:>8.0f} {least:>8.0f} {seconds:>8.1f} "
                f"{rates[-1][0]:>7.2f} {rates[-1][1]:>7.2f}"
            )
    (one_median, one_min), (many_median, many_min) = rates
    print(
        f"ESS per second, {args.chains} chains / 1: {many_median / one_median:.2f} (median), "
        f"{many_min / one_min:.2f} (min)"
    )


if __name__ == "__main__":
    main()
