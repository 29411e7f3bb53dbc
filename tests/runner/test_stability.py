"""The potential's yardstick (bdl.runner.stability) and what the runner does with it: a burn-in that
backs off a step too large for the posterior, a divergence after burn-in, and, for every sampler
option at its defaults, a run that ends sound or refuses before training."""

from __future__ import annotations

import csv
import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import SAMPLER_OPTIONS, write_fake_uci
from hydra import compose, initialize_config_module

import bdl.runner.loop
from bdl.runner import results, stability
from bdl.runner.run import run
from bdl.runner.stability import DivergedError
from bdl.runner.steppers import ChainStepper
from bdl.storage.store import load_samples
from runner.test_resume import killed_at_call, outputs


@pytest.mark.parametrize("dimensions", [1, 2, 10, 401, 79510])
def test_the_rise_limit_is_the_gamma_tail_it_claims(dimensions):
    """P(G > rise_limit(d)) = TAIL for G ~ Gamma(d/2, 1), by torch's regularised incomplete
    gamma function (not scipy's, which computes the limit)."""
    limit = torch.tensor(stability.rise_limit(dimensions), dtype=torch.float64)
    k = torch.tensor(dimensions / 2, dtype=torch.float64)
    assert torch.special.gammaincc(k, limit).item() == pytest.approx(stability.TAIL, rel=1e-6)


@pytest.mark.parametrize("temperature", [1e-3, 0.3, 1.0, 4.0])
def test_below_t_1_the_rise_limit_is_t_1s_on_u(temperature):
    """U_T = U / T: below T = 1 the limit on U_T is T = 1's limit on U, divided by T (the
    minibatch gradients' noise heats a cold chain as much, in U, as at T = 1); from T = 1 on it
    is the Gamma tail's on U_T."""
    limit = stability.rise_limit(401, temperature)
    assert limit * min(temperature, 1.0) == pytest.approx(stability.rise_limit(401), rel=1e-12)


def test_a_stationary_gaussian_chain_stays_below_the_rise_limit():
    """Exact draws from a 401-dimensional standard Gaussian posterior: U - U* = |θ|²/2, whose
    largest of 10^5 draws is about d/2 + 4.4 sqrt(d/2) (Gumbel), well under the limit, which is
    about d/2 + 6 sqrt(d/2) for a 10^-9 tail."""
    generator = torch.Generator().manual_seed(0)
    rises = torch.randn(100_000, 401, generator=generator).square().sum(1, dtype=torch.float64) / 2
    assert rises.max().item() < stability.rise_limit(401)
    assert rises.max().item() > 0.9 * stability.rise_limit(401)  # the limit is not loose


def test_restore_writes_into_views_in_place():
    """Stacked chains' states are views of one tensor: a restore must reach the stacked tensor,
    and leave alone what the snapshot does not hold."""
    stacked = torch.zeros(2, 3)
    live = {"params/0": stacked[1], "buffers/grad_var/0": torch.ones(3)}
    saved = stability.snapshot({"params/0": torch.arange(3.0)})
    live["params/0"].add_(5)  # the chain moves on
    stability.restore(live, saved)
    assert torch.equal(stacked, torch.tensor([[0.0, 0, 0], [0, 1, 2]]))
    assert torch.equal(live["buffers/grad_var/0"], torch.ones(3))


@pytest.fixture(scope="module")
def sharp_root(tmp_path_factory) -> Path:
    """A regression set whose targets are a linear function of the inputs to 1% (the UCI sets
    such as yacht are close to that): the sampled noise precision grows a hundredfold as the
    network fits, and with it the curvature that a step must respect.

    180 training rows; 200 test rows (20 of the 90/10 split and 180 more), so that a sound fit
    beats the trivial predictor by many standard errors: with the split's 20, a perfect fit
    beat it by 3.9 at most, and a run whose last bits differed (on an AMD EPYC) tied it. With
    200, every cell of the matrix at the defaults beat it by 8.7 to 9.2 standard errors
    (``ATEN_CPU_CAPABILITY=default``, seed 0; the tie margin is 1)."""
    root = tmp_path_factory.mktemp("sharp")
    write_fake_uci(root, "sharp", rows=200, columns=5, splits=1, noise=0.01, more_test_rows=180)
    return root


def sharp(root: Path, *overrides: str):
    base = ["dataset=yacht", "dataset.name=sharp", f"dataset.root={root}", "dataset.download=false"]
    base.append("figures=false")  # drawn at a run's end only; tests/analysis/test_plots.py draws
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return compose("config", [*base, *overrides])


SHORT_UCI = ["epochs=400", "burn_in=300", "thin=10"]


#: The temperatures the yardstick is held at: the Bayes posterior and the coldest of Wenzel et
#: al. (2020)'s curve, where the minibatch gradients' noise, not the injected noise, heats a chain.
TEMPERATURES = [pytest.param("1", id="T=1"), pytest.param("0.001", id="T=1e-3")]


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_burn_in_backs_off_a_step_that_heats_the_chain(sharp_root, tmp_path, caplog, temperature):
    """SGLD at its MNIST step heats up on this posterior in its first epochs (without burn-in it
    diverges: below); burn-in halves the step until it holds, and the run ends sound. The same
    at T = 1e-3: the step on U is the same at every temperature (bdl.potential), and so is the
    blow-up, which the yardstick still sees."""
    caplog.set_level(logging.INFO, logger="bdl")
    sgld = ["sampler=sgld", f"temperature={temperature}"]
    metrics = run(sharp(sharp_root, *sgld, *SHORT_UCI), tmp_path / "backed")
    assert metrics["status"] == "completed" and metrics["step_scale"] < 1 / 16
    assert metrics["test_rmse"] < metrics["trivial"]["test_rmse"] / 5
    assert "step halved to" in caplog.text
    with (tmp_path / "backed" / "curve.csv").open() as file:
        scales = [float(row["lr_scale"]) for row in csv.DictReader(file)]
    assert scales[0] <= 1 and set(scales[300:]) == {metrics["step_scale"]}  # frozen after burn-in
    with pytest.raises(DivergedError, match="diverged in epoch .*Lower sampler.lr"):
        run(sharp(sharp_root, *sgld, *SHORT_UCI[:1], "burn_in=0"), tmp_path / "bare")
    written = json.loads((tmp_path / "bare" / "metrics.json").read_text())
    assert written["status"] == "diverged"


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_minibatch_noise_at_a_cold_temperature_is_not_a_divergence(
    sharp_root, tmp_path, temperature
):
    """SGHMC on minibatches of 32 of the sharp posterior: the minibatch gradients' noise heats
    the chain by the same amount in U at every temperature. At T = 1e-3 its rises in U_T after
    burn-in are more than 8 times the limit of an exact sampler at T (the old yardstick stopped
    such a chain as diverged), within T = 1's limit on U, and the run ends sound, as at T = 1."""
    cfg = sharp(
        sharp_root, "sampler=sghmc", f"temperature={temperature}", "batch_size=32",
        "epochs=100", "burn_in=50", "thin=10",
    )  # fmt: skip
    metrics = run(cfg, tmp_path)
    assert metrics["status"] == "completed", metrics.get("error")
    assert metrics["test_rmse"] < metrics["trivial"]["test_rmse"] / 5
    if float(temperature) < 1:
        exact_limits = metrics["rise_max"] / float(temperature)  # in the exact sampler's limits
        assert exact_limits > stability.DIVERGENCE_LIMITS


def test_mc_dropout_backs_off_a_step_too_large_and_ends_sound(sharp_root, tmp_path):
    """MC dropout records U at its weights, not at the step's dropout mask
    (bdl.samplers.mc_dropout), so burn-in reads its climbs as SGD's: at sampler.lr=1000 it
    backs off and ends sound; without burn-in the same step diverges, and lowering sampler.lr,
    which the message says, is the fix that the back-off found."""
    mc_dropout = ["sampler=mc_dropout", "sampler.lr=1000"]
    metrics = run(sharp(sharp_root, *mc_dropout, *SHORT_UCI), tmp_path / "backed")
    assert metrics["status"] == "completed" and metrics["step_scale"] < 1 / 16
    assert metrics["test_rmse"] < metrics["trivial"]["test_rmse"] / 5
    with pytest.raises(DivergedError, match="diverged in epoch .*Lower sampler.lr"):
        run(sharp(sharp_root, *mc_dropout, *SHORT_UCI[:1], "burn_in=0"), tmp_path / "bare")


@pytest.mark.slow
@pytest.mark.parametrize("p", [0.1, 0.2, 0.5])
def test_mc_dropout_ends_sound_on_yacht_at_every_dropout_rate(p, data_dir, tmp_path):
    """At the UCI protocol's defaults (full batches, 2000 burn-in epochs) burn-in read the masks'
    spread of U as the chain heating and stopped MC dropout in burn-in (epoch 808 at p = 0.5;
    p = 0.1 and 0.2 alike); with U recorded at the weights each ends sound (17 s of CPU each)."""
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        overrides = ["dataset=yacht", "sampler=mc_dropout", f"sampler.p={p}", "figures=false"]
        cfg = compose("config", [f"dataset.root={data_dir}", *overrides])
    metrics = run(cfg, tmp_path)
    assert metrics["status"] == "completed", metrics.get("error")
    assert metrics["test_rmse"] < metrics["trivial"]["test_rmse"] / 2


#: SGLD at its MNIST step for 300 epochs (full batches: a step each) after a burn-in of 3, too short
#: to take the step down to what holds: the step frozen at its end heats the chain after it
LATE_CLIMB = ["sampler=sgld", "epochs=300", "burn_in=3", "thin=1"]
#: the one line of a back-off after burn-in (bdl.runner.loop), and of one during burn-in
LATE_BACKOFF = re.compile(
    r"epoch (\d+): U rose ([\d.e+]+) limits; back to epoch (\d+)(, (\d+) draws? dropped)?; "
    r"step now ([\d.e+-]+) x sampler.lr"
)
BURN_IN_BACKOFF = re.compile(r"epoch (\d+): U per step .* back to that point, step halved .*")


def test_a_climb_after_burn_in_is_backed_off_and_no_draw_of_it_is_kept(
    sharp_root, tmp_path, caplog
):
    """Each climb past the limit after burn-in returns the chain to where its last epoch within
    one rise limit of the level began (the rises measured here from the curve: the epochs
    between rose past one limit, the backed-off one past eight) and halves the step for the rest
    of the run; the draws kept since, from states the climb had begun in, are dropped (from the
    model average, the per-sample diagnostics and the store), and the backed-off epoch keeps
    none. The run ends sound, and says that its draws come from more than one step size."""
    caplog.set_level(logging.INFO, logger="bdl")
    metrics = run(sharp(sharp_root, *LATE_CLIMB), tmp_path)
    assert metrics["status"] == "completed", metrics.get("error")
    assert metrics["test_rmse"] < metrics["trivial"]["test_rmse"] / 2
    lines = [m for m in caplog.messages if LATE_BACKOFF.fullmatch(m)]
    assert lines and all(len(line) <= 100 for line in lines)
    found = [LATE_BACKOFF.fullmatch(line).groups() for line in lines]
    backoffs = [(int(epoch), int(back)) for epoch, _, back, *_ in found]  # 1-based, the curve's
    assert metrics["backoffs_after_burn_in"] == len(backoffs)
    with (tmp_path / "curve.csv").open() as file:
        curve = list(csv.DictReader(file))
    # each epoch's rise above the lowest of the last 10 epochs that stood (bdl.runner.stability)
    parameters = int(re.search(r"(\d+) parameters", caplog.text).group(1))
    limit = stability.rise_limit(parameters)
    backed = {e for e, _ in backoffs}
    backed |= {int(m.group(1)) for m in map(BURN_IN_BACKOFF.fullmatch, caplog.messages) if m}
    stood, rises = [], {}
    for row in curve:
        epoch, potential = int(row["epoch"]), float(row["potential"])
        rises[epoch] = (potential - min(stood[-10:])) / limit if stood else 0.0
        if epoch not in backed:
            stood.append(potential)
    for (epoch, back), (_, logged, *_) in zip(backoffs, found, strict=True):
        assert rises[epoch] == pytest.approx(float(logged), rel=1e-2) and rises[epoch] > 8
        assert rises[back + 1] <= 1 and all(rises[e] > 1 for e in range(back + 2, epoch + 1))
    frozen = float(curve[3]["lr_scale"])  # the first epoch after burn-in
    for row in curve[3:]:  # halved at each back-off, for every epoch from it on
        halvings = sum(epoch <= int(row["epoch"]) for epoch, _ in backoffs)
        assert float(row["lr_scale"]) == frozen / 2**halvings
    assert metrics["step_scale"] == frozen / 2 ** len(backoffs)
    kept = [entry["epoch"] + 1 for _, entry in load_samples(tmp_path / "samples")]
    # thin=1 keeps every epoch after burn-in but those from a back-off's point back to it on
    dropped = {e for epoch, back in backoffs for e in range(back + 1, epoch + 1)}
    assert kept == [e for e in range(4, 301) if e not in dropped]
    counted = [int(n or 0) for *_, n, _ in found]
    assert counted == [
        sum(4 <= e < epoch for e in range(back + 1, epoch)) for epoch, back in backoffs
    ]
    assert metrics["num_samples"] == len(kept)
    # the verdict's draws of the potential are the curve's rows of the draws kept
    rows = [{"epoch": int(r["epoch"]), "num_samples": int(r["num_samples"])} for r in curve]
    epochs_kept = SimpleNamespace(collects=lambda epoch: epoch >= 3)
    assert [row["epoch"] for row in results._kept_rows(epochs_kept, rows)] == kept
    assert any("back-off" in note and "step sizes" in note for note in metrics["notes"])


RESUMED_LATE_CLIMB = [*LATE_CLIMB, "epochs=60", "checkpoint_every=1"]


@pytest.fixture(scope="module")
def late_climb(sharp_root, tmp_path_factory) -> Path:
    """`LATE_CLIMB`'s first 60 epochs run without a stop (a checkpoint at every epoch), and the
    epoch of its first back-off after burn-in (29 when this was written), where the step drops."""
    directory = tmp_path_factory.mktemp("late") / "whole"
    metrics = run(sharp(sharp_root, *RESUMED_LATE_CLIMB), directory)
    assert metrics["backoffs_after_burn_in"] >= 1
    with (directory / "curve.csv").open() as file:
        scales = [float(row["lr_scale"]) for row in csv.DictReader(file)]
    return directory, next(e for e in range(5, len(scales)) if scales[e - 1] < scales[e - 2])


@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_a_run_killed_around_a_back_off_after_burn_in_resumes_bitwise(
    sharp_root, late_climb, tmp_path, monkeypatch, offset
):
    """Killed in the epoch before the back-off (its checkpoint holds the averages to return to),
    in the epoch that backs off (the resumed run drops the stored draws too) or in the epoch
    after it (the chain's point to return to is the backed-off one's), the resumed run ends as
    the run never stopped. Full batches: the step of epoch k is the closure's k-th call."""
    whole, epoch = late_climb
    cfg = sharp(sharp_root, *RESUMED_LATE_CLIMB)
    at = epoch + offset
    killed_at_call(monkeypatch, ChainStepper, "closure", at, lambda: run(cfg, tmp_path))
    run(sharp(sharp_root, *RESUMED_LATE_CLIMB, "resume=true"), tmp_path)
    assert outputs(tmp_path) == outputs(whole)


def test_a_climb_after_burn_in_with_no_halving_left_diverges(sharp_root, tmp_path, monkeypatch):
    """With the back-offs spent (three here, burn-in's and the freeze's among them), the next
    climb after burn-in ends the run as a divergence that names the step it was taken down to."""
    monkeypatch.setattr(bdl.runner.loop, "MAX_BACKOFFS", 3)
    with pytest.raises(DivergedError, match=r"back-offs had already taken the step down to 0.125"):
        run(sharp(sharp_root, *LATE_CLIMB), tmp_path)
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "diverged"


def test_a_state_that_is_not_finite_after_burn_in_diverges(sharp_root, tmp_path):
    """A step so large that the first epoch after burn-in overflows: nothing to back off to
    that a halving could save, and the run ends at once."""
    cfg = sharp(sharp_root, *LATE_CLIMB, "sampler.lr=1e4")
    with pytest.raises(DivergedError, match=r"diverged in epoch 4 \(its parameters or potential"):
        run(cfg, tmp_path)


# a few samples: each is scored on the 10 000 test images. Minibatches of 50: twenty steps an
# epoch on the 1000 training images (MNIST's protocol takes 100 of 500 on its 50 000). At 500,
# twelve epochs are 24 steps, which leave SGD's, SWAG's, MC dropout's, bbb_sgd's, MFVI's and
# SGHMC's at the UCI step networks at their start, predicting the majority class: an exact tie
# (0 ± 0), unsound. With 240 steps every cell that completes, but MALA's and RWMH's (below),
# beats the trivial predictor by 33 (sghmc_uci) to 302 standard errors of the paired gain in
# accuracy, the tie margin being 1 (seed 0; the same to three digits with
# ATEN_CPU_CAPABILITY=default).
CLASSIFICATION = [
    "dataset=mnist",
    "dataset.validation=59000",
    "batch_size=50",
    "epochs=12",
    "burn_in=8",
    "thin=2",
]
#: What an option needs beyond the defaults on these 1000 images: SWAG collects an iterate once
#: an epoch, as Maddox et al. (2019) do and as its default of 100 steps does on MNIST; at 100
#: steps here it would collect none in the four sampled epochs and keep SGD's last point. HMC
#: sums its full-data gradient over chunks of batch_size: chunks of 500 keep its cell at 7 s
#: rather than 15 (one core under load), for the same full-data potential.
ON_FAKE_MNIST = {"swag": ["sampler.collect_every=20"], "hmc": ["batch_size=500"]}
#: Random-walk Metropolis and MALA take full-data steps: twelve iterations leave them near their
#: start (measured: a gain of 0.0013 ± 0.0045, z = 0.3), so they may end unsound, saying so;
#: the real-data matrix below judges them at their defaults.
TIE_IN_TWELVE_EPOCHS = {"mala", "rwmh"}
#: Constant SGD's fitted step is past a network's stability limit (the csgd module): where it
#: does not refuse, it may diverge, and must then say so.
MAY_DIVERGE = {"csgd"}


def classification(root: Path, sampler: str, *overrides: str):
    options = [f"sampler={sampler}", *ON_FAKE_MNIST.get(sampler, []), *overrides]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return compose(
            "config", [f"dataset.root={root}", "figures=false", *CLASSIFICATION, *options]
        )


DATA = ["classification", "sharp regression"]
#: The matrix's cells that take 10-20 s each (one core under load): the variational fits, SWAG
#: and MC dropout score 20-30 predictive draws on the 69 000 held-out and test images, and HMC
#: takes 50 leapfrog steps of the full data per iteration. They run in full with the slow tests,
#: and shortened in the default suite (the test below the matrix); every other cell runs in full
#: in the default suite.
COSTLY = {
    ("classification", "bbb"),
    ("classification", "bbb_sgd"),
    ("classification", "mfvi"),
    ("classification", "mc_dropout"),
    ("classification", "swag"),
    ("sharp regression", "hmc"),
}


def cells(costly: bool, slow: bool = False) -> list:
    return [
        pytest.param(data, sampler, id=f"{data}-{sampler}", marks=[pytest.mark.slow] * slow)
        for data in DATA
        for sampler in SAMPLER_OPTIONS
        if ((data, sampler) in COSTLY) == costly
    ]


@pytest.mark.parametrize(("data", "sampler"), cells(False) + cells(True, slow=True))
def test_every_sampler_at_its_defaults_ends_sound_or_refuses(
    sampler, data, sharp_root, fake_data_root, isolated_cache, tmp_path
):
    """The matrix of the defaults, shortened: on generated MNIST (1000 training images) and on the
    sharply peaked regression above, each sampler option either refuses before training, in one
    line, or completes with a posterior that beats the trivial predictor. Never 'unsound'."""
    if data == "classification":
        cfg = classification(fake_data_root, sampler)
        assert_sound_or_refused(sampler, cfg, tmp_path, may_be_unsound=TIE_IN_TWELVE_EPOCHS)
        return
    cfg = sharp(sharp_root, f"sampler={sampler}", *SHORT_UCI)
    assert_sound_or_refused(sampler, cfg, tmp_path)


#: Two epochs, one of burn-in, every one kept: the least a run at the defaults can be.
TWO_EPOCHS = ["epochs=2", "burn_in=1", "thin=1"]


@pytest.mark.parametrize(("data", "sampler"), cells(True))
def test_a_costly_cell_of_the_matrix_ends_sound_when_shortened(
    sampler, data, sharp_root, fake_data_root, isolated_cache, tmp_path
):
    """The costly cells' quick tier, on the same defaults and data: the classifiers' twelve
    epochs with 2 predictive draws in place of 20-30, HMC for two epochs. Each must end sound:
    measured, the classifiers beat the trivial predictor by 101 (mfvi) to 302 standard errors
    of the paired gain in accuracy, HMC by 8.8 in squared error (the tie margin is 1; seed 0,
    the same with ATEN_CPU_CAPABILITY=default)."""
    if data == "classification":
        cfg = classification(fake_data_root, sampler, "sampler.num_samples=2")
    else:
        cfg = sharp(sharp_root, f"sampler={sampler}", *SHORT_UCI, *TWO_EPOCHS)
    metrics = run(cfg, tmp_path)
    assert metrics["status"] == "completed", metrics.get("error")


def assert_sound_or_refused(
    sampler: str,
    cfg,
    directory: Path,
    may_diverge=MAY_DIVERGE,
    may_be_unsound=(),
) -> None:
    try:
        metrics = run(cfg, directory)
    except ValueError as refusal:  # ConfigError, or a sampler's own check of its arguments
        assert "\n" not in str(refusal)
        assert not (directory / "samples").exists() or not any((directory / "samples").iterdir())
        return
    except DivergedError as divergence:
        assert sampler in may_diverge, str(divergence)
        fixes = ("Choose another sampler", "try sampler.lr=")
        assert any(fix in str(divergence) for fix in fixes), str(divergence)
        return
    if sampler in may_be_unsound and metrics["status"] == "unsound":
        assert "than ignoring the inputs" in metrics["error"]
        return
    assert metrics["status"] == "completed", metrics.get("error")


#: The real-data matrix: the UCI sets at their protocols' defaults; MNIST and naval (hours of
#: minibatch epochs at their defaults) shortened. docs/results.md has the table
#: (scripts/matrix.py).
REAL = {
    "yacht": [],
    "boston": [],
    "naval": ["epochs=30", "burn_in=20"],
    "mnist": ["epochs=20", "burn_in=10"],
}
#: What the shortened runs may end in besides a sound posterior, said so plainly. Random-walk
#: Metropolis takes 20-30 full-data iterations here, far too few to leave its start: unsound.
#: A burn-in of 20 epochs may freeze a step that a longer one would have backed off further:
#: a divergence that names the step to try (measured: naive_sghmc on naval).
SHORTENED_MAY_BE_UNSOUND = {"rwmh"}
SHORTENED_MAY_DIVERGE = {"csgd", "naive_sghmc", "sghmc", "sgld", "psgld", "sghmc_cyclical"}


@pytest.mark.slow
@pytest.mark.parametrize("sampler", SAMPLER_OPTIONS)
@pytest.mark.parametrize("dataset", sorted(REAL))
def test_every_sampler_at_its_defaults_on_real_data(sampler, dataset, data_dir, tmp_path):
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        overrides = [f"dataset={dataset}", f"sampler={sampler}", *REAL[dataset]]
        cfg = compose("config", [f"dataset.root={data_dir}", *overrides])
    if REAL[dataset]:
        assert_sound_or_refused(
            sampler, cfg, tmp_path, SHORTENED_MAY_DIVERGE, SHORTENED_MAY_BE_UNSOUND
        )
    else:
        assert_sound_or_refused(sampler, cfg, tmp_path)


def test_a_step_no_halving_can_save_names_a_smaller_one(sharp_root, tmp_path):
    """sampler.lr=1e12: twenty halvings leave a step that still blows up at once; the message
    gives a start that is smaller again, not a verdict on the model."""
    cfg = sharp(sharp_root, "sampler=sgld", "sampler.lr=1e12", *SHORT_UCI)
    with pytest.raises(DivergedError, match=r"halved 20 times.*start from a smaller step"):
        run(cfg, tmp_path)
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "diverged"
