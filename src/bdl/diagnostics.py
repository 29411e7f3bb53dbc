r"""Convergence diagnostics of a run's chains, by arviz.

Weight space says little about a neural network's posterior: permutations of hidden units and
other symmetries give many equivalent modes, so chains that agree on every prediction can
disagree on every weight. Convergence is therefore judged in function space, as Izmailov et al.
(2021) and the NeurIPS 2021 approximate-inference competition do: for each test point
:math:`i` and each posterior sample :math:`s` of each chain, the quantity followed is the
log-probability of its label, :math:`\log p(y_i \mid x_i, \theta_s)` (a Gaussian density in the
targets' original units for regression). Split R-hat and the bulk and tail effective sample
sizes of Vehtari et al. (2021) (rank-normalised, arviz's defaults) are computed per test point.

Thresholds. Vehtari et al. recommend :math:`\hat R < 1.01` for a quantity with a bulk ESS of
400 or more. Over thousands of test points that threshold is exceeded by chance alone: R-hat's
own Monte Carlo spread is about 0.005 with 4 chains of 100 independent draws, whose 95th
percentile over 10,000 points is then 1.013 and maximum 1.04 (measured). ``rhat_p95`` is reported
against 1.01; the warning that the chains have not converged is raised when the maximum exceeds
1.1, the limit of Gelman et al. (2013), which converged chains of that length do not reach.

A documented subset of weights is followed too (:data:`WEIGHT_PROBES` coordinates evenly spaced
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

#: Vehtari et al. (2021): a quantity whose R-hat exceeds this has not converged.
RHAT_THRESHOLD = 1.01
#: Gelman et al. (2013): the classic limit; the warning applies it to the largest R-hat over test
#: points.
RHAT_MAX_THRESHOLD = 1.1
#: A run's per-test-point R-hat and ESS.
FILE = "diagnostics.csv"
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


def summarise(pointwise: np.ndarray, weights: np.ndarray) -> tuple[dict[str, float], dict]:
    """Metrics and the per-test-point table from ``pointwise`` ``(chains, draws, points)`` and
    ``weights`` ``(chains, draws, probes)``.

    R-hat compares chains: arviz computes it from two chains or more, so a run of one chain gets
    the effective sample sizes alone. Test points whose draws are all equal (a label predicted
    with probability 1 to float precision) have neither; they are counted (``points_constant``)
    and left out of the summaries. Chains each constant but different from one another have an
    infinite R-hat, which is kept."""
    with np.errstate(invalid="ignore"):  # a sample giving a point zero density: -inf - -inf
        constant = np.ptp(pointwise.reshape(-1, pointwise.shape[-1]), axis=0) == 0
    metrics: dict[str, float | None] = {"points_constant": int(constant.sum())}
    table: dict[str, np.ndarray] = {"point": np.arange(pointwise.shape[-1])}
    if pointwise.shape[0] > 1:
        table["rhat"] = rhat(pointwise)
        metrics |= _extreme("rhat_max", table["rhat"], np.max)
        metrics |= _extreme("rhat_p95", table["rhat"], lambda r: np.percentile(r, 95))
        metrics |= _extreme("weight_rhat_max", rhat(weights), np.max)
    else:
        metrics |= dict.fromkeys(("rhat_max", "rhat_p95", "weight_rhat_max"))
    chains, draws = pointwise.shape[:2]
    table["ess_bulk"] = _measured(ess(pointwise, "bulk"), chains, draws)
    table["ess_tail"] = _measured(ess(pointwise, "tail"), chains, draws)
    metrics |= _extreme("ess_bulk_min", table["ess_bulk"], np.min)
    metrics |= _extreme("ess_tail_min", table["ess_tail"], np.min)
    weight_ess = _measured(ess(weights, "bulk"), chains, draws)
    metrics |= _extreme("weight_ess_bulk_min", weight_ess, np.min)
    return metrics, table


def _measured(values: np.ndarray, chains: int, draws: int) -> np.ndarray:
    """``values`` with the effective sample sizes at arviz's :func:`cap` set to NaN: there no
    autocorrelation was measured, and the number is the estimator's ceiling, not an ESS."""
    return np.where(values >= cap(chains, draws) * (1 - 1e-9), np.nan, values)


def _extreme(name: str, values: np.ndarray, reduce) -> dict[str, float | None]:
    """``{name: reduce(values)}`` over the values arviz measured (not NaN); None if none."""
    measured = values[~np.isnan(values)]
    return {name: float(reduce(measured)) if measured.size else None}


def warning(metrics: dict[str, float | None]) -> str | None:
    """A line saying that the function-space R-hat exceeds :data:`RHAT_MAX_THRESHOLD`, if so."""
    if not (metrics.get("rhat_max") or 1.0) > RHAT_MAX_THRESHOLD:
        return None
    return (
        f"the chains have not converged in function space: R-hat up to {metrics['rhat_max']:.3f} "
        f"over test points (> {RHAT_MAX_THRESHOLD}, Gelman et al. 2013; 95th percentile "
        f"{metrics['rhat_p95']:.3f}, against {RHAT_THRESHOLD} of Vehtari et al. 2021). Run more "
        "epochs, or check the step size (per-point values in diagnostics.csv)"
    )


def cap(chains: int, draws: int) -> float:
    """arviz's largest bulk ESS, ``M log10 M`` for ``M = 2 chains (draws // 2)`` split draws:
    its estimator floors the autocorrelation time at ``1/log10 M``, so a value at the cap means
    that no autocorrelation was measured (always the case with fewer than 10 draws per chain)."""
    split = 2 * chains * (draws // 2)
    return split * math.log10(split) if split > 1 else 0.0
