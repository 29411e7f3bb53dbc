"""scripts/bench_peers.py, run as a user runs it: bdl against NumPyro's NUTS and BlackJAX's SGHMC.

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


def run_script(args: list[str], env: dict[str, str], prelude: str = "") -> str:
    """stdout of the script run with ``args`` in a fresh interpreter (``prelude`` run first)."""
    code = f"{prelude}import runpy, sys; sys.argv = {[str(SCRIPT), *args]!r}; "
    code += f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
        cwd=SCRIPT.parent,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_without_the_peers_one_line_names_the_extra():
    # a module set to None in sys.modules cannot be imported: the extra is absent
    stdout = run_script(["--quick"], {}, prelude="import sys; sys.modules['numpyro'] = None; ")
    assert stdout.splitlines() == [
        "bench_peers.py needs JAX, NumPyro and BlackJAX: pip install -e .[peers]"
    ]


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
    contenders = {}
    for line in stdout.splitlines():
        match = re.fullmatch(
            rf"(bdl [\w ]+?)\s+{SPREAD}\s*{SPREAD}\s*{SPREAD}\s*{SPREAD}\s+(\d+\.\d+)", line
        )
        if match:
            contenders[match.group(1)] = [float(v) for v in match.groups()[1:]]
    assert set(contenders) == {
        "bdl 1 chain",
        "bdl 8 chains",
        "bdl 8 compiled",
        "bdl 8 adapted",
        "bdl 16 compiled",
    }
    for name, values in contenders.items():
        *ratios, z = values
        assert all(math.isfinite(r) and r > 0 for r in ratios), name
        for median, least, most in zip(ratios[::3], ratios[1::3], ratios[2::3]):
            assert median == least == most, f"{name}: one round, so no spread"
        if name != "bdl 1 chain":  # one chain's 30 draws give no usable standard error
            assert z < z_limit, f"{name}: max |z| {z} over {points} test points"

    epochs = re.findall(
        r"(bdl|bdl compiled|BlackJAX) SGHMC epoch:\s+[\d.]+ ms\s+/ bare (\d+\.\d+)", stdout
    )
    assert [name for name, _ in epochs] == ["bdl", "bdl compiled", "BlackJAX"]
    for _, ratio in epochs:
        # every loop does the same forward and backward passes: within 5x of the bare loop
        assert 0.2 < float(ratio) < 5
    accuracy = re.search(r"test accuracy .*: bdl (\d\.\d+), BlackJAX (\d\.\d+)", stdout)
    # two epochs of SGHMC at Chen et al.'s setting reach 92% on MNIST (bdl) and 81% (BlackJAX's
    # Euler step moves the position before the momentum, a step behind Chen et al.'s): both
    # learn, where a sampler that does not move stays near 10%
    assert float(accuracy.group(1)) > 0.85 and float(accuracy.group(2)) > 0.6
