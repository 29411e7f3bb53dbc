"""bdl.analysis.shift_table on hand-made run directories: the means and standard errors over
seeds, the severity columns (the mean of the four corruptions), the claims' verdicts by the
stated rule, and the severity figure; and ``scripts/ood_table.py`` end to end on the fake data."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import command_env

from bdl.analysis import shift_table
from bdl.analysis.shift_table import verdict
from bdl.data.shift import CORRUPTIONS, SEVERITIES

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ood_table.py"
#: corruption offsets: their mean is 0, so a severity's mean over the four is the base value
OFFSETS = dict(zip(CORRUPTIONS, (-0.03, -0.01, 0.01, 0.03), strict=True))


def make_run(
    root: Path,
    dataset: str,
    method: str,
    seed: int,
    nll: float,
    ece: float,
    status: str = "completed",
    converged: bool | None = None,
    skip: tuple[str, int] | None = None,
) -> Path:
    """A run directory as bdl-run and bdl-eval leave it: config, metrics.json and each
    corruption's eval/…/metrics.json, whose ECE at severity s is ece + 0.1 s (+ the corruption's
    offset) and accuracy 0.9 - 0.1 s; ``skip`` leaves one evaluation out."""
    run = root / dataset / method / f"seed{seed}"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(f"seed: {seed}\n")
    metrics = {
        "status": status,
        "test_accuracy": 0.9,
        "test_nll": nll,
        "test_ece": ece,
        "test_brier": 0.1 + seed / 100,
        "ood_auroc_entropy": 0.8,
        "ood_auroc_mutual_information": 0.5 if method == "sgd" else 0.9 + seed / 100,
    }
    if converged is not None:
        metrics["converged"] = converged
    (run / "metrics.json").write_text(json.dumps(metrics))
    for name, offset in OFFSETS.items():
        for s in SEVERITIES:
            if (name, s) == skip:
                continue
            shifted = run / "eval" / f"{dataset}-test-{name}{s}"
            shifted.mkdir(parents=True)
            values = {
                "test_accuracy": 0.9 - 0.1 * s + offset,
                "test_nll": nll + s,
                "test_ece": ece + 0.1 * s + offset,
            }
            (shifted / "metrics.json").write_text(json.dumps(values))
    return run


@pytest.fixture
def root(tmp_path) -> Path:
    for seed, (nll, ece) in enumerate([(0.30, 0.04), (0.32, 0.05), (0.34, 0.06)]):
        make_run(tmp_path, "mnist", "sgd", seed, nll, ece)
    for seed, (nll, ece) in enumerate([(0.20, 0.05), (0.21, 0.06), (0.22, 0.07)]):
        make_run(tmp_path, "mnist", "ensemble", seed, nll, ece)
    make_run(tmp_path, "mnist", "mc_dropout", 0, 0.50, 0.1)
    make_run(tmp_path, "mnist", "mc_dropout", 1, 0.52, 0.1, skip=("blur", 5))
    make_run(tmp_path, "mnist", "swag", 0, 0.10, 0.01)
    make_run(tmp_path, "mnist", "sghmc", 0, 0.25, 0.02, converged=True)
    make_run(tmp_path, "mnist", "sghmc", 1, 0.26, 0.02, converged=False)
    make_run(tmp_path, "mnist", "sghmc", 2, 9.0, 0.9, status="diverged")
    return tmp_path


def test_verdicts_follow_the_stated_rule():
    se = 0.01  # combined: 0.01 * sqrt(2) = 0.01414, twice that 0.0283
    assert verdict(0.20, se, 3, 0.23, se, 3, lower=True) == "held"  # 0.03 lower
    assert verdict(0.23, se, 3, 0.20, se, 3, lower=True) == "not held"  # 0.03 higher
    assert verdict(0.20, se, 3, 0.22, se, 3, lower=True) == "inconclusive"  # 0.02 < 0.0283
    assert verdict(0.23, se, 3, 0.20, se, 3, lower=False) == "held"  # higher, as claimed
    assert verdict(0.20, math.nan, 1, 0.30, se, 3, lower=True) == "inconclusive"  # one seed
    assert verdict(0.20, 0.0, 1, 0.30, 0.0, 1, lower=True) == "inconclusive"  # one seed each


def test_table_means_and_standard_errors(root):
    runs = shift_table.collect(root)
    assert len(runs) == 12
    table = shift_table.summary(runs).set_index("method")
    sgd = table.loc["sgd"]
    assert sgd["n_runs"] == 3
    assert sgd["test_nll_mean"] == pytest.approx(0.32)
    assert sgd["test_nll_sem"] == pytest.approx(0.02 / math.sqrt(3))
    assert sgd["test_brier_mean"] == pytest.approx(0.11)
    # severity s: the four corruptions' mean, ece + 0.1 s (the offsets cancel)
    for s in SEVERITIES:
        assert sgd[f"test_ece_s{s}_mean"] == pytest.approx(0.05 + 0.1 * s)
        assert sgd[f"test_accuracy_s{s}_mean"] == pytest.approx(0.9 - 0.1 * s)
        assert sgd[f"test_nll_s{s}_sem"] == pytest.approx(0.02 / math.sqrt(3))
    # the diverged sghmc run is not averaged
    assert table.loc["sghmc", "n_runs"] == 2
    assert table.loc["sghmc", "test_nll_mean"] == pytest.approx(0.255)
    # a run lacking one corruption at severity 5 has no value there; severity 4 has both
    assert math.isnan(table.loc["mc_dropout", "test_ece_s5_sem"])
    assert table.loc["mc_dropout", "test_ece_s5_mean"] == pytest.approx(0.6)
    assert table.loc["mc_dropout", "test_ece_s4_sem"] == pytest.approx(0.0)
    text = shift_table.table_markdown(runs, shift_table.summary(runs))
    assert "| mnist | sghmc | 2/3 | 1/2 converged | " in text
    assert "| mnist | sgd | 3/3 | no verdict | 0.9 ± 0 | 0.320 ± 0.012 |" in text
    assert "sghmc/seed2: diverged" in text
    assert "mc_dropout/seed1: no evaluation under blur5" in text


def temperature_runs(root: Path, runs: dict[str, tuple[tuple[float, float], ...]]) -> Path:
    """``scripts/cold_posterior.sh``'s layout: ``root/T<T>/seed<S>``, one completed run for
    each (test NLL, test accuracy) of ``runs[T]``."""
    for t, metrics in runs.items():
        for seed, (nll, accuracy) in enumerate(metrics):
            run = root / f"T{t}" / f"seed{seed}"
            (run / ".hydra").mkdir(parents=True)
            (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
            found = {"status": "completed", "test_nll": nll, "test_accuracy": accuracy}
            (run / "metrics.json").write_text(json.dumps(found))
    return root


def test_claims_verdicts(root, tmp_path_factory):
    table = shift_table.summary(shift_table.collect(root))
    cold = temperature_runs(
        tmp_path_factory.mktemp("cold"),
        {
            "0.01": ((0.30, 0.9), (0.31, 0.9)),
            "0.1": ((0.35, 0.9), (0.37, 0.9)),
            "1": ((0.36, 0.9), (0.37, 0.9)),
        },
    )
    claims = shift_table.claims(table, shift_table.cold_summary(cold))
    found = dict(zip(claims["claim"], claims["verdict"], strict=True))
    # ensemble NLL 0.21 ± 0.0058 against 0.32 ± 0.0115: lower by 0.11 > 2 x 0.0129
    assert found["a deep ensemble has lower NLL than one SGD network"] == "held"
    # ensemble ECE 0.06 against 0.05, each ± 0.0058: higher by 0.01 < 2 x 0.0082
    assert found["a deep ensemble has lower ECE than one SGD network"] == "inconclusive"
    # MC dropout NLL 0.51 ± 0.01 against 0.32: higher
    assert found["MC dropout has lower NLL than SGD"] == "not held"
    assert found["SWAG has lower NLL than SGD"] == "inconclusive"  # one seed
    mi = (
        "{}'s AUROC of the other dataset by mutual information exceeds one SGD network's by entropy"
    )
    assert found[mi.format("ensemble")] == "held"  # 0.91 ± 0.006 against the entropy's 0.8 ± 0
    assert found[mi.format("sgld")] == "not run"
    ece = "calibration degrades with shift for {}: ECE at severity 5 (mean of the four "
    assert found[ece.format("sgd") + "corruptions) above the clean ECE"] == "held"
    assert found[ece.format("swag") + "corruptions) above the clean ECE"] == "inconclusive"
    # cold: T = 0.01 0.305 ± 0.005 against 0.365 ± 0.005; T = 0.1 0.36 ± 0.01: within
    assert found["SGHMC at T = 0.01 has lower test NLL than at T = 1"] == "held"
    assert found["SGHMC at T = 0.1 has lower test NLL than at T = 1"] == "inconclusive"
    assert found["SGHMC at T = 0.01 has higher test accuracy than at T = 1"] == "inconclusive"
    izmailov = claims[claims["source"] == "Izmailov et al. 2021"]["verdict"]
    assert list(izmailov) == ["not run"]
    no_cold = shift_table.claims(table, None)
    assert list(no_cold[no_cold["source"] == "Wenzel et al. 2020"]["verdict"]) == ["not run"]


def test_warm_hmc_against_cold_sghmc(root, tmp_path_factory):
    """Izmailov et al.'s comparison: HMC at T = 1 against SGHMC at each colder temperature,
    by NLL and accuracy; the seeds' means and standard errors worked by hand."""
    table = shift_table.summary(shift_table.collect(root))
    izmailov = tmp_path_factory.mktemp("izmailov")
    hmc = temperature_runs(izmailov / "hmc", {"1": ((0.20, 0.94), (0.22, 0.94))})
    sghmc = temperature_runs(
        izmailov / "sghmc",
        {
            "1": ((0.10, 0.99), (0.10, 0.99)),  # warm SGHMC: not a claim's
            "0.1": ((0.30, 0.93), (0.32, 0.95)),
            "0.3": ((0.21, 0.96), (0.21, 0.96)),
        },
    )
    claims = shift_table.claims(
        table, None, shift_table.cold_summary(hmc), shift_table.cold_summary(sghmc), "a set"
    )
    rows = claims[claims["source"] == "Izmailov et al. 2021"]
    assert set(rows["dataset"]) == {"a set"}
    found = dict(zip(rows["claim"], zip(rows["numbers"], rows["verdict"]), strict=True))
    assert list(found) == [
        "HMC at T = 1 has lower test NLL than SGHMC at T = 0.1",
        "HMC at T = 1 has higher test accuracy than SGHMC at T = 0.1",
        "HMC at T = 1 has lower test NLL than SGHMC at T = 0.3",
        "HMC at T = 1 has higher test accuracy than SGHMC at T = 0.3",
    ]
    # NLL 0.21 ± 0.01 against 0.31 ± 0.01: lower by 0.10 > 2 x 0.014
    numbers, verdict = found["HMC at T = 1 has lower test NLL than SGHMC at T = 0.1"]
    assert (numbers, verdict) == (
        "HMC T=1: 0.210 ± 0.010 (n=2); SGHMC T=0.1: 0.310 ± 0.010 (n=2)",
        "held",
    )
    # accuracy 0.94 ± 0 against 0.94 ± 0.01: no difference
    assert found["HMC at T = 1 has higher test accuracy than SGHMC at T = 0.1"][1] == "inconclusive"
    # 0.21 ± 0.01 against 0.21 ± 0: no difference; accuracy 0.94 ± 0 below 0.96 ± 0
    assert found["HMC at T = 1 has lower test NLL than SGHMC at T = 0.3"][1] == "inconclusive"
    assert found["HMC at T = 1 has higher test accuracy than SGHMC at T = 0.3"][1] == "not held"
    without_cold = shift_table.claims(table, None, shift_table.cold_summary(hmc), None)
    assert list(without_cold[without_cold["source"] == "Izmailov et al. 2021"]["verdict"]) == [
        "not run"
    ]


def test_severity_figure_draws_the_means(root):
    table = shift_table.summary(shift_table.collect(root))
    figure = shift_table.severity_figure(table, "mnist")
    accuracy, nll, ece = figure.axes
    lines = {line.get_label(): line for line in ece.get_lines()}
    assert list(lines) == ["sgd", "ensemble", "mc_dropout", "swag", "sghmc"]  # ORDER's
    assert list(lines["sgd"].get_xdata()) == [0, 1, 2, 3, 4, 5]
    expected = [0.05 + 0.1 * s for s in range(6)]
    assert list(lines["sgd"].get_ydata()) == pytest.approx(expected)
    nll_sgd = next(line for line in nll.get_lines() if line.get_label() == "sgd")
    assert list(nll_sgd.get_ydata()) == pytest.approx([0.32 + s for s in range(6)])


@pytest.fixture
def script():
    """scripts/ood_table.py as a module, so that a test calls its functions directly."""
    spec = importlib.util.spec_from_file_location("ood_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_assemble_command_prints_the_table_and_writes_the_figure(
    script, root, tmp_path_factory, monkeypatch, capsys
):
    figures = tmp_path_factory.mktemp("figures")
    monkeypatch.setattr(
        sys, "argv", ["ood_table.py", "assemble", str(root), "--figures", str(figures)]
    )
    script.main()
    out = capsys.readouterr().out
    assert "| mnist | ensemble | 3/3 | no verdict | 0.9 ± 0 | 0.210 ± 0.006 |" in out
    assert (
        "| a deep ensemble has lower NLL than one SGD network | Lakshminarayanan et al. 2017; "
        "Ovadia et al. 2019 | mnist | ensemble: 0.210 ± 0.006 (n=3); sgd: 0.320 ± 0.012 (n=3) "
        "| held |"
    ) in out
    assert (figures / "severity-mnist.png").stat().st_size > 0


def test_a_run_killed_before_its_first_checkpoint_is_run_again(
    script, tmp_path, fake_data_root, monkeypatch
):
    """A SIGKILL before the first checkpoint leaves samples and no checkpoint: bdl-run keeps
    such a directory from a fresh run, so the table's `run` must pass resume=true, which starts
    the run again."""
    for name, value in command_env(fake_data_root, tmp_path / "cache").items():
        monkeypatch.setenv(name, value)
    root = tmp_path / "table"
    killed = root / "mnist" / "sgd" / "seed0"
    (killed / "samples").mkdir(parents=True)
    (killed / "samples" / "draws_0000000-0000003.safetensors").write_bytes(b"cut short")
    status = script.train(root, "mnist", "sgd", 0, ["epochs=2", "burn_in=1", "figures=false"])
    assert status == "completed"
    assert json.loads((killed / "metrics.json").read_text())["status"] == "completed"


@pytest.mark.slow
def test_run_then_assemble_end_to_end(tmp_path, fake_data_root):
    """SGD for two epochs on the fake MNIST: trained, evaluated under the 20 corruptions, not
    run again, and assembled."""
    env = command_env(fake_data_root, tmp_path / "cache")
    root = tmp_path / "table"
    command = [sys.executable, str(SCRIPT), "run", str(root), "--methods", "sgd"]
    command += ["--datasets", "mnist", "--seeds", "0", "--", "epochs=2", "burn_in=1"]
    first = subprocess.run(command, capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    assert "mnist sgd seed0: completed, 20 evaluated" in first.stdout
    evaluations = sorted((root / "mnist" / "sgd" / "seed0" / "eval").iterdir())
    assert len(evaluations) == len(CORRUPTIONS) * len(SEVERITIES)
    again = subprocess.run(command, capture_output=True, text=True, env=env)
    assert "mnist sgd seed0: completed, 0 evaluated" in again.stdout
    with (root / "cpu.csv").open() as f:
        steps = [(row["seed"], row["step"]) for row in csv.DictReader(f)]
    assert steps == [("0", "train"), ("0", "corruptions")]
    runs = shift_table.collect(root)
    assert list(runs["status"]) == ["completed"]
    assert runs["missing"].map(len).tolist() == [0]
    assembled = subprocess.run(
        [sys.executable, str(SCRIPT), "assemble", str(root)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert assembled.returncode == 0, assembled.stderr
    assert "| mnist | sgd | 1/1 | no verdict |" in assembled.stdout
    assert (root / "severity-mnist.png").is_file()
