"""``az.summary``'s columns for many quantities at once: one array computation over all of them.

A run's ``summary.csv`` has a row for the potential, each sampled hyperparameter and each test
point's log predictive density, ten thousand rows for MNIST. arviz's ``az.hdi`` and
``az.summary`` build an xarray dataset per call, some 2 ms each, which made that table take
minutes; here the mean, the standard deviation and the highest-density interval of every
quantity come from its draws' sorted array at once, equal to arviz's to rounding (the tests hold
them to it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from bdl.diagnostics import HDI_PROB, RATINGS


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
