"""Benchmark: how a run's cost grows with its chains, its draws, its test points and its training
set, so that a user can predict a run's time before starting it.

Each cell is a whole run (`bdl.run_model`, the runner ``bdl-run`` uses: composing the config,
burn-in, sampling, keeping every draw in the sample store, the test predictions, the verdict and
the run's end) of a one-hidden-layer network of 50 units on synthetic regression data with 8
features, by full-batch HMC (10 leapfrog steps an iteration, step size adapted in burn-in), at one
thread. A cell runs twice, with ``draws`` and with ``4 * draws`` after the same burn-in; the
difference gives the cost of one more draw (an iteration of every chain, keeping its draws and
predicting the test points with them) and what is left the fixed cost (start, burn-in, end):

    wall(draws) ~= fixed + per_draw * draws

Rows vary one factor from the base (1 chain, 300 training rows, 31 test points: yacht's sizes);
the last column checks the line: a run of ``16 * draws`` measured against its prediction.

    python scripts/bench_scaling.py [--draws 100] [--burn-in 50] [--quick]

``--quick`` (fewer cells, fewer draws) checks that the script works; its figures are not
measurements.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from benchtools import cpu_seconds, machine_load

import bdl


@dataclass(frozen=True)
class Cell:
    chains: int = 1
    train: int = 300
    test: int = 31

    def label(self) -> str:
        return f"{self.chains:>6} {self.train:>7} {self.test:>6}"


def regression(rows: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(rows, 8, generator=generator)
    y = torch.sin(x @ torch.linspace(-1, 1, 8)) + 0.1 * torch.randn(rows, generator=generator)
    return x, y


def timed_run(cell: Cell, draws: int, burn_in: int, directory: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``cell`` keeping ``draws`` draws a chain."""
    generator = torch.Generator().manual_seed(0)
    train, test = regression(cell.train, generator), regression(cell.test, generator)
    start, cpu = time.perf_counter(), cpu_seconds()
    bdl.run_model(
        "mlp",
        train,
        test,
        directory=directory,
        model_args={"hidden": [50]},
        sampler="hmc",
        chains=cell.chains,
        epochs=burn_in + draws,
        burn_in=burn_in,
        thin=1,
        overrides=["sampler.num_steps=10", "figures=false", "threads=1"],
    )
    return time.perf_counter() - start, cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=100, help="draws a chain of the short run")
    parser.add_argument("--burn-in", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="a few cells: a check, not figures")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # the runs' own verdicts and tables are not what is measured
    logging.getLogger("bdl").setLevel(logging.CRITICAL)
    base = Cell()
    if args.quick:
        args.draws, args.burn_in = 10, 10
        cells = [base, replace(base, chains=4)]
    else:
        cells = [
            base,
            *(replace(base, chains=k) for k in (4, 16, 64)),
            *(replace(base, train=n) for n in (3_000, 30_000)),
            *(replace(base, test=m) for m in (1_000, 10_000)),
        ]
    short, long_, check = args.draws, 4 * args.draws, 16 * args.draws
    print(
        f"full-batch HMC (10 leapfrog steps), MLP 8-50-1, synthetic regression, one thread; "
        f"burn-in {args.burn_in} iterations; per-draw cost from runs of {short} and {long_} "
        f"draws a chain, by each clock; the check: a run of {check} draws, measured / predicted"
    )
    print(
        f"{'chains':>6} {'train':>7} {'test':>6} {'fixed s':>8} {'ms/draw':>8} {'CPU ms':>7}"
        f" {'ms/chain-draw':>14} {'check (wall s)':>15}"
    )
    with machine_load(1), tempfile.TemporaryDirectory() as root:
        # the process's one-off costs (imports, Hydra's config search, the first verdict's
        # libraries) paid by a run of the base cell's own length, outside every cell
        timed_run(base, short, args.burn_in, Path(root) / "warm-up")
        for index, cell in enumerate(cells):
            folder = Path(root) / str(index)
            (wall_short, cpu_short), (wall_long, cpu_long), (wall_check, _) = (
                timed_run(cell, draws, args.burn_in, folder / str(draws))
                for draws in (short, long_, check)
            )
            per_draw = (wall_long - wall_short) / (long_ - short)
            cpu_per_draw = (cpu_long - cpu_short) / (long_ - short)
            fixed = wall_short - per_draw * short
            predicted = fixed + per_draw * check
            print(
                f"{cell.label()} {fixed:>8.2f} {per_draw * 1e3:>8.2f} {cpu_per_draw * 1e3:>7.2f}"
                f" {per_draw / cell.chains * 1e3:>14.3f} {wall_check:>7.1f} / {predicted:<6.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
