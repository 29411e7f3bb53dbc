"""Benchmark: effective samples of the test predictive per second of wall time, for one run of
one chain against one run of K chains stacked as one (``chains=K``, :mod:`bdl.chains`), on the
same sampler and iterations; full-batch HMC on yacht (277 training points, 401 parameters) by
default, the small model where per-step overhead dominates and stacking pays most.

ESS is arviz's bulk ESS of each test point's log predictive density over all chains' draws
(``diagnostics.csv``), summarised by its median and minimum over the points; seconds are the
run's own ``wall_time_s`` (sampling, evaluation and sample files). With ``compile=true`` the first
epoch also holds ``torch.compile``'s one-off compile, seconds that a run of hours does not notice:
the ``steady`` columns replace the first epoch's time by the mean of the others' (from
``curve.csv``), and the ratios are printed on both. The goal for K = 8 is a ratio of ESS per
second >= 6.

    python scripts/bench_ess.py [--chains 8] [--epochs 300] [--burn-in 100] [overrides ...]
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
from bdl.outputs import CURVE
from bdl.run import run

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
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--burn-in", type=int, default=100)
    parser.add_argument("overrides", nargs="*", help="more bdl-run overrides, for both runs")
    args = parser.parse_args()
    common = [*BASE, f"epochs={args.epochs}", f"burn_in={args.burn_in}", *args.overrides]
    print(f"{' '.join(common)}: ESS of the test predictive (median / min over points)")
    print(
        f"{'chains':>6} {'ESS med':>8} {'ESS min':>8} {'seconds':>8} {'steady':>8} "
        f"{'med/s':>7} {'min/s':>7}"
    )
    runs = []
    with tempfile.TemporaryDirectory() as root:
        for chains in (1, args.chains):
            runs.append(ess_and_seconds([*common, f"chains={chains}"], Path(root) / str(chains)))
            median, least, seconds, steady = runs[-1]
            print(
                f"{chains:>6} {median:>8.0f} {least:>8.0f} {seconds:>8.1f} {steady:>8.1f} "
                f"{median / steady:>7.2f} {least / steady:>7.2f}"
            )
    one, many = runs
    for column, name in ((2, "seconds"), (3, "steady")):
        print(
            f"ESS per second ({name}), {args.chains} chains / 1: "
            f"{many[0] / many[column] / (one[0] / one[column]):.2f} (median), "
            f"{many[1] / many[column] / (one[1] / one[column]):.2f} (min)"
        )


if __name__ == "__main__":
    main()
