"""``threads=auto``: one thread for a small network or a busy machine, else the free cores; a
resumed run keeps the count its checkpoint recorded (sums over threads round by their count)."""

import pytest
import torch

import bdl.runner.checkpoint
from bdl.runner import threads
from bdl.runner.experiment import build_chains
from bdl.runner.run import run
from runner.test_resume import config, write_tiny_uci


@pytest.fixture(autouse=True)
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def machine(monkeypatch):
    """A machine of ``cores`` cores with a one-minute load average of ``load``."""

    def make(cores: int, load: float) -> None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(cores)))
        monkeypatch.setattr(threads.os, "getloadavg", lambda: (load, load, load))

    return make


@pytest.mark.parametrize(
    ("cores", "load", "parameters", "expected"),
    [
        (8, 0.0, 402, 1),  # yacht's UCI network: too small to split
        (8, 0.0, 79_510, 8),  # MNIST's MLP on an idle machine: every core
        (8, 0.0, 273_754, 8),
        (8, 5.2, 273_754, 3),  # five cores busy elsewhere
        (8, 7.6, 273_754, 1),  # fewer than two free
        (2, 0.0, 1_000_000, 2),
    ],
)
def test_auto_takes_the_free_cores_for_a_large_network(machine, cores, load, parameters, expected):
    machine(cores, load)
    assert threads.choose("auto", parameters) == expected
    assert threads.choose(4, parameters) == 4  # a number is taken as it is


def test_auto_splits_the_free_cores_between_a_machines_ranks(machine, monkeypatch):
    machine(8, 0.0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert threads.choose("auto", 10**6) == 4


def test_auto_takes_the_environments_thread_count(machine, monkeypatch):
    machine(8, 0.0)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # a job script's, or torchrun's one per rank
    assert threads.choose("auto", 402) == threads.choose("auto", 10**6) == 3


def test_a_resumed_run_keeps_the_thread_count_of_its_checkpoint(tmp_path):
    root = write_tiny_uci(tmp_path / "data")
    run(config(root), tmp_path / "run")
    _, header = bdl.runner.checkpoint.load(tmp_path / "run" / bdl.storage.outputs.CHECKPOINT)
    assert header["threads"] == 1  # a tiny network
    build_chains(config(root), resumed_threads=3)
    assert torch.get_num_threads() == 3
    build_chains(config(root, "threads=2"))
    assert torch.get_num_threads() == 2


def test_the_thread_count_is_said_with_its_setting(machine, caplog):
    machine(8, 0.0)
    with caplog.at_level("INFO", logger="bdl"):
        threads.apply("auto", 10**6, torch.device("cpu"))
        threads.apply(1, 10**6, torch.device("cpu"))
    assert caplog.messages == ["8 CPU threads (threads=auto)", "1 CPU thread (threads=1)"]
    assert torch.get_num_threads() == 1
