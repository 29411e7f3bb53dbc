"""``az.summary``'s columns for many quantities at once: one array computation over all of them.

A run's ``summary.csv`` has a row for the potential, each sampled hyperparameter and each test
point's log predictive density, ten thousand rows for MNIST. arviz applies its ``az.hdi``,
``az.ess`` and ``az.rhat`` to one quantity at a time in Python (xarray's ``apply_ufunc`` over a
function of one ``(chain, draw)`` array), some 0.3-2 ms each, which made the end of a run take
minutes. Here every quantity is computed at once, by arviz's own algorithms written over arrays:
the highest-density interval from the sorted draws, the rank-normalised split R-hat and the bulk
and tail effective sample sizes of Vehtari et al. (2021), with the autocovariances by FFT and
Geyer (1992)'s initial monotone sequence; equal to arviz's to rounding (the tests hold them to
it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import fft, special, stats

#: Probability mass of the summary's highest-density interval (arviz's default).
HDI_PROB = 0.94
#: The summary table's diagnostic columns.
RATINGS = ("ess_bulk", "ess_tail", "rhat")
#: Draws per chain under which arviz gives no R-hat or ESS.
MIN_DRAWS = 4
#: The quantiles whose indicators' ESS is the tail ESS, the smaller of the two (arviz's).
TAIL = (0.05, 0.95)


def hdi(draws: np.ndarray, prob: float = HDI_PROB) -> np.ndarray:
    """The narrowest interval holding ``prob`` of each row of ``draws`` ``(quantities, n)``, as
    ``(quantities, 2)``: arviz's ``az.hdi`` of a sample (Hyndman 1996's highest-density region
    of a unimodal density, by the shortest window of ``floor(prob n)`` steps over the sorted
    draws; the first of equally short ones)."""
    n = draws.shape[-1]
    inside = int(np.floor(prob * n))
    if n - inside < 1:
        raise ValueError(f"{n} draws are too few for an interval of probability {prob}")
    ordered = np.sort(draws, axis=-1)
    widths = np.subtract(ordered[:, inside:], ordered[:, : n - inside], dtype=np.float64)
    start = np.argmin(widths, axis=-1)[:, None]
    low = np.take_along_axis(ordered, start, axis=-1)
    high = np.take_along_axis(ordered, start + inside, axis=-1)
    return np.concatenate([low, high], axis=-1)


def summary_rows(
    names: Sequence[str], draws: np.ndarray, ratings: Mapping[str, np.ndarray]
) -> list[dict]:
    """``az.summary``'s columns (mean, sd, the `HDI_PROB` highest-density interval, bulk and
    tail ESS, R-hat) of each quantity ``names[q]`` whose draws are ``draws[..., q]`` (``(chains,
    draws, quantities)``); its ESS and R-hat are ``ratings[key][q]`` (NaN, or a key absent: a
    blank). Quantities with a non-finite draw, or fewer than two, have no row."""
    low, high = f"hdi_{(1 - HDI_PROB) / 2:.0%}", f"hdi_{(1 + HDI_PROB) / 2:.0%}"
    # a quantity's draws contiguous, so that numpy sums each pairwise as it does a 1-d array
    flat = np.ascontiguousarray(draws.reshape(-1, draws.shape[-1]).T)
    if flat.shape[-1] < 2:
        return []
    kept = np.flatnonzero(np.isfinite(flat).all(axis=-1))
    flat = flat[kept]
    interval = hdi(flat)
    columns = {
        "mean": flat.mean(axis=-1).tolist(),
        "sd": flat.std(axis=-1, ddof=1).tolist(),
        low: interval[:, 0].tolist(),
        high: interval[:, 1].tolist(),
    }
    for key in RATINGS:
        rated = ratings[key][kept].tolist() if key in ratings else [math.nan] * len(kept)
        columns[key] = ["" if math.isnan(v) else v for v in rated]
    return [
        {"quantity": names[q], **dict(zip(columns, row, strict=True))}
        for q, *row in zip(kept.tolist(), *columns.values(), strict=True)
    ]


def rhat(draws: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat (Vehtari et al. 2021; arviz's ``az.rhat``) of each
    coordinate of ``draws`` ``(chains, draws, dim)``: the larger of the bulk's and the folded
    tail's; NaN under 2 chains or `MIN_DRAWS` draws, or for a coordinate with a NaN."""
    chains, length, _ = draws.shape
    if chains < 2 or length < MIN_DRAWS:
        return np.full(draws.shape[-1], np.nan)
    split = _split(_by_coordinate(draws))
    folded = np.abs(split - np.median(split.reshape(len(split), -1), axis=-1)[:, None, None])
    found = np.maximum(_rhat(_z_scale(split)), _rhat(_z_scale(folded)))
    return np.where(_any_nan(draws), np.nan, found)


def ess(draws: np.ndarray, method: str = "bulk") -> np.ndarray:
    """Bulk, tail or mean effective sample size (Vehtari et al. 2021; arviz's ``az.ess``) of each
    coordinate of ``draws`` ``(chains, draws, dim)``: the bulk's of the rank-normalised split
    chains, the tail's the smaller of the split indicators' of the 5% and 95% quantiles, the
    mean's of the split chains as they are (the one whose square root divides the standard
    deviation into the mean's Monte Carlo error); NaN under `MIN_DRAWS` draws or for a
    coordinate with a NaN."""
    if draws.shape[1] < MIN_DRAWS:
        return np.full(draws.shape[-1], np.nan)
    coordinates = _by_coordinate(draws)
    if method == "bulk":
        found = _ess(_z_scale(_split(coordinates)))
    elif method == "tail":
        flat = coordinates.reshape(len(coordinates), -1)
        found = np.minimum(
            *(_ess(_split(coordinates <= _quantile(flat, p)[:, None, None]) * 1.0) for p in TAIL)
        )
    elif method == "mean":
        found = _ess(_split(coordinates))
    else:
        raise ValueError(f"method={method!r}: choose bulk, tail or mean")
    return np.where(_any_nan(draws), np.nan, found)


def _by_coordinate(draws: np.ndarray) -> np.ndarray:
    """``(chains, draws, dim)`` as ``(dim, chains, draws)``, each chain's draws contiguous, so
    that numpy reduces them as arviz's one ``(chain, draw)`` array at a time."""
    return np.ascontiguousarray(np.moveaxis(np.asarray(draws, dtype=np.float64), -1, 0))


def _any_nan(draws: np.ndarray) -> np.ndarray:
    return np.isnan(draws).any(axis=(0, 1))


def _split(x: np.ndarray) -> np.ndarray:
    """Each chain's first and last halves as chains of their own (``(dim, 2 chains, half)``;
    the middle draw of an odd count dropped)."""
    half = x.shape[-1] // 2
    return np.concatenate([x[..., :half], x[..., x.shape[-1] - half :]], axis=1)


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Each coordinate's draws replaced by the normal quantiles of their average ranks over all
    chains (Blom 1958's offset 3/8)."""
    dim, chains, length = x.shape
    size = chains * length
    ranks = stats.rankdata(x.reshape(dim, size), method="average", axis=-1)
    # scipy's norm.ppf without its checks of arguments, which cost as much as the function
    return special.ndtri((ranks - 3 / 8) / (size - 2 * 3 / 8 + 1)).reshape(x.shape)


def _rhat(x: np.ndarray) -> np.ndarray:
    """The potential scale reduction of ``(dim, chains, draws)`` (Gelman et al. 2013)."""
    length = x.shape[-1]
    between = length * np.var(x.mean(axis=-1), axis=-1, ddof=1)
    within = np.mean(np.var(x, axis=-1, ddof=1), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):  # constant: NaN or inf, as arviz's
        return np.sqrt((between / within + length - 1) / length)


def _quantile(x: np.ndarray, p: float) -> np.ndarray:
    """The ``p`` quantile of each row of ``x`` as R's type 7 (``scipy.stats.mstats.mquantiles``
    with ``alphap=betap=1``, arviz's), in its arithmetic."""
    ordered = np.sort(x, axis=-1)
    n = ordered.shape[-1]
    aleph = n * p + (1.0 - p)
    k = int(np.floor(np.clip(aleph, 1, n - 1)))
    gamma = np.clip(aleph - k, 0, 1)
    return (1.0 - gamma) * ordered[:, k - 1] + gamma * ordered[:, k]


def _ess(x: np.ndarray) -> np.ndarray:
    """The effective sample size of each coordinate of ``(dim, chains, draws)`` (Geyer 1992's
    initial positive then monotone sequence of autocorrelations, as arviz's ``_ess``)."""
    dim, chains, n = x.shape
    constant = x.max(axis=(1, 2)) - x.min(axis=(1, 2)) < np.finfo(float).resolution
    centred = x - x.mean(axis=-1, keepdims=True)
    size = fft.next_fast_len(2 * n)
    transform = np.fft.rfft(centred, n=size, axis=-1)
    transform *= np.conjugate(transform)
    acov = np.fft.irfft(transform, n=size, axis=-1)[..., :n] / n
    mean_var = np.mean(acov[:, :, 0], axis=-1) * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if chains > 1:
        var_plus = var_plus + np.var(x.mean(axis=-1), axis=-1, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):  # a constant coordinate, set below
        rho = 1.0 - (mean_var[:, None] - np.mean(acov, axis=1)) / var_plus[:, None]
    rho[:, 0] = 1.0
    # arviz's loop takes the pairs S_j = rho_2j + rho_2j+1, j = 1 .. K at most, while the one
    # before sums above 0: ``taken`` of them (the last counted only where it is not negative
    # or its even term positive), the ones before it made non-increasing (Geyer's monotone
    # sequence: a pair above the one before takes half of that one's sum in each term)
    pairs = len(range(1, n - 3, 2))
    even, odd = rho[:, 0 : 2 * pairs + 2 : 2], rho[:, 1 : 2 * pairs + 2 : 2]
    sums = even + odd
    stops = np.concatenate([sums[:, :pairs] <= 0, np.ones((dim, 1), dtype=bool)], axis=-1)
    taken = stops.argmax(axis=-1)
    inner = np.arange(pairs + 1)[None, :] < taken[:, None]
    body = np.where(inner, np.minimum.accumulate(sums, axis=-1), 0.0).sum(axis=-1)
    rows = np.arange(dim)
    last, last_sum = even[rows, taken], sums[rows, taken]
    tau = -1.0 + 2.0 * body + np.where((last_sum >= 0) | (last > 0), last, 0.0)
    total = chains * n
    tau = np.maximum(tau, 1 / np.log10(total))
    return np.where(constant, float(total), total / tau)
