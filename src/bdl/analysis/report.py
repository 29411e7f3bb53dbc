"""``bdl-report``: turn a tree of Hydra runs into one table of metrics, mean ± std over seeds.

The command line over `bdl.analysis.sweeps` (finding and reading the runs), `bdl.analysis.tables`
(grouping, averaging, Markdown and LaTeX), `bdl.analysis.papers` (``--paper``), `bdl.analysis.plots`
(``--plot``) and `bdl.analysis.posterior` (``--compare``); it writes ``report.csv``,
``report_summary.csv``, ``report.md`` and ``report.tex``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from bdl.analysis.sweeps import (
    CURVE_FILE,
    WHAT_IS_A_RUN,
    find_runs,
    is_run_file,
    natural_key,
    read_runs,
    unconverged_lines,
    unfinished_lines,
    warned_lines,
)
from bdl.analysis.tables import (
    ERRORS,
    PRUNING_FILE,
    WIDTH,
    choice_columns,
    csv_safe,
    markdown_text,
    metric_columns,
    pruning_table,
    summarize,
    to_latex,
    to_markdown,
)


def _print_pruning(paths: list[str]) -> int:
    found = sorted({f.parent for p in paths for f in Path(p).rglob(PRUNING_FILE)}, key=natural_key)
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
    from bdl.analysis import papers  # matplotlib is imported only when asked for

    try:
        table = papers.PAPERS[name](df)
    except ValueError as e:
        _err(f"--paper {name}: {e}")
        return 2
    hours = pd.to_numeric(df.get("wall_time_s"), errors="coerce").sum() / 3600
    table.notes.append(f"{len(df)} runs, {hours:.2f} h of run time in all (their wall_time_s).")
    if unconverged_note(df):
        table.notes.append(unconverged_note(df, html=False))
    warned = warned_lines(df)
    if warned:
        table.notes.append(f"Averaged in with warnings ({len(warned)} runs):\n" + "\n".join(warned))
    if unfinished:
        table.notes.append(f"Not in the table ({len(unfinished)} runs):\n" + "\n".join(unfinished))
    print(table.markdown(html=False))
    try:
        files = papers.write(table, name, out)
    except OSError as e:
        _err(f"cannot write into {out}: {e}")
        return 1
    _err(f"wrote {', '.join(f.name for f in files)} into {out}")
    return 0


def unconverged_note(df: pd.DataFrame, html: bool = True) -> str:
    """The runs averaged in whose chains have not converged, each with its reasons (their
    ``metrics.json``'s ``converged: false``); blank if none. ``html``: as `markdown_text`."""
    lines = [markdown_text(line, html) for line in unconverged_lines(df)]
    if not lines:
        return ""
    return f"Averaged in without converging (n_unconverged; {len(lines)} runs):\n" + "\n".join(
        lines
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bdl-report",
        description="Summarise bdl runs (mean ± std over seeds) as Markdown, LaTeX and CSV.",
        epilog=WHAT_IS_A_RUN[0].upper() + WHAT_IS_A_RUN[1:] + ".",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="run or sweep directories")
    parser.add_argument(
        "--by",
        nargs="+",
        metavar="KEY",
        help="group keys (default: the config keys that vary); the data set is added where runs "
        "differ in it",
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
    parser.add_argument(
        "--metrics",
        nargs="+",
        metavar="M",
        help="metrics to show, every one on the terminal too (default: all of them; the "
        f"terminal's table then keeps to {WIDTH} characters unless --wide)",
    )
    parser.add_argument(
        "--wide",
        action="store_true",
        help=f"print every metric's column, however wide (by default the table keeps to {WIDTH} "
        "characters and names the columns left out; report.md always holds them all)",
    )
    parser.add_argument(
        "--plot",
        action="store_true",
        help="also draw the runs' test error against epochs and gradient evaluations, traces and "
        "R-hat histograms (PNG and PDF) in PATH/plots/ (bdl.analysis.plots)",
    )
    parser.add_argument(
        "--paper",
        choices=["uci", "chen2014"],
        help="the runs in a paper's layout beside its published numbers (bdl.analysis.papers): "
        "NAME.md, NAME.tex, NAME.csv and a figure in --out (default: the first PATH)",
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

    from bdl.analysis.posterior import Posterior, RunError

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
                **{k: record[k] for k in choice_columns(df) if df[k].nunique() > 1},
                **{k: record[k] for k in metric_columns(df) if k.startswith("test_")},
                "run_dir": record["run_dir"],
            }
        )
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    return table.sort_values("elpd_loo", ascending=False, ignore_index=True)


def report_text(
    df: pd.DataFrame,
    summary: pd.DataFrame,
    error: str,
    unfinished: list[str],
    width: int | None = None,
    html: bool = True,
) -> str:
    """The table of ``summary`` (`to_markdown`, ``width`` and ``html`` as there), then the
    runs averaged in without converging or with warnings, and those not in the table."""
    text = to_markdown(summary, error, width, html)
    if unconverged_note(df):
        text += f"\n\n{unconverged_note(df, html)}"
    warned = [markdown_text(line, html) for line in warned_lines(df)]
    if warned:
        text += (
            f"\n\nAveraged in above with warnings (n_warned; {len(warned)} runs):\n"
            + "\n".join(warned)
        )
    if unfinished:
        lines = [markdown_text(line, html) for line in unfinished]
        text += f"\n\nNot in the table ({len(unfinished)} runs):\n" + "\n".join(lines)
    return text


#: The columns of ``curve.csv`` that ``--plot`` draws from (`bdl.analysis.plots`), each numeric.
PLOTTED = ("epoch", "test_metric", "potential")


def _plottable(run_dir: str, err: Callable[[str], None]) -> bool:
    """Whether ``--plot`` can draw the run's ``curve.csv`` (none is fine: nothing is drawn);
    a malformed one is left out, with one line through ``err`` naming the file and the fault."""
    path = Path(run_dir) / CURVE_FILE
    if not path.is_file():
        return True
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        fault = f"unreadable ({type(e).__name__}: {str(e).splitlines()[0]})"
    else:
        missing = [c for c in PLOTTED if c not in frame.columns]
        text = [c for c in PLOTTED if c in frame and not pd.api.types.is_numeric_dtype(frame[c])]
        if not missing and not text:
            return True
        fault = f"has no column {', '.join(missing)}" if missing else f"has text in {text[0]}"
    err(f"warning: {path} {fault}: not plotted (bdl-run writes it; run that again)")
    return False


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
        elif not Path(p).is_dir() and not is_run_file(Path(p)):
            _err(f"error: {p} is a file, not a run directory or a sweep; {WHAT_IS_A_RUN}")
            return 2
    runs = find_runs(args.paths)
    if not runs:
        _err(f"no run directories found under {', '.join(map(str, args.paths))}; {WHAT_IS_A_RUN}")
        return 2
    df = read_runs(runs, lambda msg: _err(f"warning: {msg}"))
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

    metric_cols = metric_columns(df)
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
    markdown = report_text(df, summary, args.error, unfinished)
    print(
        report_text(
            df, summary, args.error, unfinished, None if args.wide or args.metrics else WIDTH, False
        )
    )

    first = Path(args.paths[0])
    if args.plot:
        from bdl.analysis.plots import draw  # matplotlib is imported only when asked for

        folder = Path(args.out or (first if first.is_dir() else ".")) / "plots"
        if folder.is_symlink():
            _err(f"error: {folder} is a symbolic link: bdl-report writes nothing through a link")
            return 1
        plotted = df[[_plottable(run, _err) for run in df["run_dir"]]]
        plots = draw(plotted, summary.attrs["by"], folder)
        _err(f"wrote {len(plots)} files in {plots[0].parent}" if plots else "no curve.csv to plot")
    if args.out is None and not first.is_dir():
        _err("no file written: the first PATH is not a directory (use --out DIR)")
        return 0
    out = Path(args.out or args.paths[0])
    files = {
        "report.csv": lambda f: csv_safe(df).to_csv(f, index=False),
        "report_summary.csv": lambda f: csv_safe(summary).to_csv(f, index=False),
        "report.md": lambda f: f.write_text(markdown + "\n", encoding="utf-8"),
        "report.tex": lambda f: f.write_text(to_latex(summary, args.error), encoding="utf-8"),
    }
    linked = [out / name for name in files if (out / name).is_symlink()]
    if linked:
        _err(
            f"error: {linked[0]} is a symbolic link: bdl-report writes nothing through a link; "
            "remove it, or choose another --out DIR"
        )
        return 1
    shared = [
        out / name for name in files if (out / name).is_file() and (out / name).stat().st_nlink > 1
    ]
    if shared:
        _err(
            f"error: {shared[0]} has another hard link (it is also a file elsewhere): bdl-report "
            "writes nothing through a link; remove it, or choose another --out DIR"
        )
        return 1
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
