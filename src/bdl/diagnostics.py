r"""Convergence diagnostics of a run's chains, by arviz.

Weight space says little about a neural network's posterior: permutations of hidden units and
other symmetries give many equivalent modes, so chains that agree on every prediction can
disagree on every weight. Convergence is therefore judged in function space, as Izmailov et al.
(2021) and the NeurIPS 2021 approximate-inference competition do: for each test point
$i$ and each posterior sample $s$ of each chain, the quantity followed is the
log-probability of its label, $\log p(y_i \mid x_i, \theta_s)$ (a Gaussian density in the
targets' original units for regression). Split R-hat and the bulk and tail effective sample
sizes of Vehtari et al. (2021) (rank-normalised, arviz's defaults) are computed per test point.

Thresholds, and where each applies (`verdict`; a run is ``converged`` when none fails):

- **R-hat of a scalar summary** (the potential, a sampled hyperparameter): at most 1.01
  (Vehtari et al. 2021, §4.3).
- **R-hat of the test predictive**, the largest over test points: at most 1.1, the tier that
  Izmailov et al. (2021) apply to the predictions of over-parameterised networks (and the limit of
  Gelman et al. 2013). Over thousands of test points 1.01 is exceeded by chance alone: R-hat's own
  Monte Carlo spread is about 0.005 with 4 chains of 100 independent draws, whose 95th percentile
  over 10,000 points is then 1.013 and maximum 1.04 (measured). ``rhat_p95`` is reported against
  1.01 for a reader, not judged.
- **Bulk and tail ESS** of the potential, of each sampled hyperparameter and of the test
  predictive (the smallest over test points): at least `ESS_PER_CHAIN` per chain (Vehtari
  et al. 2021, §4.3: below it R-hat and the Monte Carlo errors are themselves unreliable) and at
  least `ESS_FRACTION` of the draws (PyMC3's warning; Salvatier, Wiecki & Fonnesbeck 2016);
  a run of fewer than 100 draws per chain cannot pass, and says which ``epochs`` or ``thin``
  would give enough.
- **Divergent transitions** after burn-in (`bdl.samplers.metropolis`): none.
- **One chain** is judged by its ESS and by the split R-hat of its two halves taken as two chains
  (arviz splits each again, so four quarters are compared); nothing says that a single chain has
  found every mode, which the verdict's note says.
- **Too few draws**: under `MIN_DRAWS` per chain nothing is measured, and the verdict says
  so in one line.

A documented subset of weights is followed too (`WEIGHT_PROBES` coordinates evenly spaced
over the concatenated parameter vector), for a reader who wants weight-space numbers; expect them
to be poor for networks, for the reason above.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterable

import numpy as np
import torch
from torch import Tensor

#: Vehtari et al. (2021): a scalar summary whose R-hat exceeds this has not converged.
RHAT_THRESHOLD = 1.01
#: Izmailov et al. (2021), Gelman et al. (2013): the limit on the largest R-hat over test points.
RHAT_MAX_THRESHOLD = 1.1
#: Vehtari et al. (2021): the least bulk and tail ESS per chain.
ESS_PER_CHAIN = 100
#: PyMC3 (Salvatier, Wiecki & Fonnesbeck 2016): the least ESS as a fraction of the draws.
ESS_FRACTION = 0.1
#: Draws per chain below which nothing is measured: split R-hat needs two halves of two.
MIN_DRAWS = 4
#: A run's per-test-point R-hat and ESS.
FILE = "diagnostics.csv"
#: A run's ``az.summary``-like table: the potential, the hyperparameters, each test point.
SUMMARY_FILE = "summary.csv"
#: Probability mass of the summary's highest-density interval (arviz's default).
HDI_PROB = 0.94
#: The summary table's diagnostic columns.
RATINGS = ("ess_bulk", "ess_tail", "rhat")
#: Draws per chain under which arviz's ESS sits at its ceiling (`cap`): no measurement.
MEASURABLE_DRAWS = 10
#: Coordinates of the parameter vector followed for weight-space R-hat and ESS.
WEIGHT_PROBES = 16


def _arviz():
    # arviz's import warns of its coming API and logs which preview packages are missing
    logging.getLogger("arviz.preview").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz

    return arviz


def _per_coordinate(function, draws: np.ndarray, **kwargs) -> np.ndarray:
    """arviz's ``function`` on ``(chains, draws, dim)``, one value per coordinate."""
    az = _arviz()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # chains > draws; constant coordinates
        return np.asarray(function(az.convert_to_dataset(draws), **kwargs)["x"].values)


def ess(draws: np.ndarray, method: str = "bulk") -> np.ndarray:
    """Effective sample size (``bulk`` or ``tail``) of each coordinate of
    ``(chains, draws, dim)``."""
    return _per_coordinate(_arviz().ess, draws, method=method)


def rhat(draws: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat of each coordinate of ``(chains, draws, dim)``."""
    return _per_coordinate(_arviz().rhat, draws)


def probe_indices(total: int) -> Tensor:
    """The coordinates of a ``total``-long parameter vector that the weight diagnostics follow."""
    return torch.linspace(0, total - 1, min(WEIGHT_PROBES, total)).round().long()


def weight_probes(params: Iterable[Tensor]) -> Tensor:
    """The followed coordinates of the parameters ``params`` (in their fixed order), on the CPU."""
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    return flat[probe_indices(flat.numel()).to(flat.device)].double().cpu()


def split_rhat(draws: np.ndarray) -> np.ndarray:
    """`rhat` of ``(chains, draws, dim)``; one chain's is that of its two halves taken as
    two chains (its first draw dropped where the count is odd), NaN under 8 draws."""
    if draws.shape[0] == 1:
        half = draws.shape[1] // 2
        if half < MIN_DRAWS:
            return np.full(draws.shape[-1], np.nan)
        draws = draws[0, draws.shape[1] - 2 * half :].reshape(2, half, -1)
    return rhat(draws)


def summarise(pointwise: np.ndarray, weights: np.ndarray) -> tuple[dict[str, float], dict]:
    """Metrics and the per-test-point table from ``pointwise`` ``(chains, draws, points)`` and
    ``weights`` ``(chains, draws, probes)``: R-hat (`split_rhat`, so one chain gets its
    halves') and bulk and tail ESS, each summarised by its median, its worst and its 95th
    percentile towards the worst (``ess_*_p5``: the 5th percentile).

    Test points whose draws are all equal (a label predicted with probability 1 to float
    precision) have neither; they are counted (``points_constant``) and left out of the
    summaries. Chains each constant but different from one another have an infinite R-hat, which
    is kept."""
    with np.errstate(invalid="ignore"):  # a sample giving a point zero density: -inf - -inf
        constant = np.ptp(pointwise.reshape(-1, pointwise.shape[-1]), axis=0) == 0
    metrics: dict[str, float | None] = {"points_constant": int(constant.sum())}
    table: dict[str, np.ndarray] = {"point": np.arange(pointwise.shape[-1])}
    table["rhat"] = split_rhat(pointwise)
    metrics |= _extreme("rhat_max", table["rhat"], np.max)
    metrics |= _extreme("rhat_p95", table["rhat"], lambda r: np.percentile(r, 95))
    metrics |= _extreme("rhat_median", table["rhat"], np.median)
    metrics |= _extreme("weight_rhat_max", split_rhat(weights), np.max)
    chains, draws = pointwise.shape[:2]
    for method in ("bulk", "tail"):
        values = table[f"ess_{method}"] = _measured(ess(pointwise, method), chains, draws)
        metrics |= _extreme(f"ess_{method}_min", values, np.min)
        metrics |= _extreme(f"ess_{method}_p5", values, lambda e: np.percentile(e, 5))
        metrics |= _extreme(f"ess_{method}_median", values, np.median)
    weight_ess = _measured(ess(weights, "bulk"), chains, draws)
    metrics |= _extreme("weight_ess_bulk_min", weight_ess, np.min)
    return metrics, table


def scalar_diagnostics(draws: dict[str, np.ndarray]) -> dict[str, dict[str, float | None]]:
    """R-hat (`split_rhat`) and bulk and tail ESS of each non-constant scalar of
    ``draws`` (name: ``(chains, draws)``); None where not measurable."""
    found: dict[str, dict[str, float | None]] = {}
    for name, values in draws.items():
        if not np.isfinite(values).all() or np.ptp(values) == 0:
            continue
        chains, length = values.shape
        column = values[..., None]
        found[name] = {
            "rhat": number(split_rhat(column)[0]),
            "ess_bulk": number(_measured(ess(column, "bulk"), chains, length)[0]),
            "ess_tail": number(_measured(ess(column, "tail"), chains, length)[0]),
        }
    return found


def number(value: float) -> float | None:
    """``value`` as a float, None for NaN (not measured)."""
    return None if np.isnan(value) else float(value)


def summary_rows(draws: dict[str, np.ndarray], measured: dict[str, dict]) -> list[dict]:
    """``az.summary``'s columns (mean, sd, the `HDI_PROB` highest-density interval, bulk
    and tail ESS, R-hat) for each quantity of ``draws`` (name: ``(chains, draws)``), its ESS and
    R-hat those of ``measured`` (`scalar_diagnostics`; blank where absent)."""
    az = _arviz()
    low, high = f"hdi_{(1 - HDI_PROB) / 2:.0%}", f"hdi_{(1 + HDI_PROB) / 2:.0%}"
    rows = []
    for name, values in draws.items():
        finite = values[np.isfinite(values)]
        if finite.size < values.size or finite.size < 2:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset = az.convert_to_dataset(values[..., None])
            interval = np.asarray(az.hdi(dataset, hdi_prob=HDI_PROB)["x"].values).reshape(-1)
        found = measured.get(name, {})
        rows.append(
            {
                "quantity": name,
                "mean": float(values.mean()),
                "sd": float(values.std(ddof=1)),
                low: float(interval[0]),
                high: float(interval[1]),
                **{k: "" if found.get(k) is None else found[k] for k in RATINGS},
            }
        )
    return rows


def _measured(values: np.ndarray, chains: int, draws: int) -> np.ndarray:
    """``values`` with the effective sample sizes at arviz's `cap` set to NaN: there no
    autocorrelation was measured, and the number is the estimator's ceiling, not an ESS."""
    return np.where(values >= cap(chains, draws) * (1 - 1e-9), np.nan, values)


def _extreme(name: str, values: np.ndarray, reduce) -> dict[str, float | None]:
    """``{name: reduce(values)}`` over the values arviz measured (not NaN); None if none."""
    measured = values[~np.isnan(values)]
    return {name: float(reduce(measured)) if measured.size else None}


def verdict(
    metrics: dict,
    scalars: dict[str, dict[str, float | None]],
    chains: int,
    draws: int,
    more_draws: str,
) -> tuple[list[str], list[str]]:
    """Why a run's chains have not converged (empty if they have), by the thresholds of the
    module docstring, and notes that inform without judging. ``metrics``: `summarise`'s
    and the divergences'; ``scalars``: `scalar_diagnostics` of the potential and the
    sampled hyperparameters; ``chains`` of ``draws`` each; ``more_draws``: the settings that
    would give `ESS_PER_CHAIN` draws per chain."""
    reasons: list[str] = []
    notes: list[str] = []
    if metrics.get("divergences"):
        epochs = sorted({e for chain in metrics["divergent_epochs"] for e in chain})
        shown = ", ".join(map(str, epochs[:10])) + (" ..." if len(epochs) > 10 else "")
        reasons.append(
            f"{metrics['divergences']} divergent transitions after burn-in "
            f"({metrics['divergence_fraction']:.1%} of them; energy error above "
            f"sampler.divergence_threshold), in epochs {shown}: the step is too large for part "
            "of the posterior, which the chains under-sample; lower sampler.lr or raise "
            "sampler.target_accept"
        )
    if draws < MIN_DRAWS:
        reasons.append(
            f"{draws} draws per chain, too few for R-hat or ESS (at least {MIN_DRAWS}; "
            f"{ESS_PER_CHAIN} for an ESS of {ESS_PER_CHAIN} per chain): {more_draws}"
        )
        return reasons, notes
    if draws < ESS_PER_CHAIN:
        reasons.append(
            f"{draws} draws per chain: an ESS of {ESS_PER_CHAIN} per chain (Vehtari et al. 2021) "
            f"needs at least {ESS_PER_CHAIN}: {more_draws}"
        )
    needed = max(ESS_PER_CHAIN * chains, ESS_FRACTION * chains * draws)
    rated = [
        ("the test predictive", metrics, "rhat_max", RHAT_MAX_THRESHOLD, "Izmailov et al. 2021")
    ]
    rated += [
        (name, found, "rhat", RHAT_THRESHOLD, "Vehtari et al. 2021")
        for name, found in scalars.items()
    ]
    for name, found, key, limit, source in rated:
        value = found.get(key)
        if value is not None and not value <= limit:
            reasons.append(
                f"R-hat of {name} {_worst(found, key)}{value:.3f} > {limit} ({source})"
                + ("; one chain: its two halves disagree" if chains == 1 else "")
            )
        for method in ("bulk", "tail"):
            name_key = f"ess_{method}_min" if found is metrics else f"ess_{method}"
            value = found.get(name_key)
            if value is None:
                if found is metrics and draws < MEASURABLE_DRAWS:
                    reasons.append(
                        f"{method} ESS of {name} not measurable with {draws} draws per chain "
                        f"(arviz measures no autocorrelation under {MEASURABLE_DRAWS})"
                    )
                continue
            if value < needed:
                reasons.append(
                    f"{method} ESS of {name} {_worst(found, name_key)}{value:.1f} < {needed:g} "
                    f"({ESS_PER_CHAIN} per chain, Vehtari et al. 2021, and {ESS_FRACTION:.0%} of "
                    f"the {chains * draws} draws)"
                )
    if chains == 1:
        notes.append(
            "one chain: R-hat compares its two halves, which cannot show that it found every "
            "mode; chains=4 compare independent starts"
        )
    weight = metrics.get("weight_rhat_max")
    if weight is not None and weight > RHAT_MAX_THRESHOLD:
        notes.append(
            f"weight-space R-hat up to {weight:.3f}: expected of a network, whose symmetries "
            "give equivalent modes; the verdict is on the predictive"
        )
    return reasons, notes


def _worst(found: dict, key: str) -> str:
    """ "up to " or "down to " where ``key`` is the worst over test points."""
    if key.endswith("_max"):
        return "up to "
    return "down to " if key.endswith("_min") else ""


def cap(chains: int, draws: int) -> float:
    """arviz's largest bulk ESS, ``M log10 M`` for ``M = 2 chains (draws // 2)`` split draws:
    its estimator floors the autocorrelation time at ``1/log10 M``, so a value at the cap means
    that no autocorrelation was measured (always the case with fewer than 10 draws per chain)."""
    split = 2 * chains * (draws // 2)
    return split * math.log10(split) if split > 1 else 0.0
