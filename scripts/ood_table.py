"""The baselines and SG-MCMC samplers judged by what their posteriors predict: accuracy, NLL, ECE,
out-of-distribution AUROC (predictive entropy and mutual information, against each dataset's
``ood=`` set) and the accuracy under the strongest corruption (the lowest over the four of
``bdl.data.shift`` at severity 5).

Runs ``bdl-run`` once per method and dataset, each in its own process, then ``bdl-eval``'s
corruptions in this one, and prints a markdown table (a row per method and dataset):

    OMP_NUM_THREADS=1 python scripts/ood_table.py -- epochs=10 burn_in=5

Overrides after ``--`` go to every run (e.g. a shortened ``epochs``). MFVI and the Laplace
approximation start from the SGD run of the same dataset, so ``--methods`` names ``sgd`` before
them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bdl.analysis.evaluate import evaluate
from bdl.data.shift import CORRUPTIONS

METHODS = {
    "sgd": ["sampler=sgd"],
    "ensemble of 5": ["experiment=deep_ensemble"],
    "mc_dropout": ["sampler=mc_dropout"],
    "swag": ["sampler=swag"],
    "sgld": ["sampler=sgld"],
    "sghmc": ["sampler=sghmc"],
    "sghmc_cyclical": ["sampler=sghmc_cyclical"],
    # Izmailov et al. (2021)'s recipes: both start at the SGD run's solution ({sgd}: its directory)
    "mfvi": ["sampler=mfvi", "schedule=cosine", "burn_in=0", "init_from={sgd}"],
    "laplace": ["sampler=laplace", "epochs=1", "burn_in=0", "init_from={sgd}"],
}
COLUMNS = ["accuracy", "NLL", "ECE", "AUROC entropy", "AUROC MI", "worst corruption accuracy"]


def run(method: str, dataset: str, overrides: list[str], root: Path) -> dict[str, str]:
    directory = root / f"{dataset}-{method.replace(' ', '_')}"
    sgd = root / f"{dataset}-sgd"
    command = [
        str(Path(sys.executable).with_name("bdl-run")),
        f"dataset={dataset}",
        *overrides,
        # after the shared overrides: a method's own (laplace's one epoch) has the last word
        *(argument.format(sgd=sgd) for argument in METHODS[method]),
        f"hydra.run.dir={directory}",
    ]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    row = {"method": method, "dataset": dataset, "wall_s": f"{time.perf_counter() - start:.0f}"}
    if result.returncode:
        row["status"] = result.stderr.strip().splitlines()[-1]
        return row
    metrics = json.loads((directory / "metrics.json").read_text())
    worst = min(
        (
            evaluate(directory, {"shift.corrupt": name, "shift.severity": "5"})[0]["test_accuracy"],
            name,
        )
        for name in CORRUPTIONS
    )
    row |= {
        "status": metrics["status"],
        "accuracy": f"{metrics['test_accuracy']:.4f}",
        "NLL": f"{metrics['test_nll']:.4f}",
        "ECE": f"{metrics['test_ece']:.4f}",
        "AUROC entropy": f"{metrics['ood_auroc_entropy']:.3f}",
        "AUROC MI": f"{metrics['ood_auroc_mutual_information']:.3f}",
        "worst corruption accuracy": f"{worst[0]:.4f} ({worst[1]})",
    }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["mnist", "fashion_mnist"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    parser.add_argument("overrides", nargs="*", help="overrides for every run (after --)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bdl-ood-"))
    header = ["dataset", "method", *COLUMNS, "status", "wall_s"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for dataset in args.datasets:
        for method in args.methods:
            row = run(method, dataset, args.overrides, root)
            print("| " + " | ".join(row.get(c, "—") for c in header) + " |", flush=True)


if __name__ == "__main__":
    main()
