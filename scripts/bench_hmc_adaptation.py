"""Benchmark: what HMC's burn-in adaptation buys, per gradient and per second, side by side.

Six kernels on one posterior, each run with ``--chains`` chains stacked, for seeds 0, 1, ...
interleaved (seed 0 of every variant, then seed 1, ...), so that machine noise hits them alike:

- ``fixed``: unit mass, ``num_steps`` leapfrog steps (the default ``sampler=hmc``);
- ``mass``: ``sampler.mass=diagonal``, Stan's windowed diagonal mass;
- ``length``: ``sampler.adapt_length=true``, ChEES's jittered trajectory length;
- ``both``: the two together;
- ``fisher`` and ``fisher both``: ``sampler.mass=fisher``, the diagonal that minimises the
  Fisher divergence (Seyboldt, Carlson & Carpenter 2026), alone and with the length.

The figures of merit are the bulk ESS of the test predictive's log density (median and minimum
over test points, `bdl.diagnostics`) per thousand full-data gradients and per second of the
run (sampling, evaluation and files; warm-up included), and each variant's ratio to ``fixed`` on
the same seed, with its range over seeds. The default posterior is the hard one of the NumPyro
comparison: yacht, a N(0, 1) prior and a fixed noise of 0.1.

    python scripts/bench_hmc_adaptation.py [--chains 8] [--seeds 3] [--epochs 400]
        [--burn-in 200] [overrides ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench_ess import BASE, ess_and_seconds

VARIANTS = {
    "fixed": [],
    "mass": ["sampler.mass=diagonal"],
    "length": ["sampler.adapt_length=true"],
    "both": ["sampler.mass=diagonal", "sampler.adapt_length=true"],
    "fisher": ["sampler.mass=fisher"],
    "fisher both": ["sampler.mass=fisher", "sampler.adapt_length=true"],
}
HARD_POSTERIOR = ["prior.scale=1", "likelihood.noise_std=0.1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=400)
    parser.add_argument("--burn-in", type=int, default=200)
    parser.add_argument("overrides", nargs="*", help="bdl-run overrides for every run")
    args = parser.parse_args()
    common = [
        *BASE,
        *HARD_POSTERIOR,
        f"epochs={args.epochs}",
        f"burn_in={args.burn_in}",
        f"chains={args.chains}",
        *args.overrides,
    ]
    print(f"{' '.join(common)}: bulk ESS of the test predictive (median / min over points)")
    print(
        f"{'variant':>7} {'seed':>4} {'grads':>8} {'seconds':>7} {'ESS med':>7} {'ESS min':>7} "
        f"{'med/kgrad':>9} {'min/kgrad':>9} {'min/s':>6} {'R-hat':>6} {'RMSE':>6}"
    )
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as root:
        for seed in range(args.seeds):
            for name, variant in VARIANTS.items():
                directory = Path(root) / f"{name}_{seed}"
                median, least, seconds, _ = ess_and_seconds(
                    [*common, *variant, f"seed={seed}"], directory
                )
                metrics = json.loads((directory / "metrics.json").read_text())
                kilo = metrics["grad_evals"] / 1000
                row = {
                    "median/kgrad": median / kilo,
                    "min/kgrad": least / kilo,
                    "min/s": least / seconds,
                    "median/s": median / seconds,
                }
                rows[name].append(row)
                print(
                    f"{name:>7} {seed:>4} {metrics['grad_evals']:>8} {seconds:>7.1f} "
                    f"{median:>7.0f} {least:>7.0f} {row['median/kgrad']:>9.2f} "
                    f"{row['min/kgrad']:>9.2f} {row['min/s']:>6.1f} "
                    f"{metrics.get('rhat_max', float('nan')):>6.3f} {metrics['test_rmse']:>6.3f}"
                )
    print("ratio to fixed on the same seed: mean [min, max] over seeds")
    for name in list(VARIANTS)[1:]:
        cells = []
        for key in ("median/kgrad", "min/kgrad", "median/s", "min/s"):
            ratios = [
                ours[key] / base[key] for ours, base in zip(rows[name], rows["fixed"], strict=True)
            ]
            cells.append(
                f"{key} {statistics.mean(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"
            )
        print(f"{name:>7}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
