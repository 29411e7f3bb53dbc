"""A seeded mutation score over every module of src/bdl, by mutmut 3's mutants.

mutmut generates every mutant of ``src/bdl`` into ``mutants/`` (its generator is deterministic
for a given source; each mutated function sits behind a trampoline that runs the mutant named by
``MUTANT_UNDER_TEST``); a simple random sample of them is drawn with ``--seed``; each sampled
mutant runs its module's tests (`test_selection`: the mirroring test file, else the test
files that import the module, else its package's tests, else the runner's) with ``pytest -x``,
the default suite's markers. mutmut's own ``run`` is not used: before any mutant it runs the
whole suite twice (its instrumented run to map tests to functions, then a clean one: over 20
minutes on one core), and on this suite its instrumented run stops with a failing test that the
plain run passes. The mutants, their verdicts and the score with its Wilson (1927) 95% interval
are written to ``docs/mutation/results-<seed>.json`` after each mutant. They run in the order
drawn, and the first ``k`` of a seed's draw are its draw of ``k`` (Python's ``random.sample``
draws one at a time for samples far smaller than the population), so an interrupted run leaves
the results of a smaller sample (``run`` in the file).

Two scores are kept. ``first_pass`` is the draw's own pass: each mutant's verdict by the tests
that existed when it was drawn (a row's ``first_pass``), the honest estimate of how many of
today's mutants the suite catches. ``--rerun-survivors`` after tests written for the survivors
updates each row's ``measured`` and ``verdict`` and the top-level ``score``, never the first
pass: a test written against a known mutant kills it by construction. ``draw`` records the
commit, seed, command and time of the draw; ``commit``, ``command`` and ``timestamp`` those of
the latest pass, and ``reruns`` each rerun. A commit reads ``<hash>-dirty`` when ``src/`` or
``tests/`` differed from it. A file written before first passes were kept (``results-0.json``)
is read with its rows' first pass unknown (``null``), never guessed from the current verdicts.

A simple random sample over all mutants estimates the score over all of them without bias, and
the binomial interval applies to it; a sample stratified by module would need weights.

Survivors that no test can kill (they change nothing observable) are argued in
``docs/mutation/equivalent.json`` (mutant name -> reason) and left out of the score's
denominator. Verdicts: ``killed`` (a test failed), ``timeout`` (counted as killed: the tests did
not pass), ``survived``, ``no tests`` (counted as survived), ``equivalent``.

    python scripts/mutation.py --seed 0 --sample 40           # 40 mutants
    python scripts/mutation.py --seed 1 --sample 40 --jobs 2  # two at once, on two cores
    python scripts/mutation.py --seed 0 --sample 0.01         # 1% of them
    python scripts/mutation.py --sample 1.0                   # every mutant
    python scripts/mutation.py --seed 0 --rerun-survivors     # after a new test
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mutmut.__main__ import create_mutants
from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.mutation.trampoline import set_mutant_under_test
from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path("src/bdl")
TESTS = Path("tests")
OUT = Path("docs/mutation")
EQUIVALENT = OUT / "equivalent.json"
DETECTED = {"killed", "timeout"}
#: the library's subpackages whose modules share one contract and are tested together
TESTED_TOGETHER = {"samplers", "models", "data"}
SURVIVED = {"survived", "no tests"}
#: a mutant whose tests run longer than this has made them hang (the longest selection, the
#: runner's tests, takes about 4 minutes on a busy core)
TIMEOUT_S = 900
#: pytest's exit codes: 1 tests failed, 3 an internal error (mutmut counts it a kill), 5 none ran
VERDICT_BY_EXIT_CODE = {0: "survived", 1: "killed", 3: "killed", 5: "no tests"}


def generate() -> list[str]:
    """mutmut's mutants of every module under ``src/bdl`` (files whose source is unchanged
    since the last generation are kept), their names sorted."""
    set_mutant_under_test("mutant_generation")
    Path("mutants").mkdir(exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    create_mutants(1)
    names = []
    for path in sorted(SOURCE.rglob("*.py")):
        data = SourceFileMutationData(path=path)
        data.load()
        names += data.exit_code_by_key
    return sorted(names)


def module_of(mutant: str) -> str:
    return re.split(r"\.x[_ǁ]", mutant)[0]


def source_path(module: str) -> Path:
    """The file under ``src/`` of a dotted module name (a package's ``__init__`` holds no
    mutant, so a name is always a module's file)."""
    return Path("src", *module.split(".")).with_suffix(".py")


def test_selection(module: str) -> list[str]:
    """The tests a mutant of ``module`` runs: the mirroring file (``bdl.data.uci`` ->
    ``tests/data/test_uci.py``, ``bdl.runner.loop`` -> ``tests/runner/test_loop.py``), the test
    files that import the module or run it (``python -m bdl.cli``), and a library subpackage's
    whole test folder (``tests/samplers``: samplers are tested together, through the package's
    names); if none, the runner's tests (every module is reached through a run). The
    application's packages (``bdl.runner``, ...) group modules by job, not by a shared contract,
    so their folders are not run whole."""
    *package, name = module.split(".")[1:]
    mirror = TESTS.joinpath(*package, f"test_{name}.py")
    parent = ".".join(["bdl", *package])
    imports = re.compile(rf"\b{re.escape(module)}\b|from {re.escape(parent)} import .*\b{name}\b")
    folder = TESTS.joinpath(*package)
    whole = bool(package) and package[0] in TESTED_TOGETHER
    tests = {
        str(folder if whole and p.parent == folder else p)
        for p in TESTS.rglob("test_*.py")
        if p == mirror or imports.search(p.read_text()) or (whole and p.parent == folder)
    }
    return sorted(tests) or [str(TESTS / "runner" / "test_run.py")]


def run_mutant(mutant: str, tests: list[str]) -> tuple[str, float]:
    """The verdict of the default suite's ``tests`` on ``mutant``, and its wall time."""
    env = os.environ | {
        "MUTANT_UNDER_TEST": mutant,
        "PYTHONPATH": str(ROOT / "mutants" / "src"),
        # one core: more threads only fight over it
        "OMP_NUM_THREADS": "1",
    }
    pytest = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    try:
        code = subprocess.run(pytest, env=env, capture_output=True, timeout=TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start
    return VERDICT_BY_EXIT_CODE.get(
        code, f"error (pytest exit code {code})"
    ), time.perf_counter() - start


def sample_size(sample: str, population: int) -> int:
    """``sample`` is a count (an integer) or a fraction of ``population`` (with a point)."""
    size = round(float(sample) * population) if "." in sample else int(sample)
    if not 0 < size <= population:
        raise SystemExit(f"--sample {sample} gives {size} mutants of {population}: pick 1 to all")
    return size


def wilson(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson's (1927) score interval for a binomial proportion (95% at the default ``z``)."""
    if trials == 0:
        return math.nan, math.nan
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials**2)) / (1 + z * z / trials)
    return centre - half, centre + half


def score(verdicts: list[str]) -> dict:
    counts = Counter(verdicts)
    considered = len(verdicts) - counts["equivalent"]
    detected = sum(counts[v] for v in DETECTED)
    low, high = wilson(detected, considered)
    return {
        "verdicts": dict(sorted(counts.items())),
        "non_equivalent": considered,
        "detected": detected,
        "score": detected / considered if considered else math.nan,
        "wilson_95": [low, high],
    }


def first_pass(rows: list[dict], draw: dict) -> dict:
    """The score of the draw's own pass (each row's ``first_pass`` verdict; a mutant argued
    equivalent since is left out as in the current score), at the draw's commit; unknown when
    a row's first pass is."""
    if any(row["first_pass"] is None for row in rows):
        return {"score": None, "unknown": draw.get("first_pass_unknown", "rows without one")}
    verdicts = [
        "equivalent" if row["verdict"] == "equivalent" else row["first_pass"] for row in rows
    ]
    return {"commit": draw["commit"], **score(verdicts)}


def judged(row: dict, equivalent: dict[str, str], population: set[str]) -> dict:
    """``row`` (its ``measured`` verdict) judged: an argued equivalence applied, and the diff of
    a mutant no test killed (as drawn, for a mutant whose function has changed since)."""
    diff = row.get("diff")
    row = {k: v for k, v in row.items() if k not in ("verdict", "reason", "diff")}
    row["verdict"] = row["measured"]
    if row["measured"] in SURVIVED and row["mutant"] in equivalent:
        row |= {"verdict": "equivalent", "reason": equivalent[row["mutant"]]}
    if row["verdict"] not in DETECTED:
        current = row["mutant"] in population
        row["diff"] = (
            get_diff_for_mutant(row["mutant"], path=source_path(row["module"])) if current else diff
        )
    return row


def upgraded(previous: dict) -> dict:
    """A results file as this script writes it, from one written before first passes were kept
    (``results-0.json``): its rows' first pass unknown (``None``), and its draw's commit,
    population and time, which such a file does not hold."""
    if "draw" in previous:
        return previous
    rows = [
        {key: row[key] for key in ("mutant", "module", "tests")}
        | {"first_pass": None}
        | {key: value for key, value in row.items() if key not in ("mutant", "module", "tests")}
        for row in previous["mutants"]
    ]
    draw = {
        "commit": None,
        "seed": previous["seed"],
        "sample": previous["sample"],
        "population": None,
        "command": previous["command"],
        "timestamp": None,
        "first_pass_unknown": "written before first-pass verdicts were kept: --rerun-survivors "
        "overwrote them",
    }
    return {**previous, "draw": draw, "reruns": previous.get("reruns", []), "mutants": rows}


def results(
    rows: list[dict], population: int, draw: dict, now: dict, reruns: list[dict]
) -> dict[str, Any]:
    """The results file of judged ``rows`` drawn as ``draw`` says, last measured as ``now``
    (its ``commit``, ``command`` and ``timestamp``) after the ``reruns``."""
    return {
        **now,
        "seed": draw["seed"],
        "population": population,
        "sample": draw["sample"],
        "run": len(rows),
        "modules_in_sample": len({row["module"] for row in rows}),
        "draw": draw,
        "reruns": reruns,
        "first_pass": first_pass(rows, draw),
        **score([row["verdict"] for row in rows]),
        "mutants": rows,
    }


def head() -> str:
    """HEAD's short hash, with ``-dirty`` when ``src/`` or ``tests/`` differ from it (then the
    verdicts belong to no commit)."""
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    changed = subprocess.run(
        [*git, "status", "--porcelain", "--", "src", "tests"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return f"{commit}-dirty" if changed else commit


def pass_record(command: str) -> dict[str, str]:
    """The commit, command and UTC time of a pass starting now."""
    return {
        "commit": head(),
        "command": command,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample", default="40", help="a count, or a fraction such as 0.01")
    parser.add_argument(
        "--rerun-survivors",
        action="store_true",
        help="rerun the results file's surviving mutants (after a new test) and re-apply "
        "docs/mutation/equivalent.json, keeping the other verdicts",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="mutants run at once, each its own pytest at one thread (an interrupted run with "
        "more than one leaves the mutants finished, not the first of the draw)",
    )
    args = parser.parse_args()
    os.chdir(ROOT)
    path = OUT / f"results-{args.seed}.json"
    equivalent = json.loads(EQUIVALENT.read_text()) if EQUIVALENT.exists() else {}

    population = generate()
    generated = set(population)
    if args.rerun_survivors:
        previous = upgraded(json.loads(path.read_text()))
        now = pass_record(f"python scripts/mutation.py --seed {args.seed} --rerun-survivors")
        draw, rows = previous["draw"], previous["mutants"]
        reruns = [*previous["reruns"], now]
        for row in rows:  # more tests than a killed mutant ran still fail on it
            row["tests"] = test_selection(row["module"])
        # a survivor whose function has changed since the draw is no longer generated: it keeps
        # its verdict and its diff as drawn
        mutants = [
            row for row in rows if row["measured"] in SURVIVED and row["mutant"] in generated
        ]
    else:
        size = sample_size(args.sample, len(population))
        now = pass_record(f"python scripts/mutation.py --seed {args.seed} --sample {args.sample}")
        draw = {**now, "seed": args.seed, "sample": size, "population": len(population)}
        reruns = []
        drawn = random.Random(args.seed).sample(population, size)
        print(f"{size} of {len(population)} mutants (seed {args.seed})", flush=True)
        rows = [
            {"mutant": m, "module": module_of(m), "tests": test_selection(module_of(m))}
            for m in drawn
        ]
        mutants = rows

    def record() -> dict:
        done = [judged(row, equivalent, generated) for row in rows if "measured" in row]
        written = results(done, len(population), draw, now, reruns)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(written, indent=1, ensure_ascii=False) + "\n")
        return written

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        running = {pool.submit(run_mutant, row["mutant"], row["tests"]): row for row in mutants}
        for future in as_completed(running):
            row = running[future]
            row["measured"], seconds = future.result()
            row.setdefault("first_pass", row["measured"])
            print(f"{row['measured']} {row['mutant']} ({seconds:.0f} s)", flush=True)
            record()
    written = record()
    for name, measured in (("first pass", written["first_pass"]), ("now", written)):
        if measured["score"] is None:
            print(f"{name}: unknown ({measured['unknown']})")
            continue
        low, high = measured["wilson_95"]
        print(
            f"{name}: {measured['detected']} of {measured['non_equivalent']} non-equivalent "
            f"mutants killed ({measured['score']:.1%}, Wilson 95% {low:.1%}-{high:.1%})"
        )
    print(path)


if __name__ == "__main__":
    main()
