"""``bdl-report --plot``: the figures of a set of runs, drawn from their ``curve.csv`` files.

- ``test_error`` (classification) and ``test_rmse`` (regression): the running model average's
  test error (RMSE) of each run or sweep group, mean over its runs (seeds), against epochs and
  against gradient evaluations: the shape of Chen et al. (2014)'s Fig. 3 and of the comparisons of
  samplers at equal cost.
- ``trace_<run>``: the mean potential per step and every Gibbs-sampled hyperparameter against
  epochs, one line per chain (a ``chain`` column of ``curve.csv``; a run without one is chain 0).
- ``rhat_<run>``: the histogram of the split R-hat per test point (Vehtari et al. 2021), when the
  run has a ``diagnostics.csv`` with an ``rhat`` column; the dashed line is their 1.01 threshold.

Every figure is written as PNG and PDF. ``curve.csv`` has no per-epoch count of gradient
evaluations: a run's ``grad_evals`` (``metrics.json``) over its ``epochs`` is taken as the count
per epoch, exact for every sampler whose epochs cost the same number of gradients (all but HMC
with a random trajectory length). A ``grad_evals`` column in ``curve.csv``, where present, is
used instead.

Figures are made with :class:`matplotlib.figure.Figure` rather than ``pyplot``, so that drawing
touches no global state and needs no display.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bdl import diagnostics

__all__ = [
    "curve",
    "draw",
    "figures",
    "rhat_figure",
    "save",
    "test_error_figure",
    "trace_figure",
]

CURVE_FILE = "curve.csv"
TASKS = {"classification": ("test_error", "test error"), "regression": ("test_rmse", "test RMSE")}


def curve(run_dir: str | Path, metrics: dict | None = None) -> pd.DataFrame:
    """A run's ``curve.csv``, with ``test_error`` (1 − accuracy) for classification, and a
    ``grad_evals`` column (cumulative, at the end of each epoch) derived from ``metrics`` (the run's
    ``grad_evals`` over all its ``chains``, and ``epochs``) when the file has none: a chain's
    own."""
    frame = pd.read_csv(Path(run_dir) / CURVE_FILE)
    metrics = metrics or {}
    if "test_accuracy" in metrics:
        frame["test_error"] = 1.0 - frame["test_metric"]
    else:
        frame["test_rmse"] = frame["test_metric"]
    if "grad_evals" not in frame and metrics.get("grad_evals") and metrics.get("epochs"):
        per_epoch = metrics["grad_evals"] / metrics["epochs"] / metrics.get("chains", 1)
        frame["grad_evals"] = frame["epoch"] * per_epoch
    return frame


def _group_label(by: Sequence[str], key: tuple, runs: pd.DataFrame) -> str:
    if by:
        return ", ".join(f"{k}={v}" for k, v in zip(by, key, strict=True))
    if len(runs) == 1:
        return Path(runs["run_dir"].iloc[0]).name
    return f"{len(runs)} runs"


def test_error_figure(
    groups: Sequence[tuple[str, Sequence[pd.DataFrame]]], column: str, name: str
) -> Figure:
    """Two panels, against epochs and against gradient evaluations: one line per group, the mean
    of ``column`` over the group's curves at each epoch where it is defined (after burn-in)."""
    figure = Figure(figsize=(11, 4.2), layout="constrained")
    by_epoch, by_grads = figure.subplots(1, 2, sharey=True)
    lows, finals = [], []
    for label, curves in groups:
        frame = pd.concat(curves).dropna(subset=[column])
        mean = frame.groupby("epoch", sort=True)[column].mean()
        by_epoch.plot(mean.index.to_numpy(), mean.to_numpy(), label=label)
        if "grad_evals" in frame:
            grads = frame.groupby("epoch", sort=True)["grad_evals"].mean()
            by_grads.plot(grads.to_numpy(), mean.to_numpy(), label=label)
        if len(mean):
            lows.append(mean.min())
            finals.append(mean.iloc[-1])
    if finals and max(finals) > 0:
        # an optimiser's first epochs (SGD's 88% error) would flatten every line's end: show,
        # as Chen et al.'s Fig. 3 does, the range where the curves end
        by_epoch.set_ylim(0.9 * min(lows), 3 * max(finals))
    by_epoch.set(xlabel="epoch", ylabel=name, title=f"{name} of the model average")
    by_grads.set(xlabel="gradient evaluations", title=f"{name} against cost")
    by_grads.set_xscale("log")
    by_epoch.legend(fontsize="small")
    return figure


def trace_figure(frame: pd.DataFrame, title: str) -> Figure:
    """The potential and each hyperparameter column (``precision/…``, ``noise_precision``) of a
    curve against epochs, one line per chain."""
    columns = ["potential"] + [
        c for c in frame.columns if c.startswith("precision/") or c == "noise_precision"
    ]
    chains = frame.groupby("chain", sort=True) if "chain" in frame else [(0, frame)]
    width = min(len(columns), 3)
    rows = -(-len(columns) // width)
    figure = Figure(figsize=(4.2 * width, 3.0 * rows), layout="constrained")
    axes = np.atleast_1d(figure.subplots(rows, width, squeeze=False)).ravel()
    for column, ax in zip(columns, axes, strict=False):
        for chain, part in chains:
            ax.plot(part["epoch"].to_numpy(), part[column].to_numpy(), label=f"chain {chain}")
        ax.set(xlabel="epoch", title="potential per step" if column == "potential" else column)
    for ax in axes[len(columns) :]:
        ax.set_axis_off()
    axes[0].legend(fontsize="small")
    figure.suptitle(title)
    return figure


def rhat_figure(rhat: np.ndarray, title: str, bins: int = 30) -> Figure:
    """The histogram of R-hat over test points (non-finite values left out)."""
    figure = Figure(figsize=(5.5, 4), layout="constrained")
    ax = figure.subplots()
    finite = rhat[np.isfinite(rhat)]
    ax.hist(finite, bins=bins)
    ax.axvline(diagnostics.RHAT_THRESHOLD, color="black", linestyle="--", linewidth=1)
    ax.set(xlabel="R-hat", ylabel="test points", title=title)
    return figure


def save(figure: Figure, stem: Path) -> list[Path]:
    """``stem.png`` and ``stem.pdf``."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        figure.savefig(path, dpi=150)
    return paths


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text).strip("_") or "run"


def figures(runs: pd.DataFrame, by: Sequence[str]) -> dict[str, Figure]:
    """Every figure of the runs of ``runs`` (a :func:`bdl.sweeps.load_runs` table) grouped by
    ``by``, by file stem."""
    metrics = {
        row["run_dir"]: {
            k: row[k]
            for k in ("test_accuracy", "grad_evals", "epochs")
            if k in row and pd.notna(row[k])
        }
        for _, row in runs.iterrows()
    }
    curves = {d: curve(d, metrics[d]) for d in runs["run_dir"] if (Path(d) / CURVE_FILE).is_file()}
    out: dict[str, Figure] = {}
    grouped = list(runs.groupby(list(by), sort=True, dropna=False)) if by else [((), runs)]
    for column, name in TASKS.values():
        groups = []
        for key, sub in grouped:
            members = [curves[d] for d in sub["run_dir"] if d in curves and column in curves[d]]
            if members:
                key = key if isinstance(key, tuple) else (key,)
                groups.append((_group_label(by, key, sub), members))
        if groups:
            out[column] = test_error_figure(groups, column, name)
    common = Path(os.path.commonpath(list(curves))) if len(curves) > 1 else None
    for run_dir, frame in curves.items():
        label = str(Path(run_dir).relative_to(common)) if common else Path(run_dir).name
        out[f"trace_{_slug(label)}"] = trace_figure(frame, label)
        per_point = Path(run_dir) / diagnostics.FILE
        if per_point.is_file():
            table = pd.read_csv(per_point)
            if "rhat" in table:
                rhat = table["rhat"].to_numpy(dtype=float)
                out[f"rhat_{_slug(label)}"] = rhat_figure(rhat, f"R-hat, {label}")
    return out


def draw(runs: pd.DataFrame, by: Sequence[str], out: Path) -> list[Path]:
    """:func:`figures`, saved under ``out``; returns the files written."""
    return [path for stem, fig in figures(runs, by).items() for path in save(fig, out / stem)]
