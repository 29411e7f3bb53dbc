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
    }
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


def test_summary_rows_are_arvizs_summary(draws):
    """The run's ``summary.csv`` rows: mean, sd, 94% HDI, ESS and R-hat as ``az.summary``
    computes them (unrounded) for two quantities of the draws, one with a slow tail."""
    az = diagnostics._arviz()
    named = {"volatile": draws[..., 0], "shifted": draws[..., 19]}
    measured = diagnostics.scalar_diagnostics(named)
    rows = {row["quantity"]: row for row in diagnostics.summary_rows(named, measured)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = az.summary(az.convert_to_dataset(named), round_to="none")
    for name in named:
        row, theirs = rows[name], expected.loc[name]
        for mine, key in [
            ("mean", "mean"),
            ("sd", "sd"),
            ("hdi_3%", "hdi_3%"),
            ("hdi_97%", "hdi_97%"),
        ]:
            assert row[mine] == pytest.approx(theirs[key], rel=1e-10)
        for mine, key in [("ess_bulk", "ess_bulk"), ("ess_tail", "ess_tail"), ("rhat", "r_hat")]:
            assert row[mine] == pytest.approx(theirs[key], rel=1e-10)
    # the columns are told apart: a swapped bulk and tail, or an R-hat of 1, would be caught
    assert rows["volatile"]["ess_tail"] < rows["volatile"]["ess_bulk"] / 4
    assert rows["shifted"]["rhat"] > 1.01


@pytest.mark.parametrize(
    ("chains", "draws", "potential", "flagged"),
    [
        (4, 500, {"rhat": 1.009, "ess_bulk": 401.0, "ess_tail": 401.0}, []),
        (4, 500, {"rhat": 1.011, "ess_bulk": 401.0, "ess_tail": 401.0}, ["R-hat"]),
        (4, 500, {"rhat": 1.0, "ess_bulk": 399.0, "ess_tail": 401.0}, ["bulk ESS"]),
        # 10% of 4 x 5000 draws, 2000, is the bar above 100 per chain
        (4, 5000, {"rhat": 1.0, "ess_bulk": 2001.0, "ess_tail": 1999.0}, ["tail ESS"]),
        # one chain: 100 draws of its own
        (1, 300, {"rhat": 1.0, "ess_bulk": 99.0, "ess_tail": 101.0}, ["bulk ESS"]),
    ],
)
def test_verdict_thresholds_on_the_potential(chains, draws, potential, flagged):
    """The scalar tier, 1.01, and the ESS bar, max(100 per chain, 10% of the draws), at values
    just either side; the test predictive here passes (R-hat 1.05 < 1.1, ESS at the bar)."""
    bar = max(100 * chains, 0.1 * chains * draws)
    predictive = {"rhat_max": 1.05, "ess_bulk_min": bar, "ess_tail_min": bar}
    reasons, notes = diagnostics.verdict(predictive, {"potential": potential}, chains, draws, "")
    assert [r.split(" of potential")[0] for r in reasons] == flagged
    assert len(notes) == (chains == 1)


def test_verdict_names_divergences_and_too_few_draws():
    metrics = {"divergences": 3, "divergence_fraction": 0.015, "divergent_epochs": [[7], [7, 9]]}
    reasons, _ = diagnostics.verdict(metrics, {}, chains=2, draws=2, more_draws="epochs=300")
    assert reasons == [
        "3 divergent transitions after burn-in (1.5% of them; energy error above "
        "sampler.divergence_threshold), in epochs 7, 9: the step is too large for part of the "
        "posterior, which the chains under-sample; lower sampler.lr or raise "
        "sampler.target_accept",
        "2 draws per chain, too few for R-hat or ESS (at least 4; 100 for an ESS of 100 per "
        "chain): epochs=300",
    ]


def test_verdict_says_each_failed_threshold_with_its_value_bar_and_source():
    """Four chains of 50 draws: the predictive's R-hat above Izmailov et al.'s 1.1, its bulk
    ESS below the bar max(100 x 4, 10% of 200) = 400, the potential's R-hat above Vehtari et
    al.'s 1.01; too few draws for an ESS of 100 per chain; a note on weight-space R-hat."""
    predictive = {
        "rhat_max": 1.234,
        "ess_bulk_min": 120.04,
        "ess_tail_min": 401.0,
        "weight_rhat_max": 1.5,
    }
    scalars = {"potential": {"rhat": 1.02, "ess_bulk": 500.0, "ess_tail": 399.0}}
    reasons, notes = diagnostics.verdict(predictive, scalars, 4, 50, "epochs=120 keep 100")
    assert reasons == [
        "50 draws per chain: an ESS of 100 per chain (Vehtari et al. 2021) needs at least 100: "
        "epochs=120 keep 100",
        "R-hat of the test predictive up to 1.234 > 1.1 (Izmailov et al. 2021)",
        "bulk ESS of the test predictive down to 120.0 < 400 (100 per chain, Vehtari et al. "
        "2021, and 10% of the 200 draws)",
        "R-hat of potential 1.020 > 1.01 (Vehtari et al. 2021)",
        "tail ESS of potential 399.0 < 400 (100 per chain, Vehtari et al. 2021, and 10% of the "
        "200 draws)",
    ]
    assert notes == [
        "weight-space R-hat up to 1.500: expected of a network, whose symmetries give "
        "equivalent modes; the verdict is on the predictive"
    ]


def test_verdict_of_one_short_chain_says_what_it_cannot_measure():
    reasons, notes = diagnostics.verdict({"rhat_max": 1.2}, {}, 1, 8, "epochs=108 keep 100")
    assert reasons == [
        "8 draws per chain: an ESS of 100 per chain (Vehtari et al. 2021) needs at least 100: "
        "epochs=108 keep 100",
        "R-hat of the test predictive up to 1.200 > 1.1 (Izmailov et al. 2021); one chain: its "
        "two halves disagree",
        "bulk ESS of the test predictive not measurable with 8 draws per chain (arviz measures "
        "no autocorrelation under 10)",
        "tail ESS of the test predictive not measurable with 8 draws per chain (arviz measures "
        "no autocorrelation under 10)",
    ]
    assert notes == [
        "one chain: R-hat compares its two halves, which cannot show that it found every mode; "
        "chains=4 compare independent starts"
    ]
