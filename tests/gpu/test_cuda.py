"""bdl on a GPU: the runner on ``device=cuda`` for every sampler option, chains stacked, HMC
compiled, resume after a kill, the sample store read back onto the GPU, ResNet-20-FRN on
CIFAR-format data, the prior's and the noise's Gibbs steps, and ``torchrun``.

Each test asserts what its CPU version asserts; most run the CPU test's own body, whose
``device=auto`` picks the GPU here (``on_the_device`` checks that it did). Where the draws are the
same on both devices (no noise, full batches: the minibatch order cannot matter) the metrics equal
the CPU's to float rounding; elsewhere the GPU's generators draw other numbers than the CPU's, and
a run is compared with the CPU's by what it is (its status, its samples on disk, its metrics
recomputed from what it wrote), not by its values.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import DEVICE, skip_without_the_device

skip_without_the_device()

import runner.test_resume as resume  # noqa: E402  (after the skip: a machine without CUDA imports nothing)
import runner.test_run as test_run  # noqa: E402
import runner.test_steppers as steppers  # noqa: E402
from conftest import SAMPLER_OPTIONS, command_env, declaration  # noqa: E402
from hydra import compose, initialize_config_module  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

import bdl  # noqa: E402
from bdl.composition.config import ConfigError  # noqa: E402
from bdl.diagnostics import MIN_DRAWS  # noqa: E402
from bdl.runner.run import run  # noqa: E402
from bdl.runner.stability import DivergedError  # noqa: E402
from bdl.storage.store import count_samples  # noqa: E402

#: The generated MNIST with 1 000 of its training images kept for training (the rest held out),
#: minibatches of 100; and the generated Boston (455 training points) on minibatches of 32, at the
#: UCI step size (test_run's). Burn-in: see `case_overrides`.
SIZES = {
    "mnist": ["dataset=mnist", "dataset.validation=59000", "batch_size=100"],
    "uci": [o for o in test_run.UCI if not o.startswith("burn_in=")],
}


def compose_on(root: Path, device: str, overrides: list[str]):
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return compose("config", [f"dataset.root={root}", f"device={device}", *overrides])


def outcome(root: Path, device: str, overrides: list[str], directory: Path) -> dict:
    """The run's metrics, or how it ended without any (diverged, refused)."""
    try:
        return run(compose_on(root, device, overrides), directory)
    except DivergedError:
        return {"status": "diverged"}
    except ConfigError as error:
        return {"status": "refused", "error": str(error)}


def case_overrides(option: str, size: str, root: Path, start: Path) -> list[str]:
    """``sampler=option`` at ``size`` with what it needs there (test_resume's): burn-in only for
    samplers that keep states, and for Laplace the SGD run it expands around."""
    overrides = [*SIZES[size], "epochs=3", f"sampler={option}"]
    overrides += resume.ON_TINY_DATA.get(option, [])
    overrides.append("burn_in=1" if declaration(option).injects_noise else "burn_in=0")
    if declaration(option).needs_trained_start:
        if not (start / "metrics.json").exists():
            sgd = [*SIZES[size], "epochs=3", "sampler=sgd", "burn_in=0"]
            run(compose_on(root, DEVICE, sgd), start)
        overrides.append(f"init_from={start}")
    return overrides


def assert_written_as_reported(metrics: dict, directory: Path) -> None:
    """What test_run asserts of a run: its headline metric is that of predictive.safetensors, and
    its samples are on disk, listed in the manifest."""
    saved = load_file(directory / "predictive.safetensors")
    predictive, targets = saved["predictive"].double(), saved["targets"]
    if "test_accuracy" in metrics:
        hits = (predictive.argmax(-1) == targets.long()).double().mean().item()
        assert metrics["test_accuracy"] == pytest.approx(hits)
    else:
        rmse = (predictive[:, 0] - targets.double()).square().mean().sqrt().item()
        assert metrics["test_rmse"] == pytest.approx(rmse, rel=1e-5)
    manifests = sorted((directory / "samples").glob("**/manifest.json"))
    listed = sum(count_samples(path.parent) for path in manifests)
    assert listed == metrics["num_samples"] > 0


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("option", SAMPLER_OPTIONS)
def test_every_sampler_option_runs_on_the_device(
    fake_data_root, isolated_cache, tmp_path, option, size
):
    """The same run on the device and on the CPU ends the same way: refused with the same
    message, diverged, or run to its end (completed, or unsound against the trivial predictor:
    the two devices draw other numbers, so a run near the trivial predictor may fall either
    side), with as many samples; the device's metrics are finite where the CPU's are, and those
    of what it wrote. Where the CPU's MNIST-sized run beats the trivial predictor's accuracy by
    far (0.2), the device's beats it too (by 0.1)."""
    overrides = case_overrides(option, size, fake_data_root, tmp_path / "start")
    mine = outcome(fake_data_root, DEVICE, overrides, tmp_path / DEVICE)
    cpu = outcome(fake_data_root, "cpu", overrides, tmp_path / "cpu-run")

    def ending(metrics: dict) -> str:
        return "ran" if metrics["status"] in ("completed", "unsound") else metrics["status"]

    assert ending(mine) == ending(cpu), (mine, cpu)
    if ending(cpu) == "refused":
        # refused before any draw: in the same words (an unsound run's message quotes its own
        # metrics, which the two devices' draws make differ)
        assert mine["error"] == cpu["error"]
    if ending(cpu) != "ran":
        return
    assert mine["num_samples"] == cpu["num_samples"]
    for key, value in cpu.items():
        if isinstance(value, float):
            assert math.isfinite(mine[key]) == math.isfinite(value), key
    assert_written_as_reported(mine, tmp_path / DEVICE)
    if "test_accuracy" in cpu and cpu["test_accuracy"] > cpu["trivial"]["test_accuracy"] + 0.2:
        assert mine["test_accuracy"] > mine["trivial"]["test_accuracy"] + 0.1


@pytest.mark.parametrize("option", ["sgd", "sgd_momentum"])
def test_without_draws_the_device_gives_the_cpus_metrics(
    fake_data_root, isolated_cache, tmp_path, option
):
    """Full batches and no noise: the run is the same arithmetic on both devices, so its metrics
    and its last sample agree to float32 rounding carried through five epochs."""
    overrides = [*test_run.UCI, "batch_size=100000", "epochs=5", f"sampler={option}"]
    mine = run(compose_on(fake_data_root, DEVICE, overrides), tmp_path / DEVICE)
    cpu = run(compose_on(fake_data_root, "cpu", overrides), tmp_path / "cpu-run")
    for key in ("test_rmse", "test_ll", "train_potential"):
        if key in cpu:
            assert mine[key] == pytest.approx(cpu[key], rel=1e-4), key
    (last,) = list(bdl.load_run(tmp_path / DEVICE).samples())[-1:]
    (theirs,) = list(bdl.load_run(tmp_path / "cpu-run").samples())[-1:]
    for name, value in last.params.items():
        torch.testing.assert_close(value, theirs.params[name], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("option", ["sghmc", "hmc"])
def test_the_same_seed_twice_gives_the_same_metrics(
    fake_data_root, isolated_cache, tmp_path, option
):
    """Bit for bit, under the determinism settings of this suite's conftest."""
    overrides = case_overrides(option, "mnist", fake_data_root, tmp_path / "start")
    first = run(compose_on(fake_data_root, DEVICE, overrides), tmp_path / "first")
    second = run(compose_on(fake_data_root, DEVICE, overrides), tmp_path / "second")
    for metrics in (first, second):
        metrics.pop("wall_time_s")
    assert first == second


@pytest.mark.parametrize("option", ["sghmc", "hmc"])
def test_the_sample_store_predicts_on_the_device(fake_data_root, isolated_cache, tmp_path, option):
    """bdl.load_run(...).predict on the device gives the run's own predictive (computed while it
    ran, on the device) and, to float32 rounding, the CPU's prediction from the same samples."""
    overrides = case_overrides(option, "mnist", fake_data_root, tmp_path / "start")
    run(compose_on(fake_data_root, DEVICE, overrides), tmp_path / "run")
    posterior = bdl.load_run(tmp_path / "run")
    x = posterior.data.x_test
    saved = load_file(tmp_path / "run" / "predictive.safetensors")["predictive"]
    on_device = posterior.predict(x.to(DEVICE))
    torch.testing.assert_close(on_device, saved, rtol=1e-6, atol=1e-7)
    # float32 networks on two devices: their rounding, carried into float64 averages
    torch.testing.assert_close(on_device, posterior.predict(x, device="cpu"), rtol=1e-4, atol=1e-6)


def test_k_stacked_chains_on_the_device(fake_data_root, isolated_cache, tmp_path):
    """Eight chains in one run on the MNIST-sized data: eight chains' samples, R-hat and ESS in
    metrics.json (from the fewest draws they take), and the pooled predictive as written."""
    draws = MIN_DRAWS
    overrides = [*SIZES["mnist"], f"epochs={draws + 1}", "burn_in=1", "sampler=sghmc", "chains=8"]
    metrics = run(compose_on(fake_data_root, DEVICE, overrides), tmp_path / "run")
    assert bdl.load_run(tmp_path / "run").num_chains == 8
    assert metrics["num_samples"] == 8 * draws
    for key in ("rhat_max", "rhat_p95", "ess_bulk_min", "ess_tail_min", "weight_rhat_max"):
        assert key in metrics
    assert_written_as_reported(metrics, tmp_path / "run")


# --- the CPU tests' bodies, on the device (device=auto) -----------------------------------------

uci_root = steppers.uci_root
run_with = test_run.run_with


@pytest.mark.parametrize("name", ["sghmc", "sgld", "hmc", "psgld", "sghmc online noise estimate"])
def test_stacked_chains_follow_the_single_chain_runs(uci_root, tmp_path, name):
    steppers.test_stacked_chains_follow_the_single_chain_runs(uci_root, tmp_path, name)


@pytest.mark.parametrize("name", ["sghmc gibbs hyperprior", "hmc adapting"])
def test_chain_k_is_the_single_chain_run_seeded_seed_plus_k(uci_root, tmp_path, name):
    steppers.test_chain_k_is_the_single_chain_run_seeded_seed_plus_k(uci_root, tmp_path, name)


# HMC's trajectory as one program, and an SG-MCMC epoch as one; each as CUDA graphs too
@pytest.mark.parametrize("mode", ["default", "reduce_overhead"])
@pytest.mark.parametrize(
    "name", ["hmc one chunk", "sgld", "sghmc online noise estimate, shared minibatches"]
)
def test_compiled_runs_follow_the_eager_ones(uci_root, tmp_path, name, compiler, mode):
    steppers.test_compiled_runs_follow_the_eager_ones(uci_root, tmp_path, name, compiler, mode)


def test_a_compiled_epoch_stopped_between_its_programs_resumes_bitwise(
    uci_root, tmp_path, monkeypatch, compiler
):
    resume.test_a_compiled_epoch_stopped_between_its_programs_resumes_bitwise(
        uci_root, tmp_path, monkeypatch, compiler, chains=2
    )


@pytest.mark.parametrize(
    "name",
    ["sghmc", "sgld", "hmc", "bbb", "laplace", "sghmc gibbs hyperprior"],
)
def test_a_run_killed_mid_epoch_resumes_bitwise(uci_root, tmp_path, monkeypatch, name, request):
    resume.test_a_run_killed_mid_epoch_resumes_bitwise(
        uci_root, tmp_path, monkeypatch, name, request
    )


def test_a_stacked_run_killed_mid_epoch_resumes_bitwise(uci_root, tmp_path, monkeypatch):
    sampler = ["sampler=sghmc", "sampler.grad_var=online"]
    steppers.test_stacked_chains_resume_bitwise(uci_root, tmp_path, monkeypatch, sampler)


def test_cifar10_runs_resnet20_frn(run_with, no_cifar_md5):
    test_run.test_cifar10_runs_resnet20_frn(run_with, no_cifar_md5)


@pytest.mark.parametrize("prior", ["gaussian", "gamma_hierarchical"])
@pytest.mark.parametrize("sampler, extra, leapfrog", test_run.KERNELS, ids=["hmc", "mala", "rwmh"])
def test_metropolis_kernels_reevaluate_the_potential_after_each_gibbs_step(
    run_with, sampler, extra, leapfrog, prior
):
    test_run.test_metropolis_kernels_reevaluate_the_potential_after_each_gibbs_step(
        run_with, sampler, extra, leapfrog, prior
    )


def test_gibbs_noise_precision_under_a_metropolis_kernel(run_with):
    test_run.test_gibbs_noise_precision_under_a_metropolis_kernel(run_with)


# --- torchrun ------------------------------------------------------------------------------------

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
HMC_BOSTON = [*SIZES["uci"], "sampler=hmc", "sampler.num_steps=5", "epochs=8", "burn_in=2"]


def one_process_and_under_torchrun(args: list[str], ranks: int, root: Path, tmp_path: Path):
    """``bdl-run args`` as one process (into ``tmp_path/one``) and on ``ranks`` ranks under
    torchrun (``tmp_path/torchrun``), each in a process of its own."""
    env = command_env(root, tmp_path / "cache")
    for name, prefix in (
        ("one", [sys.executable]),
        ("torchrun", [*TORCHRUN, f"--nproc_per_node={ranks}"]),
    ):
        done = subprocess.run(
            [*prefix, "-m", "bdl.cli", *args, f"hydra.run.dir={tmp_path / name}"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]


def test_torchrun_on_one_device_is_the_one_process_run(fake_data_root, tmp_path):
    """One rank under torchrun (one GPU: nccl needs a GPU per rank, so one GPU holds one rank) is
    the run of one process: the same metrics, wall time aside."""
    args = [f"dataset.root={fake_data_root}", f"device={DEVICE}", *HMC_BOSTON]
    one_process_and_under_torchrun(args, 1, fake_data_root, tmp_path)
    metrics = [json.loads((tmp_path / n / "metrics.json").read_text()) for n in ("one", "torchrun")]
    for m in metrics:
        m.pop("wall_time_s")
    assert metrics[0] == metrics[1]


@pytest.mark.skipif(
    DEVICE != "cuda" or torch.cuda.device_count() < 2,
    reason="nccl reduces across GPUs, one rank each: needs two",
)
def test_two_nccl_ranks_give_the_one_process_chain(fake_data_root, tmp_path):
    """test_distributed's comparison on GPUs: two ranks reduce by nccl, and the chain is the one
    process's to float rounding (the order of the float64 sums differs)."""
    args = [f"dataset.root={fake_data_root}", "device=cuda", "distributed.backend=nccl"]
    one_process_and_under_torchrun([*args, *HMC_BOSTON], 2, fake_data_root, tmp_path)
    one, two = (bdl.load_run(tmp_path / n) for n in ("one", "torchrun"))
    for a, b in zip(one.samples(), two.samples(), strict=True):
        for name, value in a.params.items():
            torch.testing.assert_close(b.params[name], value, rtol=1e-4, atol=1e-6)


def test_what_a_cuda_graph_returns_is_copied_out_of_its_memory():
    """In a mode that replays CUDA graphs, a compiled function's tensors on `DEVICE` are copies
    (the next replay writes the graph's own outputs over), equal to what it returned; others
    pass as they are."""
    from bdl.compiled import Compiler

    x, y = torch.arange(3.0, device=DEVICE), torch.arange(3.0)
    owned = Compiler("reduce-overhead")._owned((x, [y], 2))
    on_cuda = x.is_cuda
    assert (owned[0] is not x) == on_cuda and torch.equal(owned[0], x)
    assert owned[1][0] is y and owned[2] == 2
    assert Compiler("default")._owned((x,))[0] is x
