"""Every sampler option at its defaults on each data set: does each end sound, or refuse?

Runs ``bdl-run sampler=S dataset=D`` for every ``conf/sampler/*.yaml`` (or ``--samplers``) and
every ``--datasets`` entry, each in its own process (so that a refusal is what a user sees), and
writes one row per run: its status, its headline metrics beside the trivial predictor's (the
training targets' mean and variance, or the training classes' frequencies), the step scale that
burn-in settled on, the largest rise of the potential after burn-in (``rise_max``, in units of
`bdl.runner.stability.rise_limit`) and, for a refusal or a failure, bdl's one-line message. A run
that completes worse than the trivial predictor ends ``unsound``, never ``completed``.

    OMP_NUM_THREADS=1 python scripts/matrix.py --datasets yacht boston --out matrix.csv
    python scripts/matrix.py --datasets mnist --jobs 2 -- epochs=20 burn_in=10

Overrides after ``--`` go to every run (e.g. ``epochs=...`` for a shortened matrix).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SAMPLERS = sorted(p.stem for p in (Path(__file__).parents[1] / "conf" / "sampler").glob("*.yaml"))
COLUMNS = [
    "sampler",
    "dataset",
    "status",
    "metric",
    "value",
    "trivial",
    "step_scale",
    "rise_max",
    "wall_s",
    "message",
]


def run(sampler: str, dataset: str, overrides: list[str], root: Path) -> dict:
    directory = root / f"{dataset}-{sampler}"
    command = [
        str(Path(sys.executable).with_name("bdl-run")),
        f"sampler={sampler}",
        f"dataset={dataset}",
        *overrides,
        f"hydra.run.dir={directory}",
    ]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    row = {"sampler": sampler, "dataset": dataset, "wall_s": round(time.perf_counter() - start)}
    metrics_file = directory / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
    row["status"] = metrics.get("status", "refused")
    metric = next((m for m in ("test_rmse", "test_accuracy") if m in metrics), None)
    if metric is not None:
        row |= {"metric": metric, "value": f"{metrics[metric]:.4g}"}
        if metric in metrics.get("trivial", {}):
            row["trivial"] = f"{metrics['trivial'][metric]:.4g}"
    for key in ("step_scale", "rise_max"):
        if metrics.get(key) is not None:
            row[key] = f"{metrics[key]:.3g}"
    if result.returncode:
        errors = [line for line in result.stderr.splitlines() if line.startswith("bdl-run:")]
        row["message"] = errors[-1] if errors else result.stderr.strip().splitlines()[-1]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["yacht", "boston"])
    parser.add_argument("--samplers", nargs="+", default=SAMPLERS)
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--out", type=Path, default=Path("matrix.csv"))
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    parser.add_argument("overrides", nargs="*", help="overrides for every run (after --)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bdl-matrix-"))
    pairs = [(s, d) for d in args.datasets for s in args.samplers]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda pair: run(*pair, args.overrides, root), pairs))
    with args.out.open("w", newline="") as file:
        writer = csv.DictWriter(file, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(" | ".join(str(row.get(c, "")) for c in COLUMNS))
    counts = {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})}
    print(f"{len(rows)} runs: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    sys.exit(1 if counts.get("unsound") else 0)


if __name__ == "__main__":
    main()
