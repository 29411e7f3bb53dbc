"""Signal-to-noise pruning: exact fractions, the order, streaming moments, and pruning.csv from
runs of a chain and of Bayes by Backprop."""

import csv

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from matplotlib.figure import Figure

import bdl.composition.config  # noqa: F401  (registers the root schema)
from analysis.test_plots import overlapping_tick_labels
from bdl.analysis import report
from bdl.analysis.pruning import (
    FRACTIONS,
    prune_masks,
    pruning_curve,
    pruning_figure,
    running_moments,
    signal_to_noise_figure,
    signal_to_noise_order,
    write_signal_to_noise,
)
from bdl.runner.run import run

SHAPES = {"a": torch.Size([7, 13]), "b": torch.Size([13]), "c": torch.Size([3, 2, 5])}


@pytest.mark.parametrize("fraction", FRACTIONS + (0.333, 1.0))
def test_pruning_keeps_exactly_the_requested_fraction(fraction):
    total = sum(s.numel() for s in SHAPES.values())
    order = torch.randperm(total, generator=torch.Generator().manual_seed(0))
    masks = prune_masks(order, SHAPES, fraction)
    assert {n: m.shape for n, m in masks.items()} == SHAPES
    kept = sum(int(m.sum()) for m in masks.values())
    assert kept == total - round(fraction * total)
    # exactly the first ones in the order are removed
    flat = torch.cat([m.flatten() for m in masks.values()])
    assert not flat[order[: total - kept]].any() and flat[order[total - kept :]].all()


def test_order_is_by_signal_to_noise_then_magnitude():
    mean = {"w": torch.tensor([1.0, -4.0, 0.5, 3.0, 0.0, -2.0])}
    std = {"w": torch.tensor([1.0, 1.0, 0.1, 0.0, 0.0, 0.0])}
    # ratios 1, 4, 5, inf, 0/0 -> 0, inf; the two infinite ones by |μ|: 2 before 3
    assert signal_to_noise_order(mean, std).tolist() == [4, 0, 1, 2, 5, 3]


def test_running_moments_match_torch():
    samples = [{"w": torch.randn(4, 3), "b": torch.randn(3)} for _ in range(9)]
    mean, std = running_moments(iter(samples), ["w", "b"])
    for name in ("w", "b"):
        stacked = torch.stack([s[name] for s in samples]).double()
        torch.testing.assert_close(mean[name], stacked.mean(0))
        torch.testing.assert_close(std[name], stacked.std(0, correction=0))
    with pytest.raises(ValueError, match="no samples"):
        running_moments(iter([]), ["w"])


class Identity(torch.nn.Module):
    """A likelihood whose predictive is the network's output."""

    def predict(self, output: torch.Tensor) -> torch.Tensor:
        return output


def test_curve_zeroes_the_pruned_weights_and_restores_the_live_ones():
    """The network predicts with each sample's weights pruned (the one input picks the
    weights out), and holds its own weights again after."""
    model = torch.nn.Linear(4, 4, bias=False)
    own = torch.tensor([1.0, 2.0, 3.0, 4.0]).diag()
    with torch.no_grad():
        model.weight.copy_(own)
    samples = [{"weight": torch.tensor([1.0, -2.0, 3.0, 0.5]).diag()}]
    mean = {"weight": torch.tensor([0.1, 2.0, 3.0, 4.0]).diag()}
    std = {"weight": torch.ones(4, 4)}
    seen = []
    rows = pruning_curve(
        model,
        Identity(),
        ["weight"],
        mean,
        std,
        samples,
        torch.ones(1, 4),
        score=lambda predictions: seen.append(predictions[0]) or 0.0,
        fractions=(0.0, 13 / 16),
    )
    assert [r["weights_kept"] for r in rows] == [16, 3]
    torch.testing.assert_close(seen[0], torch.tensor([[1.0, -2.0, 3.0, 0.5]]))
    # 13 of 16 removed: the zeros (|μ|/σ = 0), then the lowest diagonal ratio, 0.1
    torch.testing.assert_close(seen[1], torch.tensor([[0.0, -2.0, 3.0, 0.5]]))
    torch.testing.assert_close(model.weight.detach(), own)


@pytest.mark.parametrize("sampler", ["sghmc", "bbb"])
def test_runs_write_the_pruning_curve(sampler, fake_data_root, isolated_cache, tmp_path):
    overrides = [
        f"sampler={sampler}",
        f"dataset.root={fake_data_root}",
        "dataset.validation=59000",
        "epochs=2",
        "burn_in=0",
        "batch_size=100",
        "pruning=true",
        "pruning_samples=3",  # every sample: the unpruned row is then the run's own average
        "sampler.num_samples=3" if sampler == "bbb" else "thin=1",
    ]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", overrides=overrides)
    metrics = run(cfg, tmp_path)
    with (tmp_path / "pruning.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert [float(r["fraction_removed"]) for r in rows] == list(FRACTIONS)
    kept = [int(r["weights_kept"]) for r in rows]
    assert kept[0] == 79510 and kept == sorted(kept, reverse=True)
    assert float(rows[0]["test_error"]) == pytest.approx(1 - metrics["test_accuracy"])
    assert (tmp_path / "pruning.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with (tmp_path / "signal_to_noise.csv").open() as file:
        quantiles = list(csv.DictReader(file))
    assert float(quantiles[0]["sigma"]) > 0
    assert (tmp_path / "signal_to_noise.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_signal_to_noise_quantiles(tmp_path):
    # |mu|/sigma = 1, 10, 100, 0.1 and 0/1: 0, 10, 20, -10 dB and -inf, which is left out
    mean = {"w": torch.tensor([1.0, 10.0, 100.0]), "b": torch.tensor([-0.2, 0.0])}
    std = {"w": torch.ones(3), "b": torch.tensor([2.0, 1.0])}
    write_signal_to_noise(tmp_path, mean, std)
    with (tmp_path / "signal_to_noise.csv").open() as file:
        rows = {float(r["quantile"]): r for r in csv.DictReader(file)}
    assert float(rows[0.0]["snr_db"]) == pytest.approx(-10)
    assert float(rows[1.0]["snr_db"]) == pytest.approx(20)
    assert float(rows[0.5]["snr_db"]) == pytest.approx(5)  # halfway between 0 and 10 dB
    assert float(rows[0.0]["sigma"]) == 1.0 and float(rows[1.0]["sigma"]) == 2.0
    assert (tmp_path / "signal_to_noise.png").is_file()


@pytest.mark.parametrize("low, scale", [(0.0115, "linear"), (1e-4, "log")])
def test_signal_to_noise_figure_reads(low, scale):
    """σ between 0.0115 and 0.078 (a yacht run's) on a linear axis, from 10⁻⁴ on a log one; tick
    labels apart either way (a log axis within a decade labelled 2×10⁻², 3×10⁻², ... into one
    string, which the check below catches)."""
    sigma = np.geomspace(low, 0.078, 200)
    figure = signal_to_noise_figure(sigma, np.linspace(-20, 15, 200), "yacht sghmc seed 0")
    assert figure.get_suptitle() == "signal to noise — yacht sghmc seed 0"
    assert figure.axes[0].get_xscale() == scale
    assert sum(p.get_height() for p in figure.axes[0].patches) == 200
    assert overlapping_tick_labels(figure) == []
    as_before = Figure(figsize=(9, 3.5), layout="constrained")
    ax = as_before.subplots(1, 2)[0]
    ax.hist(sigma, bins=np.geomspace(sigma.min(), sigma.max() * (1 + 1e-9), 60))
    ax.set_xscale("log")
    assert bool(overlapping_tick_labels(as_before)) == (scale == "linear")


def test_pruning_figure_plots_the_curve_in_percent():
    rows = [{"fraction_removed": f, "weights_kept": 0, "score": 0.02 + f / 10} for f in FRACTIONS]
    figure = pruning_figure(rows, "test_error", "mnist bbb seed 0")
    (ax,) = figure.axes
    assert ax.get_title() == "pruning by signal to noise — mnist bbb seed 0"
    np.testing.assert_allclose(ax.lines[0].get_xdata(), [100 * f for f in FRACTIONS])
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [2 + 10 * f for f in FRACTIONS])
    assert overlapping_tick_labels(figure) == []


def test_report_prints_the_curve_as_blundells_table_1(tmp_path, capsys):
    run_dir = tmp_path / "multirun" / "0"
    run_dir.mkdir(parents=True)
    (run_dir / "pruning.csv").write_text(
        "fraction_removed,weights_kept,test_error\n"
        "0.0,2392800,0.0124\n0.5,1196400,0.0124\n0.95,119640,0.0129\n0.98,47856,0.0139\n"
    )
    assert report.main(["--pruning", str(tmp_path)]) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert [c.strip() for c in table[0].split("|")[1:4]] == [
        "Proportion removed",
        "# Weights",
        "Test Error",
    ]
    assert [line.split("|")[2].strip() for line in table[2:]] == ["2.4m", "1.2m", "120k", "48k"]
    assert table[-1].split("|")[3].strip() == "1.39%"
    assert report.main(["--pruning", str(tmp_path / "nowhere")]) == 2


def test_what_pruning_cannot_work_on_is_refused_by_name(tmp_path):
    from bdl.analysis.pruning import curve_from_store
    from bdl.storage.store import SampleStore

    with pytest.raises(ValueError) as error:
        running_moments([], ["w"])
    assert str(error.value) == "no samples to take moments of: the run kept none"
    with pytest.raises(ValueError) as error:
        prune_masks(torch.arange(4), {"w": torch.Size([4])}, 1.5)
    assert str(error.value) == "a pruning fraction must be in [0, 1], got 1.5"
    SampleStore(tmp_path / "samples")
    (tmp_path / "samples" / "manifest.json").write_text("[]")  # a store that kept nothing
    with pytest.raises(ValueError) as error:
        curve_from_store(tmp_path / "samples", None, None, [], None, None, len, 4)
    assert str(error.value) == (
        f"{tmp_path / 'samples'} holds no samples to draw a pruning curve from"
    )


def test_write_curve_writes_the_csv_and_a_figure_titled_with_the_run(tmp_path, monkeypatch):
    from matplotlib.image import imread

    from analysis.test_plots import write_run
    from bdl.analysis.pruning import write_curve

    run = write_run(tmp_path / "run", "bbb", 4, "epoch,potential\n1,2.0\n", {})
    rows = [
        {"fraction_removed": 0.0, "weights_kept": 100, "score": 0.5},
        {"fraction_removed": 0.5, "weights_kept": 99, "score": 0.5},
    ]
    drawn = []
    save = Figure.savefig

    def saved(figure, *args, **options):
        drawn.append(figure)
        save(figure, *args, **options)

    monkeypatch.setattr(Figure, "savefig", saved)
    assert write_curve(run, rows, "test_rmse") == run / "pruning.csv"
    assert (run / "pruning.csv").read_text().splitlines() == [
        "fraction_removed,weights_kept,test_rmse",
        "0.0,100,0.5",
        "0.5,99,0.5",
    ]
    (figure,) = drawn
    (ax,) = figure.axes
    assert ax.get_title() == "pruning by signal to noise — mnist bbb seed 4"
    assert (ax.get_xlabel(), ax.get_ylabel()) == (
        "weights removed by signal-to-noise ratio (%)",
        "test RMSE",
    )
    width, height = figure.get_size_inches() * 120  # at 120 dots per inch
    assert imread(run / "pruning.png").shape[:2] == (round(height), round(width))
