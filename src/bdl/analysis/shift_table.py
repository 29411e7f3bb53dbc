"""The calibration, dataset-shift and out-of-distribution table of Ovadia et al. (2019), "Can you
trust your model's uncertainty?", assembled from finished run directories, with the published
findings it tests as rows whose verdicts these numbers decide.

The runs lie in ``ROOT/<dataset>/<method>/seed<S>`` (``scripts/ood_table.py run`` makes them;
any machine may make some of them). A run counts when its ``metrics.json`` says ``completed``;
its clean metrics are those of ``metrics.json`` (``test_*`` and ``ood_auroc_*``, the AUROC of
telling the protocol's ``ood=`` set from the test set, by predictive entropy and by mutual
information), its shifted ones those ``bdl-eval shift.corrupt=C shift.severity=S`` wrote to
``eval/<data>-test-<C><S>/metrics.json``. Accuracy, NLL and ECE at a severity are the means
over the four corruptions of `bdl.data.shift` (Gaussian noise, blur, translation, contrast),
severity 0 being the clean test set; a run lacking one of the four has no value there.

A claim compares two groups of runs by one metric: its verdict is **held** when the difference
of the groups' seed means lies in the claimed direction by more than `SE_MULTIPLE` combined
standard errors (√(se_a² + se_b²), each the standard deviation over seeds / √n), **not held**
when it lies the other way by as much, and **inconclusive** otherwise or when either group has
fewer than two seeds (no standard error).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bdl.analysis.sweeps import find_runs
from bdl.analysis.tables import mean_pm, summarize
from bdl.data.shift import CORRUPTIONS, SEVERITIES

__all__ = [
    "CLAIMS_RULE",
    "IZMAILOV_DATASET",
    "Claim",
    "SE_MULTIPLE",
    "claims",
    "claims_markdown",
    "cold_summary",
    "collect",
    "severity_figure",
    "summary",
    "table_markdown",
    "verdict",
]

#: The problem on which HMC at T = 1 is set against cold SGHMC (Izmailov et al. 2021): theirs is
#: CIFAR-10 on 512 TPU cores; full-batch HMC on all 60 000 images is hours a chain on one core
IZMAILOV_DATASET = "mnist, 5 000 images (experiment=izmailov_mnist)"
#: How many combined standard errors a difference of means must exceed to decide a claim.
SE_MULTIPLE = 2.0
CLAIMS_RULE = (
    f"held when the difference of the seed means lies in the claimed direction by more than "
    f"{SE_MULTIPLE:g} combined standard errors (√(se₁² + se₂²)), not held when it lies the other "
    f"way by as much, inconclusive otherwise or with fewer than 2 seeds in a group"
)
#: The methods that sample a posterior by SG-MCMC: bdl's convergence verdict applies to them.
SG_MCMC = ("sgld", "sghmc", "sghmc_cyclical")
#: The rows' order (others follow, by name): one network, then what averages several.
ORDER = ("mnist", "fashion_mnist", "sgd", "ensemble", "mc_dropout", "swag", *SG_MCMC)
ORDER += ("mfvi", "laplace")
#: The clean metrics of ``metrics.json``, with their column titles.
CLEAN = {
    "test_accuracy": "accuracy",
    "test_nll": "NLL",
    "test_ece": "ECE",
    "test_brier": "Brier",
    "ood_auroc_entropy": "AUROC entropy",
    "ood_auroc_mutual_information": "AUROC MI",
}
#: The shifted metrics, each at severities 0 (clean) to 5: ``<name>_s<severity>``.
SHIFTED = {"test_accuracy": "accuracy", "test_nll": "NLL", "test_ece": "ECE"}
LEVELS = (0, *SEVERITIES)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _shifted(run: Path, name: str, severity: int) -> dict[str, Any] | None:
    """The metrics bdl-eval wrote for the run's test set under corruption ``name``."""
    found = sorted(run.glob(f"eval/*-test-{name}{severity}/metrics.json"))
    return _read(found[0]) if found else None


def collect(root: str | Path) -> pd.DataFrame:
    """A row per run below ``root`` (``<dataset>/<method>/seed<S>``): dataset, method, seed,
    status, converged (True, False, or None where bdl gives no verdict), ``run`` (its path below
    ``root``), the clean metrics and
    the shifted ones, ``missing``: the corruption evaluations not yet made."""
    root = Path(root).resolve()
    rows = []
    for run in find_runs([root]):
        parts = run.relative_to(root).parts
        if len(parts) != 3 or not parts[2].startswith("seed"):
            continue
        dataset, method, seed = parts[0], parts[1], parts[2].removeprefix("seed")
        metrics = _read(run / "metrics.json") or {}
        row: dict[str, Any] = {
            "dataset": dataset,
            "method": method,
            "seed": int(seed) if seed.isdigit() else seed,
            "status": metrics.get("status", "no metrics.json"),
            "converged": metrics.get("converged"),
            "run": run.relative_to(root).as_posix(),
        }
        row |= {key: metrics.get(key, math.nan) for key in CLEAN}
        missing = []
        for severity in SEVERITIES:
            values: dict[str, list[float]] = {key: [] for key in SHIFTED}
            for name in CORRUPTIONS:
                shifted = _shifted(run, name, severity)
                if shifted is None:
                    missing.append(f"{name}{severity}")
                    continue
                for key in SHIFTED:
                    values[key].append(shifted[key])
            for key in SHIFTED:
                complete = len(values[key]) == len(CORRUPTIONS)
                row[f"{key}_s{severity}"] = float(np.mean(values[key])) if complete else math.nan
        row["missing"] = missing
        rows.append(row)
    columns = ["dataset", "method", "seed", "status", "converged", "run", *CLEAN]
    columns += [f"{k}_s{s}" for k in SHIFTED for s in SEVERITIES] + ["missing"]
    return pd.DataFrame(rows, columns=columns)


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean, standard deviation and standard error over seeds (`bdl.analysis.tables.summarize`)
    of every metric per dataset and method, from the completed runs; ``n_runs`` counts them."""
    done = runs[runs["status"] == "completed"]
    metrics = [*CLEAN] + [f"{k}_s{s}" for k in SHIFTED for s in SEVERITIES]
    table = summarize(done, by=["dataset", "method"], metrics=metrics)
    rank = {name: i for i, name in enumerate(ORDER)}
    return table.sort_values(
        ["dataset", "method"],
        key=lambda names: names.map(lambda n: (rank.get(n, len(ORDER)), n)),
        ignore_index=True,
    )


def verdict(
    mean_a: float, se_a: float, n_a: int, mean_b: float, se_b: float, n_b: int, lower: bool
) -> str:
    """Whether group a's metric is below (``lower``) or above group b's, by `CLAIMS_RULE`."""
    if n_a < 2 or n_b < 2 or not all(map(math.isfinite, (mean_a, se_a, mean_b, se_b))):
        return "inconclusive"
    difference = (mean_b - mean_a) if lower else (mean_a - mean_b)
    margin = SE_MULTIPLE * math.hypot(se_a, se_b)
    if difference > margin:
        return "held"
    if -difference > margin:
        return "not held"
    return "inconclusive"


@dataclass(frozen=True)
class Claim:
    """A published finding as a comparison: ``a``'s ``metric`` is lower (or higher) than
    ``b``'s, each a (group label, metric column) of a summary."""

    statement: str
    source: str
    dataset: str
    a: str
    b: str
    metric_a: str
    metric_b: str
    lower: bool


#: (statement, source, comparisons): each comparison (a, metric of a, b, metric of b, lower),
#: a and b the methods compared; ``{a}`` in the statement names a
_COMPARISONS = [
    (
        "a deep ensemble has lower NLL than one SGD network",
        "Lakshminarayanan et al. 2017; Ovadia et al. 2019",
        [("ensemble", "test_nll", "sgd", "test_nll", True)],
    ),
    (
        "a deep ensemble has lower ECE than one SGD network",
        "Lakshminarayanan et al. 2017; Ovadia et al. 2019",
        [("ensemble", "test_ece", "sgd", "test_ece", True)],
    ),
    (
        "{a}'s AUROC of the other dataset by mutual information exceeds one SGD network's by "
        "entropy",
        "Lakshminarayanan et al. 2017; Ovadia et al. 2019",
        [
            (m, "ood_auroc_mutual_information", "sgd", "ood_auroc_entropy", False)
            for m in ("ensemble", *SG_MCMC)
        ],
    ),
    (
        "SWAG has lower NLL than SGD",
        "Maddox et al. 2019",
        [("swag", "test_nll", "sgd", "test_nll", True)],
    ),
    (
        "MC dropout has lower NLL than SGD",
        "Gal & Ghahramani 2016",
        [("mc_dropout", "test_nll", "sgd", "test_nll", True)],
    ),
]


def _group(table: pd.DataFrame, dataset: str, method: str) -> pd.Series | None:
    found = table[(table["dataset"] == dataset) & (table["method"] == method)]
    return found.iloc[0] if len(found) else None


def _claim_row(claim: Claim, a: pd.Series | None, b: pd.Series | None) -> dict[str, str]:
    row = {
        "claim": claim.statement,
        "source": claim.source,
        "dataset": claim.dataset,
    }
    if a is None or b is None:
        return row | {"numbers": "—", "verdict": "not run"}
    (mean_a, se_a, n_a), (mean_b, se_b, n_b) = (
        (group[f"{metric}_mean"], group[f"{metric}_sem"], int(group["n_runs"]))
        for group, metric in ((a, claim.metric_a), (b, claim.metric_b))
    )
    numbers = (
        f"{claim.a}: {mean_pm(mean_a, se_a)} (n={n_a}); {claim.b}: {mean_pm(mean_b, se_b)} "
        f"(n={n_b})"
    )
    return row | {
        "numbers": numbers,
        "verdict": verdict(mean_a, se_a, n_a, mean_b, se_b, n_b, claim.lower),
    }


def claims(
    table: pd.DataFrame,
    cold: pd.DataFrame | None = None,
    warm_hmc: pd.DataFrame | None = None,
    cold_sghmc: pd.DataFrame | None = None,
    hmc_dataset: str = IZMAILOV_DATASET,
) -> pd.DataFrame:
    """The published findings as rows: claim, source, dataset, the numbers compared and the
    verdict by `CLAIMS_RULE` (``not run`` where a group has no completed run).

    ``table`` is `summary`'s; ``cold`` a summary of cold-posterior runs by ``temperature``
    (`cold_summary`: columns ``temperature``, ``n_runs``, ``test_nll_mean``/``_sem``,
    ``test_accuracy_mean``/``_sem``), None when they were not run; ``warm_hmc`` and
    ``cold_sghmc`` the same of HMC at T = 1 and of SGHMC at colder temperatures on the problem
    ``hmc_dataset`` names, for Izmailov et al.'s comparison."""
    rows = []
    datasets = list(dict.fromkeys(table["dataset"]))
    for dataset in datasets:
        for statement, source, comparisons in _COMPARISONS:
            for a, metric_a, b, metric_b, lower in comparisons:
                claim = Claim(
                    statement.format(a=a), source, dataset, a, b, metric_a, metric_b, lower
                )
                rows.append(_claim_row(claim, _group(table, dataset, a), _group(table, dataset, b)))
        for method in dict.fromkeys(table[table["dataset"] == dataset]["method"]):
            group = _group(table, dataset, method)
            claim = Claim(
                f"calibration degrades with shift for {method}: ECE at severity 5 (mean of the "
                "four corruptions) above the clean ECE",
                "Ovadia et al. 2019",
                dataset,
                f"{method} severity 5",
                f"{method} clean",
                "test_ece_s5",
                "test_ece",
                False,
            )
            rows.append(_claim_row(claim, group, group))
    rows += _cold_claims(cold)
    rows += _warm_hmc_claims(warm_hmc, cold_sghmc, hmc_dataset)
    return pd.DataFrame(rows, columns=["claim", "source", "dataset", "numbers", "verdict"])


def claims_markdown(found: pd.DataFrame) -> str:
    """`claims`' rows as a Markdown table."""
    lines = ["| " + " | ".join(found.columns) + " |", "|" + "---|" * len(found.columns)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in found.itertuples(index=False)]
    return "\n".join(lines)


def _not_run(statement: str, source: str, dataset: str) -> list[dict[str, str]]:
    return [
        {
            "claim": statement,
            "source": source,
            "dataset": dataset,
            "numbers": "—",
            "verdict": "not run",
        }
    ]


def _predicts_better(
    a: str,
    b: str,
    labels: tuple[str, str],
    groups: tuple[pd.Series, pd.Series],
    source: str,
    dataset: str,
) -> list[dict[str, str]]:
    """The two claims that ``a`` predicts better than ``b``: a lower test NLL, a higher test
    accuracy (``labels`` name the groups in the numbers)."""
    rows = []
    for metric, lower, word in (("test_nll", True, "NLL"), ("test_accuracy", False, "accuracy")):
        statement = f"{a} has {'lower' if lower else 'higher'} test {word} than {b}"
        claim = Claim(statement, source, dataset, *labels, metric, metric, lower)
        rows.append(_claim_row(claim, *groups))
    return rows


def _warm(summary: pd.DataFrame | None) -> pd.Series | None:
    """A temperature summary's (`cold_summary`) row at T = 1, if it has one."""
    found = None if summary is None else summary[summary["temperature"] == 1]
    return None if found is None or found.empty else found.iloc[0]


def _colder(summary: pd.DataFrame | None) -> list[tuple[str, pd.Series]]:
    """A temperature summary's rows below T = 1, coldest first, each with its T as written."""
    if summary is None:
        return []
    colder = summary[summary["temperature"] < 1].sort_values("temperature")
    return [(f"{group['temperature']:g}", group) for _, group in colder.iterrows()]


def _cold_claims(cold: pd.DataFrame | None) -> list[dict[str, str]]:
    source, warm = "Wenzel et al. 2020", _warm(cold)
    if warm is None:
        statement = "SGHMC at T < 1 predicts better (NLL, accuracy) than at T = 1"
        return _not_run(statement, source, "fashion_mnist")
    rows = []
    for t, group in _colder(cold):
        labels, groups = (f"T={t}", "T=1"), (group, warm)
        rows += _predicts_better(
            f"SGHMC at T = {t}", "at T = 1", labels, groups, source, "fashion_mnist"
        )
    return rows


def _warm_hmc_claims(
    warm_hmc: pd.DataFrame | None, cold_sghmc: pd.DataFrame | None, dataset: str
) -> list[dict[str, str]]:
    source, warm, colder = "Izmailov et al. 2021", _warm(warm_hmc), _colder(cold_sghmc)
    if warm is None or not colder:
        statement = "HMC at T = 1 predicts no worse than the cold SG-MCMC posterior"
        return _not_run(statement, source, "—")
    rows = []
    for t, group in colder:
        labels, groups = ("HMC T=1", f"SGHMC T={t}"), (warm, group)
        rows += _predicts_better(
            "HMC at T = 1", f"SGHMC at T = {t}", labels, groups, source, dataset
        )
    return rows


def _verdict_cell(runs: pd.DataFrame) -> str:
    """bdl's convergence verdict over a group's completed runs: ``k/n`` where it gives one."""
    verdicts = [v for v in runs["converged"] if isinstance(v, bool)]
    return f"{sum(verdicts)}/{len(verdicts)} converged" if verdicts else "no verdict"


def table_markdown(runs: pd.DataFrame, table: pd.DataFrame) -> str:
    """The table (mean ± standard error over seeds), its accuracy and NLL against severity, and
    the runs left out, in Markdown."""
    lines = [
        "| dataset | method | runs | bdl's verdict | " + " | ".join(CLEAN.values()) + " |",
        "|" + "---|" * (4 + len(CLEAN)),
    ]
    for _, group in table.iterrows():
        members = runs[(runs["dataset"] == group["dataset"]) & (runs["method"] == group["method"])]
        done = members[members["status"] == "completed"]
        cells = [mean_pm(group[f"{k}_mean"], group[f"{k}_sem"]) for k in CLEAN]
        verdict_text = _verdict_cell(done) if group["method"] in SG_MCMC else "no verdict"
        lines.append(
            f"| {group['dataset']} | {group['method']} | {len(done)}/{len(members)} | "
            f"{verdict_text} | " + " | ".join(cells) + " |"
        )
    for key in ("test_accuracy", "test_nll"):
        lines += [
            "",
            f"{SHIFTED[key]} against corruption severity (0: clean; 1-5: mean of the "
            "four corruptions)",
            "",
        ]
        lines.append("| dataset | method | " + " | ".join(map(str, LEVELS)) + " |")
        lines.append("|" + "---|" * (2 + len(LEVELS)))
        for _, group in table.iterrows():
            cells = [
                mean_pm(group[_level(key, s, "mean")], group[_level(key, s, "sem")]) for s in LEVELS
            ]
            lines.append(f"| {group['dataset']} | {group['method']} | " + " | ".join(cells) + " |")
    left_out = runs[runs["status"] != "completed"]
    partial = runs[(runs["status"] == "completed") & runs["missing"].map(bool)]
    if len(left_out) or len(partial):
        lines += ["", "Runs not in the means:"]
        lines += [f"- {r.run}: {r.status}" for r in left_out.itertuples()]
        lines += [
            f"- {r.run}: no evaluation under {', '.join(r.missing)} (its severities are left blank)"
            for r in partial.itertuples()
        ]
    return "\n".join(lines)


def severity_figure(table: pd.DataFrame, dataset: str) -> Figure:
    """Accuracy, NLL and ECE against corruption severity (0: clean) for ``dataset``: a line per
    method, a band of ± one standard error over seeds (Ovadia et al. 2019, Fig. 2)."""
    figure = Figure(figsize=(12, 3.8), layout="constrained")
    axes = figure.subplots(1, len(SHIFTED))
    rows = table[table["dataset"] == dataset]
    for ax, (key, title) in zip(axes, SHIFTED.items(), strict=True):
        for _, group in rows.iterrows():
            mean = np.array([group[_level(key, s, "mean")] for s in LEVELS], dtype=float)
            # one seed has no standard error: its band is the line
            se = np.nan_to_num(np.array([group[_level(key, s, "sem")] for s in LEVELS], float))
            (line,) = ax.plot(LEVELS, mean, marker="o", markersize=3, label=group["method"])
            ax.fill_between(LEVELS, mean - se, mean + se, color=line.get_color(), alpha=0.2)
        ax.set_xlabel("corruption severity (0: clean)")
        ax.set_ylabel(f"test {title}")
        ax.set_xticks(LEVELS)
    axes[0].legend(fontsize=7)
    figure.suptitle(
        f"{dataset}: mean over Gaussian noise, blur, translation and contrast "
        "(bdl.data.shift), ± one standard error over seeds"
    )
    return figure


def _level(key: str, severity: int, stat: str) -> str:
    return f"{key}_{stat}" if severity == 0 else f"{key}_s{severity}_{stat}"


def cold_summary(root: str | Path) -> pd.DataFrame:
    """The cold-posterior runs below ``root`` (``T<T>/seed<S>``, `scripts/cold_posterior.sh`)
    summarised by temperature: mean, std and standard error of test NLL and accuracy."""
    root = Path(root).resolve()
    rows = []
    for run in find_runs([root]):
        parts = run.relative_to(root).parts
        metrics = _read(run / "metrics.json") or {}
        if len(parts) != 2 or not parts[0].startswith("T") or metrics.get("status") != "completed":
            continue
        rows.append(
            {
                "temperature": float(parts[0][1:]),
                "test_nll": metrics["test_nll"],
                "test_accuracy": metrics["test_accuracy"],
            }
        )
    frame = pd.DataFrame(rows, columns=["temperature", "test_nll", "test_accuracy"])
    return summarize(frame, by=["temperature"], metrics=["test_nll", "test_accuracy"])
