r"""Convergence diagnostics of a run's chains, by arviz.

Weight space says little about a neural network's posterior: permutations of hidden units and
other symmetries give many equivalent modes, so chains that agree on every prediction can
disagree on every weight. Convergence is therefore judged in function space, as Izmailov et al.
(2021) and the NeurIPS 2021 approximate-inference competition do: for each test point
$i$ and each posterior sample $s$ of each chain, the quantity followed is the
log-probability of its label, $\log p(y_i \mid x_i, \theta_s)$ (a Gaussian density in the
targets' original units for regression). Split R-hat and the bulk and tail effective sample
sizes of Vehtari et al. (2021) (rank-normalised, arviz's defaults) are computed per test point.

The verdict (`verdict`; a run is ``converged`` when no rule fails) judges quantities whose
false-alarm rate does not grow with the number of test points, at limits whose operating
characteristics the chains guide measures (``scripts/verdict_oc.py``):

- **R-hat of a scalar** (the potential, a sampled hyperparameter): at most `rhat_limit`,
  Vehtari et al.'s (2021) 1.01, raised for short runs to what independent draws exceed with
  probability `FALSE_ALARM` (1.025 at 4 chains of 100 draws); a potential whose R-hat falls
  under it once a tenth or more of the draws is dropped is still trending (`settled`), and
  the verdict names the ``burn_in`` that drops it.
- **Bulk and tail ESS** of each scalar: at least `ess_limit`, Vehtari et al.'s 100 a chain
  (a quarter of the draws under 400 draws a chain, a tenth for one chain).
- **The test predictive**, over test points: R-hat at most Izmailov et al.'s (2021) 1.1 at the
  90th percentile (`POINT_QUANTILE`), and the ESS limit at the 10th; a quantile of many
  points, unlike their extreme, is not pushed over by chance as points are added.
- **The reported metric's Monte Carlo error**: the model average's test NLL (`nll_error`)
  within `MCSE_RATIO` of its standard error over test points.
- **Divergent transitions** after burn-in (`bdl.samplers.metropolis`): none.
- **Every chain moves**: a chain whose predictions or potential never change fails.
- **At least** `MIN_JUDGED_DRAWS` **draws a chain**; under `MIN_DRAWS` nothing is measured.
- **One chain** is judged by its trend (the split R-hat of its two halves, which arviz splits
  again: four quarters), ESS and Monte Carlo error; whether it found every mode it cannot show,
  which a note says.

Each failed rule is a cause with one line of what to run (`Settings`): ``epochs`` from the
measured ESS per draw (the draws that reach 100 a chain: under 400 a chain the limit grows with
the draws, and a run extrapolated to today's limit fails again) up to `GROWTH_CAP` times the
draws, beyond it a run until converged within that (the quantity named as mixing slowly, a note
giving the factor measured), ``burn_in`` from
the trend, ``sampler.lr`` or ``target_accept`` for divergences. An ESS under a tenth of the
draws is a note suggesting ``thin``, not a failure.

A documented subset of weights is followed too (`WEIGHT_PROBES` coordinates evenly spaced
over the concatenated parameter vector), for a reader who wants weight-space numbers; expect them
to be poor for networks, for the reason above.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats
from torch import Tensor

from bdl import summary

#: Vehtari et al. (2021): a scalar summary whose R-hat exceeds this has not converged.
RHAT_THRESHOLD = 1.01
#: Izmailov et al. (2021): the limit on the test predictive's R-hat, at its 90th percentile over
#: test points (`POINT_QUANTILE`).
RHAT_PREDICTIVE_THRESHOLD = 1.1
#: The test predictive is judged at this quantile over test points (R-hat's, and ESS's at
#: ``1 - POINT_QUANTILE``): unlike the extreme, its false-alarm rate falls as points are added.
POINT_QUANTILE = 0.9
#: Vehtari et al. (2021): the least bulk and tail ESS per chain.
ESS_PER_CHAIN = 100
#: Under 400 draws a chain, the least ESS as a fraction of the draws (`ess_limit`); one
#: chain's, whose ESS arviz estimates from two halves, spreads wider.
ESS_SHORT_FRACTION = 0.25
ONE_CHAIN_ESS_FRACTION = 0.1
#: Draws per chain below which no run is judged converged: the limits lose their power.
MIN_JUDGED_DRAWS = 100
#: Chance of independent draws' R-hat exceeding `rhat_limit` (per quantity); autocorrelated
#: chains exceed it more often (HMC's in the chains guide's table), hence 0.2% and not 1%.
FALSE_ALARM = 0.002
#: The largest Monte Carlo standard error of the test NLL, as a fraction of its standard error
#: over test points: at half, the two together are 12% above the latter alone.
MCSE_RATIO = 0.5
#: The most the advice multiplies a run's draws by. An ESS per draw measured on chains that
#: have not mixed is a poor guide to many times the draws (it changes as they find what they had
#: not), and a run several times longer is a budget to try, not a promise: beyond this factor
#: the advice is a run until converged within it, and a note gives the factor measured.
GROWTH_CAP = 4
#: A bulk ESS under this fraction of the draws adds a note suggesting ``thin``.
THIN_NOTE = 0.1
#: Draws per chain below which nothing is measured: split R-hat needs two halves of two.
MIN_DRAWS = 4
#: A run's per-test-point R-hat and ESS.
FILE = "diagnostics.csv"
#: A run's ``az.summary``-like table: the potential, the hyperparameters, each test point.
SUMMARY_FILE = "summary.csv"
#: Coordinates of the parameter vector followed for weight-space R-hat and ESS.
WEIGHT_PROBES = 16


def _arviz():
    # arviz's import warns of its coming API (once a day) and logs which preview packages are
    # missing
    logging.getLogger("arviz.preview").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "\nArviZ is undergoing", FutureWarning)
        import arviz

    return arviz


def _per_coordinate(function, draws: np.ndarray, **kwargs) -> np.ndarray:
    """arviz's ``function`` on ``(chains, draws, dim)``, one value per coordinate."""
    az = _arviz()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "More chains", UserWarning)  # chains > draws
        # a constant coordinate's variances are 0, its R-hat NaN
        warnings.filterwarnings(
            "ignore", "(invalid value|divide by zero) encountered", RuntimeWarning
        )
        return np.asarray(function(az.convert_to_dataset(draws), **kwargs)["x"].values)


def ess(draws: np.ndarray, method: str = "bulk") -> np.ndarray:
    """Effective sample size (``bulk``, ``tail`` or ``mean``) of each coordinate of
    ``(chains, draws, dim)``."""
    return summary.ess(draws, method)


def rhat(draws: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat of each coordinate of ``(chains, draws, dim)``."""
    return summary.rhat(draws)


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
    metrics |= _extreme("rhat_p90", table["rhat"], lambda r: np.percentile(r, 100 * POINT_QUANTILE))
    metrics |= _extreme("rhat_median", table["rhat"], np.median)
    metrics |= _extreme("weight_rhat_max", split_rhat(weights), np.max)
    chains, draws = pointwise.shape[:2]
    for method in ("bulk", "tail"):
        values = table[f"ess_{method}"] = _measured(ess(pointwise, method), chains, draws)
        metrics |= _extreme(f"ess_{method}_min", values, np.min)
        metrics |= _extreme(f"ess_{method}_p5", values, lambda e: np.percentile(e, 5))
        metrics |= _extreme(
            f"ess_{method}_p10", values, lambda e: np.percentile(e, 100 * (1 - POINT_QUANTILE))
        )
        metrics |= _extreme(f"ess_{method}_median", values, np.median)
    weight_ess = _measured(ess(weights, "bulk"), chains, draws)
    metrics |= _extreme("weight_ess_bulk_min", weight_ess, np.min)
    moved = np.ptp(pointwise, axis=1) > 0
    metrics["frozen_chains"] = [k for k in range(chains) if not moved[k].any()]
    metrics |= nll_error(pointwise)
    return metrics, table


def nll_error(pointwise: np.ndarray) -> dict[str, float | None]:
    r"""The Monte Carlo standard error of the model average's test NLL (``nll_mcse``) and the
    NLL's standard error over test points (``nll_se``), from the log densities ``pointwise``
    ``(chains, draws, points)``. The NLL $-\frac1P \sum_i \log \bar p_i$ of the average
    $\bar p_i$ of the draws' densities $p_{si}$ is, to first order in $p_{si} - \bar p_i$, the
    mean over draws of $g_s = -\frac1P \sum_i (p_{si} / \bar p_i - 1)$ (plus a constant): its
    Monte Carlo error is that of a mean, $\mathrm{sd}(g) / \sqrt{\mathrm{ESS}(g)}$, with the
    ESS of the mean over all chains (arviz's ``mcse``), which counts chains that disagree.
    None where a density is not finite or positive."""
    chains, draws, points = pointwise.shape
    flat = pointwise.reshape(chains * draws, points).astype(np.float64)
    if not np.isfinite(flat).all() or chains * draws < 2 * MIN_DRAWS:
        return {"nll_mcse": None, "nll_se": None}
    peak = flat.max(0)
    log_mean = peak + np.log(np.exp(flat - peak).mean(0))
    g = -(np.exp(flat - log_mean) - 1).mean(-1).reshape(chains, draws)
    error = float(np.std(-log_mean, ddof=1) / math.sqrt(points)) if points > 1 else None
    if np.ptp(g) == 0:
        return {"nll_mcse": 0.0, "nll_se": error}
    mcse = _per_coordinate(_arviz().mcse, g[..., None], method="mean")[0]
    return {"nll_mcse": number(mcse), "nll_se": error}


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


def _measured(values: np.ndarray, chains: int, draws: int) -> np.ndarray:
    """``values`` with the effective sample sizes at arviz's `cap` set to NaN: there no
    autocorrelation was measured, and the number is the estimator's ceiling, not an ESS."""
    return np.where(values >= cap(chains, draws) * (1 - 1e-9), np.nan, values)


def _extreme(name: str, values: np.ndarray, reduce) -> dict[str, float | None]:
    """``{name: reduce(values)}`` over the values arviz measured (not NaN); None if none."""
    measured = values[~np.isnan(values)]
    return {name: float(reduce(measured)) if measured.size else None}


@dataclass(frozen=True)
class Settings:
    """What a verdict's advice changes: the run's ``epochs``, ``burn_in`` and ``thin``, the
    sampler's ``lr`` and ``target_accept`` where it has them, and whether ``until_converged``
    can extend the run (``extendable``: its schedule's steps do not depend on ``epochs``)."""

    epochs: int
    burn_in: int
    thin: int = 1
    lr: float | None = None
    target_accept: float | None = None
    extendable: bool = True

    def epochs_for(self, draws: int, burn_in: int | None = None) -> int:
        """The ``epochs`` that keep ``draws`` draws a chain after ``burn_in`` (the run's by
        default), rounded up to a multiple of 10."""
        burn = self.burn_in if burn_in is None else burn_in
        return int(math.ceil((burn + draws * self.thin) / 10) * 10)


def rhat_limit(chains: int, draws: int, false_alarm: float = FALSE_ALARM) -> float:
    r"""The largest R-hat of one quantity judged converged with ``chains`` of ``draws``: Vehtari
    et al.'s (2021) 1.01, or where chance alone exceeds it, the R-hat that independent draws
    exceed with probability ``false_alarm``. Split R-hat compares $m$ half chains (one chain's
    four quarters, `split_rhat`) of $n$ draws; for independent normal draws
    $\hat R^2 = \frac{n-1}{n} + \frac{F}{n}$ with $F \sim F(m-1, m(n-1))$, the ratio of the
    between- to the within-chain variance (Gelman & Rubin 1992). The rank-normalised R-hat is the
    larger of the bulk's and the folded draws', so each is held to ``false_alarm / 2``.
    Vats & Knudson (2021) make the same point: R-hat's limit must depend on the draws."""
    m, n = (4, draws // 4) if chains == 1 else (2 * chains, draws // 2)
    if n < 2:
        return math.inf
    quantile = float(stats.f.ppf(1 - false_alarm / 2, m - 1, m * (n - 1)))
    return max(RHAT_THRESHOLD, math.sqrt((n - 1) / n + quantile / n))


def ess_limit(chains: int, draws: int) -> float:
    """The least bulk and tail ESS judged enough: Vehtari et al.'s (2021) 100 a chain, or under
    400 draws a chain `ESS_SHORT_FRACTION` of the draws (`ONE_CHAIN_ESS_FRACTION` for one
    chain). Independent draws' ESS, as arviz estimates it, spreads too widely for more: the
    smaller of bulk and tail falls under 0.46 of the draws in 0.1% of 4 chains of 100 draws,
    and under 0.11 in 0.1% of one chain of 100 (``chisquare(5)`` draws, 2000 repetitions)."""
    fraction = ESS_SHORT_FRACTION if chains > 1 else ONE_CHAIN_ESS_FRACTION
    return chains * min(ESS_PER_CHAIN, fraction * draws)


def settled(potential: np.ndarray, limit: float) -> int:
    """How many leading draws of each chain of ``potential`` ``(chains, draws)`` to drop (a
    multiple of a tenth of the draws, at most half) to leave its trend behind: the fewest after
    which its R-hat is at most ``limit``, else those after which it is lowest if that halves
    its excess over 1; 0 when none does (no trend: the chains disagree or mix slowly)."""
    draws = potential.shape[1]
    rhats = [float(split_rhat(potential[:, t * draws // 10 :, None])[0]) for t in range(6)]
    for tenth, value in enumerate(rhats):
        if value <= limit:
            return tenth * draws // 10
    best = int(np.argmin(rhats))
    return best * draws // 10 if rhats[best] - 1 <= (rhats[0] - 1) / 2 else 0


def verdict(
    metrics: dict,
    scalars: dict[str, dict[str, float | None]],
    chains: int,
    draws: int,
    settings: Settings,
    potential: np.ndarray | None = None,
) -> tuple[list[str], list[str]]:
    """Why a run's chains have not converged, one line per cause with what to run (empty if they
    have), and notes that inform without judging; by the rules of the module docstring.
    ``metrics``: `summarise`'s and the divergences'; ``scalars``: `scalar_diagnostics` of the
    potential and the sampled hyperparameters; ``chains`` of ``draws`` each; ``settings``: the
    run's, which the advice changes; ``potential``: its draws ``(chains, draws)``, whose
    trend sets the advised ``burn_in``."""
    reasons: list[str] = []
    if metrics.get("divergences"):
        advice = f"sampler.lr={settings.lr / 2:.2g}" if settings.lr else "a smaller sampler.lr"
        if settings.target_accept is not None:
            target = max(settings.target_accept, min(0.99, (1 + settings.target_accept) / 2))
            advice += f" or sampler.target_accept={target:.3g}"
        reasons.append(
            f"{metrics['divergences']} divergences ({metrics['divergence_fraction']:.1%}): {advice}"
        )
    frozen = set(metrics.get("frozen_chains", []))
    if potential is not None and potential.shape[1] > 1:
        frozen |= {k for k in range(potential.shape[0]) if np.ptp(potential[k]) == 0}
    frozen = sorted(frozen)
    if frozen:
        step = f" (now {settings.lr:g})" if settings.lr else ""
        reasons.append(
            f"chain{'s' * (len(frozen) > 1)} {', '.join(map(str, frozen))} never moved (every "
            f"draw equal): check sampler.lr{step}"
        )
        return reasons, _notes(metrics, chains)  # what else fails follows from it
    if draws < MIN_JUDGED_DRAWS:
        reasons.append(
            f"{draws} draws a chain, under the {MIN_JUDGED_DRAWS} needed to judge: "
            f"epochs={settings.epochs_for(MIN_JUDGED_DRAWS)}"
        )
        return reasons, _notes(metrics, chains)
    rhat_bound, ess_bound = rhat_limit(chains, draws), ess_limit(chains, draws)
    burn_in = settings.burn_in
    found = scalars.get("potential", {})
    failing = (
        not found.get("rhat", 1) <= rhat_bound
        or min(found.get("ess_bulk") or math.inf, found.get("ess_tail") or math.inf) < ess_bound
    )
    drop = settled(potential, rhat_bound) if failing and _has(potential) else 0
    if drop:  # judged on what the longer burn-in keeps; the predictive's R-hat follows the trend
        burn_in += drop * settings.thin
        reasons.append(
            f"the potential still trends after burn-in (R-hat {found['rhat']:.3f}): "
            f"burn_in={burn_in} epochs={settings.epochs_for(draws, burn_in)}"
        )
        scalars = scalars | scalar_diagnostics({"potential": potential[:, drop:]})
    # (factor of draws needed, what was measured, of what, in brief); the worst names the cause.
    # Under 400 draws a chain the ESS limit is a fraction of the draws, which a longer run raises
    # with them: at a constant ESS per draw only the draws that reach 100 a chain pass.
    ess_target = chains * ESS_PER_CHAIN
    short: list[tuple[float, str, str, str]] = []
    for name, found in scalars.items():
        value = found.get("rhat")
        if value is not None and not value <= rhat_bound:
            measured = f"R-hat of {name} {value:.3f} > {rhat_bound:.3f}"
            short.append((2.0, measured, name, measured))
        for method in ("bulk", "tail"):
            value = found.get(f"ess_{method}")
            if value is not None and value < ess_bound:
                measured = f"{method} ESS of {name} {value:.0f} < {ess_bound:g}"
                short.append(
                    (ess_target / value, measured, name, f"ESS {value:.0f} < {ess_bound:g}")
                )
    mcse, error = metrics.get("nll_mcse"), metrics.get("nll_se")
    if mcse is not None and error and mcse > MCSE_RATIO * error:
        measured = f"test NLL ±{mcse:.2g} by chance > ±{error:.2g}/2"
        short.append(
            ((mcse / (MCSE_RATIO * error)) ** 2, measured, "test NLL", f"±{mcse:.2g} by chance")
        )
    for method in ("bulk", "tail"):
        value = metrics.get(f"ess_{method}_p10")
        if value is not None and value < ess_bound:
            measured = f"{method} ESS {value:.0f} < {ess_bound:g} at 10% of points"
            brief = f"ESS {value:.0f} < {ess_bound:g}"
            short.append((ess_target / value, measured, "test predictive", brief))
    factor, measured, subject, brief = max(short, default=(1.0, "", "", ""))
    spread = metrics.get("rhat_p90")
    unmixed = not drop and spread is not None and spread > RHAT_PREDICTIVE_THRESHOLD
    if unmixed:  # beyond GROWTH_CAP the note gives the measurement; the line keeps to 100
        factor = max(factor, 2.0)
        which = f"90th-percentile R-hat {spread:.2f} > {RHAT_PREDICTIVE_THRESHOLD}"
        which = f"R-hat {spread:.2f}" if factor > GROWTH_CAP else which
        more = _more(settings, draws, factor, burn_in)
        reasons.append(f"test predictive not mixed ({which}): {more}")
    elif factor > GROWTH_CAP:
        more = _more(settings, draws, factor, burn_in)
        reasons.append(f"{subject} mixes slowly ({brief}): {more}")
    elif short:
        more = _more(settings, draws, factor, burn_in)
        reasons.append(f"too few effective draws ({measured}): {more}")
    notes = _notes(metrics, chains, scalars, draws, settings.thin)
    if factor > GROWTH_CAP:
        said = (
            f"{measured} asks {factor:.0f}x the draws at this rate; the advice tries {GROWTH_CAP}x"
        )
        notes.insert(0, said)
        if not unmixed and all(entry[2] in scalars for entry in short):
            notes.insert(
                1, f"the test predictive passed: the predictions have mixed, {subject} not"
            )
    return reasons, notes


def _more(settings: Settings, draws: int, factor: float, burn_in: int) -> str:
    """What to run for ``factor`` times the ``draws`` a chain after ``burn_in``: ``epochs=``
    for at most `GROWTH_CAP` times; beyond it, where the schedule lets the run extend, a run
    until converged within `GROWTH_CAP` times (it stops when the verdict passes)."""
    epochs = settings.epochs_for(math.ceil(draws * min(factor, GROWTH_CAP)), burn_in)
    if factor > GROWTH_CAP and settings.extendable:
        return f"until_converged=true max_epochs={epochs}"
    return f"epochs={epochs}"


def _has(values: np.ndarray | None) -> bool:
    """Whether ``values`` are ``(chains, draws)`` enough for `settled` to drop tenths of."""
    return values is not None and values.ndim == 2 and values.shape[1] >= 2 * MIN_DRAWS


def _notes(
    metrics: dict, chains: int, scalars: dict | None = None, draws: int = 0, thin: int = 1
) -> list[str]:
    """What informs without judging: what one chain cannot show, an ESS so small a fraction of
    the draws that a larger ``thin`` (the run's is ``thin``) would save space, weight-space
    R-hat."""
    notes = []
    if chains == 1:
        notes.append(
            "one chain: judged on its trend and ESS; only chains=4 can show it found every mode"
        )
    for name, found in (scalars or {}).items():
        ess_bulk = found.get("ess_bulk")
        if ess_bulk is not None and draws and ess_bulk < THIN_NOTE * chains * draws:
            every = max(2, int(chains * draws / ess_bulk / 2))
            notes.append(
                f"ESS of {name} {ess_bulk / (chains * draws):.0%} of the draws: "
                f"thin={every * thin} would store {every}x fewer"
            )
            break
    weight = metrics.get("weight_rhat_max")
    if weight is not None and weight > RHAT_PREDICTIVE_THRESHOLD:
        notes.append(
            f"weight-space R-hat up to {weight:.3f}, as a network's symmetries give; not judged"
        )
    return notes


def cap(chains: int, draws: int) -> float:
    """arviz's largest bulk ESS, ``M log10 M`` for ``M = 2 chains (draws // 2)`` split draws:
    its estimator floors the autocorrelation time at ``1/log10 M``, so a value at the cap means
    that no autocorrelation was measured (always the case with fewer than 10 draws per chain)."""
    split = 2 * chains * (draws // 2)
    return split * math.log10(split) if split > 1 else 0.0
