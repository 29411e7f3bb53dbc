"""bdl-report --plot: the figures hold exactly the curves of the runs' curve.csv files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.image import imread

from bdl.analysis.plots import figures, summary_figure, write_summary
from bdl.analysis.report import main
from bdl.analysis.sweeps import load_runs
from bdl.diagnostics import RHAT_THRESHOLD

# Running test accuracy after burn-in (epochs 1-2 are burn-in: empty test_metric).
ACCURACY = {
    ("sghmc", 0): [0.90, 0.92, 0.93],
    ("sghmc", 1): [0.88, 0.90, 0.95],
    ("sgld", 0): [0.80, 0.85, 0.86],
}
GRAD_EVALS_PER_EPOCH = {"sghmc": 100, "sgld": 100}


def write_run(
    directory: Path, sampler: str, seed: int, curve: str, metrics: dict, burn_in: int = 2
) -> Path:
    (directory / ".hydra").mkdir(parents=True)
    (directory / ".hydra" / "config.yaml").write_text(
        f"seed: {seed}\nburn_in: {burn_in}\ndataset:\n  name: mnist\nsampler:\n  name: {sampler}\n"
    )
    (directory / ".hydra" / "hydra.yaml").write_text(
        f"hydra:\n  runtime:\n    choices:\n      sampler: {sampler}\n      dataset: mnist\n"
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
    assert set(lines) == {"sampler=sghmc", "sampler=sgld", "_nolegend_"}  # and burn-in
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
    line, burn_in = drawn["trace_1"].axes[0].lines  # seed 1: potential 100 - epoch + 1
    np.testing.assert_allclose(line.get_xdata(), [1, 2, 3, 4, 5])
    np.testing.assert_allclose(line.get_ydata(), [100, 99, 98, 97, 96])
    np.testing.assert_allclose(burn_in.get_xdata(), [2, 2])


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
    assert (ax.lines[0].get_linestyle(), ax.lines[0].get_color()) == ("--", "black")
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("R-hat (dashed: 1.01)", "test points")
    assert ax.get_title() == "R-hat per test point — mnist sghmc seed 0"
    assert [a.get_title() for a in drawn["trace_run"].axes[:2]] == [
        "potential per step",
        "noise_precision",
    ]


def test_bdl_report_plot_writes_png_and_pdf(sweep: Path, capsys):
    assert main([str(sweep), "--plot"]) == 0
    out = sweep / "plots"
    stems = ["test_error", "trace_0", "trace_1", "trace_2"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{s}.{ext}" for s in stems for ext in ("pdf", "png")
    )
    image = imread(out / "test_error.png")
    assert image.shape[:2] == (540, 1200)  # 8 x 3.6 inches at 150 dpi
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
    from bdl.analysis.plots import _slug

    assert _slug(label) == stem


@pytest.mark.parametrize(
    ("record", "label"),
    [
        ({"dataset": "yacht", "sampler": "sghmc", "seed": 0}, "yacht sghmc seed 0"),
        # a config naming a target and no option: the class it builds
        (
            {"dataset": "yacht", "sampler._target_": "bdl.samplers.sgld.SGLD", "seed": 2.0},
            "yacht SGLD seed 2",
        ),
        ({"run_dir": "/runs/first", "seed": float("nan")}, "first"),
    ],
)
def test_a_run_label_names_dataset_sampler_and_seed(record, label):
    from bdl.analysis.plots import run_label

    assert run_label(record) == label
    assert run_label({**record, "sampler.lr": 0.1}, by=["sampler.lr"]) == f"{label}, sampler.lr=0.1"


def overlapping_tick_labels(figure: Figure, gap: float = 2.0) -> list[tuple[str, str]]:
    """The pairs of drawn tick labels of one axis closer than ``gap`` pixels, over every axis."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    pairs = []
    for ax in figure.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            boxes = [
                (tick.label1.get_text(), tick.label1.get_window_extent(renderer).padded(gap / 2))
                for tick in axis.get_major_ticks() + axis.get_minor_ticks()
                if tick.label1.get_visible()
                and tick.label1.get_text()
                and lo <= tick.get_loc() <= hi
            ]
            pairs += [
                (a, b)
                for i, (a, box_a) in enumerate(boxes)
                for b, box_b in boxes[i + 1 :]
                if box_a.overlaps(box_b)
            ]
    return pairs


def burn_in_lines(ax) -> list[float]:
    """The x of the vertical lines of ``ax`` (axvline: two points at one x)."""
    return [
        float(line.get_xdata()[0])
        for line in ax.lines
        if len(line.get_xdata()) == 2 and line.get_xdata()[0] == line.get_xdata()[1]
    ]


def test_the_sweep_figure_reads(sweep: Path):
    """Title naming the dataset and the sweep, a band of ± std over the two sghmc seeds and none
    for sgld's one, burn-in (epoch 2) marked, a linear y for errors within a factor of 2,
    ticks apart."""
    figure = figures(load_runs([sweep]), ["sampler"])["test_error"]
    by_epoch, by_grads = figure.axes
    assert figure.get_suptitle() == "test error of the model average — mnist, sweep sweep"
    (band,) = [c for c in by_epoch.collections if isinstance(c, PolyCollection)]
    errors = np.array([[0.10, 0.08, 0.07], [0.12, 0.10, 0.05]])  # 1 - ACCURACY of sghmc's seeds
    lows = errors.mean(0) - errors.std(0, ddof=1)
    highs = errors.mean(0) + errors.std(0, ddof=1)
    y = band.get_paths()[0].vertices[:, 1]
    np.testing.assert_allclose([y.min(), y.max()], [lows.min(), highs.max()], rtol=1e-9)
    assert burn_in_lines(by_epoch) == [2.0, 2.0]  # each group's, in its colour
    assert burn_in_lines(by_grads) == [200.0, 200.0]  # 100 gradients per epoch
    assert by_epoch.get_yscale() == "linear"
    # every group's means set the range: sghmc's lowest 0.06, sgld's highest 0.20
    assert by_epoch.get_ylim() == pytest.approx((0.95 * 0.06, 1.05 * 0.20))
    assert overlapping_tick_labels(figure) == []
    labels = [(ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) for ax in (by_epoch, by_grads)]
    assert labels == [
        ("epoch", "test error", "against epochs (dashed: end of burn-in)"),
        ("gradient evaluations", "", "against cost"),
    ]
    legend = by_epoch.get_legend()
    assert legend.get_title().get_text() == "band: ± std over seeds"  # two sghmc seeds
    assert [t.get_text() for t in legend.get_texts()] == ["sampler=sghmc", "sampler=sgld"]
    assert all(float(tick).is_integer() for tick in by_epoch.get_xticks())  # whole epochs
    one_seed = figures(load_runs([sweep / "2"]), ["sampler"])["test_error"]
    assert one_seed.axes[0].get_legend().get_title().get_text() == ""  # no band to explain


def test_a_trace_spanning_decades_is_drawn_on_a_log_axis(tmp_path: Path):
    """A potential falling from 10^5 to 10^2 spans more than SPREAD: log; the noise precision
    (between 1 and 1.5) does not: linear. An optimiser (test metric from epoch 1) has no burn-in
    to mark; a sampler (blank test metric until burn_in) has."""
    epochs = range(1, 21)
    for name, blank in (("sampler", 5), ("optimiser", 0)):
        rows = [
            f"{e},{1e5 * 0.7**e},{'' if e <= blank else 1.0 / e**2},{1 + e / 40}" for e in epochs
        ]
        curve = "epoch,potential,test_metric,noise_precision\n" + "\n".join(rows) + "\n"
        write_run(tmp_path / name, "sghmc", 3, curve, {"test_rmse": 0.1, "epochs": 20}, 5)
    drawn = figures(load_runs([tmp_path]), [])
    potential, noise = drawn["trace_sampler"].axes[:2]
    assert drawn["trace_sampler"].get_suptitle() == "trace — mnist sghmc seed 3"
    assert (potential.get_yscale(), noise.get_yscale()) == ("log", "linear")
    assert burn_in_lines(potential) == [5.0]
    assert burn_in_lines(drawn["trace_optimiser"].axes[0]) == []
    rmse = drawn["test_rmse"].axes[0]
    assert rmse.get_yscale() == "log"  # 1/e² from epoch 1 (optimiser) to 20: a ratio of 400
    means = rmse.lines[0].get_ydata()
    assert rmse.get_ylim() == pytest.approx((means.min() / 1.5, 1.5 * means.max()))
    for figure in drawn.values():
        assert overlapping_tick_labels(figure) == []


def test_summary_of_a_run_of_several_chains(tmp_path: Path):
    curve = "chain,epoch,potential,test_metric\n"
    curve += "".join(
        f"{c},{e},{1e5 / e**2 + c},{'' if e <= 3 else 0.8 + 0.01 * c}\n"
        for e in range(1, 11)
        for c in (0, 1)
    )
    metrics = {"status": "completed", "test_accuracy": 0.85, "epochs": 10, "chains": 2}
    run = write_run(tmp_path / "run", "sgld", 7, curve, metrics, burn_in=3)
    rhat = [1.0, 1.05, 1.2]
    (run / "diagnostics.csv").write_text("point,rhat\n0,1.0\n1,1.05\n2,1.2\n")
    figure = summary_figure(run)
    metric, potential, histogram = figure.axes
    assert figure.get_suptitle() == "mnist sgld seed 7, 2 chains — completed"
    for converged, said in [(False, "completed, NOT converged"), (True, "converged")]:
        (run / "metrics.json").write_text(json.dumps(metrics | {"converged": converged}))
        assert summary_figure(run).get_suptitle() == f"mnist sgld seed 7, 2 chains — {said}"
    np.testing.assert_allclose(metric.lines[1].get_ydata(), [0.19] * 7)  # chain 1's error
    assert burn_in_lines(metric) == [3.0] and burn_in_lines(potential) == [3.0]
    assert [round(y, 12) for y in metric.lines[-1].get_ydata()] == [0.15, 0.15]  # pooled
    assert potential.get_yscale() == "log"  # 10^5 down to 10^3
    assert [len(line.get_xdata()) for line in potential.lines[:2]] == [10, 10]
    assert sum(p.get_height() for p in histogram.patches) == len(rhat)
    assert overlapping_tick_labels(figure) == []
    assert [(ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) for ax in figure.axes] == [
        ("epoch", "test error", "test error of the model average"),
        ("epoch", "", "potential per step"),
        ("R-hat (dashed: 1.01)", "test points", "R-hat per test point (2 chains)"),
    ]
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "chain 0",
        "chain 1",
        "end of burn-in",
        "all chains' average",
    ]
    assert write_summary(run) == run / "summary.png"
    image = imread(run / "summary.png")
    assert image[..., :3].std() > 0.05
    width, height = figure.get_size_inches() * 120  # at 120 dots per inch
    assert image.shape[:2] == (round(height), round(width))


def test_a_summary_that_cannot_be_drawn_leaves_the_run_as_it_is(tmp_path: Path, caplog):
    run = write_run(tmp_path / "run", "sgld", 0, "epoch,potential\n1,3.0\n", {"epochs": 1})
    (run / "curve.csv").write_text("not,a\ncurve")  # no epoch column
    assert write_summary(run) is None
    assert not (run / "summary.png").exists()
    assert "no summary.png: KeyError" in caplog.text


def test_reliability_diagram_bars_are_each_bins_accuracy_and_confidence(tmp_path: Path):
    """Two bins by hand: confidences 0.4 and 0.45 (one right) in (0, 0.5], 0.6, 0.8 and 0.9
    (two right) in (0.5, 1]; the bars are the accuracies 1/2 and 2/3, the gaps reach the mean
    confidences 0.425 and 0.7667, the counts are 2 and 3, and the ECE is
    0.4 * 0.075 + 0.6 * 0.1 = 0.09; a run's reliability.png is drawn from its
    predictive.safetensors beside summary.png."""
    import torch
    from safetensors.torch import save_file

    from bdl.analysis.plots import reliability_figure

    probs = torch.tensor(
        [
            [0.4, 0.3, 0.3],
            [0.45, 0.35, 0.2],
            [0.6, 0.2, 0.2],
            [0.1, 0.8, 0.1],
            [0.05, 0.05, 0.9],
        ],
        dtype=torch.float64,
    )
    y = torch.tensor([0, 1, 0, 1, 0])
    figure = reliability_figure(probs, y, "hand", bins=2)
    diagram, counts = figure.axes
    low, high, low_gap, high_gap = diagram.patches
    assert [low.get_height(), high.get_height()] == pytest.approx([1 / 2, 2 / 3])
    assert low.get_height() + low_gap.get_height() == pytest.approx(0.425)
    assert high.get_height() + high_gap.get_height() == pytest.approx(2.3 / 3)
    assert [p.get_height() for p in counts.patches] == [2, 3]
    assert diagram.get_title() == "hand\nECE 0.0900 (2 bins)"
    assert (diagram.get_ylabel(), diagram.get_xlim(), diagram.get_ylim()) == (
        "accuracy",
        (0, 1),
        (0, 1),
    )
    assert (counts.get_xlabel(), counts.get_ylabel()) == ("top-class confidence", "points")
    assert [t.get_text() for t in diagram.get_legend().get_texts()] == [
        "perfect calibration",
        "accuracy",
        "gap to the mean confidence",
    ]
    (diagonal,) = diagram.get_lines()
    assert (list(diagonal.get_xdata()), list(diagonal.get_ydata())) == ([0, 1], [0, 1])
    assert [p.get_width() for p in diagram.patches] == [0.5] * 4  # a bar spans its bin

    run = write_run(tmp_path / "run", "sgld", 0, "epoch,potential,test_metric\n1,3.0,0.6\n", {})
    metrics = {"status": "completed", "test_accuracy": 0.6, "epochs": 1}
    (run / "metrics.json").write_text(json.dumps(metrics))
    save_file({"predictive": probs, "targets": y}, run / "predictive.safetensors")
    assert write_summary(run) == run / "summary.png"
    image = imread(run / "reliability.png")
    assert image[..., :3].std() > 0.05
    width, height = figure.get_size_inches() * 120  # at 120 dots per inch
    assert image.shape[:2] == (round(height), round(width))


@pytest.mark.parametrize(
    ("values", "scale"),
    [
        ([1.0, 20.0], "linear"),  # exactly SPREAD times: not more
        ([1.0, 20.001], "log"),
        ([np.nan, 2.0, 100.0, np.inf], "log"),  # only finite values count
        ([0.0, 100.0], "linear"),  # a log axis cannot show 0
        ([-1.0, 100.0], "linear"),
        ([], "linear"),
    ],
)
def test_an_axis_is_logarithmic_only_when_positive_values_span_more_than_spread(values, scale):
    from bdl.analysis.plots import scale_to_spread

    ax = Figure().subplots()
    assert scale_to_spread(ax, values) == scale
    assert (ax.get_yscale(), ax.get_xscale()) == (scale, "linear")
    assert scale_to_spread(ax, values, axis="x") == scale and ax.get_xscale() == scale


def test_a_curve_counts_each_chains_gradients_per_epoch(tmp_path: Path):
    from bdl.analysis.plots import curve

    (tmp_path / "curve.csv").write_text("epoch,potential,test_metric\n1,5,0.7\n2,4,0.8\n3,3,0.9\n")
    # 1200 gradient evaluations over 3 epochs and 2 chains: 200 per chain and epoch
    frame = curve(tmp_path, {"test_accuracy": 0.9, "grad_evals": 1200, "epochs": 3, "chains": 2})
    np.testing.assert_allclose(frame["grad_evals"], [200, 400, 600])
    np.testing.assert_allclose(frame["test_error"], [0.3, 0.2, 0.1])
    frame = curve(tmp_path, {"test_rmse": 0.9, "grad_evals": 300})  # no epochs: no count
    assert "grad_evals" not in frame and "test_error" not in frame
    np.testing.assert_allclose(frame["test_rmse"], [0.7, 0.8, 0.9])
    (tmp_path / "curve.csv").write_text("epoch,potential,test_metric,grad_evals\n1,5,0.7,17\n")
    frame = curve(tmp_path, {"test_accuracy": 0.7, "grad_evals": 1200, "epochs": 1})
    assert frame["grad_evals"].tolist() == [17]  # the file's own count wins


def test_a_group_marks_its_latest_burn_in_where_no_test_metric_precedes_it():
    from bdl.analysis.plots import group_of

    blank_to_3 = pd.DataFrame({"epoch": [1, 2, 3, 4], "test_metric": [np.nan, np.nan, 0.5, 0.6]})
    records = [{"run_dir": "a", "burn_in": 2}, {"run_dir": "b", "burn_in": 1}]
    curves = {"a": blank_to_3, "b": blank_to_3}
    assert group_of("g", records, curves) == ("g", [blank_to_3, blank_to_3], 2)
    assert group_of("g", [{"run_dir": "a", "burn_in": 3}], curves).burn_in is None  # 0.5 at 3
    assert group_of("g", [{"run_dir": "a", "burn_in": 0}], curves).burn_in is None
    assert group_of("g", [{"run_dir": "a", "burn_in": np.nan}], curves).burn_in is None


def test_lines_are_labelled_by_every_key_or_by_their_runs(sweep: Path):
    runs = load_runs([sweep])
    by_both = figures(runs, ["sampler", "seed"])["test_error"].axes[0]
    lines = {line.get_label(): line.get_ydata() for line in by_both.lines}
    assert set(lines) - {"_nolegend_"} == {
        "sampler=sghmc, seed=0",
        "sampler=sghmc, seed=1",
        "sampler=sgld, seed=0",
    }
    np.testing.assert_allclose(lines["sampler=sghmc, seed=1"], [0.12, 0.10, 0.05])
    (pooled, *_) = figures(runs, [])["test_error"].axes[0].lines
    assert pooled.get_label() == "3 runs"  # every run in one line: the mean over the three
    errors = 1 - np.array(list(ACCURACY.values()))
    np.testing.assert_allclose(pooled.get_ydata(), errors.mean(axis=0), rtol=1e-12)
    (one, *_) = figures(load_runs([sweep / "2"]), [])["test_error"].axes[0].lines
    assert one.get_label() == "2"
    trace = figures(runs, ["sampler", "seed"])["trace_1"]
    assert trace.get_suptitle() == "trace — mnist sghmc seed 1"


def test_an_error_axis_shows_where_the_curves_end(tmp_path: Path):
    """A linear axis from 0.95 times the lowest mean to 1.05 times the lower of the highest mean
    and three times the highest final value: an optimiser's 88% error at epoch 1 would flatten
    the ends the reader compares. A cost axis spanning more than SPREAD is logarithmic."""
    rows = [(1, 0.12), (2, 0.5), (3, 0.85), (4, 0.9)]  # accuracy; 100 gradients per epoch
    curve = "epoch,potential,test_metric\n" + "".join(f"{e},1.0,{a}\n" for e, a in rows)
    write_run(
        tmp_path / "sgd",
        "sgd",
        0,
        curve,
        {"test_accuracy": 0.9, "epochs": 4, "grad_evals": 400},
        burn_in=0,
    )
    (by_epoch, by_grads) = figures(load_runs([tmp_path]), [])["test_error"].axes
    assert by_epoch.get_yscale() == "linear"  # 0.88 / 0.1 is below SPREAD
    assert by_epoch.get_ylim() == pytest.approx((0.95 * 0.1, 1.05 * 3 * 0.1))
    assert by_grads.get_xscale() == "linear"  # 100 to 400

    rows = [(e, 1 - 0.5 / e) for e in range(1, 31)]
    curve = "epoch,potential,test_metric\n" + "".join(f"{e},1.0,{a}\n" for e, a in rows)
    write_run(
        tmp_path / "long" / "r",
        "sgd",
        0,
        curve,
        {"test_accuracy": 0.98, "epochs": 30, "grad_evals": 3000},
        burn_in=0,
    )
    (by_epoch, by_grads) = figures(load_runs([tmp_path / "long"]), [])["test_error"].axes
    assert by_grads.get_xscale() == "log"  # 100 to 3000 gradients
    assert by_epoch.get_yscale() == "log"  # 0.5 to 0.5 / 30
    np.testing.assert_allclose(by_grads.lines[0].get_xdata(), 100 * np.arange(1, 31))


def test_a_trace_draws_the_potential_and_each_gibbs_sampled_hyperparameter():
    from bdl.analysis.plots import trace_figure

    frame = pd.DataFrame(
        {
            "epoch": [1, 2],
            "potential": [9.0, 8.0],
            "lr_scale": [1.0, 0.5],
            "precision/b": [3.0, 4.0],
            "noise_precision": [5.0, 6.0],
            "precision/a": [1.0, 2.0],
        }
    )
    figure = trace_figure(frame, "t", burn_in=None)
    panels = [ax for ax in figure.axes if ax.lines]
    assert [ax.get_title() for ax in panels] == [
        "potential per step",
        "precision/b",
        "noise_precision",
        "precision/a",
    ]
    # a curve without a chain column is chain 0's, as a run of one chain numbers it
    assert [line.get_label() for line in panels[0].lines] == ["chain 0"]
    np.testing.assert_allclose(panels[0].lines[0].get_ydata(), [9.0, 8.0])
    for ax, column in zip(panels[1:], ["precision/b", "noise_precision", "precision/a"]):
        np.testing.assert_allclose(ax.lines[0].get_ydata(), frame[column])
        assert ax.get_xlabel() == "epoch"


@pytest.mark.parametrize(
    ("record", "by", "label"),
    [
        ({"dataset.name": "boston", "sampler.name": "hmc", "seed": 1}, [], "boston hmc seed 1"),
        # a key the label names already is not repeated; a key without a value is left out
        (
            {"dataset": "wine", "sampler": "sgld", "seed": 0, "lr": np.nan, "width": 50},
            ["seed", "lr", "width"],
            "wine sgld seed 0, width=50",
        ),
        ({"sampler": "sgld", "run_dir": "/x/y"}, [], "sgld"),
        ({"dataset": "wine", "seed": 3}, ["dataset"], "wine seed 3"),
    ],
)
def test_a_run_label_names_only_the_keys_it_has(record, by, label):
    from bdl.analysis.plots import run_label

    assert run_label(record, by) == label


def test_sweep_title_lists_each_dataset_once_and_a_single_run_by_name():
    from bdl.analysis.plots import sweep_title

    runs = pd.DataFrame(
        {"dataset": ["wine", "yacht", "wine"], "run_dir": ["/s/a/0", "/s/b/1", "/s/a/2"]}
    )
    assert sweep_title(runs) == "wine, yacht, sweep s"
    assert sweep_title(runs.iloc[1:2]) == "yacht, run 1"


def test_summary_of_one_regression_chain(tmp_path: Path):
    curve = "epoch,potential,test_metric\n1,300.0,\n2,20.0,0.8\n3,10.0,0.6\n"
    metrics = {"status": "diverged", "test_rmse": 0.6, "epochs": 3}
    run = write_run(tmp_path / "run", "sghmc", 2, curve, metrics, burn_in=1)
    figure = summary_figure(run)
    metric, potential = figure.axes
    assert figure.get_suptitle() == "mnist sghmc seed 2 — diverged"
    assert metric.get_ylabel() == "test RMSE"
    (line,) = [line for line in metric.lines if line.get_label() == "chain 0"]
    np.testing.assert_allclose(line.get_xdata(), [2, 3])
    np.testing.assert_allclose(line.get_ydata(), [0.8, 0.6])
    assert burn_in_lines(metric) == [1.0]  # and no pooled line: one chain is the average
    assert potential.get_yscale() == "log"  # 300 to 10
    np.testing.assert_allclose(potential.lines[0].get_ydata(), [300, 20, 10])


def test_a_group_averages_each_runs_chains_before_its_runs(tmp_path: Path):
    """Run a's two chains (errors 0.1 and 0.3 at epoch 1) count as one run of error 0.2 beside
    run b's 0.4: the line is at 0.3 (not (0.1 + 0.3 + 0.4) / 3), its band ± the runs' sd."""
    curves = {
        "a": "epoch,chain,potential,test_metric\n1,0,1,0.9\n1,1,1,0.7\n2,0,1,0.9\n2,1,1,0.9\n",
        "b": "epoch,potential,test_metric\n1,1,0.6\n2,1,0.8\n",
    }
    for name, curve in curves.items():
        metrics = {"test_accuracy": 0.9, "epochs": 2}
        write_run(tmp_path / name, "sgld", {"a": 0, "b": 1}[name], curve, metrics, burn_in=0)
    by_epoch = figures(load_runs([tmp_path]), ["sampler"])["test_error"].axes[0]
    (line,) = by_epoch.lines
    np.testing.assert_allclose(line.get_ydata(), [0.3, 0.15])
    (band,) = [c for c in by_epoch.collections if isinstance(c, PolyCollection)]
    y = band.get_paths()[0].vertices[:, 1]
    spread = np.std([[0.2, 0.1], [0.4, 0.2]], axis=0, ddof=1)
    np.testing.assert_allclose([y.min(), y.max()], [0.15 - spread[1], 0.3 + spread[0]])


def test_a_run_of_several_chains_is_drawn_against_each_chains_gradients(tmp_path: Path):
    """Two chains that spent 1200 gradients in all over 3 epochs spent 200 each per epoch: its
    line (the mean of its chains) is drawn at 200, 400, 600 beside a one-chain run's 100 per
    epoch."""
    rows = "".join(f"{e},{c},1.0,0.9\n" for e in (1, 2, 3) for c in (0, 1))
    metrics = {"test_accuracy": 0.9, "epochs": 3, "grad_evals": 1200, "chains": 2}
    write_run(
        tmp_path / "two",
        "sghmc",
        0,
        "epoch,chain,potential,test_metric\n" + rows,
        metrics,
        burn_in=0,
    )
    rows = "".join(f"{e},1.0,0.8\n" for e in (1, 2, 3))
    metrics = {"test_accuracy": 0.8, "epochs": 3, "grad_evals": 300}
    write_run(tmp_path / "one", "sgld", 0, "epoch,potential,test_metric\n" + rows, metrics, 0)
    by_grads = figures(load_runs([tmp_path]), ["sampler"])["test_error"].axes[1]
    lines = {line.get_label(): line.get_xdata() for line in by_grads.lines}
    np.testing.assert_allclose(lines["sampler=sghmc"], [200, 400, 600])
    np.testing.assert_allclose(lines["sampler=sgld"], [100, 200, 300])


def test_a_diagnostics_file_without_rhat_draws_no_histogram(sweep: Path):
    (sweep / "0" / "diagnostics.csv").write_text("point,ess\n0,80.0\n1,95.0\n")
    (sweep / "1" / "diagnostics.csv").write_text("point,rhat\n0,1.0\n1,1.3\n")
    drawn = figures(load_runs([sweep]), ["sampler"])
    assert sorted(k for k in drawn if k.startswith("rhat_")) == ["rhat_1"]
    assert sum(p.get_height() for p in drawn["rhat_1"].axes[0].patches) == 2
