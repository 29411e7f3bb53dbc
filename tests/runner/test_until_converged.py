"""Run until converged (``until_converged=true``, `bdl.runner.sampling.Budget`): the run samples
on past ``epochs`` while the verdict fails and the budget lasts, checking when its draws after
burn-in have grown by half, ends saying what ended it, and resumes to the same end after a kill.
The verdict itself is tested in tests/test_diagnostics.py; here it is the run's own
(`bdl.runner.results.current_verdict`) or, where a test needs it to pass at a given check, one
that fails a given number of times first."""

from __future__ import annotations

import json
import logging

import pytest

from bdl.composition.config import ConfigError, validate
from bdl.runner import results
from bdl.runner import run as runner
from bdl.runner.sampling import Budget
from bdl.runner.steppers import ChainStepper
from runner.test_resume import config, killed_at_call, outputs, write_tiny_uci


@pytest.fixture(scope="module")
def uci_root(tmp_path_factory):
    return write_tiny_uci(tmp_path_factory.mktemp("data"))


# epochs=10 burn_in=2: checks at epochs 10, 2 + 1.5 x 8 = 14, 2 + 1.5 x 12 = 20, 29, ...
UNTIL = ["epochs=10", "until_converged=true", "checkpoint_every=1"]


def failing(times: int, seen: list[int]):
    """A verdict that fails ``times`` checks and then passes, noting each check's epoch."""

    def verdict(experiment, loops):
        seen.append(loops[0].epoch)
        return ["too few effective draws (stand-in): epochs=100"] if len(seen) <= times else []

    return verdict


def test_checks_grow_by_half_of_the_draws_within_the_budget():
    budget = Budget(max_epochs=25)
    assert [budget.next_check(e, 2) for e in (10, 14, 20)] == [14, 20, 25]
    assert budget.next_check(3, 2) == 4  # at least one epoch more
    assert budget.spent(24, 1e9) is None and budget.spent(25, 0.0) == "max_epochs"
    assert Budget(max_minutes=1.5).spent(10**6, 89.0) is None
    assert Budget(max_minutes=1.5).spent(0, 90.0) == "max_minutes"


def test_stops_when_the_verdict_passes(uci_root, tmp_path, monkeypatch, caplog):
    seen: list[int] = []
    monkeypatch.setattr(results, "current_verdict", failing(2, seen))
    with caplog.at_level(logging.INFO, logger="bdl"):
        metrics = runner.run(config(uci_root, *UNTIL, "max_epochs=100"), tmp_path)
    assert seen == [10, 14, 20]
    assert metrics["epochs"] == 20 and metrics["ended_by"] == "converged"
    assert metrics["num_samples"] == 18  # every epoch after the 2 of burn-in
    assert "until_converged: ended at epoch 20: the verdict passed" in caplog.messages
    assert (
        "until_converged: not converged at epoch 10 (1 cause: too few effective draws); "
        "sampling on to epoch 14"
    ) in caplog.messages


def test_stops_at_its_budget_and_says_so(uci_root, tmp_path, caplog):
    """The run's own verdict on the tiny set's few draws fails at every check."""
    with caplog.at_level(logging.INFO, logger="bdl"):
        metrics = runner.run(config(uci_root, *UNTIL, "max_epochs=16"), tmp_path)
    assert metrics["epochs"] == 16 and metrics["ended_by"] == "max_epochs"
    assert metrics["converged"] is False
    assert metrics["reasons"] == ["14 draws a chain, under the 100 needed to judge: epochs=110"]
    said = "until_converged: ended at epoch 16: its budget is spent (max_epochs=16)"
    assert said in caplog.messages


def test_a_time_budget_ends_the_run_at_the_epoch_it_runs_out(uci_root, tmp_path, monkeypatch):
    monkeypatch.setattr(Budget, "spent", lambda self, epoch, elapsed: "max_minutes" * (epoch >= 7))
    metrics = runner.run(config(uci_root, *UNTIL, "max_minutes=5"), tmp_path)
    assert metrics["epochs"] == 7 and metrics["ended_by"] == "max_minutes"


def test_a_run_until_converged_killed_resumes_bitwise(uci_root, tmp_path, monkeypatch):
    """Killed in epoch 16, after the check at 14 extended the run to 20: the resumed run
    reaches 20 and 25 as the whole one did."""
    monkeypatch.setattr(results, "current_verdict", failing(10, []))
    cfg = config(uci_root, *UNTIL, "max_epochs=25")
    runner.run(cfg, tmp_path / "whole")
    killed_at = 4 * 15 + 2  # 4 steps an epoch: mid-epoch 16
    killed_at_call(
        monkeypatch,
        ChainStepper,
        "closure",
        killed_at,
        lambda: runner.run(cfg, tmp_path / "killed"),
    )
    runner.run(config(uci_root, *UNTIL, "max_epochs=25", "resume=true"), tmp_path / "killed")
    whole = outputs(tmp_path / "whole")
    assert outputs(tmp_path / "killed") == whole
    assert whole[0]["epochs"] == 25 and whole[0]["ended_by"] == "max_epochs"
    assert json.loads((tmp_path / "killed" / "metrics.json").read_text())["num_samples"] == 23


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["until_converged=true"], "until_converged=true with a budget: max_epochs=40"),
        (["until_converged=true", "max_epochs=5"], "max_epochs=5 is out of range"),
        (["until_converged=true", "max_epochs=50", "sampler=sgd"], "sampler with a convergence"),
        (
            ["until_converged=true", "max_epochs=50", "schedule=cyclical"],
            "needs schedule=constant",
        ),
    ],
)
def test_a_run_until_converged_without_what_it_needs_is_refused(uci_root, overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(config(uci_root, "epochs=10", *overrides))
