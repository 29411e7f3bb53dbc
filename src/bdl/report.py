"""``bdl-report``: turn a tree of Hydra runs into one table of metrics, mean ± std over seeds.

A run directory is any directory holding ``metrics.json`` and ``.hydra/config.yaml``; sweeps
(``-m``) produce numbered subdirectories of those, possibly nested, so runs are found by walking
rather than by assuming a layout. The table is grouped by the config keys that actually differ
between runs, because a sweep's interesting axes are exactly those, and the seed is averaged
over. When Hydra's ``.hydra/hydra.yaml`` records which config-group options were chosen
(``sampler=sghmc``), those short names label the rows instead of ``_target_`` class paths.

YAML is read with OmegaConf (a safe loader) and nothing in a run directory is ever executed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, ListConfig, OmegaConf

from bdl.instantiation import inert

__all__ = [
    "DEFAULT_EXCLUDE",
    "ERRORS",
    "KNOWN_METRICS",
    "RunSkippedWarning",
    "find_runs",
    "format_table",
    "load_runs",
    "main",
    "mean_pm",
    "pruning_table",
    "summarize",
    "to_latex",
    "to_markdown",
    "unfinished_lines",
    "varying_keys",
]

METRICS_FILE = "metrics.json"
CONFIG_FILE = Path(".hydra") / "config.yaml"
HYDRA_FILE = Path(".hydra") / "hydra.yaml"

#: Metrics in the order a reader wants them; others follow in the order first seen.
KNOWN_METRICS = (
    "test_accuracy",
    "test_nll",
    "test_ece",
    "test_brier",
    "test_rmse",
    "test_ll",
    "agreement",
    "total_variation",
    "num_samples",
    "epochs",
    "grad_evals",
    "wall_time_s",
)

#: Config keys (fnmatch patterns) that differ between runs without being an experimental axis:
#: the seed is averaged over and paths/devices/logging only say where or how a run happened.
DEFAULT_EXCLUDE = (
    "seed",
    "run_dir",
    "hydra",
    "hydra.*",
    "root",
    "*.root",
    "*_dir",
    "*.dir",
    "*_path",
    "*.path",
    "device",
    "*.device",
    "num_workers",
    "*.num_workers",
    "wandb.*",
    "logger.*",
    "log_every",
)

_IMPL_KEYS = ("_target_", "*._target_", "_partial_", "*._partial_")
_WHAT_IS_A_RUN = (
    f"a run directory contains {CONFIG_FILE.as_posix()} (written when `bdl-run` starts) and "
    f"{METRICS_FILE} (written when it ends); pass a run directory or a directory above runs, "
    "e.g. outputs/ or multirun/"
)
CURVE_FILE = "curve.csv"
#: The column of a run's warnings (its ``metrics.json``'s list, joined): a judgement, not a
#: failure, so the run stays in the table and its row counts it (``n_warned``).
WARNINGS = "warnings"
#: ``metrics.json``'s status of a run that belongs in the table; runs written before statuses
#: existed have none and were complete, since only a finished run wrote the file.
COMPLETED = "completed"
NO_METRICS = f"no {METRICS_FILE} (killed, or still running)"


class RunSkippedWarning(UserWarning):
    """A run directory whose files could not be read; the report goes on without it."""


# --------------------------------------------------------------------------- finding runs


def _is_run(directory: Path) -> bool:
    """A run has its config from the moment it starts; ``metrics.json`` only once it ends."""
    return (directory / CONFIG_FILE).is_file()


def _is_run_file(path: Path) -> bool:
    """``metrics.json`` or ``.hydra/config.yaml`` of a run, which stand for the run."""
    return path.is_file() and (path.name == METRICS_FILE or path.parts[-2:] == CONFIG_FILE.parts)


def _natural_key(path: Path) -> list[tuple]:
    """Sort ``multirun/.../10`` after ``.../9``: Hydra numbers sweep jobs without zero padding."""
    return [
        tuple(int(t) if i % 2 else t for i, t in enumerate(re.split(r"(\d+)", part)))
        for part in path.parts
    ]


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """All run directories at or below ``paths``: resolved, deduplicated, naturally sorted.

    Hidden directories (``.hydra``, ``.git``) are not descended into; a path that is a file
    (``metrics.json``, ``.hydra/config.yaml``) stands for the run that holds it. Paths that do not
    exist contribute nothing, so the caller decides how loudly to complain.
    """
    found: set[Path] = set()
    for p in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        root = Path(p).expanduser()
        if root.is_file():
            if not _is_run_file(root):
                continue
            root = root.parent.parent if root.parent.name == ".hydra" else root.parent
        if not root.is_dir():
            continue
        for dirpath, dirnames, _ in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            here = Path(dirpath)
            if _is_run(here):
                found.add(here.resolve())
                # A run's sample store can hold thousands of files and never a run.
                dirnames[:] = [d for d in dirnames if d != "samples"]
    return sorted(found, key=_natural_key)


# --------------------------------------------------------------------------- loading runs


def _flatten(obj: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Dotted keys for nested dicts; lists become strings so that they can label a group."""
    out = {} if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        out[prefix] = json.dumps(obj, default=str)
    elif prefix:
        out[prefix] = obj
    return out


def _config_values(path: Path) -> dict[str, Any]:
    """The flattened config, resolving interpolations that resolve outside of Hydra.

    Interpolations such as ``${hydra:runtime.output_dir}`` only resolve inside a Hydra app;
    those keep their literal text rather than losing the whole config. Environment lookups are
    never resolved (:func:`bdl.instantiation.inert`).
    """
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    cfg = OmegaConf.create(inert(raw, as_written=True))
    try:
        return _flatten(OmegaConf.to_container(cfg, resolve=True))
    except Exception:
        flat = _flatten(OmegaConf.to_container(cfg, resolve=False))
    for key, value in flat.items():
        if isinstance(value, str) and "${" in value:
            try:
                resolved = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
            except Exception:
                continue
            if isinstance(resolved, (DictConfig, ListConfig)):
                resolved = json.dumps(OmegaConf.to_container(resolved, resolve=False), default=str)
            flat[key] = resolved
    return flat


def _choices(path: Path) -> dict[str, str]:
    """Config-group choices (``{"sampler": "sghmc"}``) from Hydra's own record of the run."""
    if not path.is_file():
        return {}
    choices = OmegaConf.select(OmegaConf.load(path), "hydra.runtime.choices")
    if not isinstance(choices, DictConfig):
        return {}
    raw = OmegaConf.to_container(choices, resolve=False)
    return {
        str(k): str(v)
        for k, v in raw.items()
        if v is not None and not str(k).startswith("hydra/") and str(k) != "hydra"
    }


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _epoch_reached(run: Path) -> int | None:
    """The last epoch ``curve.csv`` recorded: how far an unfinished run got."""
    try:
        epochs = pd.read_csv(run / CURVE_FILE, usecols=["epoch"])["epoch"]
    except Exception:  # no curve yet, or one cut mid-line: the epoch is just unknown
        return None
    return int(epochs.iloc[-1]) if len(epochs) else None


def _load_runs(runs: Sequence[Path], skip: Callable[[str], None]) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    unfinished: list[dict[str, Any]] = []
    choice_cols: dict[str, None] = {}
    config_cols: dict[str, None] = {}
    metric_cols: dict[str, None] = {}
    other_cols: dict[str, None] = {}
    loaded = []
    for run in runs:
        if not (run / METRICS_FILE).is_file():
            unfinished.append({"run_dir": str(run), "status": NO_METRICS})
            continue
        try:
            metrics = json.loads((run / METRICS_FILE).read_text(encoding="utf-8"))
            if not isinstance(metrics, dict):
                raise ValueError("metrics.json is not a JSON object")
            status = metrics.pop("status", COMPLETED)
            if status != COMPLETED:
                unfinished.append({"run_dir": str(run), "status": str(status)})
                continue
            # the trivial predictor's metrics are the run's yardstick, not results to average
            metrics.pop("trivial", None)
            run_warnings = metrics.pop("warnings", [])
            metrics = _flatten(metrics)
            metrics[WARNINGS] = "; ".join(map(str, run_warnings))
            config = _config_values(run / CONFIG_FILE)
            choices = _choices(run / HYDRA_FILE)
        except Exception as e:  # one broken run must not hide the others
            skip(f"skipped {run}: {type(e).__name__}: {e}")
            continue
        loaded.append((run, metrics, config, choices))
    # any run's metric names: a run that failed early lacks some, and must name its config
    # columns as the others do
    metric_names = {k for _, metrics, _, _ in loaded for k in metrics}
    for run, metrics, config, choices in loaded:
        row: dict[str, Any] = {}
        for k, v in config.items():
            key = f"config.{k}" if k in metric_names else k  # a metric keeps its plain name
            row[key] = v
            config_cols[key] = None
        for k, v in choices.items():
            if k not in row and k not in metrics:
                row[k] = v
                choice_cols[k] = None
        for k, v in metrics.items():
            row[k] = v
            (metric_cols if _is_number(v) else other_cols)[k] = None
        row["run_dir"] = str(run)
        rows.append(row)
    metrics_order = [m for m in KNOWN_METRICS if m in metric_cols]
    metrics_order += [m for m in metric_cols if m not in metrics_order]
    choice = [c for c in choice_cols if c not in config_cols]
    config = [c for c in config_cols if c not in choice_cols]
    others = [c for c in other_cols if c not in metric_cols]
    df = pd.DataFrame(rows, columns=[*choice, *config, *metrics_order, *others, "run_dir"])
    df.attrs["choice_columns"] = choice
    df.attrs["config_columns"] = config
    df.attrs["metric_columns"] = metrics_order
    df.attrs["unfinished"] = [
        {**u, "epoch": _epoch_reached(Path(u["run_dir"]))} for u in unfinished
    ]
    return df


def load_runs(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per completed run below ``paths``: choice columns, flattened config, metrics,
    ``run_dir``.

    A run is completed when its ``metrics.json`` says ``"status": "completed"`` or has no status
    (runs older than the field). The others (diverged, interrupted, failed, or no
    ``metrics.json`` yet) are in ``df.attrs["unfinished"]``: one ``{"run_dir", "status",
    "epoch"}`` each, ``epoch`` the last one ``curve.csv`` recorded (None when unknown). Runs
    whose files cannot be read are skipped with a :class:`RunSkippedWarning` (a sweep with
    one crashed job should still be reportable). A config key named like a metric (``epochs``
    is both) becomes ``config.<key>`` so that neither hides the other. Which columns are
    metrics, config keys and Hydra choices is recorded in ``df.attrs`` for
    :func:`varying_keys` and :func:`summarize`.
    """

    def warn(message: str) -> None:
        warnings.warn(message, RunSkippedWarning, stacklevel=3)

    return _load_runs(find_runs(paths), warn)


# --------------------------------------------------------------------------- grouping


def _metric_columns(df: pd.DataFrame) -> list[str]:
    """Metric columns from ``attrs``, or guessed by name when a pandas op dropped the attrs."""
    cols = df.attrs.get("metric_columns")
    if cols is not None:
        return [c for c in cols if c in df.columns]
    return [
        c
        for c in df.columns
        if (c in KNOWN_METRICS or str(c).startswith(("test_", "val_", "train_")))
        and pd.api.types.is_numeric_dtype(df[c])
    ]


def _choice_columns(df: pd.DataFrame) -> list[str]:
    cols = df.attrs.get("choice_columns")
    if cols is not None:
        return [c for c in cols if c in df.columns]
    # A scalar column named like the prefix of config keys can only be a group choice, since
    # in the config itself that name holds a mapping.
    return [
        c
        for c in df.columns
        if "." not in str(c) and any(str(o).startswith(f"{c}.") for o in df.columns)
    ]


def varying_keys(df: pd.DataFrame, exclude: Iterable[str] = DEFAULT_EXCLUDE) -> list[str]:
    """Config (and choice) columns that take more than one value across the runs.

    ``exclude`` holds fnmatch patterns; metric columns are never keys. When Hydra choices are
    present, ``_target_``/``_partial_`` are dropped as they merely restate the choice.
    """
    patterns = list(exclude)
    if _choice_columns(df):
        patterns += _IMPL_KEYS
    skip = set(_metric_columns(df)) | {"run_dir"}
    return [
        c
        for c in df.columns
        if c not in skip
        and not any(fnmatch(str(c), pat) for pat in patterns)
        and df[c].nunique(dropna=False) > 1
    ]


def _constant_within(df: pd.DataFrame, group_keys: list[str], key: str) -> bool:
    return bool(
        df.groupby(group_keys, dropna=False, sort=False)[key].nunique(dropna=False).max() <= 1
    )


def _default_by(df: pd.DataFrame) -> list[str]:
    """Varying keys minus seed, less keys implied by the choices or by the seed.

    Two samplers come with different default hyper-parameters; listing every one of them as a
    column would split nothing further and only widen the table, so keys constant within each
    choice (or ``_target_``) group go. Likewise a key that only follows the seed (a run name
    like ``sghmc-3``) would put every seed in a group of its own, so when seeds are reused
    across runs, keys constant within each (choice, seed) group go too. A key swept *within*
    those groups still varies inside them and is kept.
    """
    keys = [k for k in varying_keys(df) if k != "seed"]
    choices = set(_choice_columns(df))
    primary = [k for k in keys if k in choices] or [
        k for k in keys if k == "_target_" or str(k).endswith("._target_")
    ]
    if primary:
        keys = [k for k in keys if k in primary or not _constant_within(df, primary, k)]
    if "seed" in df.columns and df["seed"].nunique(dropna=False) < len(df):
        replicate = [*primary, "seed"]
        keys = [k for k in keys if k in primary or not _constant_within(df, replicate, k)]
    return keys


def summarize(
    df: pd.DataFrame,
    by: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Mean, std (ddof=1, NaN for a single run) and standard error of the mean (std/√n, n the
    runs that report the metric) of each metric per group, plus ``n_runs``.

    Args:
        df: as returned by :func:`load_runs`.
        by: group keys; by default the keys that vary between runs apart from the seed.
        metrics: metric columns to summarise; by default all of them.

    Returns:
        One row per group: the ``by`` columns, ``n_runs``, then ``<metric>_mean`` and
        ``<metric>_std``, ``<metric>_sem`` for each metric.
    """
    by = _default_by(df) if by is None else list(by)
    metrics = _metric_columns(df) if metrics is None else list(metrics)
    unknown = [k for k in [*by, *metrics] if k not in df.columns]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; available: {list(df.columns)}")
    columns = [*by, "n_runs"] + [f"{m}_{s}" for m in metrics for s in ("mean", "std", "sem")]

    counts_warnings = WARNINGS in df.columns and (df[WARNINGS].fillna("") != "").any()
    if counts_warnings:
        columns.insert(columns.index("n_runs") + 1, "n_warned")

    def stats(sub: pd.DataFrame) -> dict[str, Any]:
        row: dict[str, Any] = {"n_runs": len(sub)}
        if counts_warnings:
            row["n_warned"] = int((sub[WARNINGS].fillna("") != "").sum())
        for m in metrics:
            values = pd.to_numeric(sub[m], errors="coerce")
            row[f"{m}_mean"] = values.mean()
            row[f"{m}_std"] = values.std(ddof=1) if values.count() > 1 else math.nan
            # a group whose runs all lack the metric (R-hat of one-chain runs) has no error
            count = values.count()
            row[f"{m}_sem"] = row[f"{m}_std"] / math.sqrt(count) if count else math.nan
        return row

    rows = []
    if not by:
        if len(df):
            rows.append(stats(df))
    else:
        try:
            groups = list(df.groupby(by, dropna=False, sort=True))
        except TypeError:  # mixed types in a key column cannot be ordered
            groups = list(df.groupby(by, dropna=False, sort=False))
        for key, sub in groups:
            key = key if isinstance(key, tuple) else (key,)
            rows.append({**dict(zip(by, key, strict=True)), **stats(sub)})
    summary = pd.DataFrame(rows, columns=columns)
    summary.attrs["by"] = list(by)
    summary.attrs["metrics"] = list(metrics)
    return summary


# --------------------------------------------------------------------------- formatting

#: What follows ± in a cell: the standard deviation over a row's runs (seeds, splits), or the
#: standard error of their mean, std/√n_runs.
ERRORS = {"std": "standard deviation", "sem": "standard error of the mean"}


def _sig(x: float) -> str:
    """Four significant digits; large counts without exponent (``123500``, not ``1.235e+05``)."""
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    exponent = math.floor(math.log10(abs(x)))
    if 4 <= exponent < 15:
        return f"{round(x, 3 - exponent):.0f}"
    return f"{x:.4g}"


def _decimals(error: float) -> int:
    """Decimal places (negative: tens, hundreds) that keep one significant digit of ``error``,
    two when that digit is a 1.

    A spread estimated from a few seeds is itself uncertain by tens of percent, so more digits
    are noise; but a single digit 1 would move 0.0149 to 0.01 (by a third), while a single
    digit of 2 or more moves it by at most a fifth and two digits starting with 1 by at most a
    twentieth. The leading digit is read from the decimal notation (``f"{x:e}"``), not from
    ``x / 10**floor(log10 x)``, which gives 2.999… for 0.3.
    """
    mantissa, exponent = f"{error:.3e}".split("e")
    return -int(exponent) + (mantissa[0] == "1")


def _fixed(x: float, decimals: int) -> str:
    text = f"{x:.{decimals}f}" if decimals >= 0 else f"{round(x, decimals):.0f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text  # no "-0.00"


def mean_pm(mean: float, error: float) -> str:
    """``mean ± error`` with the error rounded by :func:`_decimals` and the mean to the same
    decimal place: ``1.2345, 0.0678 → "1.23 ± 0.07"``, ``0.9, 0.0149 → "0.900 ± 0.015"``.

    A NaN error (a single run) leaves the mean alone at four significant digits; a zero error
    (identical runs) gives ``mean ± 0``.
    """
    if pd.isna(mean):
        return "n/a"
    if pd.isna(error):
        return _sig(float(mean))
    if error == 0 or not math.isfinite(error) or not math.isfinite(mean):
        return f"{_sig(float(mean))} ± {_sig(float(error))}"
    decimals = _decimals(float(error))
    return f"{_fixed(float(mean), decimals)} ± {_fixed(float(error), decimals)}"


def _label(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    return str(value).replace("\n", " ")


def format_table(summary: pd.DataFrame, error: str = "std") -> pd.DataFrame:
    """The summary as a reader sees it: group labels, ``n_runs`` and ``mean ± error`` strings.

    With two or more rows, a column that holds the same value in every row (a metric with equal
    means and no spread, such as ``epochs``; ``n_runs`` when every row has as many runs) says
    nothing about the rows and goes; ``attrs["constant"]`` keeps its name and value for a line
    under the table.
    """
    if error not in ERRORS:
        raise ValueError(f"error must be one of {', '.join(ERRORS)}, not {error!r}")
    metrics = summary.attrs.get("metrics")
    if metrics is None:
        metrics = [
            c[: -len("_mean")]
            for c in summary.columns
            if str(c).endswith("_mean") and f"{c[: -len('_mean')]}_std" in summary.columns
        ]
    by = summary.attrs.get("by")
    if by is None:
        cols = list(summary.columns)
        by = cols[: cols.index("n_runs")] if "n_runs" in cols else []
    table = pd.DataFrame({str(k): summary[k].map(_label) for k in by}, index=summary.index)
    table["n_runs"] = summary["n_runs"].map(_label)
    if "n_warned" in summary.columns:  # never dropped as constant: a reader must see it
        table["n_warned"] = summary["n_warned"].map(_label)
    constant: dict[str, str] = {}
    several = len(summary) > 1
    for key in [*map(str, by), "n_runs"]:
        if several and table[key].nunique() == 1:
            constant[key] = table[key].iloc[0]
            table = table.drop(columns=key)
    for m in metrics:
        mean, spread = summary[f"{m}_mean"], summary[f"{m}_{error}"]
        if several and mean.nunique(dropna=False) == 1 and (spread.fillna(0) == 0).all():
            constant[m] = "n/a" if pd.isna(mean.iloc[0]) else _sig(float(mean.iloc[0]))
            continue
        table[m] = [mean_pm(a, b) for a, b in zip(mean, spread, strict=True)]
    table.attrs["labels"] = [c for c in table.columns if c in map(str, by)]
    table.attrs["constant"] = constant
    table.attrs["legend"] = f"mean ± {ERRORS[error]} over each row's n_runs runs"
    return table


def _notes(table: pd.DataFrame) -> list[str]:
    notes = [f"Cells: {table.attrs['legend']}."]
    if table.attrs["constant"]:
        same = ", ".join(f"{k} = {v}" for k, v in table.attrs["constant"].items())
        notes.append(f"Same in every row: {same}.")
    return notes


def to_markdown(summary: pd.DataFrame, error: str = "std") -> str:
    """A GitHub-flavoured Markdown table of :func:`format_table` (through pandas and
    ``tabulate``), then a legend and the columns dropped as constant."""
    table = format_table(summary, error)
    labels = table.attrs["labels"]
    escaped = table.rename(columns=lambda c: c.replace("|", r"\|"))
    escaped = escaped.map(lambda c: c.replace("|", r"\|"))
    align = ["left" if c in labels else "right" for c in table.columns]
    text = escaped.to_markdown(index=False, disable_numparse=True, colalign=align)
    return "\n\n".join([text, " ".join(_notes(table))])


LATEX_SPECIALS = str.maketrans(
    {c: rf"\{c}" for c in "&%$#_{}"} | {"\\": r"\textbackslash{}", "~": r"\~{}", "^": r"\^{}"}
)


def to_latex(summary: pd.DataFrame, error: str = "std") -> str:
    """The table of :func:`to_markdown` as a LaTeX ``tabular`` (booktabs rules) through pandas,
    with ``$\\pm$`` and the notes as a paragraph after it."""
    table = format_table(summary, error)
    labels = table.attrs["labels"]
    layout = "".join("l" if c in labels else "r" for c in table.columns)
    text = table.to_latex(index=False, escape=True, column_format=layout)
    notes = " ".join(_notes(table)).translate(LATEX_SPECIALS)
    return text.replace("±", r"$\pm$") + "\n" + notes.replace("±", r"$\pm$") + "\n"


def warned_lines(df: pd.DataFrame) -> list[str]:
    """One Markdown list item per run in the table whose ``metrics.json`` carries warnings."""
    if WARNINGS not in df.columns:
        return []
    warned = df[df[WARNINGS].fillna("") != ""]
    rows = zip(warned["run_dir"], warned[WARNINGS], strict=True)
    return [f"- {run}: {text}" for run, text in rows]


def unfinished_lines(df: pd.DataFrame) -> list[str]:
    """One Markdown list item per run left out of the table: directory, status, epoch reached."""
    return [
        f"- {u['run_dir']}: {u['status']}" + ("" if u["epoch"] is None else f", epoch {u['epoch']}")
        for u in df.attrs.get("unfinished", [])
    ]


PRUNING_FILE = "pruning.csv"


def _weights(count: int) -> str:
    """A weight count as Blundell et al.'s Table 1 writes it: 2.4m, 600k, 48k."""
    if count >= 1_000_000:
        return f"{count / 1e6:.1f}m"
    return f"{count / 1e3:.0f}k" if count >= 10_000 else str(count)


def pruning_table(run_dir: str | Path) -> str:
    """A run's ``pruning.csv`` in the layout of Blundell et al. (2015)'s Table 1: proportion
    removed, number of weights kept, test error (or RMSE for regression)."""
    path = Path(run_dir) / PRUNING_FILE
    try:
        curve = pd.read_csv(path)
        metric = curve.columns[2]
        error = metric == "test_error"
        table = pd.DataFrame(
            {
                "Proportion removed": [f"{100 * float(f):g}%" for f in curve["fraction_removed"]],
                "# Weights": [_weights(int(w)) for w in curve["weights_kept"]],
                "Test Error" if error else "Test RMSE": [
                    f"{100 * float(v):.2f}%" if error else _sig(float(v)) for v in curve[metric]
                ],
            }
        )
    except (OSError, ValueError, KeyError, IndexError, pd.errors.ParserError) as e:
        raise ValueError(
            f"{path} is not a pruning curve ({type(e).__name__}: {str(e).splitlines()[0]}); "
            "bdl-run pruning=true writes it: run that again, or remove the file"
        ) from None
    return table.to_markdown(index=False, disable_numparse=True)


def _print_pruning(paths: list[str]) -> int:
    found = sorted({f.parent for p in paths for f in Path(p).rglob(PRUNING_FILE)}, key=_natural_key)
    if not found:
        _err(f"no {PRUNING_FILE} under {', '.join(paths)}: run bdl-run with pruning=true")
        return 2
    status = 0
    for run_dir in found:
        try:
            print(f"{run_dir}\n\n{pruning_table(run_dir)}\n")
        except ValueError as e:
            _err(f"error: {e}")
            status = 2
    return status


def _print_paper(name: str, df: pd.DataFrame, out: Path, unfinished: list[str]) -> int:
    from bdl import papers  # matplotlib is imported only when asked for

    try:
        table = papers.PAPERS[name](df)
    except ValueError as e:
        _err(f"--paper {name}: {e}")
        return 2
    hours = pd.to_numeric(df.get("wall_time_s"), errors="coerce").sum() / 3600
    table.notes.append(f"{len(df)} runs, {hours:.2f} h of run time in all (their wall_time_s).")
    warned = warned_lines(df)
    if warned:
        table.notes.append(f"Averaged in with warnings ({len(warned)} runs):\n" + "\n".join(warned))
    if unfinished:
        table.notes.append(f"Not in the table ({len(unfinished)} runs):\n" + "\n".join(unfinished))
    print(table.markdown())
    try:
        files = papers.write(table, name, out)
    except OSError as e:
        _err(f"cannot write into {out}: {e}")
        return 1
    _err(f"wrote {', '.join(f.name for f in files)} into {out}")
    return 0


# --------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bdl-report",
        description="Summarise bdl runs (mean ± std over seeds) as Markdown, LaTeX and CSV.",
        epilog=_WHAT_IS_A_RUN[0].upper() + _WHAT_IS_A_RUN[1:] + ".",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="run or sweep directories")
    parser.add_argument(
        "--by", nargs="+", metavar="KEY", help="group keys (default: the config keys that vary)"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="directory for report.csv (one row per run), report_summary.csv, report.md and "
        "report.tex (default: the first PATH)",
    )
    parser.add_argument(
        "--error",
        choices=list(ERRORS),
        default="std",
        help="after ±: the standard deviation over runs (std, default) or the standard error "
        "of their mean (sem)",
    )
    parser.add_argument("--metrics", nargs="+", metavar="M", help="metrics to show (default: all)")
    parser.add_argument(
        "--plot",
        action="store_true",
        help="also draw the runs' test error against epochs and gradient evaluations, traces and "
        "R-hat histograms (PNG and PDF) in PATH/plots/ (bdl.plots)",
    )
    parser.add_argument(
        "--paper",
        choices=["uci", "chen2014"],
        help="the runs in a paper's layout beside its published numbers (bdl.papers): NAME.md, "
        "NAME.tex, NAME.csv and a figure in --out (default: the first PATH)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="rank the runs by PSIS-LOO over the training points (elpd_loo, its standard "
        "error, Pareto-k warnings; Vehtari et al. 2017) beside their test metrics",
    )
    parser.add_argument(
        "--pruning",
        action="store_true",
        help=f"print each run's {PRUNING_FILE} as Blundell et al.'s Table 1 (bdl-run pruning=true)",
    )
    return parser


def compare(df: pd.DataFrame, skip: Callable[[str], None]) -> pd.DataFrame:
    """The runs of ``df`` ranked by their PSIS-LOO expected log predictive density (Vehtari et
    al. 2017, by arviz), best first: ``elpd_loo``, its standard error, the count of points whose
    Pareto k is above arviz's threshold (there the estimate is unreliable), and the test
    metrics beside. Leaving a point out approximates the posterior without it, so the points
    are the training points the posterior was conditioned on, not the test points. A run
    without posterior samples (an optimiser's) is skipped through ``skip``."""
    import arviz as az  # imported only when asked for: it is slow to import

    from bdl.posterior import Posterior, RunError

    rows = []
    for record in df.to_dict("records"):
        try:
            idata = Posterior(record["run_dir"]).to_inferencedata(train=True)
        except (RunError, ValueError, OSError) as e:
            skip(f"{record['run_dir']} not compared: {str(e).splitlines()[0]}")
            continue
        with warnings.catch_warnings():  # the Pareto-k warning is counted in the table
            warnings.filterwarnings("ignore", message=".*shape parameter of Pareto")
            loo = az.loo(idata, pointwise=True, var_name="y_train")
        threshold = getattr(loo, "good_k", 0.7)
        rows.append(
            {
                "elpd_loo": loo["elpd_loo"],
                "se": loo["se"],
                "p_loo": loo["p_loo"],
                "pareto_k_warnings": int((loo["pareto_k"].values > threshold).sum()),
                **{k: record[k] for k in _choice_columns(df) if df[k].nunique() > 1},
                **{k: record[k] for k in _metric_columns(df) if k.startswith("test_")},
                "run_dir": record["run_dir"],
            }
        )
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    return table.sort_values("elpd_loo", ascending=False, ignore_index=True)


def _err(message: str) -> None:
    print(f"bdl-report: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``bdl-report``; returns the exit status (2 for usage errors)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # --help or a usage error argparse already reported
        return e.code if isinstance(e.code, int) else 2

    if args.pruning:
        return _print_pruning(args.paths)
    for p in args.paths:
        if not Path(p).exists():
            _err(f"warning: {p} does not exist")
        elif not Path(p).is_dir() and not _is_run_file(Path(p)):
            _err(f"error: {p} is a file, not a run directory or a sweep; {_WHAT_IS_A_RUN}")
            return 2
    runs = find_runs(args.paths)
    if not runs:
        _err(f"no run directories found under {', '.join(map(str, args.paths))}; {_WHAT_IS_A_RUN}")
        return 2
    df = _load_runs(runs, lambda msg: _err(f"warning: {msg}"))
    unfinished = unfinished_lines(df)
    if df.empty:
        if unfinished:
            print("No completed run. Not in a table:\n" + "\n".join(unfinished))
            return 0
        _err(f"none of the {len(runs)} run directories could be read; see the warnings above")
        return 2

    if args.paper:
        return _print_paper(args.paper, df, Path(args.out or args.paths[0]), unfinished)
    if args.compare:
        table = compare(df, lambda msg: _err(f"warning: {msg}"))
        if table.empty:
            _err("no run holds posterior samples to compare")
            return 2
        print(table.to_markdown(index=False, floatfmt=".4g"))
        return 0

    metric_cols = _metric_columns(df)
    if args.metrics:
        unknown = [m for m in args.metrics if m not in metric_cols]
        if unknown:
            _err(f"unknown metric(s) {', '.join(unknown)}; available: {', '.join(metric_cols)}")
            return 2
    if args.by:
        # A config key that shares its name with a metric (``epochs``) is stored as
        # ``config.<key>``; grouping by the plain name means the config key.
        args.by = [
            f"config.{k}" if k in metric_cols and f"config.{k}" in df.columns else k
            for k in args.by
        ]
        unknown = [k for k in args.by if k not in df.columns or k == "run_dir"]
        if unknown:
            keys = [c for c in df.columns if c not in metric_cols and c != "run_dir"]
            _err(f"unknown --by key(s) {', '.join(unknown)}; available keys: {', '.join(keys)}")
            return 2

    summary = summarize(df, by=args.by, metrics=args.metrics)
    markdown = to_markdown(summary, args.error)
    warned = warned_lines(df)
    if warned:
        markdown += (
            f"\n\nAveraged in above with warnings (n_warned; {len(warned)} runs):\n"
            + "\n".join(warned)
        )
    if unfinished:
        markdown += f"\n\nNot in the table ({len(unfinished)} runs):\n" + "\n".join(unfinished)
    print(markdown)

    first = Path(args.paths[0])
    if args.plot:
        from bdl.plots import draw  # matplotlib is imported only when asked for

        folder = Path(args.out or (first if first.is_dir() else ".")) / "plots"
        plots = draw(df, summary.attrs["by"], folder)
        _err(f"wrote {len(plots)} files in {plots[0].parent}" if plots else "no curve.csv to plot")
    if args.out is None and not first.is_dir():
        _err("no file written: the first PATH is not a directory (use --out DIR)")
        return 0
    out = Path(args.out or args.paths[0])
    files = {
        "report.csv": lambda f: df.to_csv(f, index=False),
        "report_summary.csv": lambda f: summary.to_csv(f, index=False),
        "report.md": lambda f: f.write_text(markdown + "\n", encoding="utf-8"),
        "report.tex": lambda f: f.write_text(to_latex(summary, args.error), encoding="utf-8"),
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, write in files.items():
            write(out / name)
    except OSError as e:
        _err(f"cannot write into {out}: {e}")
        return 1
    _err(f"{len(df)} runs; wrote {', '.join(files)} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
