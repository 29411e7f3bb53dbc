"""The convergence verdict (`bdl.diagnostics.verdict`) of a finished one-chain classification run
on windows of its draws: what a longer burn-in or a shorter run would have been judged, from one
run.

    OMP_NUM_THREADS=1 python scripts/verdict_windows.py RUN --burn-in 50 100 150 --epochs 800 1200

For each ``--burn-in`` B and ``--epochs`` E (both at least the run's burn-in, E at most its
epochs), the draws kept after epoch B up to epoch E (every one at the run's ``thin``) are judged
as a run of that burn-in and length would be: the test predictive's log density of each label
(each stored sample put into the network again), the potential from ``curve.csv``. Prints one
row per window with what the verdict judges, then its lines.
"""

from __future__ import annotations

import argparse
import csv
import time

import numpy as np

import bdl
from bdl import diagnostics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run")
    parser.add_argument("--burn-in", type=int, nargs="+", required=True)
    parser.add_argument("--epochs", type=int, nargs="+", required=True)
    args = parser.parse_args()
    started = time.process_time()
    posterior = bdl.load_run(args.run)
    if posterior.num_chains != 1:
        parser.error(f"{args.run} has {posterior.num_chains} chains: its curve.csv is one chain's")
    config = posterior.config
    x, y = posterior.data.x_test, posterior.data.y_test.long()
    pointwise = np.zeros((1, len(posterior), len(y)))
    for sample, logits in posterior.predictions(x, logits=True):
        log_p = logits.double().log_softmax(-1).gather(-1, y[:, None])[:, 0]
        pointwise[sample.chain, sample.draw] = log_p.numpy()
    with open(f"{args.run}/curve.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    kept = [r for r in rows if int(r["epoch"]) > config.burn_in]  # every kept epoch, in order
    kept = kept[config.thin - 1 :: config.thin]
    potential = np.array([[float(r["potential"]) for r in kept]])
    print(f"{pointwise.shape[1]} draws a chain read in {time.process_time() - started:.0f} s CPU")
    print(
        "| burn_in | epochs | draws | p90 R-hat | p10 bulk / tail ESS | NLL MCSE / SE "
        "| potential R-hat (limit) / bulk, tail ESS |"
    )
    print("|---|---|---|---|---|---|---|")
    lines = []
    for end in args.epochs:
        for burn in args.burn_in:
            first = (burn - config.burn_in) // config.thin
            last = (end - config.burn_in) // config.thin
            window, pot = pointwise[:, first:last], potential[:, first:last]
            metrics, _ = diagnostics.summarise(window, window[..., :1])
            scalars = diagnostics.scalar_diagnostics({"potential": pot})
            settings = diagnostics.Settings(
                epochs=end, burn_in=burn, thin=config.thin, lr=config.sampler.get("lr")
            )
            draws = last - first
            reasons, notes = diagnostics.verdict(metrics, scalars, 1, draws, settings, pot)
            found = scalars["potential"]
            print(
                f"| {burn} | {end} | {draws} | {metrics['rhat_p90']:.3f} | "
                f"{metrics['ess_bulk_p10']:.0f} / {metrics['ess_tail_p10']:.0f} | "
                f"{metrics['nll_mcse']:.4f} / {metrics['nll_se']:.4f} | {found['rhat']:.3f} "
                f"({diagnostics.rhat_limit(1, draws):.3f}) / {found['ess_bulk'] or 0:.0f}, "
                f"{found['ess_tail'] or 0:.0f} |"
            )
            lines += [f"burn_in={burn} epochs={end}:"]
            lines += [f"  NOT CONVERGED: {r}" for r in reasons] + [f"  note: {n}" for n in notes]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
