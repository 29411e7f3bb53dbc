"""scripts/bench_peers.py, run as a user runs it: bdl against NumPyro's NUTS (one chain and
vectorised), BlackJAX's ChEES-HMC and BlackJAX's SGHMC.

The run with the peers needs the ``peers`` extra (absent in CI, which skips it) and the real
data; the line that names the extra runs everywhere."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import norm

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_peers.py"
SPREAD = r"(\d+\.\d+) \((\d+\.\d+)-(\d+\.\d+)\)"
#: a yacht contender's row in round 0: its name, twelve figures and max|z| (or "ref")
ROW = r"([\w ]+?)\s+0\s+" + r"\s+".join([r"(-?\d+\.?\d*)"] * 12) + r"\s+(ref|\d+\.\d+)"
#: a row of ratios: bdl's setting / a peer, four spreads
RATIOS = r"(bdl [\w ]+?) / ([\w ]+?)\s+" + r"\s+".join([SPREAD] * 4)


def run_process(
    args: list[str], env: dict[str, str], prelude: str = ""
) -> subprocess.CompletedProcess:
    """The script run with ``args`` in a fresh interpreter (``prelude`` run first)."""
    code = f"{prelude}import runpy, sys; sys.argv = {[str(SCRIPT), *args]!r}; "
    code += f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
        cwd=SCRIPT.parent,
        timeout=600,
    )


def run_script(args: list[str], env: dict[str, str], prelude: str = "") -> str:
    """stdout of the script run with ``args``, which must succeed."""
    result = run_process(args, env, prelude)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_an_unknown_contender_is_refused_by_name():
    pytest.importorskip("numpyro")
    pytest.importorskip("blackjax")
    result = run_process(["--contenders", "bdl 16 compiled,ChEES"], {})
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "bench_peers.py: error: unknown contenders: ChEES"


def test_a_negative_burn_in_is_refused_in_one_line():
    pytest.importorskip("numpyro")
    pytest.importorskip("blackjax")
    result = run_process(["--part", "yacht", "--burn-in", "-3"], {})
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "bench_peers.py: error: --burn-in must be 0 or more iterations, not -3"
    )


def test_without_the_peers_one_line_names_the_extra():
    # a module set to None in sys.modules cannot be imported: the extra is absent
    stdout = run_script(["--quick"], {}, prelude="import sys; sys.modules['numpyro'] = None; ")
    assert stdout.splitlines() == [
        "bench_peers.py needs JAX, NumPyro and BlackJAX: pip install -e .[peers]"
    ]


@pytest.mark.slow
def test_burn_in_sets_bdls_and_keeps_its_draws(data_dir):
    pytest.importorskip("numpyro")
    pytest.importorskip("blackjax")
    args = ["--quick", "--rounds", "1", "--part", "yacht", "--burn-in", "25"]
    stdout = run_script([*args, "--contenders", "bdl 16 compiled"], {"BDL_DATA_DIR": str(data_dir)})

    header = stdout.splitlines()[0]
    # 25 burn-in iterations, then --quick's 30 draws a chain, as many as the peers keep
    assert "epochs=55 burn_in=25 " in header and "30 draws a chain" in header
    rows = [re.fullmatch(ROW, line) for line in stdout.splitlines()]
    (row,) = [match for match in rows if match]
    assert row.group(1) == "bdl 16 compiled"


@pytest.mark.slow
def test_quick_run_prints_sane_ratios_and_agreeing_posteriors(data_dir):
    pytest.importorskip("numpyro")
    pytest.importorskip("blackjax")
    stdout = run_script(["--quick", "--rounds", "1"], {"BDL_DATA_DIR": str(data_dir)})

    points = int(re.search(r"(\d+) test points", stdout).group(1))
    assert points == 31  # yacht's split 0: 308 rows, a tenth held out (Hernandez-Lobato & Adams)
    # no difference of means beyond what Monte Carlo error gives at 1 in 1000 over the points
    # (Bonferroni); the chains of one run are short, so their ESS is itself rough
    z_limit = norm.isf(0.001 / 2 / points)
    bdl = {
        "bdl 1 chain",
        "bdl 8 chains",
        "bdl 8 compiled",
        "bdl 8 adapted",
        "bdl 16 compiled",
        "bdl 16 adapted",
        "bdl 16 mass",
        "bdl 16 length",
        "bdl 16 fisher",
        "bdl 16 fisher adapted",
    }
    adaptive = {name for name in bdl if name.startswith("bdl 16 ") and name != "bdl 16 compiled"}
    peers = {"NumPyro NUTS", "NumPyro NUTS x16", "ChEES x16", "ChEES diag x16"}
    rows = {}
    for line in stdout.splitlines():
        match = re.fullmatch(ROW, line)
        if match:
            rows[match.group(1)] = [float(v) for v in match.groups()[1:-1]], match.group(14)
    assert set(rows) == bdl | peers
    assert rows["bdl 16 compiled"][1] == "ref"
    for name, ((_, _, wall, cpu, wall_after, cpu_after, *_), z) in rows.items():
        # the sampling after warm-up is part of the whole run, on either clock
        assert 0 < wall_after < wall and 0 < cpu_after < cpu, name
        # the reference itself; one chain's 30 draws give no usable standard error
        if name not in ("bdl 16 compiled", "bdl 1 chain"):
            assert float(z) < z_limit, f"{name}: max |z| {z} over {points} test points"

    # the whole run, then after warm-up: each bdl setting against each peer
    whole, after = stdout.split("after warm-up: median (min-max) over rounds")
    for table in (whole, after):
        ratios = {}
        for line in table.splitlines():
            match = re.fullmatch(RATIOS, line)
            if match:
                ratios[match.group(1), match.group(2)] = [float(v) for v in match.groups()[2:]]
        # and each of bdl's adaptive settings against its fixed-length kernel
        expected = {(ours, theirs) for ours in bdl for theirs in peers}
        assert set(ratios) == expected | {(ours, "fixed") for ours in adaptive}
        for pair, values in ratios.items():
            assert all(math.isfinite(r) and r > 0 for r in values), pair
            for median, least, most in zip(values[::3], values[1::3], values[2::3], strict=True):
                assert median == least == most, f"{pair}: one round, so no spread"
    assert re.search(
        r"^1 thread on \d+ cores; load average \(1 minute\) [\d.]+ before, [\d.]+ after; "
        r"[\d.]+ s wall, [\d.]+ s CPU",
        stdout,
        re.MULTILINE,
    )

    # each library's start paid before the timed runs, and said
    assert re.search(
        r"^before the timed runs: JAX's start [\d.]+ s \([\d.]+ CPU-s\), Inductor's start and "
        r"vector probe [\d.]+ s \([\d.]+ CPU-s\), arviz's import [\d.]+ s \([\d.]+ CPU-s\)$",
        stdout,
        re.MULTILINE,
    )
    # a gradient of 16 stacked chains: both libraries' cost in µs, and their ratio on each clock
    costs = dict(re.findall(r"^(bdl|BlackJAX) +([\d.]+) µs CPU +[\d.]+ µs wall", stdout, re.M))
    assert set(costs) == {"bdl", "BlackJAX"}
    # yacht's network, 16 chains: tens of µs a chain's gradient on any CPU of the last decade
    assert all(1 < float(cost) < 1000 for cost in costs.values()), costs
    for clock in ("CPU", "WALL"):
        ratio = re.search(rf"bdl / BlackJAX per gradient, {clock}: {SPREAD}", stdout)
        assert 0.1 < float(ratio.group(1)) < 10

    epochs = re.findall(
        r"(bdl|bdl compiled steps|bdl compiled|BlackJAX) SGHMC epoch:\s+[\d.]+ ms\s+/ bare "
        r"(\d+\.\d+)",
        stdout,
    )
    assert [name for name, _ in epochs] == ["bdl", "bdl compiled steps", "bdl compiled", "BlackJAX"]
    for _, ratio in epochs:
        # every loop does the same forward and backward passes: within 5x of the bare loop
        assert 0.2 < float(ratio) < 5
    accuracy = re.search(r"test accuracy .*: bdl (\d\.\d+), BlackJAX (\d\.\d+)", stdout)
    # two epochs of SGHMC at Chen et al.'s setting reach 92% on MNIST (bdl) and 81% (BlackJAX's
    # Euler step moves the position before the momentum, a step behind Chen et al.'s): both
    # learn, where a sampler that does not move stays near 10%
    assert float(accuracy.group(1)) > 0.85 and float(accuracy.group(2)) > 0.6


def test_the_guard_refuses_options_that_would_change_what_it_measures():
    pytest.importorskip("numpyro")
    pytest.importorskip("blackjax")
    result = run_process(["--guard", "--part", "yacht"], {})
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "bench_peers.py: error: --guard runs its own parts and contenders on one thread: drop "
        "the rest"
    )


#: a guard row: the ratio's name, its median (min-max), its line and the verdict
GUARD_ROW = r"(.+?)\s+" + SPREAD + r"\s+goal (<=|>=) (\d+\.?\d*)\s+(held|FAILED)"


@pytest.mark.slow
def test_the_guards_verdicts_follow_its_figures_and_its_exit_status_follows_them(data_dir):
    pytest.importorskip("numpyro")
    pytest.importorskip("blackjax")
    result = run_process(["--guard", "--quick", "--rounds", "1"], {"BDL_DATA_DIR": str(data_dir)})
    rows = [re.fullmatch(GUARD_ROW, line) for line in result.stdout.splitlines()]
    rows = [row for row in rows if row]
    assert [(row.group(1), row.group(5), row.group(6)) for row in rows] == [
        ("bdl / BlackJAX, CPU seconds per gradient", "<=", "1.3"),
        ("bdl compile=true / BlackJAX, MNIST SGHMC epoch", "<=", "1.1"),
        ("bdl 16 length / ChEES x16, ESS per CPU-second (median point)", ">=", "1.0"),
    ]
    failed = False
    for row in rows:
        median, low, high, line = (float(row.group(k)) for k in (2, 3, 4, 6))
        assert 0 < low <= median <= high
        held = median <= line if row.group(5) == "<=" else median >= line
        assert row.group(7) == ("held" if held else "FAILED"), row.group(0)
        failed |= not held
    if "guard: NOT JUDGED" in result.stdout:
        assert result.returncode == 2
    else:
        assert result.returncode == (1 if failed else 0), result.stderr
