"""The spread over seeds of every ``bdl-check`` statistic: the measurement the thresholds of
``bdl.checks.check.THRESHOLDS`` (and so of the slow tests) are set from.

Run ``bdl-check --seed S --out DIR/sS`` for several seeds, then

    python scripts/check_spread.py DIR/s*

prints, per target, sampler and statistic, the mean, the standard deviation over seeds, the
largest value, the threshold in force and its distance from the mean in standard deviations.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from bdl.checks.check import THRESHOLDS

STATISTICS = ["tv", "mean_error", "cov_error"]


def spread(directories: list[Path]) -> pd.DataFrame:
    frames = [pd.read_csv(d / "check.csv").assign(run=str(d)) for d in directories]
    long = pd.concat(frames).melt(
        id_vars=["target", "sampler", "run"], value_vars=STATISTICS, var_name="statistic"
    )
    table = (
        long.dropna(subset=["value"])
        .groupby(["target", "sampler", "statistic"], sort=False)["value"]
        .agg(["count", "mean", "std", "max"])
        .reset_index()
    )
    bounds = {
        (target, sampler, bound.error): bound.limit
        for (target, sampler), target_bounds in THRESHOLDS.items()
        for bound in target_bounds
        if bound.above is None
    }
    table["threshold"] = [
        bounds.get((row.target, row.sampler, row.statistic)) for row in table.itertuples()
    ]
    table["sds_above_mean"] = (table["threshold"] - table["mean"]) / table["std"]
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="+", type=Path, help="bdl-check --out directories")
    args = parser.parse_args()
    print(spread(args.directories).to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
