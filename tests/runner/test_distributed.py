"""Data-parallel full-data kernels: the training set split across ranks gives one process's chain.

The end-to-end tests start ``torchrun`` with two CPU ranks (gloo) and compare every output with a
one-process run of the same config: the same accept decision at every iteration, the same
samples and the same ``metrics.json``. The chunk-aligned shards and the float64 sums of
`bdl.potential.Potential.full_closure` make them bitwise equal at equal thread counts;
the tolerance asserted on the samples, 1e-6 relative, would not survive a summation-order
difference (it grows through the trajectories' chaos to 1e-3 within twenty iterations).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bdl.composition.config import ConfigError
from bdl.likelihoods import Gaussian
from bdl.potential import Potential
from bdl.priors import Gaussian as GaussianPrior
from bdl.runner import distributed
from bdl.storage.store import load_samples

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
HMC = ["sampler=hmc", "sampler.num_steps=10", "epochs=22", "burn_in=6", "thin=1"]
CASES = {
    "boston": ["dataset=boston", "batch_size=32"],  # N = 455 in 15 chunks: 8 and 7 per rank
    # N = 200 in 4 chunks. Every sample is scored on the 59 800 held-out images: the last two
    # of the 16, where a difference would have grown most, are kept
    "mnist": ["dataset.validation=59800", "batch_size=50", "thin=8"],
}
#: The samples each case keeps of its 16 epochs after burn-in.
KEPT = {"boston": 16, "mnist": 2}


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    if not os.environ.get("BDL_DATA_DIR"):
        pytest.skip("needs real data: set BDL_DATA_DIR to a folder with MNIST/raw/ and uci/")
    cache = tmp_path_factory.mktemp("cache")
    return {
        **os.environ,
        "BDL_CACHE_DIR": str(cache),
        "XDG_CACHE_HOME": str(cache),
        "OMP_NUM_THREADS": "1",  # torchrun's default per rank; the one process's too
        "HYDRA_FULL_ERROR": "0",
    }


def bdl(prefix: list[str], args: list[str], env: dict[str, str], cwd: Path):
    return subprocess.run(
        [*prefix, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def outputs(directory: Path) -> tuple[list[dict], dict, list[str]]:
    metrics = json.loads((directory / "metrics.json").read_text())
    metrics.pop("wall_time_s")
    samples = [tensors for tensors, _ in load_samples(directory / "samples")]
    curve = (directory / "curve.csv").read_text().splitlines()
    return samples, metrics, curve


def run_one_process(args: list[str], directory: Path) -> None:
    """The one-process chain, in this process (a process start costs more than the run), at
    torchrun's one thread per rank."""
    from hydra import compose, initialize_config_module

    from bdl.runner.run import run

    threads = torch.get_num_threads()
    try:
        with initialize_config_module("bdl.conf", version_base="1.3"):
            run(compose("config", [*args, "threads=1"]), directory)
    finally:
        torch.set_num_threads(threads)


def one_process_and_two_ranks(args: list[str], env, tmp_path: Path, monkeypatch):
    """The outputs of ``args`` run in one process (``tmp_path/1``) and on two ranks (``/2``)."""
    for key in ("BDL_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.setenv(key, env[key])
    run_one_process(args, tmp_path / "1")
    two = bdl(
        [*TORCHRUN, "-m", "bdl.cli"], [*args, f"hydra.run.dir={tmp_path / '2'}"], env, tmp_path
    )
    assert two.returncode == 0, two.stderr[-3000:]
    return outputs(tmp_path / "1"), outputs(tmp_path / "2")


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_ranks_give_the_one_process_chain(env, tmp_path, case, monkeypatch):
    (samples_1, metrics_1, curve_1), (samples_2, metrics_2, curve_2) = one_process_and_two_ranks(
        [*HMC, *CASES[case]], env, tmp_path, monkeypatch
    )
    assert metrics_1 == metrics_2
    assert len(samples_1) == len(samples_2) == KEPT[case]
    for a, b in zip(samples_1, samples_2):
        for name in a:
            torch.testing.assert_close(b[name], a[name], rtol=1e-6, atol=0)
    header = curve_1[0].split(",")
    column = header.index("accept_rate")
    accepts = [[row.split(",")[column] for row in curve[1:]] for curve in (curve_1, curve_2)]
    assert accepts[0] == accepts[1] and len(accepts[0]) == 22
    assert "0.0" in accepts[0] and "1.0" in accepts[0]  # both decisions occur
    # rank 1 wrote nothing: one run directory, and no stray one under outputs/
    assert not (tmp_path / "outputs").exists()


def test_two_ranks_split_a_full_batch_whatever_its_size(env, tmp_path, monkeypatch):
    """The UCI protocol's batch_size takes every training point: under torchrun its chunks are
    made small enough for both ranks, and the chain is one process's up to the order of the sums
    (one chunk there, two here)."""
    (samples_1, metrics_1, _), (samples_2, metrics_2, _) = one_process_and_two_ranks(
        [*HMC, "dataset=boston"],
        env,
        tmp_path,
        monkeypatch,  # the protocol's batch_size=100000
    )
    assert len(samples_1) == len(samples_2) == 22 - 6
    for a, b in zip(samples_1, samples_2):
        for name in a:
            torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-6)
    assert metrics_2["test_rmse"] == pytest.approx(metrics_1["test_rmse"], rel=1e-4)


def test_a_minibatch_sampler_is_refused_in_one_line(env, tmp_path):
    result = bdl(
        [*TORCHRUN, "-m", "bdl.cli"],
        ["sampler=sgld", "dataset=boston", "epochs=3", "burn_in=1", f"hydra.run.dir={tmp_path}"],
        env,
        tmp_path,
    )
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("bdl-run: error")]
    assert len(errors) == 1  # rank 0 speaks; rank 1 stops with it
    assert "sampler SGLD does not run data-parallel" in errors[0]
    assert "hmc, mala, rwmh" in errors[0]


def test_every_data_parallel_option_and_no_other_is_full_batch():
    from hydra import compose, initialize_config_module
    from hydra.utils import instantiate

    names = sorted(p.stem for p in (Path(__file__).parents[2] / "conf" / "sampler").glob("*.yaml"))
    with initialize_config_module("bdl.conf", version_base="1.3"):
        full_batch = {
            name: instantiate(compose("config", [f"sampler={name}"]).sampler)(
                lr=1e-3
            ).declaration.full_batch
            for name in names
        }
    # the Laplace fit reads the training set through laplace-torch, which knows no ranks
    data_parallel = sorted(n for n, full in full_batch.items() if full and n != "laplace")
    assert data_parallel == sorted(distributed.SUPPORTED)


def group(rank: int, world_size: int) -> distributed.Group:
    return distributed.Group(rank, world_size, rank, torch.device("cpu"))


def test_shards_are_whole_chunks_that_cover_the_data_once():
    for num, chunk, size in [(455, 32, 2), (455, 32, 3), (200, 50, 4), (10, 1, 10), (7, 3, 3)]:
        shards = [group(r, size).shard(num, chunk) for r in range(size)]
        assert shards[0].start == 0 and shards[-1].stop == num
        for before, after in zip(shards, shards[1:]):
            assert before.stop == after.start
        for s in shards:
            assert s.start % chunk == 0 and s.stop > s.start


def test_the_potential_summed_over_shards_is_the_full_potential():
    """Two shards' data terms, added by ``reduce`` before the prior term, give bitwise the
    one-process value and gradient (the other shard's part stands in for the other rank's)."""
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(90, 3, generator=generator), torch.randn(90, generator=generator)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def potential(reduce=None) -> Potential:
        return Potential(model, Gaussian(noise_std=0.3), GaussianPrior(1.0), 90, 0.7, reduce)

    def chunks(lo: int, hi: int):
        return lambda: zip(x[lo:hi].split(20), y[lo:hi].split(20), strict=True)

    whole_u, whole_grads = potential().full_closure(chunks(0, 90))()
    other = []  # the other shard's data term in float64, as its rank hands it to all-reduce
    potential(lambda tensors: other.extend(t.clone() for t in tensors)).full_closure(
        chunks(60, 90)
    )()

    def add_other(tensors):
        for mine, theirs in zip(tensors, other):
            mine += theirs

    u, grads = potential(add_other).full_closure(chunks(0, 60))()
    assert u.dtype == torch.float64 and u.item() == whole_u.item()
    for g, w in zip(grads, whole_grads):
        assert torch.equal(g, w)


def test_the_noise_precisions_gibbs_step_sums_its_statistics_over_shards():
    """The conjugate draw from one shard's residuals plus the other's count and sum of squares
    (what all-reduce adds) is the draw from all the residuals."""
    generator = torch.Generator().manual_seed(0)
    mean, y = torch.randn(50, 1, generator=generator), torch.randn(50, generator=generator)
    whole, shard = Gaussian(gibbs=True), Gaussian(gibbs=True)
    whole.gibbs_step([(mean[:30], y[:30]), (mean[30:], y[30:])], torch.Generator().manual_seed(1))
    other = [
        torch.tensor(20.0, dtype=torch.float64),
        (y[30:] - mean[30:, 0]).double().square().sum(),
    ]

    def add_other(tensors):
        for mine, theirs in zip(tensors, other):
            mine += theirs

    shard.gibbs_step([(mean[:30], y[:30])], torch.Generator().manual_seed(1), reduce=add_other)
    assert shard.log_precision.item() == whole.log_precision.item()
    alone = Gaussian(gibbs=True)
    alone.gibbs_step([(mean[:30], y[:30])], torch.Generator().manual_seed(1))
    assert alone.log_precision.item() != whole.log_precision.item()  # the test can fail


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_nccl_without_gpus_is_refused_before_any_rendezvous(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="nccl needs GPUs, and none is visible"):
        distributed.join("nccl", torch.device("cpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_bdl_run_joins_with_the_configured_backend(monkeypatch, tmp_path):
    """The run's own ``distributed.backend`` reaches the join: nccl on a CPU machine under
    torchrun is refused in one line, and nothing is written."""
    from bdl.runner.run import run
    from runner.test_resume import config, write_tiny_uci

    root = write_tiny_uci(tmp_path / "data")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="nccl needs GPUs, and none is visible"):
        run(config(root, "distributed.backend=nccl"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_nccl_on_a_gpu_machine_needs_device_cuda(monkeypatch):
    """nccl reduces GPU tensors: with GPUs visible, a CPU run is refused; a GPU run passes that
    check and stops at the next one (no GPU for its ``LOCAL_RANK``: none here, truly), before
    any rendezvous."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(ConfigError, match="nccl reduces on GPUs: use device=cuda"):
        distributed.join("nccl", torch.device("cpu"))
    with pytest.raises(ConfigError, match="LOCAL_RANK=0 but this node has 0 GPU"):
        distributed.join("nccl", torch.device("cuda"))


def test_a_gpu_rank_takes_the_gpu_of_its_local_rank(monkeypatch):
    """Rank 3 of a node's four GPU processes (LOCAL_RANK 1 on the second node) sets, joins with
    and keeps GPU 1: two ranks of one node never share a GPU."""
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    calls = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set", device)))
    monkeypatch.setattr(
        distributed.dist,
        "init_process_group",
        lambda backend, device_id: calls.append((backend, device_id)),
    )
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 3)
    group = distributed.join("auto", torch.device("cuda"))
    gpu = torch.device("cuda", 1)
    assert calls == [("set", gpu), ("nccl", gpu)]
    assert (group.rank, group.world_size, group.local_rank, group.device) == (3, 4, 1, gpu)


def test_one_process_has_no_group(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert distributed.join("nccl", torch.device("cpu")) is None


def test_more_ranks_than_points_or_chunks_is_refused():
    assert distributed.check_supported(None, "SGLD", False, 1, 1) is None  # one process
    with pytest.raises(ConfigError, match="only 3 training points"):
        distributed.check_supported(group(0, 4), "HMC", True, 3, 1)
    with pytest.raises(ConfigError, match="hmc, mala, rwmh"):
        distributed.check_supported(group(0, 2), "SGHMC", False, 455, 32)


@pytest.mark.slow
def test_an_interrupted_two_rank_run_resumes_into_the_one_process_chain(env, tmp_path):
    """SIGTERM to torchrun (as SLURM sends it): both ranks stop at the same step, rank 0
    checkpoints; resumed under torchrun, the run ends bitwise as one uninterrupted process."""
    import signal
    import time

    args = [*HMC, *CASES["boston"], "epochs=40", "checkpoint_every=1"]
    stopped = tmp_path / "2"
    process = subprocess.Popen(
        [*TORCHRUN, "-m", "bdl.cli", *args, f"hydra.run.dir={stopped}"],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    curve = stopped / "curve.csv"
    while not (curve.exists() and len(curve.read_text().splitlines()) > 12):
        assert process.poll() is None, process.stderr.read()
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate(timeout=120)[1]
    assert json.loads((stopped / "metrics.json").read_text())["status"] == "interrupted"
    assert "torchrun --standalone --nproc_per_node=2 --no-python bdl-run" in stderr

    resumed = bdl(
        [*TORCHRUN, "-m", "bdl.cli"],
        [*args, f"hydra.run.dir={stopped}", "resume=true"],
        env,
        tmp_path,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    whole = bdl(
        [sys.executable, "-m", "bdl.cli"], [*args, f"hydra.run.dir={tmp_path / '1'}"], env, tmp_path
    )
    assert whole.returncode == 0, whole.stderr
    (samples_1, metrics_1, _), (samples_2, metrics_2, _) = outputs(tmp_path / "1"), outputs(stopped)
    assert metrics_1 == metrics_2 and len(samples_1) == len(samples_2) == 40 - 6
    for a, b in zip(samples_1, samples_2):
        assert all(torch.equal(a[name], b[name]) for name in a)


def test_the_ranks_vote_on_the_groups_device(monkeypatch):
    """nccl reduces only tensors on the rank's GPU: the stop vote (``Group.any``) is made there.
    No GPU here: the meta device stands in, and the reduction is intercepted."""

    class Reduced(Exception):
        pass

    devices = []

    def all_reduce(tensor, op):
        devices.append(tensor.device)
        raise Reduced

    monkeypatch.setattr(distributed.dist, "all_reduce", all_reduce)
    group = distributed.Group(rank=1, world_size=2, local_rank=1, device=torch.device("meta"))
    with pytest.raises(Reduced):
        group.any(True)
    assert devices == [torch.device("meta")]
