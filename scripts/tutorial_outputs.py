"""The output and the figure each tutorial shows, made by running its commands as printed.

    OMP_NUM_THREADS=1 BDL_DATA_DIR=../shared/data python scripts/tutorial_outputs.py [PAGE ...]

For each page of ``docs/tutorials/`` named in ``TUTORIALS`` (all of them by default), the page's
``bdl-*`` command lines are run in a scratch directory, in order, on the real data of
``BDL_DATA_DIR``. A page that builds a package of the reader's own (own-model) has its files
(its ``title="..."`` blocks, and the files its tree marks ``(empty)``) written there first, and
its ``pip install`` and ``python`` lines run too: the package installed into the scratch
directory's ``site-packages``, on ``PYTHONPATH``, so that nothing stays installed. Then

- the fenced ``text`` block under the page's ``<!-- output: PROGRAM K -->`` line is replaced by
  what the K-th (from 1) command of that program printed: the table that ends a ``bdl-run`` (from
  its log, without the timestamps), or the standard output of ``bdl-report`` and ``bdl-eval``;
- ``docs/figures/tutorials/<page>.png`` is copied from the figure the spec names.

``tests/test_docs.py`` runs each tutorial shortened on generated data and checks that the page's
output block lists the keys that run prints, so a block falls behind the code only until the test
runs. The commands' wall times are printed; the pages say the machine they ran on.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS_DIR = ROOT / "docs" / "tutorials"
FIGURES = ROOT / "docs" / "figures" / "tutorials"
PROGRAMS = ("bdl-run", "bdl-report", "bdl-eval")
MARKER = re.compile(r"^<!-- output: (bdl-[a-z]+) (\d+) -->\n```text\n.*?^```\n", re.M | re.S)
# A log line's prefix: "[2026-11-27 08:36:56,910][bdl][INFO] - "
LOG_PREFIX = re.compile(r"^\[[^\]]+\]\[[^\]]+\]\[[A-Z]+\] - ", re.M)


@dataclass(frozen=True)
class Tutorial:
    figure: str  # a glob under the scratch directory: the figure the page shows
    skip: tuple[str, ...] = ()  # command lines that cannot run here (a SLURM cluster's)
    interrupt_after_s: float | None = None  # SIGTERM the first bdl-run then (resume.md)
    own_files: bool = False  # the page's files written, its pip and python lines run (own-model)


TUTORIALS = {
    "uci-chains": Tutorial(figure="runs/yacht-hmc/plots/trace_*.png"),
    "shift": Tutorial(figure="runs/mnist-sghmc/summary.png"),
    "slurm-sweep": Tutorial(
        figure="multirun/*/0_*/summary.png", skip=("hydra/launcher=slurm", "--cfg job", "runs/")
    ),
    "chen-mnist": Tutorial(figure="runs/chen/sghmc/summary.png", skip=("-m ", "--paper")),
    "resume": Tutorial(figure="runs/chen/summary.png", interrupt_after_s=60),
    "hmc-reference": Tutorial(figure="runs/izmailov/hmc/summary.png"),
    "own-model": Tutorial(figure="runs/sine-sghmc/summary.png", own_files=True),
}
SHELL = ("pip install ", "python ")  # the own-files pages' other command lines
SITE = "site-packages"  # where those pages' packages are installed, under the scratch directory


def page_commands(text: str, programs: tuple[str, ...] = PROGRAMS) -> list[str]:
    """The page's command lines: indented code lines that start with one of ``programs``."""
    return [
        line.strip()
        for line in text.splitlines()
        if line.startswith("    ") and line.strip().startswith(programs)
    ]


def write_page_files(text: str, work: Path) -> None:
    """The files a page shows, under ``work``: each ``title="PATH"`` block, and each file of its
    tree marked ``(empty)``."""
    files = dict.fromkeys(re.findall(r"^\s+(\S+)\s+\(empty\)$", text, re.M), "")
    files.update(re.findall(r'^```\w+ title="([^"]+)"\n(.*?)^```$', text, re.M | re.S))
    for path, content in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(content, encoding="utf-8")


def command_line(command: str, work: Path, env: dict[str, str]) -> list[str]:
    """What runs for a page's command line. ``pip install`` installs into ``work``'s `SITE`
    instead of the environment bdl runs from (not editable: a target folder is no site
    directory, whose ``.pth`` files Python reads), which joins ``env``'s ``PYTHONPATH``."""
    program, *args = shlex.split(command, comments=True)
    bin_dir = Path(sys.executable).parent
    if program == "python":
        return [sys.executable, *args]
    if program == "pip":
        site = str(work / SITE)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH")]))
        # offline, as the tutorial's package needs nothing bdl's environment lacks
        offline = ["--no-deps", "--no-build-isolation", "--no-index", "--target", site]
        folders = [a for a in args[1:] if a != "-e"]  # args[0] is "install"
        return [sys.executable, "-m", "pip", "install", *offline, *folders]
    return [str(bin_dir / program), *args]


def run_summary(log: str) -> str:
    """The table that ends a run's log and the verdict and warnings after it, without
    timestamps, the run's directory or its progress lines (``drawing the figures...``)."""
    text = LOG_PREFIX.sub("", log)
    start = max(text.rfind("completed (metrics.json):"), text.rfind("unsound (metrics.json):"))
    if start < 0:
        raise RuntimeError(f"no end-of-run table in the log:\n{text[-2000:]}")
    lines = [
        line
        for line in text[start:].splitlines()
        if not line.startswith("run directory:") and not line.endswith("...")
    ]
    return "\n".join(lines).rstrip() + "\n"


def run_tutorial(name: str, spec: Tutorial, work: Path) -> None:
    page = TUTORIALS_DIR / f"{name}.md"
    text = page.read_text(encoding="utf-8")
    outputs: defaultdict[str, list[str]] = defaultdict(list)
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ)
    if spec.own_files:
        write_page_files(text, work)
    for command in page_commands(text, PROGRAMS + SHELL if spec.own_files else PROGRAMS):
        program, *args = shlex.split(command, comments=True)
        if any(pattern in command for pattern in spec.skip):
            print(f"skipped (cannot run here): {command}", flush=True)
            outputs[program].append("")
            continue
        started = time.monotonic()
        process = subprocess.Popen(
            command_line(command, work, env),
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        first_run = program == "bdl-run" and not outputs[program]
        interrupt = spec.interrupt_after_s if first_run else None
        try:
            out, _ = process.communicate(timeout=interrupt)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)
            out, _ = process.communicate()
        seconds = time.monotonic() - started
        load = os.getloadavg()[0]  # the pages say the load their times were measured at
        print(
            f"{seconds:7.1f} s  exit {process.returncode}  load {load:.1f}  {command}", flush=True
        )
        if process.returncode not in (0, 143):
            raise RuntimeError(f"{command} failed:\n{out[-3000:]}")
        if program == "python" and out.strip():
            print(f"  it printed: {out.strip().splitlines()[-1]}", flush=True)  # for the prose
        if program == "bdl-run" and process.returncode == 143:
            # the interrupted run's last words: where its checkpoint is and how to resume
            out = "\n".join(LOG_PREFIX.sub("", out).splitlines()[-3:]) + "\n"
        elif program == "bdl-run" and "-m" not in args:
            # a sweep's jobs write their tables into their own logs, not to its terminal
            out = run_summary(out)
        # paths as a reader's own run would print them: relative, the program by its name
        outputs[program].append(out.replace(str(work) + "/", "").replace(str(bin_dir) + "/", ""))

    def fill(match: re.Match) -> str:
        program, index = match[1], int(match[2])
        shown = outputs[program][index - 1]
        if not shown:
            raise RuntimeError(f"{name}: the output of {program} {index} was not made here")
        return f"<!-- output: {program} {index} -->\n```text\n{shown}```\n"

    page.write_text(MARKER.sub(fill, text), encoding="utf-8")
    (figure, *_) = sorted(work.glob(spec.figure)) or [None]
    if figure is None:
        raise RuntimeError(f"{name}: no figure matches {spec.figure}")
    FIGURES.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(figure, FIGURES / f"{name}.png")
    print(f"{name}: wrote {page.relative_to(ROOT)} and {FIGURES.name}/{name}.png", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", help=f"of {', '.join(TUTORIALS)} (default: all)")
    args = parser.parse_args()
    if unknown := sorted(set(args.pages) - set(TUTORIALS)):
        parser.error(f"no tutorial {', '.join(unknown)}: the choices are {', '.join(TUTORIALS)}")
    if "BDL_DATA_DIR" not in os.environ:
        parser.error("set BDL_DATA_DIR to the real data (the tutorials' outputs are real runs)")
    for name in args.pages or TUTORIALS:
        scratch = Path(tempfile.mkdtemp(prefix=f"tutorial-{name}-"))
        run_tutorial(name, TUTORIALS[name], scratch)
        shutil.rmtree(scratch)  # kept when a run fails, for its logs


if __name__ == "__main__":
    main()
