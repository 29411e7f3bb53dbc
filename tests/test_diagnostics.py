"""The diagnostics' values against arviz called here, one test point at a time, on draws whose
bulk and tail effective sample sizes differ and whose R-hats spread over test points, so that a
summary taken from the wrong column or the wrong percentile gives a different number."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bdl import diagnostics


def arviz_per_point(function, draws: np.ndarray, **kwargs) -> np.ndarray:
    """``function`` on each point's ``(chains, draws)`` array, arviz's own layout for one
    quantity."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array([float(function(draws[..., j], **kwargs)) for j in range(draws.shape[-1])])


@pytest.fixture(scope="module")
def draws() -> np.ndarray:
    """4 chains of 500 draws at 20 points. Points 0-9: stochastic volatility (a normal times
    exp of an AR(1) with coefficient 0.98), whose signs are independent, so the rank-normalised
    bulk is nearly uncorrelated (bulk ESS about 1 900) while the tails come in long stretches of
    high volatility (tail ESS 100-330). Points 10-19: independent normals with chain ``k``
    shifted by ``0.02 j k`` at point ``10 + j``, R-hat rising from 1 to about 1.02; the
    volatility points' R-hats are near 1.1, so the 95th percentile and the median differ."""
    rng = np.random.default_rng(0)
    chains, length, points = 4, 500, 10
    log_scale = np.zeros((chains, length, points))
    for t in range(1, length):
        log_scale[:, t] = 0.98 * log_scale[:, t - 1] + 0.3 * rng.standard_normal((chains, points))
    volatile = rng.standard_normal((chains, length, points)) * np.exp(log_scale)
    shift = np.linspace(0, 0.2, points) * np.arange(chains)[:, None, None]
    return np.concatenate([volatile, rng.standard_normal((chains, length, points)) + shift], -1)


def test_per_point_table_is_arvizs_rhat_bulk_and_tail_ess(draws):
    az = diagnostics._arviz()
    _, table = diagnostics.summarise(draws, draws[..., :3])
    bulk = arviz_per_point(az.ess, draws, method="bulk")
    tail = arviz_per_point(az.ess, draws, method="tail")
    # the draws do separate the two: a tail column holding the bulk ESS is caught
    assert np.all(tail[:10] < bulk[:10] / 4)
    np.testing.assert_allclose(table["ess_bulk"], bulk, rtol=1e-10)
    np.testing.assert_allclose(table["ess_tail"], tail, rtol=1e-10)
    np.testing.assert_allclose(table["rhat"], arviz_per_point(az.rhat, draws), rtol=1e-10)
    np.testing.assert_array_equal(table["point"], np.arange(20))


def test_summaries_are_the_extremes_and_95th_percentile_of_arvizs_values(draws):
    az = diagnostics._arviz()
    weights = draws[..., 5:8]
    metrics, _ = diagnostics.summarise(draws, weights)
    rhat = arviz_per_point(az.rhat, draws)
    bulk = arviz_per_point(az.ess, draws, method="bulk")
    tail = arviz_per_point(az.ess, draws, method="tail")
    assert np.percentile(rhat, 95) - np.median(rhat) > 0.05  # a median would be caught
    assert bulk.min() > 1.5 * tail.min()  # the minima are told apart
    expected = {
        "points_constant": 0,
        "rhat_max": rhat.max(),
        # numpy's default linear interpolation between order statistics 18 and 19 of 20
        "rhat_p95": np.sort(rhat)[18] + 0.05 * (np.sort(rhat)[19] - np.sort(rhat)[18]),
        "weight_rhat_max": arviz_per_point(az.rhat, weights).max(),
        "ess_bulk_min": bulk.min(),
        "ess_tail_min": tail.min(),
        "weight_ess_bulk_min": arviz_per_point(az.ess, weights, method="bulk").min(),
        # the median of 20 is the mean of order statistics 10 and 11 (1-based); the 5th
        # percentile is 5% of the way from the smallest to the second smallest
        "rhat_median": (np.sort(rhat)[9] + np.sort(rhat)[10]) / 2,
        "ess_bulk_median": (np.sort(bulk)[9] + np.sort(bulk)[10]) / 2,
        "ess_tail_median": (np.sort(tail)[9] + np.sort(tail)[10]) / 2,
        "ess_bulk_p5": np.sort(bulk)[0] + 0.95 * (np.sort(bulk)[1] - np.sort(bulk)[0]),
        "ess_tail_p5": np.sort(tail)[0] + 0.95 * (np.sort(tail)[1] - np.sort(tail)[0]),
        # the judged quantiles: 90th of R-hat at position 17.1 of 0-19, 10th of ESS at 1.9
        "rhat_p90": np.sort(rhat)[17] + 0.1 * (np.sort(rhat)[18] - np.sort(rhat)[17]),
        "ess_bulk_p10": np.sort(bulk)[1] + 0.9 * (np.sort(bulk)[2] - np.sort(bulk)[1]),
        "ess_tail_p10": np.sort(tail)[1] + 0.9 * (np.sort(tail)[2] - np.sort(tail)[1]),
    }
    assert metrics.pop("frozen_chains") == []
    assert metrics.pop("nll_mcse") > 0 and metrics.pop("nll_se") > 0  # tested below
    assert metrics == pytest.approx(expected, rel=1e-10)


def test_constant_points_are_counted_and_left_out(draws):
    """A point predicted with probability 1 (every draw equal) has no R-hat (arviz gives its ESS
    as the number of draws, which no minimum picks); the summaries are those of the others."""
    with_constant = draws.copy()
    with_constant[..., 3] = -0.5
    metrics, table = diagnostics.summarise(with_constant, with_constant[..., :3])
    others = np.delete(draws, 3, axis=-1)
    az = diagnostics._arviz()
    assert metrics["points_constant"] == 1
    assert np.isnan(table["rhat"][3])
    assert metrics["rhat_max"] == pytest.approx(arviz_per_point(az.rhat, others).max())
    tail = arviz_per_point(az.ess, others, method="tail")
    assert metrics["ess_tail_min"] == pytest.approx(tail.min())


def test_one_chain_has_ess_and_the_rhat_of_its_halves(draws):
    az = diagnostics._arviz()
    one = draws[:1]
    metrics, table = diagnostics.summarise(one, one[..., :3])
    halves = one[0].reshape(2, 250, -1)  # the first 250 draws against the last 250
    np.testing.assert_allclose(table["rhat"], arviz_per_point(az.rhat, halves), rtol=1e-10)
    assert metrics["rhat_max"] == pytest.approx(table["rhat"].max())
    short, _ = diagnostics.summarise(one[:, :7], one[:, :7, :3])  # halves of 3: no R-hat
    assert short["rhat_max"] is None
    assert metrics["ess_tail_min"] == pytest.approx(
        arviz_per_point(az.ess, one, method="tail").min()
    )


@pytest.mark.parametrize(("chains", "length"), [(4, 9), (1, 8), (3, 5)])
def test_cap_is_arvizs_ess_of_chains_too_short_to_measure_autocorrelation(chains, length):
    draws = np.random.default_rng(chains).standard_normal((chains, length, 2))
    np.testing.assert_allclose(diagnostics.ess(draws, "bulk"), diagnostics.cap(chains, length))


@pytest.mark.parametrize(("chains", "draws"), [(4, 100), (1, 200)])
def test_rhat_limit_is_exceeded_by_one_percent_of_independent_draws(chains, draws):
    """`rhat_limit` from the F distribution against arviz's R-hat of 4000 quantities of
    independent chi-square draws: 1% exceed it (0.4-1.4% measured over seven chain and draw
    counts at 2000 repetitions each), so between 0.3% and 2.5% here (over 4 binomial sd at 1%)."""
    limit = diagnostics.rhat_limit(chains, draws, false_alarm=0.01)
    assert limit > diagnostics.RHAT_THRESHOLD  # short runs: chance alone exceeds 1.01
    x = np.random.default_rng(chains).chisquare(5, (chains, draws, 4000))
    exceeded = np.mean(diagnostics.split_rhat(x) > limit)
    assert 0.003 < exceeded < 0.025


def test_rhat_limit_is_vehtaris_for_long_runs():
    assert diagnostics.rhat_limit(4, 1000) == diagnostics.RHAT_THRESHOLD
    assert diagnostics.rhat_limit(4, 3) == float("inf")


def test_nll_mcse_is_the_spread_of_the_nll_over_repeated_runs():
    """The model average's NLL from 300 independent sets of 4 chains of 100 draws of a
    linear-Gaussian posterior, N(mu, 0.3^2 I) in 3 dimensions, at 50 test points: its standard
    deviation over the sets is what `nll_error` estimates from one set. The spread of an sd of
    300 is 4%, of the MCSE estimates' mean under 2%: they agree within 15%. ``nll_se`` is the
    standard deviation of the pointwise NLL over the test points, over their square root."""
    rng = np.random.default_rng(3)
    mu = rng.standard_normal(3)
    x = rng.standard_normal((50, 3))
    y = x @ mu + rng.standard_normal(50)
    nll, mcse = [], []
    for _ in range(300):
        theta = mu + 0.3 * rng.standard_normal((4, 100, 3))
        pointwise = -0.5 * (y - theta @ x.T) ** 2 - 0.5 * np.log(2 * np.pi)
        log_mean = np.log(np.exp(pointwise).reshape(400, 50).mean(0))
        nll.append(-log_mean.mean())
        found = diagnostics.nll_error(pointwise)
        mcse.append(found["nll_mcse"])
        assert found["nll_se"] == pytest.approx(np.std(log_mean, ddof=1) / np.sqrt(50))
    assert np.mean(mcse) == pytest.approx(np.std(nll, ddof=1), rel=0.15)


def settings(**kwargs):
    return diagnostics.Settings(**({"epochs": 300, "burn_in": 100, "thin": 2, "lr": 0.01} | kwargs))


PASSING = {
    "rhat_p90": 1.01,
    "ess_bulk_p10": 400.0,
    "ess_tail_p10": 400.0,
    "nll_mcse": 0.001,
    "nll_se": 0.01,
    "frozen_chains": [],
}
GOOD = {"rhat": 1.0, "ess_bulk": 400.0, "ess_tail": 400.0}


def test_verdict_passes_what_is_at_its_limits_and_notes_one_chain():
    reasons, notes = diagnostics.verdict(PASSING, {"potential": GOOD}, 4, 100, settings())
    assert (reasons, notes) == ([], [])
    one = PASSING | {"ess_bulk_p10": 10.0, "ess_tail_p10": 10.0}  # a tenth of one chain's 100
    reasons, notes = diagnostics.verdict(one, {"potential": GOOD}, 1, 100, settings())
    assert reasons == []
    assert notes == [
        "one chain: judged on its trend and ESS; only chains=4 can show it found every mode"
    ]


@pytest.mark.parametrize(
    ("changed", "potential", "reason"),
    [
        # 4 chains of 100 draws: ESS at least a quarter of the 400, a limit that grows with the
        # draws to 100 a chain. At 99 in 400 draws a longer run stays under it until it reaches
        # 400 at 400/99 = 4.04x the draws, past 4x: a run until converged within 4x,
        # 100 + 4 x 100 x 2 (thin) = 900 epochs (extrapolating to today's 100 asked 310, which
        # fails again: 4 chains of 102 draws at that rate have 101 of 102 needed)
        (
            {},
            GOOD | {"ess_bulk": 99.0},
            "potential mixes slowly (ESS 99 < 100): until_converged=true max_epochs=900",
        ),
        (
            {"ess_tail_p10": 50.0},
            GOOD,
            "test predictive mixes slowly (ESS 50 < 100): until_converged=true max_epochs=900",
        ),
        # the Monte Carlo error twice its allowance: 4x the draws
        (
            {"nll_mcse": 0.01},
            GOOD,
            "too few effective draws (test NLL ±0.01 by chance > ±0.01/2): epochs=900",
        ),
        (
            {"rhat_p90": 1.234},
            GOOD,
            "test predictive not mixed (90th-percentile R-hat 1.23 > 1.1): epochs=500",
        ),
        (
            {"divergences": 3, "divergence_fraction": 0.015},
            GOOD,
            "3 divergences (1.5%): sampler.lr=0.005",
        ),
        (
            {"frozen_chains": [2]},
            GOOD,
            "chain 2 never moved (every draw equal): check sampler.lr (now 0.01)",
        ),
    ],
)
def test_verdict_names_each_cause_with_what_to_run(changed, potential, reason):
    """``epochs`` from the measured shortfall: the draws times (limit / ESS), or times
    (MCSE / allowance)^2, at least doubled, after the burn-in, in steps of 10."""
    reasons, _ = diagnostics.verdict(
        PASSING | changed, {"potential": potential}, 4, 100, settings()
    )
    assert reasons == [reason]


def test_a_shortfall_beyond_four_times_the_draws_is_advised_a_run_until_converged_within_four():
    """The UCI SGHMC protocol's 4 chains on yacht (400 draws each, one every 20 epochs after
    2000): the potential's bulk ESS 16 of the 400 needed asks 25x the draws (200 000 epochs);
    the advice runs until converged within 4x, 2000 + 4 x 400 x 20 = 34 000 epochs, and the
    notes say the factor, that the predictions passed, and that thin=1000 (50 times the run's
    20) would store 50 times fewer draws."""
    uci = settings(epochs=10000, burn_in=2000, thin=20)
    potential = {"rhat": 1.163, "ess_bulk": 16.0, "ess_tail": 30.0}
    reasons, notes = diagnostics.verdict(PASSING, {"potential": potential}, 4, 400, uci)
    assert reasons == [
        "potential mixes slowly (ESS 16 < 400): until_converged=true max_epochs=34000"
    ]
    assert notes == [
        "bulk ESS of potential 16 < 400 asks 25x the draws at this rate; the advice tries 4x",
        "the test predictive passed: the predictions have mixed, potential not",
        "ESS of potential 1% of the draws: thin=1000 would store 50x fewer",
    ]
    # a schedule that until_converged cannot extend: the epochs of 4x
    fixed = settings(epochs=10000, burn_in=2000, thin=20, extendable=False)
    reasons, _ = diagnostics.verdict(PASSING, {"potential": potential}, 4, 400, fixed)
    assert reasons == ["potential mixes slowly (ESS 16 < 400): epochs=34000"]
    # the predictive short too (its 10% of points: 400/12 = 33x): no "passed"
    unmixed = PASSING | {"ess_tail_p10": 12.0}
    reasons, notes = diagnostics.verdict(unmixed, {"potential": potential}, 4, 400, uci)
    assert reasons == [
        "test predictive mixes slowly (ESS 12 < 400): until_converged=true max_epochs=34000"
    ]
    assert notes[:2] == [
        "tail ESS 12 < 400 at 10% of points asks 33x the draws at this rate; the advice tries 4x",
        "ESS of potential 1% of the draws: thin=1000 would store 50x fewer",
    ]
    # at 4x or under, the extrapolation itself: 400 x 400/101 = 1585 draws, 2000 + 31 700
    near = potential | {"ess_bulk": 101.0, "ess_tail": 300.0}
    reasons, notes = diagnostics.verdict(PASSING, {"potential": near}, 4, 400, uci)
    assert reasons == ["too few effective draws (bulk ESS of potential 101 < 400): epochs=33700"]
    assert not any("the advice tries" in note for note in notes)


def test_verdict_advises_target_accept_for_an_adapting_kernel_and_few_draws():
    metrics = PASSING | {"divergences": 3, "divergence_fraction": 0.015}
    reasons, _ = diagnostics.verdict(metrics, {}, 4, 100, settings(target_accept=0.8))
    assert reasons == ["3 divergences (1.5%): sampler.lr=0.005 or sampler.target_accept=0.9"]
    reasons, _ = diagnostics.verdict({}, {}, 2, 30, settings())
    assert reasons == ["30 draws a chain, under the 100 needed to judge: epochs=300"]


def test_a_trending_potential_is_told_the_burn_in_that_drops_the_trend():
    """Four chains of 200 independent draws, one of which starts 8 sd off and relaxes over its
    first 40 (a fifth of the draws): its R-hat is over the limit until 40 draws are dropped;
    the verdict says to burn 40 draws (80 epochs at thin 2) more, keeping the draws."""
    rng = np.random.default_rng(1)
    potential = rng.standard_normal((4, 200))
    potential[3, :40] += np.linspace(8, 0, 40)
    scalars = diagnostics.scalar_diagnostics({"potential": potential})
    assert scalars["potential"]["rhat"] > diagnostics.rhat_limit(4, 200)
    dropped = diagnostics.settled(potential, diagnostics.rhat_limit(4, 200))
    assert dropped in (20, 40)
    reasons, _ = diagnostics.verdict(PASSING, scalars, 4, 200, settings(), potential)
    rhat = scalars["potential"]["rhat"]
    burn_in = 100 + 2 * dropped
    assert reasons == [
        f"the potential still trends after burn-in (R-hat {rhat:.3f}): burn_in={burn_in} "
        f"epochs={burn_in + 400}"
    ]


def test_a_chain_whose_potential_never_moves_fails():
    potential = np.random.default_rng(2).standard_normal((4, 100))
    potential[1] = 3.0
    scalars = diagnostics.scalar_diagnostics({"potential": potential})
    reasons, _ = diagnostics.verdict(PASSING, scalars, 4, 100, settings(), potential)
    assert reasons == ["chain 1 never moved (every draw equal): check sampler.lr (now 0.01)"]
    metrics, _ = diagnostics.summarise(
        np.repeat(np.arange(3.0)[None, None], 100, 1) * np.ones((2, 1, 1)), np.ones((2, 100, 1))
    )
    assert metrics["frozen_chains"] == [0, 1]


def test_every_line_fits_100_columns_as_printed():
    """The longest a cause or note prints, with its heading, at extreme but possible values."""
    metrics = PASSING | {
        "divergences": 123456,
        "divergence_fraction": 0.1234,
        "frozen_chains": [],
        "rhat_p90": 12.345,
        "weight_rhat_max": 123.4,
    }
    big = settings(epochs=1234567, burn_in=123456, thin=1000, lr=1.2345e-7, target_accept=0.999)
    scalars = {"noise_precision": {"rhat": 1.5, "ess_bulk": 1.2, "ess_tail": 1.3}}
    reasons, notes = diagnostics.verdict(metrics, scalars, 1, 123456, big)
    lines = [f"NOT CONVERGED: {r}" for r in reasons] + [f"note: {n}" for n in notes]
    assert len(reasons) == 2 and len(notes) == 4
    assert reasons[1].startswith("test predictive not mixed (R-hat 12.35): until_converged=true")
    # the predictive mixed, the hyperparameter 83x short
    scalars = {"noise_precision": {"rhat": 1.0, "ess_bulk": 1.2, "ess_tail": 1.3}}
    reasons, notes = diagnostics.verdict(metrics | {"rhat_p90": 1.0}, scalars, 1, 123456, big)
    assert reasons[1] == (
        "noise_precision mixes slowly (ESS 1 < 100): until_converged=true max_epochs=493947460"
    )
    lines += [f"NOT CONVERGED: {r}" for r in reasons] + [f"note: {n}" for n in notes]
    assert max(map(len, lines)) <= 100, max(lines, key=len)
