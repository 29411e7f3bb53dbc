r"""Signal-to-noise pruning curves (Blundell et al. 2015, Table 1; Bühler §2.2.1).

The network's parameters are ordered by their posterior signal-to-noise ratio
$|\mu_j|/\sigma_j$ — the mean and standard deviation of $q$ for variational methods, the
sample mean and standard deviation across the kept samples for MCMC (streamed from the sample
store with Welford's running moments, so a long chain costs one sample's memory) — and the lowest
fraction is set to zero ("replacing their variational posterior with a constant zero"). At each
fraction the Bayesian model average over the run's samples (at most ``max_samples`` of them,
evenly spaced, which bounds the cost to ``fractions × max_samples`` test-set passes) is scored on
the test set. Ties in the ratio (e.g. $\sigma = 0$ for a single SGD solution) are broken by
$|\mu|$, so that a point estimate is pruned by magnitude.

All of the network's parameters are candidates, biases included (they too have a posterior); the
likelihood's (a noise precision) are not. ``pruning.csv`` has one row per fraction:
``fraction_removed``, ``weights_kept`` and the test metric, ``test_error`` for classification or
``test_rmse`` (original units) for regression; ``pruning.png`` plots it.

Whether the ratio can rank the weights is seen in its distribution: ``signal_to_noise.png``
draws the histograms of $\sigma$ and of the ratio in decibels, $10\log_{10}
(|\mu|/\sigma)$ (Blundell et al.'s Fig. 4), and ``signal_to_noise.csv`` holds their quantiles. A
$\sigma$ that barely left its initial value, the same for every weight, makes the ratio a
ranking by $|\mu|$ alone.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from bdl.composition.network import predict_samples
from bdl.storage.store import count_samples, load_samples

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "FRACTIONS",
    "curve_from_store",
    "pruning_curve",
    "prune_masks",
    "pruning_figure",
    "running_moments",
    "signal_to_noise_figure",
    "signal_to_noise_order",
    "write_curve",
    "write_signal_to_noise",
]

#: The quantiles of σ and of the signal-to-noise ratio in ``signal_to_noise.csv``.
QUANTILES = (0.0, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 1.0)

#: Blundell's 0/50/75/95/98% and a finer grid between.
FRACTIONS = tuple(i / 10 for i in range(8)) + (0.75, 0.8, 0.85, 0.9, 0.95, 0.96, 0.97, 0.98, 0.99)


def running_moments(
    samples: Iterable[Mapping[str, Tensor]], names: Sequence[str]
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Mean and (population) standard deviation of ``names`` across ``samples``, one pass
    (Welford 1962), in float64."""
    count = 0
    mean: dict[str, Tensor] = {}
    m2: dict[str, Tensor] = {}
    for sample in samples:
        count += 1
        for name in names:
            x = sample[name].double()
            if name not in mean:
                mean[name], m2[name] = x.clone(), torch.zeros_like(x)
                continue
            delta = x - mean[name]
            mean[name] += delta / count
            m2[name] += delta * (x - mean[name])
    if count == 0:
        raise ValueError("no samples to take moments of: the run kept none")
    return mean, {name: (m2[name] / count).sqrt() for name in names}


def signal_to_noise_order(mean: Mapping[str, Tensor], std: Mapping[str, Tensor]) -> Tensor:
    """Flat indices (over the concatenated tensors, in ``mean``'s order) from the lowest
    $|\\mu|/\\sigma$ to the highest, ties broken by $|\\mu|$."""
    magnitude = torch.cat([m.detach().flatten().abs().double() for m in mean.values()])
    sigma = torch.cat([std[name].detach().flatten().double() for name in mean])
    ratio = magnitude / sigma  # |μ|/0 = inf, 0/0 = nan: both are resolved below
    ratio = torch.where(sigma > 0, ratio, torch.where(magnitude > 0, math.inf, 0.0))
    by_magnitude = torch.argsort(magnitude, stable=True)
    return by_magnitude[torch.argsort(ratio[by_magnitude], stable=True)]


def prune_masks(
    order: Tensor, shapes: Mapping[str, torch.Size], fraction: float
) -> dict[str, Tensor]:
    """Boolean keep-masks shaped like ``shapes`` that remove exactly ``round(fraction · D)`` of
    the ``D`` parameters, the first ones in ``order``."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"a pruning fraction must be in [0, 1], got {fraction}")
    total = order.numel()
    keep = torch.ones(total, dtype=torch.bool)
    keep[order[: round(fraction * total)]] = False
    sizes = [math.prod(shape) for shape in shapes.values()]
    return {
        name: part.view(shape)
        for (name, shape), part in zip(shapes.items(), keep.split(sizes), strict=True)
    }


def pruning_curve(
    model: nn.Module,
    likelihood: nn.Module,
    prunable: Sequence[str],
    mean: Mapping[str, Tensor],
    std: Mapping[str, Tensor],
    samples: Sequence[Mapping[str, Tensor]],
    x: Tensor,
    score: Callable[[list[Tensor]], float],
    fractions: Sequence[float] = FRACTIONS,
) -> list[dict[str, float]]:
    """The pruning curve of a run: one ``{"fraction_removed", "weights_kept", "score"}`` per
    fraction.

    Args:
        model, likelihood: the network, which holds each pruned sample in turn
            (`bdl.composition.network.predict_samples`) and its own values again after.
        prunable: the names of the candidates for pruning.
        mean, std: their posterior moments.
        samples: the (bounded) posterior samples whose model average is scored.
        x: the test inputs.
        score: the test metric of the average of a list of per-sample predictives.
    """
    order = signal_to_noise_order({n: mean[n] for n in prunable}, std)
    shapes = {name: mean[name].shape for name in prunable}
    rows = []
    for fraction in fractions:
        masks = prune_masks(order, shapes, fraction)
        pruned = (
            {
                name: value * masks[name].to(value.device) if name in masks else value
                for name, value in sample.items()
            }
            for sample in samples
        )
        predictions = [output for (output,) in predict_samples(model, likelihood, pruned, [x])]
        kept = sum(int(mask.sum()) for mask in masks.values())
        rows.append(
            {"fraction_removed": fraction, "weights_kept": kept, "score": score(predictions)}
        )
    return rows


def write_curve(directory: Path, rows: list[dict[str, float]], metric: str) -> Path:
    """``pruning.csv`` (the score column named ``metric``) and its plot ``pruning.png``."""
    path = directory / "pruning.csv"
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["fraction_removed", "weights_kept", metric])
        for row in rows:
            writer.writerow([row["fraction_removed"], row["weights_kept"], row["score"]])

    from bdl.analysis.plots import run_title  # matplotlib is imported only to draw

    pruning_figure(rows, metric, run_title(directory)).savefig(directory / "pruning.png", dpi=120)
    return path


def write_signal_to_noise(
    directory: Path, mean: Mapping[str, Tensor], std: Mapping[str, Tensor]
) -> Path:
    r"""``signal_to_noise.csv`` (quantiles of $\sigma$ and of $|\mu|/\sigma$ in dB
    over every parameter of ``mean``) and the histograms ``signal_to_noise.png``."""
    sigma = torch.cat([std[name].detach().flatten().double().cpu() for name in mean])
    magnitude = torch.cat([m.detach().flatten().double().cpu().abs() for m in mean.values()])
    decibels = 10 * torch.log10(magnitude / sigma)
    q = torch.tensor(QUANTILES, dtype=torch.float64)
    finite = decibels[torch.isfinite(decibels)]
    path = directory / "signal_to_noise.csv"
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["quantile", "sigma", "snr_db"])
        snr = torch.quantile(finite, q) if finite.numel() else torch.full_like(q, math.nan)
        for row in zip(q.tolist(), torch.quantile(sigma, q).tolist(), snr.tolist(), strict=True):
            writer.writerow(row)

    from bdl.analysis.plots import run_title  # matplotlib is imported only to draw

    figure = signal_to_noise_figure(sigma.numpy(), finite.numpy(), run_title(directory))
    figure.savefig(directory / "signal_to_noise.png", dpi=120)
    return path


def pruning_figure(rows: Sequence[Mapping[str, float]], metric: str, title: str) -> Figure:
    """The pruning curve ``rows`` (`pruning_curve`) of ``metric``, titled with the run."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5.5, 3.8), layout="constrained")
    axes = figure.subplots()
    scale = 100 if metric == "test_error" else 1
    axes.plot([100 * r["fraction_removed"] for r in rows], [scale * r["score"] for r in rows], "o-")
    axes.set_xlabel("weights removed by signal-to-noise ratio (%)")
    axes.set_ylabel("test error (%)" if metric == "test_error" else "test RMSE")
    axes.grid(alpha=0.3)
    axes.set_title(f"pruning by signal to noise — {title}", fontsize="medium")
    return figure


def signal_to_noise_figure(sigma: np.ndarray, decibels: np.ndarray, title: str) -> Figure:
    """The histograms of the posterior standard deviations ``sigma`` (on a log axis where they
    span more than `bdl.analysis.plots.SPREAD`) and of the finite ratios ``decibels``."""
    from matplotlib.figure import Figure

    from bdl.analysis.plots import scale_to_spread

    figure = Figure(figsize=(9, 3.8), layout="constrained")
    left, right = figure.subplots(1, 2)
    positive = sigma[sigma > 0]
    if positive.size:
        if scale_to_spread(left, positive, axis="x") == "log":
            left.hist(positive, bins=np.geomspace(positive.min(), positive.max() * (1 + 1e-9), 60))
        else:
            left.hist(positive, bins=60)
    left.set(xlabel="σ", ylabel="parameters", title="posterior standard deviations")
    right.hist(decibels, bins=60)
    right.set(xlabel="signal-to-noise ratio |μ|/σ (dB)", title="signal-to-noise ratios")
    figure.suptitle(f"signal to noise — {title}")
    return figure


def curve_from_store(
    store_directory: Path,
    model: nn.Module,
    likelihood: nn.Module,
    prunable: Sequence[str],
    moments: tuple[Mapping[str, Tensor], Mapping[str, Tensor]] | None,
    x: Tensor,
    score: Callable[[list[Tensor]], float],
    max_samples: int,
) -> tuple[list[dict[str, float]], dict[str, Tensor], dict[str, Tensor]]:
    """`pruning_curve` of the run whose samples are in ``store_directory``, in one pass over
    the store: running moments (unless ``moments`` are given, as $q$'s are) and the at most
    ``max_samples`` evenly spaced samples of the model average. Returns the curve and the
    moments of the ``prunable`` parameters it ranked them by."""
    count = count_samples(store_directory)
    if count == 0:
        raise ValueError(f"{store_directory} holds no samples to draw a pruning curve from")
    chosen = set(torch.linspace(0, count - 1, min(count, max_samples)).round().long().tolist())
    subset: list[Mapping[str, Tensor]] = []

    def stream() -> Iterator[Mapping[str, Tensor]]:
        for index, (sample, _) in enumerate(load_samples(store_directory)):
            if index in chosen:
                subset.append(sample)
            yield sample

    if moments is None:
        mean, std = running_moments(stream(), prunable)
    else:
        mean, std = ({n: m[n] for n in prunable} for m in moments)
        for _ in stream():
            pass
    curve = pruning_curve(model, likelihood, prunable, mean, std, subset, x, score)
    return curve, mean, std
