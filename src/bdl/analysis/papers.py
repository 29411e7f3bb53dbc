"""bdl's runs beside the published numbers they reproduce, in each paper's layout
(``bdl-report --paper NAME``).

- ``uci``: the nine UCI regression sets of Hernández-Lobato & Adams (2015) on their standard
  splits: test RMSE and test log-likelihood (original units), mean ± standard error over the
  splits, beside probabilistic backpropagation (PBP; Hernández-Lobato & Adams 2015), MC dropout
  (Gal & Ghahramani 2016) and deep ensembles (Lakshminarayanan, Pritzel & Blundell 2017), the
  best value of each row in bold. One bdl column per sampler.
- ``chen2014``: MNIST test error per sampler (and prior), mean ± standard deviation over seeds,
  as in Chen, Fox & Guestrin (2014)'s Fig. 3, whose curves print no numbers: the published
  column is what the figure shows at its end (read off the plot, so approximate), and the line
  under the table says whether bdl's means keep the paper's order SGHMC < SGLD < SGD.

Published values are the papers' means, as printed: two decimals. bdl's means are compared with
them at that precision (`PUBLISHED_DECIMALS`), both for the bold and for the count of sets
where bdl beats PBP: naval's deep-ensemble RMSE is printed 0.00, which says only that it is below
0.005, and a bdl RMSE of 0.0013 ties with it rather than losing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bdl.analysis.plots import curve, group_of, save, sweep_title, test_error_figure
from bdl.analysis.tables import LATEX_SPECIALS, markdown_text, mean_pm, summarize

__all__ = ["CHEN2014_FIG3", "PAPERS", "UCI_PUBLISHED", "UCI_SETS", "chen2014", "uci"]

#: The sets in the papers' order, by bdl's ``dataset=`` option.
UCI_SETS = ("boston", "concrete", "energy", "kin8nm", "naval", "power", "protein", "wine", "yacht")

#: (test RMSE, test log-likelihood) per set: mean over the standard splits.
UCI_PUBLISHED: dict[str, dict[str, tuple[float, float]]] = {
    "PBP": {
        "boston": (3.01, -2.57),
        "concrete": (5.67, -3.16),
        "energy": (1.80, -2.04),
        "kin8nm": (0.10, 0.90),
        "naval": (0.01, 3.73),
        "power": (4.12, -2.84),
        "protein": (4.73, -2.97),
        "wine": (0.64, -0.97),
        "yacht": (1.02, -1.63),
    },
    "MC dropout": {
        "boston": (2.97, -2.46),
        "concrete": (5.23, -3.04),
        "energy": (1.66, -1.99),
        "kin8nm": (0.10, 0.95),
        "naval": (0.01, 3.80),
        "power": (4.02, -2.80),
        "protein": (4.36, -2.89),
        "wine": (0.62, -0.93),
        "yacht": (1.11, -1.55),
    },
    "Deep ensembles": {
        "boston": (3.28, -2.41),
        "concrete": (6.03, -3.06),
        "energy": (2.09, -1.38),
        "kin8nm": (0.09, 1.20),
        "naval": (0.00, 5.63),
        "power": (4.11, -2.79),
        "protein": (4.71, -2.83),
        "wine": (0.64, -0.94),
        "yacht": (1.58, -1.18),
    },
}

#: The decimals the published UCI values are printed with, and bdl's are compared at.
PUBLISHED_DECIMALS = 2

#: Test error (%) at the end of Chen et al. (2014)'s Fig. 3, read off the plot, by sampler.
CHEN2014_FIG3 = {"sgd": 2.1, "sgd_momentum": 1.9, "sgld": 1.9, "sghmc": 1.8}


@dataclass
class PaperTable:
    """A paper-layout table: ``numbers`` (one row per line, plain floats, for CSV), ``cells``
    (the same as a reader sees them, ``**bold**`` marking a row's best), notes under it, and
    the figures to save by file stem."""

    numbers: pd.DataFrame
    cells: pd.DataFrame
    notes: list[str]
    figures: dict[str, Figure]
    labels: int = 1  # the leading columns that name a row rather than hold a number

    def _layout(self) -> list[str]:
        return ["l"] * self.labels + ["r"] * (self.cells.shape[1] - self.labels)

    def markdown(self, html: bool = True) -> str:
        """The table and its notes, the notes inert for a Markdown renderer unless ``html`` is
        false (a terminal's; `bdl.analysis.tables.markdown_text`)."""
        align = ["left" if a == "l" else "right" for a in self._layout()]

        def escape(text: str) -> str:
            # a run's sampler or dataset name is shown as written, never rendered as HTML
            return markdown_text(text, html)

        cells = self.cells.map(escape).rename(columns=escape)
        text = cells.to_markdown(index=False, disable_numparse=True, colalign=align)
        return "\n\n".join([text, *map(escape, self.notes)])

    def latex(self) -> str:
        def cell(text: str) -> str:
            bold = text.startswith("**") and text.endswith("**")
            text = (text[2:-2] if bold else text).translate(LATEX_SPECIALS)
            return rf"\textbf{{{text}}}" if bold else text

        # escaped here rather than by pandas, which would escape the bold markup too
        table = self.cells.map(cell).rename(columns=cell)
        text = table.to_latex(index=False, escape=False, column_format="".join(self._layout()))
        notes = " ".join(self.notes).translate(LATEX_SPECIALS)
        return (text + "\n" + notes + "\n").replace("±", r"$\pm$")


def _bold_best(row: dict[str, float], cells: dict[str, str], lower: bool) -> dict[str, str]:
    finite = {k: v for k, v in row.items() if math.isfinite(v)}
    if not finite:
        return cells
    best = min(finite.values()) if lower else max(finite.values())
    return {k: f"**{c}**" if finite.get(k) == best else c for k, c in cells.items()}


def uci(runs: pd.DataFrame) -> PaperTable:
    """The UCI table of completed runs (`bdl.analysis.sweeps.load_runs`) that have a ``dataset``
    choice among `UCI_SETS`; bdl's cells are mean ± standard error over splits."""
    if not {"dataset", "sampler"} <= set(runs.columns):
        raise ValueError("no run has dataset= and sampler= choices: pass bdl-run's directories")
    runs = runs[runs["dataset"].isin(UCI_SETS)]
    if runs.empty:
        raise ValueError(f"no run on a UCI set ({', '.join(UCI_SETS)})")
    samplers = sorted(runs["sampler"].unique())
    methods = [f"bdl {s}" for s in samplers] + list(UCI_PUBLISHED)
    sets = [d for d in UCI_SETS if d in set(runs["dataset"])]
    stats = summarize(runs, by=["dataset", "sampler"], metrics=["test_rmse", "test_ll"])
    stats = stats.set_index(["dataset", "sampler"]).reindex(
        pd.MultiIndex.from_product([sets, samplers])
    )
    numbers, cells = [], []
    wins = {s: {"test_rmse": 0, "test_ll": 0} for s in samplers}
    for dataset in sets:
        number_row: dict[str, object] = {"dataset": dataset}
        cell_row: dict[str, str] = {"Dataset": dataset}
        for metric, lower, name in (("test_rmse", True, "RMSE"), ("test_ll", False, "LL")):
            means, shown = {}, {}
            for sampler in samplers:
                row = stats.loc[(dataset, sampler)]
                mean, error = row[f"{metric}_mean"], row[f"{metric}_sem"]
                label = f"bdl {sampler}"
                shown[label] = mean_pm(mean, error)
                means[label] = round(mean, PUBLISHED_DECIMALS) if math.isfinite(mean) else mean
                number_row[f"{metric} {label}"] = mean
                number_row[f"{metric} {label} sem"] = error
                number_row[f"splits {label}"] = int(np.nan_to_num(row["n_runs"]))
                pbp = UCI_PUBLISHED["PBP"][dataset][0 if lower else 1]
                wins[sampler][metric] += (means[label] < pbp) if lower else (means[label] > pbp)
            for method, table in UCI_PUBLISHED.items():
                value = table[dataset][0 if lower else 1]
                means[method], shown[method] = value, f"{value:.2f}"
                number_row[f"{metric} {method}"] = value
            shown = _bold_best(means, shown, lower)
            cell_row.update({f"{name} {m}": shown[m] for m in methods})
        numbers.append(number_row)
        cells.append(cell_row)
    notes = [
        "Test RMSE (lower is better) and test log-likelihood (higher is better) in the targets' "
        "original units. bdl: mean ± standard error over the splits run; published: the "
        "papers' means over all standard splits (20; protein 5), as printed. The best of each "
        "row in bold, bdl's means compared at the papers' two decimals (ties all bold)."
    ]
    for sampler in samplers:
        splits = ", ".join(
            f"{d} {int(np.nan_to_num(stats.loc[(d, sampler), 'n_runs']))}" for d in sets
        )
        notes.append(
            f"bdl {sampler}: RMSE below PBP's on {wins[sampler]['test_rmse']} of "
            f"{len(sets)} sets, test LL above PBP's on {wins[sampler]['test_ll']} of {len(sets)}; "
            f"splits per set: {splits}."
        )
    frame = pd.DataFrame(numbers)
    figure = _uci_figure(frame, methods, sweep_title(runs))
    return PaperTable(frame, pd.DataFrame(cells), notes, {"uci": figure})


def _uci_figure(numbers: pd.DataFrame, methods: list[str], title: str) -> Figure:
    """Each method's RMSE as a ratio to PBP's (log scale) and its test LL minus PBP's, per set:
    the sets' scales differ by three orders of magnitude, so raw values share no axis."""
    figure = Figure(figsize=(11, 4.2), layout="constrained")
    ratio_ax, diff_ax = figure.subplots(1, 2, sharex=True)
    x = np.arange(len(numbers))
    for i, method in enumerate(methods):
        shift = (i - (len(methods) - 1) / 2) * 0.12
        pbp_rmse = numbers["test_rmse PBP"].to_numpy(float)
        ratio = numbers[f"test_rmse {method}"].to_numpy(float) / np.where(
            pbp_rmse > 0, pbp_rmse, np.nan
        )
        ratio_ax.plot(x + shift, ratio, "o", label=method)
        diff = numbers[f"test_ll {method}"].to_numpy(float) - numbers["test_ll PBP"].to_numpy(float)
        diff_ax.plot(x + shift, diff, "o", label=method)
    ratio_ax.axhline(1.0, color="black", linewidth=0.8)
    diff_ax.axhline(0.0, color="black", linewidth=0.8)
    ratio_ax.set(yscale="log", ylabel="test RMSE / PBP's", title="RMSE (lower is better)")
    diff_ax.set(ylabel="test LL − PBP's", title="log-likelihood (higher is better)")
    for ax in (ratio_ax, diff_ax):
        ax.set_xticks(x, numbers["dataset"], rotation=45)
    ratio_ax.legend(fontsize="small")
    figure.suptitle(f"UCI benchmarks beside PBP (Hernández-Lobato and Adams 2015) — {title}")
    return figure


def chen2014(runs: pd.DataFrame) -> PaperTable:
    """Test error per (sampler, prior) over seeds, beside `CHEN2014_FIG3` (Chen et al.
    sampled under a Gamma hyperprior, so the column stands beside every prior's row), with the
    running test error of each row against epochs and gradient evaluations (their Fig. 3)."""
    if "test_accuracy" not in runs or "sampler" not in runs:
        raise ValueError("no classification run with a sampler= choice: pass MNIST runs")
    runs = runs.assign(prior=runs.get("prior", ""), test_error=100 * (1 - runs["test_accuracy"]))
    keys = ["sampler", "prior"]
    groups = dict(iter(runs.groupby(keys, sort=True)))
    numbers, cells, curves = [], [], []
    means: dict[str, dict[str, float]] = {}
    for _, row in summarize(runs, by=keys, metrics=["test_error"]).iterrows():
        sampler, prior, mean, std = row[["sampler", "prior", "test_error_mean", "test_error_std"]]
        seeds = int(row["n_runs"])
        means.setdefault(prior, {})[sampler] = mean
        published = CHEN2014_FIG3.get(sampler)
        numbers.append(
            {"sampler": sampler, "prior": prior, "seeds": seeds, "test_error_%": mean, "std": std}
        )
        cells.append(
            {
                "Sampler": sampler,
                "Prior": prior,
                "Seeds": str(seeds),
                "Test error (%)": mean_pm(mean, std),
                "Chen et al. Fig. 3 (≈)": "" if published is None else f"{published:.1f}",
            }
        )
        group = groups[(sampler, prior)]
        records = [run.to_dict() for _, run in group.iterrows()]
        loaded = {r["run_dir"]: curve(r["run_dir"], r) for r in records}
        curves.append(group_of(f"{sampler}, {prior}" if prior else sampler, records, loaded))
    notes = [
        "bdl: mean ± standard deviation over seeds. Chen et al. print no final errors; their "
        "column is the end of their Fig. 3's curves, read off the plot."
    ]
    for prior, by_sampler in means.items():
        order = [s for s in ("sghmc", "sgld", "sgd") if s in by_sampler]
        if len(order) < 2:
            continue
        kept = all(by_sampler[a] < by_sampler[b] for a, b in zip(order, order[1:], strict=False))
        found = ", ".join(f"{s} {by_sampler[s]:.2f}%" for s in order)
        under = f" under {prior}" if prior else ""
        notes.append(
            f"Order of the means{under} ({' < '.join(order)} in the paper): "
            f"{'kept' if kept else 'NOT kept'} ({found})."
        )
    title = f"Chen et al. (2014)'s Fig. 3, {sweep_title(runs)}"
    figure = test_error_figure(curves, "test_error", "test error", title)
    return PaperTable(pd.DataFrame(numbers), pd.DataFrame(cells), notes, {"chen2014": figure}, 2)


PAPERS: dict[str, Callable[[pd.DataFrame], PaperTable]] = {"uci": uci, "chen2014": chen2014}


def write(table: PaperTable, name: str, out: Path) -> list[Path]:
    """``<name>.md``, ``<name>.tex``, ``<name>.csv`` and each figure as PNG and PDF in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    files = [out / f"{name}.md", out / f"{name}.tex", out / f"{name}.csv"]
    files[0].write_text(table.markdown() + "\n", encoding="utf-8")
    files[1].write_text(table.latex(), encoding="utf-8")
    table.numbers.to_csv(files[2], index=False)
    for stem, figure in table.figures.items():
        files += save(figure, out / stem)
    return files
