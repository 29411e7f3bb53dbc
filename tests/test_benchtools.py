"""scripts/benchtools.py's report of how a benchmark ran: the CPU seconds it counts (this
process's and its children's, live or ended) and the warning that the machine was under load."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "benchtools.py"
spec = importlib.util.spec_from_file_location("benchtools", SCRIPT)
benchtools = sys.modules["benchtools"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(benchtools)

#: CPU seconds each child spends spinning; /proc counts a child's in ticks of 10 ms, truncated, and
#: splits it between user and system time, each truncated (a fresh clone's run read 0.58 of 0.60)
SPIN = 0.3
TICK = 0.05
SPINNER = (
    "import sys, time\n"
    f"while time.process_time() < {SPIN}: pass\n"
    "print('spun', flush=True)\n"
    "sys.stdin.read()\n"  # alive until the parent closes its stdin
)


def spinner() -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", SPINNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline() == "spun\n"
    return child


def test_cpu_seconds_count_this_process_and_its_children_live_or_ended():
    start = benchtools.cpu_seconds()
    spun = time.process_time() + SPIN
    while time.process_time() < spun:
        pass
    child = spinner()
    live = benchtools.cpu_seconds() - start
    child.stdin.close()
    child.wait()
    ended = benchtools.cpu_seconds() - start
    # this process's SPIN, the live child's SPIN and more (its interpreter's start)
    assert live >= 2 * SPIN - TICK
    # once ended and waited for, the child is counted once, not lost nor twice
    assert 2 * SPIN - TICK <= ended < live + 2 * SPIN - TICK


def test_a_sleeping_block_has_wall_time_but_no_cpu_time(capsys, monkeypatch):
    monkeypatch.setattr(benchtools.os, "getloadavg", lambda: (0.2, 0.3, 0.4))
    with benchtools.machine_load(cores=1):
        time.sleep(0.2)
    (line,) = capsys.readouterr().out.splitlines()
    wall, cpu = map(float, re.search(r"([\d.]+) s wall, ([\d.]+) s CPU", line).groups())
    assert line.startswith("1 thread on ")
    assert "load average (1 minute) 0.20 before, 0.20 after" in line
    assert wall >= 0.2 and cpu < 0.05


@pytest.mark.parametrize(
    ("cores", "before", "after", "warned"),
    [
        (1, 0.3, 1.5, False),  # the benchmark's own thread and half a core of noise
        (1, 0.3, 1.6, True),  # more than that after: other work ran beside it
        (1, 1.6, 1.0, True),  # or before
        (2, 2.5, 2.5, False),
        (2, 0.0, 2.51, True),
    ],
)
def test_a_load_beyond_the_benchmarks_cores_and_a_half_warns(cores, before, after, warned):
    lines = benchtools.load_report(cores, before, after, wall=10.0, cpu=9.5)
    assert lines[0].endswith(
        f"load average (1 minute) {before:.2f} before, {after:.2f} after; 10.0 s wall, 9.5 s CPU "
        "(child processes included)"
    )
    assert lines[1:] == (
        ["WARNING: machine under load: ratios are not evidence; rerun on a quiet machine"]
        if warned
        else []
    )
