"""The runs of `bdl.analysis.sweeps.load_runs` as tables: grouped by the config keys that differ
between runs (a sweep's interesting axes are exactly those), averaged over seeds, and written as
``mean ± error`` in Markdown and LaTeX; and a pruning curve in Blundell et al. (2015)'s layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pandas as pd

from bdl.analysis.sweeps import KNOWN_METRICS, UNCONVERGED, WARNINGS

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

#: the choice column naming a run's data set
DATASET = "dataset"
_IMPL_KEYS = ("_target_", "*._target_", "_partial_", "*._partial_")


# --------------------------------------------------------------------------- grouping


def _columns(df: pd.DataFrame, kind: str, guess: Callable[[Any], bool]) -> list[str]:
    """The columns that ``df.attrs[kind]`` names (`bdl.sweeps.load_runs` sets it), or those
    ``guess`` picks when a pandas op dropped the attrs."""
    cols = df.attrs.get(kind)
    if cols is not None:
        return [c for c in cols if c in df.columns]
    return [c for c in df.columns if guess(c)]


def metric_columns(df: pd.DataFrame) -> list[str]:
    """Metric columns from ``attrs``, or guessed by name when a pandas op dropped the attrs."""
    return _columns(
        df,
        "metric_columns",
        lambda c: (
            (c in KNOWN_METRICS or str(c).startswith(("test_", "val_", "train_")))
            and pd.api.types.is_numeric_dtype(df[c])
        ),
    )


def choice_columns(df: pd.DataFrame) -> list[str]:
    # A scalar column named like the prefix of config keys can only be a group choice, since
    # in the config itself that name holds a mapping.
    return _columns(
        df,
        "choice_columns",
        lambda c: "." not in str(c) and any(str(o).startswith(f"{c}.") for o in df.columns),
    )


def varying_keys(df: pd.DataFrame, exclude: Iterable[str] = DEFAULT_EXCLUDE) -> list[str]:
    """Config (and choice) columns that take more than one value across the runs.

    ``exclude`` holds fnmatch patterns; metric columns are never keys. When Hydra choices are
    present, ``_target_``/``_partial_`` are dropped as they merely restate the choice.
    """
    patterns = list(exclude)
    if choice_columns(df):
        patterns += _IMPL_KEYS
    # a run's warnings and reasons describe it; they are not settings to group by
    skip = set(metric_columns(df)) | {"run_dir", WARNINGS, UNCONVERGED}
    return [
        c
        for c in _configuration_columns(df)
        if c not in skip
        and not any(fnmatch(str(c), pat) for pat in patterns)
        and df[c].nunique(dropna=False) > 1
    ]


def _configuration_columns(df: pd.DataFrame) -> list[str]:
    """The columns that say how a run was configured: its choices and config keys, never what
    its ``metrics.json`` says (a warning's text, an error, a status), which differ between
    seeds of one configuration."""
    config = df.attrs.get("config_columns")
    if config is None:  # a table a pandas operation left without its attrs
        return list(df.columns)
    return [c for c in df.columns if c in config or c in choice_columns(df)]


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
    choices = set(choice_columns(df))
    primary = [k for k in keys if k in choices] or [
        k for k in keys if k == "_target_" or str(k).endswith("._target_")
    ]
    if primary:
        keys = [k for k in keys if k in primary or not _constant_within(df, primary, k)]
    if "seed" in df.columns and df["seed"].nunique(dropna=False) < len(df):
        replicate = [*primary, "seed"]
        keys = [k for k in keys if k in primary or not _constant_within(df, replicate, k)]
    return keys


def _by_dataset(df: pd.DataFrame, by: list[str]) -> list[str]:
    """``by`` and, where the runs are of more than one data set, the data set: an accuracy on
    MNIST and one on Fashion-MNIST are not draws of one quantity, so no row averages them."""
    if DATASET in by or DATASET not in choice_columns(df) or df[DATASET].nunique() < 2:
        return by
    return [*by, DATASET]


def summarize(
    df: pd.DataFrame,
    by: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Mean, std (ddof=1, NaN for a single run) and standard error of the mean (std/√n, n the
    runs that report the metric) of each metric per group, plus ``n_runs``.

    Args:
        df: as returned by `load_runs`.
        by: group keys; by default the keys that vary between runs apart from the seed.
        metrics: metric columns to summarise; by default all of them.

    Returns:
        One row per group: the ``by`` columns, ``n_runs``, then ``<metric>_mean`` and
        ``<metric>_std``, ``<metric>_sem`` for each metric.
    """
    by = _default_by(df) if by is None else _by_dataset(df, list(by))
    metrics = metric_columns(df) if metrics is None else list(metrics)
    unknown = [k for k in [*by, *metrics] if k not in df.columns]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; available: {list(df.columns)}")
    columns = [*by, "n_runs"] + [f"{m}_{s}" for m in metrics for s in ("mean", "std", "sem")]

    counts_warnings = WARNINGS in df.columns and (df[WARNINGS].fillna("") != "").any()
    if counts_warnings:
        columns.insert(columns.index("n_runs") + 1, "n_warned")
    counts_unconverged = UNCONVERGED in df.columns and (df[UNCONVERGED].fillna("") != "").any()
    if counts_unconverged:
        columns.insert(columns.index("n_runs") + 1, "n_unconverged")

    def stats(sub: pd.DataFrame) -> dict[str, Any]:
        row: dict[str, Any] = {"n_runs": len(sub)}
        if counts_warnings:
            row["n_warned"] = int((sub[WARNINGS].fillna("") != "").sum())
        if counts_unconverged:
            row["n_unconverged"] = int((sub[UNCONVERGED].fillna("") != "").sum())
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
    """``mean ± error`` with the error rounded by `_decimals` and the mean to the same
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
    return str(value).replace("\r", " ").replace("\n", " ")


#: The columns of run counts a table has beside its group labels.
COUNTS = ("n_runs", "n_unconverged", "n_warned")


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
    for count in COUNTS[1:]:  # never dropped as constant: a reader must see it
        if count in summary.columns:
            table[count] = summary[count].map(_label)
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


def _notes(table: pd.DataFrame, hidden: Sequence[str] = ()) -> list[str]:
    notes = [f"Cells: {table.attrs['legend']}."]
    if table.attrs["constant"]:
        same = ", ".join(f"{k} = {v}" for k, v in table.attrs["constant"].items())
        notes.append(f"Same in every row: {same}.")
    if hidden:
        notes.append(f"{len(hidden)} more columns with --wide: {', '.join(hidden)}.")
    return notes


#: The widest a table printed on a terminal is by default: metric columns past it are named
#: under it instead (``bdl-report --wide`` prints them all).
WIDTH = 120


def to_markdown(
    summary: pd.DataFrame, error: str = "std", width: int | None = None, html: bool = True
) -> str:
    """A GitHub-flavoured Markdown table of `format_table` (through pandas and
    ``tabulate``), then a legend and the columns dropped as constant.

    ``width``: the metric columns, in their order, that keep the table within that many
    characters (the group labels and counts always), the others named in the legend.
    ``html``: whether the cells are made inert for a Markdown renderer (`markdown_text`); a
    terminal shows them as they are."""
    table = format_table(summary, error)
    labels, columns = table.attrs["labels"], list(table.columns)
    # the labels and counts come first, then the metrics in their order of importance
    first = len([c for c in columns if c in labels or c in COUNTS])
    end = len(columns)
    text = _render(table, columns, labels, html)
    while width is not None and end > first + 1 and _width(text) > width:
        end -= 1
        text = _render(table, columns[:end], labels, html)
    return "\n\n".join([text, " ".join(_notes(table, columns[end:]))])


def _render(table: pd.DataFrame, columns: list[str], labels: list[str], html: bool) -> str:
    def cell(text: Any) -> str:
        return markdown_text(text, html)

    escaped = table[columns].rename(columns=cell).map(cell)
    align = ["left" if c in labels else "right" for c in columns]
    return escaped.to_markdown(index=False, disable_numparse=True, colalign=align)


def _width(text: str) -> int:
    return max(map(len, text.splitlines()), default=0)


def markdown_text(text: str, html: bool = True) -> str:
    """``text`` as inert Markdown: a run directory or a config value named ``<img src=x
    onerror=...>`` is shown, never rendered as HTML (no tag, comment or autolink opens without
    a ``<``), and cannot end a table's cell; ``>=`` reads as it is. Without ``html`` (for a
    terminal, which renders nothing) only the cell's ``|`` is escaped."""
    text = str(text).replace("|", r"\|")
    return text.replace("<", "&lt;") if html else text


#: What makes a spreadsheet read a cell as a formula (OWASP's CSV injection): a cell starting
#: with one is written after a quote, which the spreadsheet shows and never evaluates.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell and column name that a spreadsheet would evaluate (a
    formula prefix) quoted, for ``report.csv``; numbers are left as they are."""

    def cell(value: Any) -> Any:
        return (
            f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_PREFIXES) else value
        )

    safe = frame.rename(columns=lambda c: cell(str(c))).map(cell)
    safe.attrs = frame.attrs
    return safe


LATEX_SPECIALS = str.maketrans(
    {c: rf"\{c}" for c in "&%$#_{}"} | {"\\": r"\textbackslash{}", "~": r"\~{}", "^": r"\^{}"}
)


def to_latex(summary: pd.DataFrame, error: str = "std") -> str:
    """The table of `to_markdown` as a LaTeX ``tabular`` (booktabs rules) through pandas,
    with ``$\\pm$`` and the notes as a paragraph after it."""
    table = format_table(summary, error)
    labels = table.attrs["labels"]
    layout = "".join("l" if c in labels else "r" for c in table.columns)
    text = table.to_latex(index=False, escape=True, column_format=layout)
    notes = " ".join(_notes(table)).translate(LATEX_SPECIALS)
    return text.replace("±", r"$\pm$") + "\n" + notes.replace("±", r"$\pm$") + "\n"


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
