"""bdl-report --plot: the figures hold exactly the curves of the runs' curve.csv files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from bdl.diagnostics import RHAT_THRESHOLD
from bdl.plots import figures
from bdl.report import main
from bdl.sweeps import load_runs

# Running test accuracy after burn-in (epochs 1-2 are burn-in: empty test_metric).
ACCURACY = {
    ("sghmc", 0): [0.90, 0.92, 0.93],
    ("sghmc", 1): [0.88, 0.90, 0.95],
    ("sgld", 0): [0.80, 0.85, 0.86],
}
GRAD_EVALS_PER_EPOCH = {"sghmc": 100, "sgld": 100}


def write_run(directory: Path, sampler: str, seed: int, curve: str, metrics: dict) -> Path:
    (directory / ".hydra").mkdir(parents=True)
    (directory / ".hydra" / "config.yaml").write_text(
        f"seed: {seed}\nsampler:\n  name: {sampler}\n"
    )
    (directory / ".hydra" / "hydra.yaml").write_text(
        f"hydra:\n  runtime:\n    choices:\n      sampler: {sampler}\n"
    )
    (directory / "metrics.json").write_text(json.dumps(metrics))
    (directory / "curve.csv").write_text(curve)
    return directory


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    for i, ((sampler, seed), accuracy) in enumerate(ACCURACY.items()):
        lines = ["epoch,potential,lr_scale,num_samples,test_metric,wall_time_s,accept_rate"]
        lines += [f"{e},{100 - e + seed},1.0,0,,{e}," for e in (1, 2)]
        lines += [f"{e},{100 - e + seed},1.0,{e - 2},{a},{e}," for e, a in zip((3, 4, 5), accuracy)]
        metrics = {"test_accuracy": accuracy[-1], "epochs": 5, "grad_evals": 500}
        write_run(tmp_path / "sweep" / str(i), sampler, seed, "\n".join(lines) + "\n", metrics)
    return tmp_path / "sweep"


def test_test_error_lines_are_the_group_means_of_the_curves(sweep: Path):
    drawn = figures(load_runs([sweep]), ["sampler"])
    by_epoch, by_grads = drawn["test_error"].axes
    lines = {line.get_label(): line for line in by_epoch.lines}
    assert set(lines) == {"sampler=sghmc", "sampler=sgld"}
    np.testing.assert_allclose(lines["sampler=sghmc"].get_xdata(), [3, 4, 5])
    np.testing.assert_allclose(
        lines["sampler=sghmc"].get_ydata(), [1 - 0.89, 1 - 0.91, 1 - 0.94], rtol=1e-12
    )
    np.testing.assert_allclose(lines["sampler=sgld"].get_ydata(), [0.20, 0.15, 0.14], rtol=1e-12)
    grads = {line.get_label(): line for line in by_grads.lines}
    np.testing.assert_allclose(grads["sampler=sgld"].get_xdata(), [300, 400, 500])
    np.testing.assert_allclose(grads["sampler=sgld"].get_ydata(), [0.20, 0.15, 0.14], rtol=1e-12)


def test_traces_per_run(sweep: Path):
    drawn = figures(load_runs([sweep]), ["sampler"])
    assert {k for k in drawn if k.startswith("trace_")} == {"trace_0", "trace_1", "trace_2"}
    (line,) = drawn["trace_1"].axes[0].lines  # seed 1: potential 100 - epoch + 1
    np.testing.assert_allclose(line.get_xdata(), [1, 2, 3, 4, 5])
    np.testing.assert_allclose(line.get_ydata(), [100, 99, 98, 97, 96])


def test_regression_chains_hyperparameters_and_rhat(tmp_path: Path):
    curve = "epoch,chain,potential,test_metric,noise_precision,precision/layers.0.weight\n"
    rows = [(e, c, 50.0 - e - 10 * c, 2.0 / e, 1.0 + c, 0.5 * e) for c in (0, 1) for e in (1, 2)]
    curve += "".join(",".join(map(str, row)) + "\n" for row in rows)
    run = write_run(tmp_path / "run", "sghmc", 0, curve, {"test_rmse": 1.0, "epochs": 2})
    rhat = np.array([1.0, 1.002, 1.005, 1.02, 1.3, np.nan])
    (run / "diagnostics.csv").write_text(
        "point,rhat\n" + "".join(f"{i},{r}\n" for i, r in enumerate(rhat))
    )
    drawn = figures(load_runs([run]), [])
    assert set(drawn) == {"test_rmse", "trace_run", "rhat_run"}
    (rmse,) = drawn["test_rmse"].axes[0].lines  # the mean over the two chains' rows
    np.testing.assert_allclose(rmse.get_ydata(), [2.0, 1.0])
    assert not drawn["test_rmse"].axes[1].lines  # no grad_evals to put on the axis
    potential, noise, precision = drawn["trace_run"].axes[:3]
    assert [line.get_label() for line in potential.lines] == ["chain 0", "chain 1"]
    np.testing.assert_allclose(potential.lines[1].get_ydata(), [39.0, 38.0])
    np.testing.assert_allclose(noise.lines[1].get_ydata(), [2.0, 2.0])
    assert precision.get_title() == "precision/layers.0.weight"
    np.testing.assert_allclose(precision.lines[0].get_ydata(), [0.5, 1.0])
    ax = drawn["rhat_run"].axes[0]
    counts, _ = np.histogram(rhat[np.isfinite(rhat)], bins=30)
    assert [p.get_height() for p in ax.patches] == counts.tolist()
    assert ax.lines[0].get_xdata()[0] == RHAT_THRESHOLD


def test_bdl_report_plot_writes_png_and_pdf(sweep: Path, capsys):
    assert main([str(sweep), "--plot"]) == 0
    out = sweep / "plots"
    stems = ["test_error", "trace_0", "trace_1", "trace_2"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{s}.{ext}" for s in stems for ext in ("pdf", "png")
    )
    image = imread(out / "test_error.png")
    assert image.shape[0] > 300 and image.shape[1] > 900  # 11 x 4.2 inches at 150 dpi
    assert image[..., :3].std() > 0.05  # not a blank canvas
    assert (out / "trace_0.pdf").read_bytes().startswith(b"%PDF")
    assert "wrote 8 files" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("label", "stem"),
    [
        ("sampler=sgld/seed=0", "sampler=sgld_seed=0"),  # a sweep's job: one file name
        ("Xavier init, run 1 (2026)", "Xavier_init_run_1_2026"),  # only separators trimmed
        ("???", "run"),
    ],
)
def test_a_run_label_becomes_a_file_stem(label, stem):
    from bdl.plots import _slug

    assert _slug(label) == stem
