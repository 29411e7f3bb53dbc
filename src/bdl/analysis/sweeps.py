"""Run directories read as data: finding the runs of a sweep's tree, and loading their configs and
metrics into one table (one row per completed run) for `bdl.analysis.tables` and ``bdl-report``.

A run directory is any directory holding ``.hydra/config.yaml`` (written when ``bdl-run``
starts) and, once it ends, ``metrics.json``; sweeps (``-m``) produce numbered subdirectories of
those, possibly nested, so runs are found by walking rather than by assuming a layout. When
Hydra's ``.hydra/hydra.yaml`` records which config-group options were chosen
(``sampler=sghmc``), those short names become columns of their own.

YAML is read with OmegaConf (a safe loader) and nothing in a run directory is ever executed.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, ListConfig, OmegaConf

from bdl.composition.instantiation import inert, load_yaml

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

WHAT_IS_A_RUN = (
    f"a run directory contains {CONFIG_FILE.as_posix()} (written when `bdl-run` starts) and "
    f"{METRICS_FILE} (written when it ends); pass a run directory or a directory above runs, "
    "e.g. outputs/ or multirun/"
)
CURVE_FILE = "curve.csv"
#: The column of a run's warnings (its ``metrics.json``'s list, joined): a judgement, not a
#: failure, so the run stays in the table and its row counts it (``n_warned``).
WARNINGS = "warnings"
#: The column of the reasons a run's chains have not converged (its ``metrics.json``'s
#: ``converged: false`` and ``reasons``, joined; blank for a converged run or one without a
#: verdict): counted per row (``n_unconverged``). Its ``notes`` inform, and are not read.
UNCONVERGED = "unconverged"
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


def is_run_file(path: Path) -> bool:
    """``metrics.json`` or ``.hydra/config.yaml`` of a run, which stand for the run."""
    return path.is_file() and (path.name == METRICS_FILE or path.parts[-2:] == CONFIG_FILE.parts)


def natural_key(path: Path) -> list[tuple]:
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
            if not is_run_file(root):
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
    return sorted(found, key=natural_key)


# --------------------------------------------------------------------------- loading runs


def _flatten(obj: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Dotted keys for nested dicts; lists become strings so that they can label a group.
    (``pandas.json_normalize`` dots them too, but puts every nested key after the top-level
    ones: the report's columns would leave the config's order.)"""
    out = {} if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        out[prefix] = json.dumps(obj, default=str)
    elif prefix:
        out[prefix] = obj
    return out


def config_values(path: Path) -> dict[str, Any]:
    """The flattened config, resolving interpolations that resolve outside of Hydra.

    Interpolations such as ``${hydra:runtime.output_dir}`` only resolve inside a Hydra app;
    those keep their literal text rather than losing the whole config. Environment lookups are
    never resolved (`bdl.composition.instantiation.inert`).
    """
    raw = OmegaConf.to_container(load_yaml(path), resolve=False)
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


def choices(path: Path) -> dict[str, str]:
    """Config-group choices (``{"sampler": "sghmc"}``) from Hydra's own record of the run."""
    if not path.is_file():
        return {}
    recorded = OmegaConf.select(load_yaml(path), "hydra.runtime.choices")
    if not isinstance(recorded, DictConfig):
        return {}
    raw = OmegaConf.to_container(recorded, resolve=False)
    return {
        str(k): str(v)
        for k, v in raw.items()
        if v is not None and not str(k).startswith("hydra/") and str(k) != "hydra"
    }


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: The largest magnitude a metric may have to be averaged: a square of it (in a standard
#: deviation) stays finite in double precision, whose largest value is about 1.8e308.
LARGEST = 1e150


def _not_averageable(metrics: dict[str, Any]) -> str | None:
    """The first metric a table cannot average, as ``key=value`` and why: NaN or an infinity
    (``metrics.json`` may hold them as ``NaN``, ``Infinity`` or ``1e999``), or a magnitude
    whose mean or spread would overflow; None when every one can be."""
    for key, value in metrics.items():
        if not _is_number(value):
            continue
        if not math.isfinite(value):
            return f"{key}={value}, not a finite number: a mean over it would be {value}"
        if abs(value) > LARGEST:
            return f"{key}={value:g}, beyond ±{LARGEST:g}: its mean or spread would overflow"
    return None


def _epoch_reached(run: Path) -> int | None:
    """The last epoch ``curve.csv`` recorded: how far an unfinished run got."""
    try:
        epochs = pd.read_csv(run / CURVE_FILE, usecols=["epoch"])["epoch"]
    except Exception:  # no curve yet, or one cut mid-line: the epoch is just unknown
        return None
    return int(epochs.iloc[-1]) if len(epochs) else None


def read_runs(runs: Sequence[Path], skip: Callable[[str], None]) -> pd.DataFrame:
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
            unconverged = _unconverged(metrics)
            metrics = _flatten(metrics)
            unfit = _not_averageable(metrics)
            if unfit is not None:
                skip(f"skipped {run}: {METRICS_FILE} holds {unfit}")
                continue
            metrics[WARNINGS] = "; ".join(map(str, run_warnings))
            metrics[UNCONVERGED] = unconverged
            config = config_values(run / CONFIG_FILE)
            chosen = choices(run / HYDRA_FILE)
        except Exception as e:  # one broken run must not hide the others
            skip(f"skipped {run}: {type(e).__name__}: {e}")
            continue
        loaded.append((run, metrics, config, chosen))
    # any run's metric names: a run that failed early lacks some, and must name its config
    # columns as the others do
    metric_names = {k for _, metrics, _, _ in loaded for k in metrics}
    for run, metrics, config, chosen in loaded:
        row: dict[str, Any] = {}
        for k, v in config.items():
            key = f"config.{k}" if k in metric_names else k  # a metric keeps its plain name
            row[key] = v
            config_cols[key] = None
        for k, v in chosen.items():
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
    whose files cannot be read are skipped with a `RunSkippedWarning` (a sweep with
    one crashed job should still be reportable). A config key named like a metric (``epochs``
    is both) becomes ``config.<key>`` so that neither hides the other. Which columns are
    metrics, config keys and Hydra choices is recorded in ``df.attrs`` for
    `varying_keys` and `summarize`.
    """

    def warn(message: str) -> None:
        warnings.warn(message, RunSkippedWarning, stacklevel=3)

    return read_runs(find_runs(paths), warn)


def _unconverged(metrics: dict[str, Any]) -> str:
    """The reasons a run has not converged, joined (popping the verdict's fields, which are
    not metrics to average); blank if it has, or has no verdict."""
    converged = metrics.pop("converged", None)
    reasons = metrics.pop("reasons", [])
    metrics.pop("notes", None)
    metrics.pop("divergent_epochs", None)  # per chain, in the run's own metrics.json
    if converged is False:
        return "; ".join(map(str, reasons)) or "not converged"
    return ""


def _flagged_lines(df: pd.DataFrame, column: str) -> list[str]:
    """One Markdown list item per run in the table with text in ``column``: the run, the text."""
    if column not in df.columns:
        return []
    flagged = df[df[column].fillna("") != ""]
    rows = zip(flagged["run_dir"], flagged[column], strict=True)
    return [f"- {run}: {text}" for run, text in rows]


def unconverged_lines(df: pd.DataFrame) -> list[str]:
    """One Markdown list item per run in the table whose chains have not converged."""
    return _flagged_lines(df, UNCONVERGED)


def warned_lines(df: pd.DataFrame) -> list[str]:
    """One Markdown list item per run in the table whose ``metrics.json`` carries warnings."""
    return _flagged_lines(df, WARNINGS)


def unfinished_lines(df: pd.DataFrame) -> list[str]:
    """One Markdown list item per run left out of the table: directory, status, epoch reached."""
    return [
        f"- {u['run_dir']}: {u['status']}" + ("" if u["epoch"] is None else f", epoch {u['epoch']}")
        for u in df.attrs.get("unfinished", [])
    ]
