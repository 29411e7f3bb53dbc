"""scripts/mutation.py's bookkeeping, with mutmut's generation and the mutants' test runs replaced
by a fixed population and chosen verdicts: a draw records its first pass, a rerun of the
survivors after new tests changes the current score and never the first pass, and a file
written before first passes were kept reads with its first pass unknown. Every results file in
docs/mutation agrees with its own rows."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("mutmut")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import mutation  # noqa: E402

POPULATION = [f"bdl.nowhere.x_f{i}__mutmut_1" for i in range(12)]


@pytest.fixture
def script(tmp_path, monkeypatch):
    """``script(args, outcomes)`` runs mutation.py's ``main`` with ``args``, each mutant's
    verdict read from ``outcomes`` (``killed`` where absent), the results written under
    ``tmp_path`` at the commit ``script.commit``; returns the results file it wrote."""
    monkeypatch.chdir(tmp_path)  # main moves to the repository: undone after the test
    monkeypatch.setattr(mutation, "OUT", tmp_path)
    monkeypatch.setattr(mutation, "EQUIVALENT", tmp_path / "equivalent.json")
    monkeypatch.setattr(mutation, "generate", lambda: POPULATION)
    monkeypatch.setattr(mutation, "get_diff_for_mutant", lambda mutant, path: f"diff of {mutant}")

    def run(args, outcomes):
        monkeypatch.setattr(
            mutation, "run_mutant", lambda mutant, tests: (outcomes.get(mutant, "killed"), 0.0)
        )
        monkeypatch.setattr(mutation, "head", lambda: run.commit)
        monkeypatch.setattr(sys, "argv", ["mutation.py", *args])
        mutation.main()
        return json.loads((tmp_path / f"results-{args[1]}.json").read_text())

    run.commit = "aaaaaaa"  # HEAD, as the test moves it
    return run


def test_a_rerun_of_the_survivors_keeps_the_first_pass(script):
    drawn = script(["--seed", "3", "--sample", "5"], {})
    mutants = [row["mutant"] for row in drawn["mutants"]]
    survivors = dict.fromkeys(mutants[:2], "survived") | {mutants[2]: "no tests"}
    first = script(["--seed", "3", "--sample", "5"], survivors)
    assert [row["first_pass"] for row in first["mutants"]] == [
        survivors.get(m, "killed") for m in mutants
    ]
    assert first["first_pass"]["detected"] == first["detected"] == 2
    assert first["first_pass"]["score"] == first["score"] == 2 / 5
    assert first["first_pass"]["commit"] == "aaaaaaa"
    assert first["draw"] | {"timestamp": None} == {
        "commit": "aaaaaaa",
        "seed": 3,
        "sample": 5,
        "population": 12,
        "command": "python scripts/mutation.py --seed 3 --sample 5",
        "timestamp": None,
    }

    # tests written for two survivors kill them; one is argued equivalent
    mutation.EQUIVALENT.write_text(json.dumps({mutants[2]: "changes nothing observable"}))
    script.commit = "bbbbbbb"
    rerun = script(["--seed", "3", "--rerun-survivors"], {mutants[2]: "no tests"})
    assert [row["first_pass"] for row in rerun["mutants"]] == [
        row["first_pass"] for row in first["mutants"]
    ]
    assert [row["verdict"] for row in rerun["mutants"]] == ["killed"] * 2 + ["equivalent"] + [
        "killed"
    ] * 2
    assert (rerun["detected"], rerun["non_equivalent"], rerun["score"]) == (4, 4, 1.0)
    # the equivalent mutant leaves the first pass's denominator too: 2 of 4
    assert rerun["first_pass"]["score"] == 2 / 4
    assert rerun["first_pass"]["wilson_95"] == pytest.approx(
        # Wilson's interval for 2 of 4 at z = 1.96, by hand: (p + z²/2n ± z√(p(1-p)/n + z²/4n²))
        # / (1 + z²/n)
        [
            (0.5 + 1.96**2 / 8 - s * 1.96 * math.sqrt(0.25 / 4 + 1.96**2 / 64)) / (1 + 1.96**2 / 4)
            for s in (1, -1)
        ],
        abs=1e-4,
    )
    assert rerun["first_pass"]["commit"] == "aaaaaaa" and rerun["commit"] == "bbbbbbb"
    assert rerun["draw"] == first["draw"]
    assert [r["commit"] for r in rerun["reruns"]] == ["bbbbbbb"]
    assert rerun["command"] == "python scripts/mutation.py --seed 3 --rerun-survivors"


def test_a_file_without_first_passes_reads_with_its_first_pass_unknown(script, tmp_path):
    """A file as written before first passes were kept (results-0.json's first form)."""
    rows = [
        {"mutant": m, "module": "bdl.nowhere", "tests": [], "measured": v, "verdict": v}
        for m, v in zip(POPULATION[:3], ["killed", "survived", "killed"], strict=True)
    ]
    old = {"commit": "ccccccc", "seed": 0, "sample": 3, "command": "...", "mutants": rows}
    (tmp_path / "results-0.json").write_text(json.dumps(old))
    rerun = script(["--seed", "0", "--rerun-survivors"], {})
    assert rerun["score"] == 1.0
    assert rerun["first_pass"]["score"] is None and "unknown" in rerun["first_pass"]
    assert [row["first_pass"] for row in rerun["mutants"]] == [None] * 3
    assert rerun["draw"]["commit"] is None


@pytest.mark.parametrize("path", sorted((ROOT / "docs" / "mutation").glob("results-*.json")))
def test_each_results_file_agrees_with_its_rows(path):
    results = json.loads(path.read_text())
    rows = results["mutants"]
    assert results["draw"]["seed"] == results["seed"] == int(path.stem.split("-")[1])
    assert results["run"] == len(rows) <= results["sample"]
    assert {k: v for k, v in mutation.score([r["verdict"] for r in rows]).items()} == {
        k: results[k] for k in ("verdicts", "non_equivalent", "detected", "score", "wilson_95")
    }
    assert results["first_pass"] == mutation.first_pass(rows, results["draw"])
