"""The vectorised summary against arviz called one quantity at a time: the highest-density
interval of skewed, heavy-tailed and tied draws, and ``az.summary``'s mean, sd and HDI."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bdl import diagnostics, summary


def arviz_hdi(draws: np.ndarray, prob: float) -> np.ndarray:
    az = diagnostics._arviz()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array([az.hdi(row, hdi_prob=prob) for row in draws])


@pytest.mark.parametrize("prob", [0.94, 0.5, 0.999])
@pytest.mark.parametrize("n", [5, 40, 401])
def test_hdi_is_arvizs_on_every_row(prob, n):
    """Rows of every shape the runs give: skewed (exponential), heavy-tailed (Cauchy),
    bimodal, and rounded to few values, so that windows tie and the first must win."""
    rng = np.random.default_rng(n)
    rows = np.concatenate(
        [
            rng.exponential(size=(50, n)),
            rng.standard_cauchy(size=(50, n)),
            rng.standard_normal((50, n)) + 6 * rng.integers(0, 2, (50, n)),
            rng.integers(0, 4, (50, n)).astype(float),
        ]
    )
    np.testing.assert_array_equal(summary.hdi(rows, prob), arviz_hdi(rows, prob))


def test_hdi_refuses_an_interval_of_every_draw():
    with pytest.raises(ValueError, match="too few"):
        summary.hdi(np.zeros((3, 4)), 1.0)


def test_summary_rows_are_arvizs_summary():
    """mean, sd and the 94% HDI as ``az.summary`` computes them (unrounded), over chains; the
    ratings passed through, NaN as a blank; a quantity with a non-finite draw left out."""
    az = diagnostics._arviz()
    rng = np.random.default_rng(1)
    draws = rng.gamma(2.0, size=(4, 50, 6)) + np.arange(6)
    draws[1, 3, 4] = np.inf
    names = [f"q{i}" for i in range(6)]
    rhat = np.array([1.0, 1.01, np.nan, 1.2, 1.1, 1.3])
    rows = summary.summary_rows(names, draws, {"rhat": rhat})
    assert [row["quantity"] for row in rows] == ["q0", "q1", "q2", "q3", "q5"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = az.summary(
            az.convert_to_dataset({n: draws[..., i] for i, n in enumerate(names)}),
            round_to="none",
            kind="stats",
        )
    for row in rows:
        theirs = expected.loc[row["quantity"]]
        for key in ("mean", "sd", "hdi_3%", "hdi_97%"):
            assert row[key] == pytest.approx(theirs[key], rel=1e-12), key
        i = names.index(row["quantity"])
        assert row["rhat"] == ("" if np.isnan(rhat[i]) else rhat[i])
        assert row["ess_bulk"] == row["ess_tail"] == ""


def test_summary_rows_of_one_draw_are_none():
    assert summary.summary_rows(["a"], np.zeros((1, 1, 1)), {}) == []


def autoregressive(rng, chains: int, length: int, dim: int) -> np.ndarray:
    """AR(1) chains with coefficients from -0.5 to 0.99 over the coordinates (ESS from above
    the draws to a few), and three that arviz treats apart: a constant, one of three values
    (ties in the ranks) and one whose chains are shifted apart (R-hat far above 1)."""
    draws = np.zeros((chains, length, dim))
    phi = np.linspace(-0.5, 0.99, dim)
    for t in range(1, length):
        draws[:, t] = phi * draws[:, t - 1] + rng.standard_normal((chains, dim))
    draws[..., 0] = 1.0
    draws[..., 1] = rng.integers(0, 3, (chains, length))
    draws[..., 2] += np.arange(chains)[:, None]
    return draws


def arviz_each(function, draws: np.ndarray, **kwargs) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array([float(function(draws[..., j], **kwargs)) for j in range(draws.shape[-1])])


@pytest.mark.parametrize(
    ("chains", "length"), [(1, 3), (1, 4), (1, 5), (2, 7), (4, 9), (1, 100), (3, 57), (4, 400)]
)
def test_rhat_and_ess_are_arvizs_on_every_coordinate(chains, length):
    """Every length where arviz's Geyer loop takes no pair, one, or stops on a negative one;
    one chain (no R-hat) and several; NaN where arviz gives NaN, and a NaN draw's coordinate."""
    az = diagnostics._arviz()
    draws = autoregressive(np.random.default_rng(length), chains, length, 30)
    draws[0, -1, 3] = np.nan
    for mine, theirs in [
        (summary.rhat(draws), arviz_each(az.rhat, draws)),
        (summary.ess(draws, "bulk"), arviz_each(az.ess, draws, method="bulk")),
        (summary.ess(draws, "tail"), arviz_each(az.ess, draws, method="tail")),
        (summary.ess(draws, "mean"), arviz_each(az.ess, draws, method="mean")),
    ]:
        np.testing.assert_array_equal(np.isnan(mine), np.isnan(theirs))
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)
    assert np.isnan(summary.rhat(draws)[3]) and np.isnan(summary.ess(draws)[3])


def test_ess_refuses_an_unknown_method():
    with pytest.raises(ValueError, match="choose bulk, tail or mean"):
        summary.ess(np.zeros((1, 8, 1)), "median")
