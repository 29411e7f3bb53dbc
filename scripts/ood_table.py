"""The calibration, dataset-shift and out-of-distribution table (Ovadia et al. 2019): every method
on MNIST and Fashion-MNIST over several seeds, its corruptions at every severity, and the
published findings it tests as rows with verdicts (`bdl.analysis.shift_table`).

Two commands, so that the table can be made in parts and on several machines:

    OMP_NUM_THREADS=1 python scripts/ood_table.py run ROOT [--methods ...] [--datasets ...]
        [--seeds 0 1 2] [-- bdl-run overrides, e.g. epochs=20 burn_in=10]
    python scripts/ood_table.py assemble ROOT [--cold COLD_ROOT] [--izmailov DIR] [--figures DIR]

``run`` trains each method x dataset x seed with ``bdl-run`` in its own process, into
``ROOT/<dataset>/<method>/seed<S>``: a run whose ``metrics.json`` says it ended is not run again
and one interrupted is resumed in place (``resume=true``; one killed before its first checkpoint
starts again). Each completed run is then evaluated by ``bdl-eval``'s code under the four
corruptions of `bdl.data.shift` at severities 1-5, each into the run's ``eval/`` (JSON metrics
beside the model average), skipping those already there. The CPU seconds of each step are
appended to ``ROOT/cpu.csv``. MFVI and the Laplace approximation start from the SGD run of the
same dataset and seed, so ``--methods`` names ``sgd`` before them.

``assemble`` reads the finished runs only: the table (mean ± standard error over seeds), the
accuracy and NLL at each severity, the claims with their verdicts (``--cold``: the runs of
``scripts/cold_posterior.sh`` for Wenzel et al.'s; ``--izmailov``: its runs of HMC at T = 1 in
``DIR/hmc`` and of SGHMC colder in ``DIR/sghmc``, on `shift_table.IZMAILOV_DATASET`'s problem, for
Izmailov et al.'s), the total CPU time of ``cpu.csv``, and
writes ``severity-<dataset>.png`` into ``--figures`` (default ROOT).
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from bdl.analysis import shift_table
from bdl.analysis.evaluate import USER_ERRORS, evaluate, user_message
from bdl.analysis.plots import save
from bdl.analysis.posterior import Posterior
from bdl.data.shift import CORRUPTIONS, SEVERITIES

METHODS = {
    "sgd": ["sampler=sgd"],
    "ensemble": ["experiment=deep_ensemble"],  # five SGD networks
    "mc_dropout": ["sampler=mc_dropout"],
    "swag": ["sampler=swag"],
    "sgld": ["sampler=sgld"],
    "sghmc": ["sampler=sghmc"],
    "sghmc_cyclical": ["sampler=sghmc_cyclical"],
    # Izmailov et al. (2021)'s recipes: both start at the SGD run's solution ({sgd}: its directory)
    "mfvi": ["sampler=mfvi", "schedule=cosine", "burn_in=0", "init_from={sgd}"],
    "laplace": ["sampler=laplace", "epochs=1", "burn_in=0", "init_from={sgd}"],
}
CPU_FILE = "cpu.csv"
CPU_COLUMNS = ["dataset", "method", "seed", "step", "cpu_s", "wall_s"]


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _record(root: Path, row: list) -> None:
    path = root / CPU_FILE
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(CPU_COLUMNS)
        writer.writerow(row)


def _status(directory: Path) -> str | None:
    try:
        return json.loads((directory / "metrics.json").read_text())["status"]
    except (OSError, ValueError, KeyError):
        return None


def train(root: Path, dataset: str, method: str, seed: int, overrides: list[str]) -> str:
    """The run trained (or resumed) unless it has ended; its status."""
    directory = root / dataset / method / f"seed{seed}"
    status = _status(directory)
    if status not in (None, "interrupted"):
        return status
    sgd = root / dataset / "sgd" / f"seed{seed}"
    if "{sgd}" in " ".join(METHODS[method]) and _status(sgd) != "completed":
        return f"not run: it starts from {sgd}, which has not completed (run sgd first)"
    # a run killed before its first checkpoint left samples that only resume=true may replace
    resume = ["resume=true"] if directory.is_dir() else []
    command = [
        str(Path(sys.executable).with_name("bdl-run")),
        f"dataset={dataset}",
        f"seed={seed}",
        *overrides,
        # after the shared overrides: a method's own (laplace's one epoch) has the last word
        *(argument.format(sgd=sgd) for argument in METHODS[method]),
        *resume,
        f"hydra.run.dir={directory}",
    ]
    cpu, start = _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    seconds = [_cpu(resource.RUSAGE_CHILDREN) - cpu, time.perf_counter() - start]
    _record(root, [dataset, method, seed, "train", *(f"{s:.1f}" for s in seconds)])
    if result.returncode and _status(directory) is None:
        lines = result.stderr.strip().splitlines()
        return f"failed: {lines[-1] if lines else result.returncode}"
    return _status(directory) or "no metrics.json"


def corruptions(root: Path, dataset: str, method: str, seed: int) -> int:
    """The run evaluated under every corruption and severity not yet evaluated; how many."""
    directory = root / dataset / method / f"seed{seed}"
    todo = [
        (name, severity)
        for name in CORRUPTIONS
        for severity in SEVERITIES
        if not list(directory.glob(f"eval/*-test-{name}{severity}/metrics.json"))
    ]
    cpu, start = _cpu(resource.RUSAGE_SELF), time.perf_counter()
    posterior = Posterior(directory)  # its data read once for the twenty evaluations
    for name, severity in todo:
        try:
            evaluate(directory, {"shift.corrupt": name, "shift.severity": str(severity)}, posterior)
        except USER_ERRORS as error:  # the table lists the evaluation as missing
            print(f"{directory} {name}{severity}: {user_message(error)}", file=sys.stderr)
    if todo:
        seconds = [_cpu(resource.RUSAGE_SELF) - cpu, time.perf_counter() - start]
        _record(root, [dataset, method, seed, "corruptions", *(f"{s:.1f}" for s in seconds)])
    return len(todo)


def run(args: argparse.Namespace) -> None:
    args.root.mkdir(parents=True, exist_ok=True)
    # seed by seed: a table stopped part-way has every method and dataset at fewer seeds
    for seed in args.seeds:
        for dataset in args.datasets:
            for method in args.methods:
                status = train(args.root, dataset, method, seed, args.overrides)
                evaluated = 0
                if status == "completed":
                    evaluated = corruptions(args.root, dataset, method, seed)
                print(f"{dataset} {method} seed{seed}: {status}, {evaluated} evaluated", flush=True)


def assemble(args: argparse.Namespace) -> None:
    runs = shift_table.collect(args.root)
    if runs.empty:
        sys.exit(f"ood_table.py: no runs below {args.root} (run `ood_table.py run` first)")
    table = shift_table.summary(runs)
    cold = shift_table.cold_summary(args.cold) if args.cold else None
    warm_hmc, cold_sghmc = (
        (shift_table.cold_summary(args.izmailov / name) for name in ("hmc", "sghmc"))
        if args.izmailov
        else (None, None)
    )
    print(shift_table.table_markdown(runs, table))
    print(f"\nClaims ({shift_table.CLAIMS_RULE}):\n")
    found = shift_table.claims(table, cold, warm_hmc, cold_sghmc)
    print(shift_table.claims_markdown(found))
    cpu_file = args.root / CPU_FILE
    if cpu_file.is_file():
        with cpu_file.open() as f:
            total = sum(float(row["cpu_s"]) for row in csv.DictReader(f))
        print(f"\nCPU time recorded in {cpu_file}: {total / 60:.1f} min")
    for dataset in dict.fromkeys(table["dataset"]):
        figure = shift_table.severity_figure(table, dataset)
        for path in save(figure, (args.figures or args.root) / f"severity-{dataset}"):
            print(f"wrote {path}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser(
        "run", help="train and evaluate the runs not yet done; -- then bdl-run overrides"
    )
    runner.add_argument("root", type=Path)
    runner.add_argument("--datasets", nargs="+", default=["mnist", "fashion_mnist"])
    runner.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    runner.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    assembler = commands.add_parser("assemble", help="the table from the finished runs")
    assembler.add_argument("root", type=Path)
    assembler.add_argument("--cold", type=Path, help="scripts/cold_posterior.sh's output")
    assembler.add_argument(
        "--izmailov",
        type=Path,
        help="HMC at T = 1 (DIR/hmc) and SGHMC at T < 1 (DIR/sghmc) by scripts/cold_posterior.sh",
    )
    assembler.add_argument("--figures", type=Path, help="where the figures go (default ROOT)")
    # what follows -- goes to bdl-run, split off here: argparse would match an empty list of
    # overrides right after ROOT and refuse them after --seeds
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.overrides = argv[cut + 1 :]
    if args.command == "assemble" and args.overrides:
        parser.error("assemble takes no bdl-run overrides")
    run(args) if args.command == "run" else assemble(args)


if __name__ == "__main__":
    main()
