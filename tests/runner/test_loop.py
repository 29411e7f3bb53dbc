"""A chain's loop (`bdl.runner.loop.Loop`) during burn-in: a step that heats the chain is backed
off, the chain returned to where the epoch began, and the message names the epoch from which the
step is frozen; the last halved step is the one kept after burn-in."""

from __future__ import annotations

import csv
import logging
import re

import pytest

from bdl.runner.experiment import build
from bdl.runner.loop import Loop
from bdl.runner.run import run
from bdl.runner.stability import ONE_CHAIN
from runner.test_resume import config, write_tiny_uci


@pytest.fixture(scope="module")
def uci_root(tmp_path_factory):
    return write_tiny_uci(tmp_path_factory.mktemp("data"))


def test_a_step_that_heats_the_chain_is_halved_until_burn_in_ends(uci_root, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="bdl")
    # SGLD at over 30 000 times the UCI step (3e-4): U climbs within its first epochs
    cfg = config(uci_root, "sampler=sgld", "sampler.lr=10", "epochs=8", "burn_in=5", "thin=1")
    metrics = run(cfg, tmp_path / "run")
    number = r"(-?[\d.]+(?:e[+-]\d+)?)"
    line = re.compile(
        rf"epoch (\d+): U per step {number}, above its lowest \({number}\) by more than "
        rf"{number}: back to that point, step halved to {number} x sampler.lr \(burn-in adapts "
        r"it; it is frozen from epoch (\d+) on\)"
    )
    halvings = [match.groups() for m in caplog.messages if (match := line.fullmatch(m))]
    assert halvings, caplog.text
    epochs, potentials, lowest, rise, scales, frozen = zip(*halvings)
    # each backed off epoch rose above its lowest by more than the limit it names
    assert all(
        float(u) > float(low) + float(limit)
        for u, low, limit in zip(potentials, lowest, rise, strict=True)
    )
    assert set(frozen) == {"6"}  # burn_in=5: epochs 1-5 adapt, epoch 6 is the first kept
    assert all(1 <= int(e) <= 5 for e in epochs)
    assert [float(s) for s in scales] == [2.0**-k for k in range(1, len(scales) + 1)]
    with (tmp_path / "run" / "curve.csv").open() as file:
        kept = [float(row["lr_scale"]) for row in csv.DictReader(file)][5:]
    # frozen after burn-in at half the last step that held (bdl.runner.stability)
    assert set(kept) == {metrics["step_scale"]} == {float(scales[-1]) / 2}
    assert (
        f"burn-in over: the step is frozen at {float(scales[-1]) / 2:.3g} x sampler.lr, half the "
        "largest that held (a step that burn-in had to back off from sits near its limit)"
    ) in caplog.messages


def test_the_first_epoch_sets_the_level_and_rises_by_nothing(uci_root, tmp_path):
    """A chain's first epoch is its own yardstick: with no burn-in, a one-epoch run's largest
    rise above its level (``rise_max``, in `rise_limit`s) is exactly 0."""
    cfg = config(uci_root, "sampler=sgld", "epochs=1", "burn_in=0", "thin=1")
    metrics = run(cfg, tmp_path / "run")
    assert metrics["num_samples"] == 1 and metrics["rise_max"] == 0.0


def test_a_slow_climb_is_the_chain_s_own_and_a_fast_one_is_backed_off(uci_root):
    """The level forgets all but the last `stability.WINDOW` epochs (`bdl.runner.stability`,
    "The window"). A chain that climbs from where it starts to where it is stationary, at the
    rate measured on Boston (the UCI protocol, full batches: about 4.5 in ``U`` an epoch, 0.009
    rise limits), climbs 2.7 limits in 300 epochs of burn-in and is never backed off; the same
    chain rising 1.5 limits in 2 epochs is. (With the level over a tenth of a 2000-epoch
    burn-in, the slow climb was backed off at its 113th epoch.)"""
    experiment = build(config(uci_root, "sampler=sghmc", "epochs=2001", "burn_in=2000"))
    limit = experiment.run.rise_limit
    loop = Loop.start(experiment)
    slow = [100 + 0.009 * limit * epoch for epoch in range(300)]
    fast = [slow[-1] + 0.4 * limit, slow[-1] + 1.5 * limit]
    stood = []
    for potential in slow + fast:
        stood.append(loop.check_stability(experiment, potential, ONE_CHAIN))
        loop.epoch += 1
    assert all(stood[:300]) and loop.step_scale == 0.5
    assert stood[300:] == [True, False]  # 1.57 limits above the lowest of the last 10
