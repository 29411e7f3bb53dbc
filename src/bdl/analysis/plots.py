"""The figures of runs, drawn from their ``curve.csv`` files: ``bdl-report --plot`` and each run's
``summary.png``.

``bdl-report --plot`` draws:

- ``test_error`` (classification) and ``test_rmse`` (regression): the running model average's
  test error (RMSE) of each run or sweep group, mean over its runs (seeds) with a band of ± one
  standard deviation over them where a group has two runs or more, against epochs and against
  gradient evaluations: the shape of Chen et al. (2014)'s Fig. 3 and of the comparisons of
  samplers at equal cost.
- ``trace_<run>``: the mean potential per step and every Gibbs-sampled hyperparameter against
  epochs, one line per chain (a ``chain`` column of ``curve.csv``; a run without one is chain 0).
- ``rhat_<run>``: the histogram of the split R-hat per test point (Vehtari et al. 2021), when the
  run has a ``diagnostics.csv`` with an ``rhat`` column; the dashed line is their 1.01 threshold.

Every run writes ``summary.png`` (`write_summary`): its test metric per chain, its
potential per chain and, for several chains, the R-hat histogram, drawn by the same functions;
a classification run also writes ``reliability.png`` (`reliability_figure`), the reliability
diagram of its model average on the test set (DeGroot & Fienberg 1983; Guo et al. 2017): the
accuracy of the points in each bin of top-class confidence against their mean confidence, the
diagonal being perfect calibration, with the number of points per bin below and the ECE titled.

How they read: a dashed vertical line marks the end of burn-in (the run's ``burn_in`` epoch) where
the run has one; an optimiser's or variational fit's curve has its test metric from the first
epoch, burn-in is moot there and not marked. A y axis is logarithmic when every value drawn on it
is positive and the largest is more than `SPREAD` times the smallest (a potential that
falls from 10⁵ to 10³ would otherwise flatten into its first epochs); linear otherwise. Titles
name the dataset, sampler and seed of a run (with the keys its sweep varies), or the sweep.

Every ``bdl-report`` figure is written as PNG and PDF. ``curve.csv`` has no per-epoch count of
gradient evaluations: a run's ``grad_evals`` (``metrics.json``) over its ``epochs`` is taken as
the count per epoch, exact for every sampler whose epochs cost the same number of gradients (all
but HMC with a random trajectory length). A ``grad_evals`` column in ``curve.csv``, where present,
is used instead.

Figures are made with `matplotlib.figure.Figure` rather than ``pyplot``, so that drawing
touches no global state and needs no display.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullFormatter
from torch import Tensor

from bdl import diagnostics

__all__ = [
    "SPREAD",
    "Group",
    "curve",
    "draw",
    "figures",
    "group_of",
    "mark_burn_in",
    "reliability_figure",
    "rhat_figure",
    "run_label",
    "run_title",
    "save",
    "scale_to_spread",
    "sweep_title",
    "summary_figure",
    "test_error_figure",
    "trace_figure",
    "write_summary",
]

log = logging.getLogger("bdl")

CURVE_FILE = "curve.csv"
SUMMARY_FILE = "summary.png"
RELIABILITY_FILE = "reliability.png"
TASKS = {"classification": ("test_error", "test error"), "regression": ("test_rmse", "test RMSE")}

#: The ratio of the largest to the smallest value on an axis above which it is logarithmic.
SPREAD = 20.0

#: Keys that `run_label` names by themselves.
_NAMED = ("dataset", "dataset.name", "sampler", "sampler.name", "seed")


class Group(NamedTuple):
    """The runs drawn as one line: a label, their curves, and the burn-in to mark (None: none)."""

    label: str
    curves: Sequence[pd.DataFrame]
    burn_in: int | None = None


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


def _value(record: Mapping[str, Any], *keys: str) -> Any:
    """The first of ``keys`` that ``record`` holds a value for (None if none does)."""
    for key in keys:
        value = record.get(key)
        if value is not None and not (isinstance(value, float) and np.isnan(value)):
            return value
    return None


def run_label(record: Mapping[str, Any], by: Sequence[str] = ()) -> str:
    """``"yacht sghmc seed 0"``: a run's dataset, sampler and seed from its config (a
    `bdl.analysis.sweeps.load_runs` row, or `_record`), then the keys ``by`` that a sweep
    varies; the run directory's name when the config names none of them."""
    sampler = _value(record, "sampler", "sampler.name")
    if sampler is None and _value(record, "sampler._target_"):
        sampler = str(record["sampler._target_"]).rsplit(".", 1)[-1]
    parts = [str(v) for v in (_value(record, "dataset", "dataset.name"), sampler) if v is not None]
    seed = _value(record, "seed")
    if seed is not None:
        parts.append(f"seed {int(seed)}")
    label = " ".join(parts) or Path(str(record.get("run_dir", "run"))).name
    extra = [f"{k}={record[k]}" for k in by if k not in _NAMED and _value(record, k) is not None]
    return ", ".join([label, *extra])


def _burn_in(record: Mapping[str, Any], frame: pd.DataFrame) -> int | None:
    """The run's ``burn_in`` where it has one to mark: positive, and no test metric before it (an
    optimiser's or a variational fit's curve has one from the first epoch)."""
    burn_in = _value(record, "burn_in")
    if burn_in is None or int(burn_in) <= 0 or "test_metric" not in frame:
        return None
    before = frame.loc[frame["epoch"] <= int(burn_in), "test_metric"]
    return None if before.notna().any() else int(burn_in)


def scale_to_spread(ax: Axes, values: Sequence[float] | np.ndarray, axis: str = "y") -> str:
    """Set ``ax``'s ``axis`` logarithmic when every finite value of ``values`` is positive and
    the largest exceeds `SPREAD` times the smallest, linear otherwise; returns the scale."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    spread = finite.size and finite.min() > 0 and finite.max() > SPREAD * finite.min()
    scale = "log" if spread else "linear"
    (ax.set_yscale if axis == "y" else ax.set_xscale)(scale)
    if scale == "log" and axis == "x":
        # labels of the ticks between decades (2×10⁻², 3×10⁻², ...) run into each other side by side
        ax.xaxis.set_minor_formatter(NullFormatter())
    return scale


def mark_burn_in(ax: Axes, at: float | None, color: str = "0.3", label: str = "end of burn-in"):
    """A dashed vertical line at ``at`` (nothing when None)."""
    if at is not None:
        ax.axvline(at, color=color, linestyle="--", linewidth=1, label=label)


def _metric_lines(
    groups: Sequence[Group], column: str, by_epoch: Axes, by_grads: Axes | None = None
) -> tuple[list[float], list[float]]:
    """One line per group on ``by_epoch`` (and against gradient evaluations on ``by_grads``): the
    mean of ``column`` over the group's runs at each epoch where it is defined (each run's own
    chains averaged first), in a band of ± their standard deviation where two runs or more have
    it. Returns every mean drawn and each line's last value."""
    drawn, finals = [], []
    for group in groups:
        per_run = [c.dropna(subset=[column]).groupby("epoch", sort=True) for c in group.curves]
        runs = pd.concat([g[column].mean() for g in per_run], axis=1)
        mean, std = runs.mean(axis=1), runs.std(axis=1)  # std: NaN where one run has the epoch
        if mean.empty:
            continue
        (line,) = by_epoch.plot(mean.index.to_numpy(), mean.to_numpy(), label=group.label)
        color = line.get_color()
        banded = std.notna().to_numpy()
        if banded.any():
            low, high = (mean - std)[banded].to_numpy(), (mean + std)[banded].to_numpy()
            by_epoch.fill_between(mean.index[banded], low, high, color=color, alpha=0.2)
        mark_burn_in(by_epoch, group.burn_in, color=color, label="_nolegend_")
        drawn += mean.tolist()
        finals.append(mean.iloc[-1])
        if by_grads is None or not all("grad_evals" in c for c in group.curves):
            continue
        grads = pd.concat(
            [c.groupby("epoch", sort=True)["grad_evals"].mean() for c in group.curves]
        )
        grads = grads.groupby(level=0).mean()
        by_grads.plot(grads[mean.index].to_numpy(), mean.to_numpy(), color=color, label=group.label)
        if banded.any():
            x = grads[mean.index[banded]].to_numpy()
            by_grads.fill_between(x, low, high, color=color, alpha=0.2)
        if group.burn_in is not None and group.burn_in in grads.index:
            mark_burn_in(by_grads, grads[group.burn_in], color=color, label="_nolegend_")
    return drawn, finals


def test_error_figure(groups: Sequence[Group], column: str, name: str, title: str) -> Figure:
    """Two panels, against epochs and against gradient evaluations, of the groups' ``column``
    (`_metric_lines`), under the suptitle ``title``."""
    # 8 inches, not wider: shown at a documentation page's width (about 760 pixels), its legend and
    # ticks keep a readable size
    figure = Figure(figsize=(8, 3.6), layout="constrained")
    by_epoch, by_grads = figure.subplots(1, 2, sharey=True)
    drawn, finals = _metric_lines(groups, column, by_epoch, by_grads)
    if scale_to_spread(by_epoch, drawn) == "log":
        # the lines' range: a band's lower edge near 0 would stretch a log axis by decades
        by_epoch.set_ylim(min(drawn) / 1.5, 1.5 * max(drawn))
    elif finals and max(finals) > 0:
        # an optimiser's first epochs (SGD's 88% error) would flatten every line's end: show,
        # as Chen et al.'s Fig. 3 does, the range where the curves end
        by_epoch.set_ylim(0.95 * min(drawn), 1.05 * min(max(drawn), 3 * max(finals)))
    banded = any(len(g.curves) > 1 for g in groups)
    by_epoch.set(xlabel="epoch", ylabel=name, title="against epochs (dashed: end of burn-in)")
    by_epoch.xaxis.set_major_locator(MaxNLocator(integer=True))
    by_grads.set(xlabel="gradient evaluations", title="against cost")
    scale_to_spread(by_grads, [x for line in by_grads.lines for x in line.get_xdata()], axis="x")
    by_epoch.legend(fontsize="medium", title="band: ± std over seeds" if banded else None)
    figure.suptitle(f"{name} of the model average — {title}")
    return figure


def _trace_panel(ax: Axes, frame: pd.DataFrame, column: str, burn_in: int | None) -> None:
    """``column`` of ``frame`` against epochs, one line per chain, burn-in marked."""
    chains = frame.groupby("chain", sort=True) if "chain" in frame else [(0, frame)]
    for chain, part in chains:
        ax.plot(part["epoch"].to_numpy(), part[column].to_numpy(), label=f"chain {chain}")
    scale_to_spread(ax, frame[column].to_numpy(dtype=float))
    mark_burn_in(ax, burn_in)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="epoch", title="potential per step" if column == "potential" else column)


def trace_figure(frame: pd.DataFrame, title: str, burn_in: int | None = None) -> Figure:
    """The potential and each hyperparameter column (``precision/…``, ``noise_precision``) of a
    curve against epochs, one line per chain."""
    columns = ["potential"] + [
        c for c in frame.columns if c.startswith("precision/") or c == "noise_precision"
    ]
    width = min(len(columns), 3)
    rows = -(-len(columns) // width)
    figure = Figure(figsize=(4.2 * width, 3.0 * rows + 0.4), layout="constrained")
    axes = np.atleast_1d(figure.subplots(rows, width, squeeze=False)).ravel()
    for column, ax in zip(columns, axes, strict=False):
        _trace_panel(ax, frame, column, burn_in)
    for ax in axes[len(columns) :]:
        ax.set_axis_off()
    axes[0].legend(fontsize="small")
    figure.suptitle(f"trace — {title}")
    return figure


def _rhat_panel(ax: Axes, rhat: np.ndarray, bins: int = 30) -> None:
    """The histogram of R-hat over test points (non-finite values left out), Vehtari et al.'s
    threshold dashed."""
    ax.hist(rhat[np.isfinite(rhat)], bins=bins)
    ax.axvline(diagnostics.RHAT_THRESHOLD, color="black", linestyle="--", linewidth=1)
    ax.set(xlabel="R-hat (dashed: 1.01)", ylabel="test points")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def rhat_figure(rhat: np.ndarray, title: str, bins: int = 30) -> Figure:
    """The histogram of R-hat over test points under the title ``title``."""
    figure = Figure(figsize=(5.5, 4), layout="constrained")
    ax = figure.subplots()
    _rhat_panel(ax, rhat, bins)
    ax.set_title(f"R-hat per test point — {title}", fontsize="medium")
    return figure


def save(figure: Figure, stem: Path) -> list[Path]:
    """``stem.png`` and ``stem.pdf``."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.parent / f"{stem.name}.{suffix}" for suffix in ("png", "pdf")]
    for path in paths:
        figure.savefig(path, dpi=150)
    return paths


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text).strip("_") or "run"


def _rhat(run_dir: str | Path) -> np.ndarray | None:
    """The per-point R-hat of ``diagnostics.csv``, if the run has one."""
    per_point = Path(run_dir) / diagnostics.FILE
    if not per_point.is_file():
        return None
    table = pd.read_csv(per_point)
    return table["rhat"].to_numpy(dtype=float) if "rhat" in table else None


def sweep_title(runs: pd.DataFrame) -> str:
    """``"yacht, sweep <directory>"``: the datasets of ``runs`` and their common directory."""
    datasets = dict.fromkeys(_value(r, "dataset", "dataset.name") for _, r in runs.iterrows())
    dirs = list(runs["run_dir"])
    where = (
        f"run {Path(dirs[0]).name}"
        if len(dirs) == 1
        else f"sweep {Path(os.path.commonpath(dirs)).name}"
    )
    return ", ".join([*(str(d) for d in datasets if d is not None), where])


def group_of(
    label: str, records: Sequence[Mapping[str, Any]], curves: Mapping[str, pd.DataFrame]
) -> Group:
    """The runs ``records`` (`bdl.analysis.sweeps.load_runs` rows) drawn as one line: their
    ``curves`` (by ``run_dir``) and the latest burn-in among them to mark."""
    marks = {_burn_in(r, curves[r["run_dir"]]) for r in records} - {None}
    return Group(label, [curves[r["run_dir"]] for r in records], max(marks) if marks else None)


def figures(runs: pd.DataFrame, by: Sequence[str]) -> dict[str, Figure]:
    """Every figure of the runs of ``runs`` (a `bdl.analysis.sweeps.load_runs` table) grouped by
    ``by``, by file stem."""
    records = {row["run_dir"]: row for _, row in runs.iterrows()}
    # with ``chains``, a run of several chains is drawn against each chain's gradients (`curve`),
    # as its line is the mean of its chains' curves
    keys = ("test_accuracy", "grad_evals", "epochs", "chains")
    metrics = {d: {k: row[k] for k in keys if pd.notna(row.get(k))} for d, row in records.items()}
    curves = {d: curve(d, metrics[d]) for d in records if (Path(d) / CURVE_FILE).is_file()}
    out: dict[str, Figure] = {}
    grouped = list(runs.groupby(list(by), sort=True, dropna=False)) if by else [((), runs)]
    for column, name in TASKS.values():
        groups = []
        for key, sub in grouped:
            members = [d for d in sub["run_dir"] if d in curves and column in curves[d]]
            if members:
                key = key if isinstance(key, tuple) else (key,)
                label = ", ".join(f"{k}={v}" for k, v in zip(by, key, strict=True))
                if not label:
                    label = Path(members[0]).name if len(members) == 1 else f"{len(members)} runs"
                groups.append(group_of(label, [records[d] for d in members], curves))
        if groups:
            out[column] = test_error_figure(groups, column, name, sweep_title(runs))
    common = Path(os.path.commonpath(list(curves))) if len(curves) > 1 else None
    for run_dir, frame in curves.items():
        stem = _slug(str(Path(run_dir).relative_to(common)) if common else Path(run_dir).name)
        label = run_label(records[run_dir], by)
        out[f"trace_{stem}"] = trace_figure(frame, label, _burn_in(records[run_dir], frame))
        rhat = _rhat(run_dir)
        if rhat is not None:
            out[f"rhat_{stem}"] = rhat_figure(rhat, label)
    return out


def draw(runs: pd.DataFrame, by: Sequence[str], out: Path) -> list[Path]:
    """`figures`, saved under ``out``; returns the files written."""
    return [path for stem, fig in figures(runs, by).items() for path in save(fig, out / stem)]


def _record(run_dir: str | Path) -> dict[str, Any]:
    """A run's flattened config with its Hydra choices, as a `bdl.analysis.sweeps.load_runs` row
    holds them."""
    from bdl.analysis.sweeps import CONFIG_FILE, HYDRA_FILE, choices, config_values

    run_dir = Path(run_dir)
    config = config_values(run_dir / CONFIG_FILE) if (run_dir / CONFIG_FILE).is_file() else {}
    return {**choices(run_dir / HYDRA_FILE), **config, "run_dir": str(run_dir)}


def summary_figure(run_dir: str | Path) -> Figure:
    """A run's test metric per chain (the pooled model average's final value dotted), its
    potential per chain, and for several chains with ``diagnostics.csv`` the R-hat histogram,
    in one row, from the files of ``run_dir``, titled with its dataset, sampler, seed and status
    (a completed sampler's with its verdict: converged or not)."""
    run_dir = Path(run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    record = _record(run_dir)
    frame = curve(run_dir, metrics)
    column, name = TASKS["classification" if "test_accuracy" in metrics else "regression"]
    chains = int(metrics.get("chains", 1))
    burn_in = _burn_in(record, frame)
    rhat = _rhat(run_dir) if chains > 1 else None
    panels = 2 if rhat is None else 3
    figure = Figure(figsize=(4.4 * panels, 3.8), layout="constrained")
    axes = figure.subplots(1, panels)
    axes[0].sharex(axes[1])
    per_chain = frame.groupby("chain", sort=True) if "chain" in frame else [(0, frame)]
    drawn, _ = _metric_lines(
        [Group(f"chain {c}", [part]) for c, part in per_chain], column, axes[0]
    )
    mark_burn_in(axes[0], burn_in)
    final = 1 - metrics["test_accuracy"] if "test_accuracy" in metrics else metrics.get(column)
    if chains > 1 and final is not None:
        axes[0].axhline(final, color="black", linestyle=":", label="all chains' average")
        drawn.append(final)
    scale_to_spread(axes[0], drawn)
    axes[0].set(xlabel="epoch", ylabel=name, title=f"{name} of the model average")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize="small")
    _trace_panel(axes[1], frame, "potential", burn_in)
    if rhat is not None:
        _rhat_panel(axes[2], rhat)
        axes[2].set_title(f"R-hat per test point ({chains} chains)")
    status = metrics.get("status", "completed")
    if status == "completed" and "converged" in metrics:
        status = "converged" if metrics["converged"] else "completed, NOT converged"
    chains_text = f", {chains} chains" if chains > 1 else ""
    figure.suptitle(f"{run_label(record)}{chains_text} — {status}")
    return figure


def run_title(run_dir: str | Path) -> str:
    """`run_label` of the run in ``run_dir``, from its config."""
    return run_label(_record(run_dir))


def reliability_figure(probs: Tensor, y: Tensor, title: str, bins: int = 15) -> Figure:
    """The reliability diagram of class probabilities ``probs`` against labels ``y``: per bin of
    top-class confidence (`bdl.metrics.calibration_bins`, `bdl.metrics.ece`'s), the
    accuracy of its points drawn as a bar over the bin, the gap from it to their mean confidence
    hatched, the diagonal where the two agree; below, the number of points in each bin."""
    from bdl.metrics import calibration_bins, ece

    count, conf_sum, acc_sum = (t.cpu().numpy() for t in calibration_bins(probs, y, bins))
    filled = count > 0
    edges = np.linspace(0, 1, bins + 1)
    centres, width = (edges[:-1] + edges[1:]) / 2, 1 / bins
    accuracy = np.divide(acc_sum, count, out=np.zeros_like(acc_sum), where=filled)
    confidence = np.divide(conf_sum, count, out=np.zeros_like(conf_sum), where=filled)
    figure = Figure(figsize=(4.6, 5.2), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    top.bar(centres[filled], accuracy[filled], width=width, edgecolor="black", label="accuracy")
    gap = confidence[filled] - accuracy[filled]
    top.bar(
        centres[filled],
        gap,
        bottom=accuracy[filled],
        width=width,
        color="C3",
        alpha=0.35,
        hatch="//",
        label="gap to the mean confidence",
    )
    top.plot([0, 1], [0, 1], "--", color="0.4", label="perfect calibration")
    top.set(ylabel="accuracy", xlim=(0, 1), ylim=(0, 1))
    top.set_title(f"{title}\nECE {ece(probs, y, bins):.4f} ({bins} bins)", fontsize="medium")
    top.legend(loc="upper left", fontsize="small")
    bottom.bar(centres, count, width=width, color="0.6", edgecolor="black")
    bottom.set(xlabel="top-class confidence", ylabel="points")
    return figure


def write_summary(run_dir: str | Path) -> Path | None:
    """``summary.png`` of the run in ``run_dir`` (`summary_figure`), and for a
    classification run ``reliability.png`` (`reliability_figure`) from its
    ``predictive.safetensors``; returns the summary's path, or None, with a warning, when it
    cannot be drawn: the run's results are already written, and a figure is no reason to fail
    it."""
    path = Path(run_dir) / SUMMARY_FILE
    try:
        summary_figure(run_dir).savefig(path, dpi=120)
    except Exception as error:  # noqa: BLE001 - any failure to draw leaves the results as they are
        log.warning("no %s: %s: %s", SUMMARY_FILE, type(error).__name__, error)
        return None
    try:
        _write_reliability(Path(run_dir))
    except Exception as error:  # noqa: BLE001 - as above
        log.warning("no %s: %s: %s", RELIABILITY_FILE, type(error).__name__, error)
    return path


def _write_reliability(run_dir: Path) -> None:
    from safetensors.torch import load_file

    from bdl.storage.store import PREDICTIVE

    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    if "test_accuracy" not in metrics or not (run_dir / PREDICTIVE).is_file():
        return
    saved = load_file(run_dir / PREDICTIVE)
    figure = reliability_figure(saved["predictive"], saved["targets"].long(), run_title(run_dir))
    figure.savefig(run_dir / RELIABILITY_FILE, dpi=120)
