"""One directory is one experiment, and a run stopped at any moment resumes bit for bit.

A kill is simulated in-process by an exception raised at a chosen point (a sampler step, between
a sample file and its manifest entry, in the middle of writing a checkpoint): what is on disk then
is what a SIGKILL at that moment leaves. The resumed run's samples, ``metrics.json`` (wall time
aside) and ``curve.csv`` (its wall-time column aside) must equal those of a run never stopped.
The real-process version (SIGKILL at random moments of ``bdl-run``) is ``test_resume_slow.py``.
"""

from __future__ import annotations

import csv
import json
import os
import signal
from pathlib import Path

import pytest
import torch
from conftest import SAMPLER_OPTIONS, declaration, write_fake_uci
from hydra import compose, initialize_config_module

import bdl.atomic
import bdl.runner.checkpoint
import bdl.storage.store
from bdl.composition.config import ConfigError
from bdl.composition.network import load_data
from bdl.metrics import ClassificationAverage, RegressionAverage
from bdl.runner import run as runner
from bdl.runner import steppers
from bdl.runner.checkpoint import CheckpointError
from bdl.runner.curve import Curve
from bdl.runner.interrupts import Interrupted, resume_command
from bdl.runner.loop import Loop
from bdl.runner.sampling import Sampling
from bdl.runner.stability import DivergedError
from bdl.runner.steppers import ChainStepper
from bdl.storage.outputs import RunDirectory


class Kill(BaseException):
    """Stands for SIGKILL: nothing in bdl may catch it and tidy up."""


def killed_at_call(monkeypatch, owner, name: str, at: int, run) -> None:
    """``run()`` killed (`Kill`) at the ``at``-th call of ``owner.name``, which is then restored."""
    real, calls = getattr(owner, name), {"n": 0}

    def dying(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == at:
            raise Kill
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, dying)
    with pytest.raises(Kill):
        run()
    monkeypatch.setattr(owner, name, real)


def write_tiny_uci(root: Path, n: int = 60) -> Path:
    """A regression set ``uci/tiny/`` in the standard splits' layout, with one split."""
    write_fake_uci(root, "tiny", rows=n, columns=4, splits=1)
    return root


@pytest.fixture(scope="module")
def uci_root(tmp_path_factory) -> Path:
    return write_tiny_uci(tmp_path_factory.mktemp("data"))


def config(root: Path, *overrides: str):
    base = [
        "dataset=boston",
        "dataset.name=tiny",
        f"dataset.root={root}",
        "dataset.download=false",
        "protocol.mlp.hidden=[8]",
        "sampler.lr=3e-4",  # the UCI step size (sampler=sghmc_uci's)
        "epochs=6",
        "burn_in=2",
        "thin=1",
        "batch_size=12",
        "checkpoint_every=1",
        "figures=false",  # drawn at a run's end only; tests/analysis/test_plots.py draws them
    ]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return compose("config", [*base, *overrides])


def outputs(directory: Path) -> tuple[dict, list[list[str]], list[dict]]:
    """What must be equal between runs: metrics less wall time, curve less its wall-time column,
    and the sample manifest of each chain (file names and sha256 of every sample)."""
    metrics = json.loads((directory / "metrics.json").read_text())
    metrics.pop("wall_time_s")
    with (directory / "curve.csv").open() as file:
        curve = [[v for k, v in row.items() if k != "wall_time_s"] for row in csv.DictReader(file)]
    manifests = sorted((directory / "samples").glob("**/manifest.json"))  # one per chain
    return metrics, curve, [json.loads(path.read_text()) for path in manifests]


#: What an option needs on the tiny data set beyond its defaults; an option not named here (a new
#: sampler's) runs at them.
ON_TINY_DATA = {
    # small batches: noise enough for its step; seed 1, one whose fitted step does not diverge
    # on this tiny network (most do: see the csgd module)
    "csgd": ["batch_size=4", "seed=1"],
    "hmc": ["sampler.num_steps=3"],
    "bbb": ["sampler.num_samples=3"],
    "bbb_sgd": ["sampler.num_samples=3"],
    "mfvi": ["sampler.num_samples=3"],
    "swag": ["sampler.num_samples=3", "sampler.collect_every=1"],
    "mc_dropout": ["sampler.num_samples=3"],
    # the Laplace approximation is of the weights alone: the noise is fixed
    "laplace": ["likelihood.noise_std=0.5"],
}
#: What the options' defaults leave out: Gibbs-sampled hyperparameters, the online noise
#: estimate, step-size adaptation under a hyperprior, naive SGHMC's Metropolis test.
VARIANTS = {
    "sghmc gibbs hyperprior": ["sampler=sghmc", "prior=gamma_hierarchical"],
    "sghmc online noise": ["sampler=sghmc", "sampler.grad_var=online", "likelihood.gibbs=true"],
    "hmc adapting": ["sampler=hmc", "sampler.num_steps=3", "prior=gamma_hierarchical"],
    "naive sghmc mh": ["sampler=naive_sghmc", "sampler.mh=true", "sampler.resample_every=4"],
    # a step and threshold at which 3 of the 4 transitions after burn-in count as divergent:
    # their tallies resume too
    "hmc divergent": [
        "sampler=hmc",
        "sampler.num_steps=3",
        "sampler.lr=0.003",
        "sampler.divergence_threshold=0.01",
    ],
}


def sampler_cases(on_tiny_data: dict[str, list[str]], variants: dict[str, list[str]]):
    """Every sampler option (with what it needs here) and the variants: name -> overrides."""
    options = {name: [f"sampler={name}", *on_tiny_data.get(name, [])] for name in SAMPLER_OPTIONS}
    return options | variants


def option_of(overrides: list[str]) -> str:
    return next(o.split("=", 1)[1] for o in overrides if o.startswith("sampler="))


def trained_start(root: Path, directory: Path, overrides: list[str]) -> list[str]:
    """For a sampler that expands the posterior around a trained network (Laplace), the SGD run
    it starts from (``init_from``); nothing for the others."""
    if not declaration(option_of(overrides)).needs_trained_start:
        return []
    if not (directory / "metrics.json").exists():
        runner.run(config(root, "sampler=sgd", "burn_in=0"), directory)
    return [f"init_from={directory}"]


def tiny_config(root: Path, directory: Path, overrides: list[str], *more: str):
    """``config`` of a sampler case, burn-in dropped for the samplers that keep no states."""
    burn_in = [] if declaration(option_of(overrides)).injects_noise else ["burn_in=0"]
    return config(root, *overrides, *burn_in, *trained_start(root, directory, overrides), *more)


SAMPLERS = sampler_cases(ON_TINY_DATA, VARIANTS)


#: HMC's trajectory compiled as one program (compile=true, the training set in one chunk), with
#: some of its transitions divergent
COMPILED_TRAJECTORY = [
    *VARIANTS["hmc divergent"],
    "batch_size=100000",
    "compile=true",
]


@pytest.mark.parametrize("name", [*SAMPLERS, "hmc compiled trajectory"])
def test_a_run_killed_mid_epoch_resumes_bitwise(uci_root, tmp_path, monkeypatch, name, request):
    if name not in SAMPLERS:
        request.getfixturevalue("compiler")
    overrides = SAMPLERS.get(name, COMPILED_TRAJECTORY)
    cfg = tiny_config(uci_root, tmp_path / "start", overrides)
    runner.run(cfg, tmp_path / "whole")

    full_batch = declaration(option_of(overrides)).full_batch
    kill_at = 4 if full_batch else 17  # epoch 5 of the full-batch kernels; mid-epoch 4 otherwise
    killed_at_call(
        monkeypatch, ChainStepper, "closure", kill_at, lambda: runner.run(cfg, tmp_path / "killed")
    )
    runner.run(
        tiny_config(uci_root, tmp_path / "start", overrides, "resume=true"), tmp_path / "killed"
    )
    assert outputs(tmp_path / "killed") == outputs(tmp_path / "whole")
    if "sampler.divergence_threshold=0.01" in overrides:  # there were divergences to carry
        assert outputs(tmp_path / "whole")[0]["divergences"] > 0


def test_a_sample_written_after_the_checkpoint_is_neither_lost_nor_duplicated(
    uci_root, tmp_path, monkeypatch
):
    cfg = config(uci_root, "checkpoint_every=2", "epochs=8")
    monkeypatch.setattr(bdl.storage.store, "SHARD_BYTES", 1)  # a shard a draw: written at once
    runner.run(cfg, tmp_path / "whole")
    real_add, real_sync = bdl.storage.store.SampleStore.add, bdl.storage.store.SampleStore.sync
    adds = {"n": 0}

    def dying(self, *args, **kwargs):
        real_add(self, *args, **kwargs)
        adds["n"] += 1
        if adds["n"] == 4:  # the 4th sample's file is written, in epoch 6
            raise Kill

    def sync(self):
        if adds["n"] < 4:  # a killed process lists nothing more
            real_sync(self)

    monkeypatch.setattr(bdl.storage.store.SampleStore, "add", dying)
    monkeypatch.setattr(bdl.storage.store.SampleStore, "sync", sync)
    with pytest.raises(Kill):
        runner.run(cfg, tmp_path / "killed")
    monkeypatch.undo()
    samples = tmp_path / "killed" / "samples"
    # listed: the samples of epochs 3 and 4, which the checkpoint after epoch 4 counts
    assert bdl.storage.store.count_samples(samples) == 2
    for name in ("draws_0000002-0000003.safetensors", "draws_0000003-0000004.safetensors"):
        assert (samples / name).exists()  # written, never listed
    # the resumed run writes the 3rd and 4th again
    runner.run(
        config(uci_root, "checkpoint_every=2", "epochs=8", "resume=true"), tmp_path / "killed"
    )
    assert outputs(tmp_path / "killed") == outputs(tmp_path / "whole")


@pytest.mark.parametrize("chains", [1, 2])
def test_a_checkpoint_counts_only_samples_already_flushed_to_disk(
    uci_root, tmp_path, monkeypatch, chains
):
    """The stores flush at checkpoints, not at each sample: after a power cut the checkpoint
    must not count a sample whose file or manifest entry was still only in memory."""
    flushed = set()  # inodes, so that a file renamed after its flush still counts
    real_fsync, real_save = os.fsync, bdl.runner.checkpoint.save

    def fsync(fd):
        flushed.add(os.fstat(fd).st_ino)
        real_fsync(fd)

    checkpoints = []

    def save(path, tensors, header):
        samples = path.parent / "samples"
        written = [*samples.rglob("draws_*.safetensors"), *samples.rglob("manifest.json")]
        assert {p.stat().st_ino for p in written} <= flushed, "a checkpoint before its samples"
        stores = {p.parent for p in written}
        checkpoints.append(sum(bdl.storage.store.count_samples(store) for store in stores))
        real_save(path, tensors, header)

    monkeypatch.setattr(bdl.atomic.os, "fsync", fsync)
    monkeypatch.setattr(bdl.runner.checkpoint, "save", save)
    runner.run(config(uci_root, f"chains={chains}"), tmp_path / "run")
    # a checkpoint each epoch; the last one sees each chain's 4 samples (epochs 3-6, after a
    # burn-in of 2) listed
    assert checkpoints[-1] == chains * 4 and len(checkpoints) >= 6


def test_a_kill_while_checkpointing_leaves_the_previous_checkpoint(uci_root, tmp_path, monkeypatch):
    cfg = config(uci_root)
    runner.run(cfg, tmp_path / "whole")
    real = bdl.runner.checkpoint.atomic_write
    saves = {"n": 0}

    def dying(path, data):
        saves["n"] += 1
        if saves["n"] == 3:
            # half the new file written beside the old one, then the process dies
            (path.parent / f".{path.name}.partial.tmp").write_bytes(data[: len(data) // 2])
            raise Kill
        real(path, data)

    monkeypatch.setattr(bdl.runner.checkpoint, "atomic_write", dying)
    with pytest.raises(Kill):
        runner.run(cfg, tmp_path / "killed")
    monkeypatch.setattr(bdl.runner.checkpoint, "atomic_write", real)
    _, header = bdl.runner.checkpoint.load(tmp_path / "killed" / bdl.storage.outputs.CHECKPOINT)
    assert header["chains"][0]["loop"]["epoch"] == 2
    runner.run(config(uci_root, "resume=true"), tmp_path / "killed")
    assert outputs(tmp_path / "killed") == outputs(tmp_path / "whole")
    assert not list((tmp_path / "killed").glob(".*.tmp"))  # the orphan was removed


@pytest.mark.parametrize(
    ("method", "calls", "stopped_at"),
    [
        ((ChainStepper, "closure"), 10, {"epoch": 2, "step": 2}),  # mid-epoch
        # between epochs, after the progress line: the next epoch must not draw its order twice
        ((Sampling, "_checkpoint_due"), 3, {"epoch": 3, "step": 0}),
    ],
)
def test_sigterm_checkpoints_and_resumes_bitwise(
    uci_root, tmp_path, monkeypatch, caplog, method, calls, stopped_at
):
    cfg = config(uci_root, "checkpoint_every=100")  # only the signal's checkpoint
    runner.run(cfg, tmp_path / "whole")
    owner, method = method
    real = getattr(owner, method)
    count = {"n": 0}

    def signalled(self, *args):
        count["n"] += 1
        if count["n"] == calls:
            signal.raise_signal(signal.SIGTERM)
        return real(self, *args)

    monkeypatch.setattr(owner, method, signalled)
    with pytest.raises(Interrupted) as stop:
        runner.run(cfg, tmp_path / "stopped")
    assert stop.value.exit_code == 128 + signal.SIGTERM
    stopped = tmp_path / "stopped"
    # the tiny set's 54 training rows hold 4 full minibatches of 12: 4 steps an epoch
    where = f"epoch {stopped_at['epoch'] + 1} of 6"
    where += f", after step {stopped_at['step']} of 4" if stopped_at["step"] else ""
    assert str(stop.value) == (
        f"SIGTERM: stopped in {where}; checkpoint {stopped / 'checkpoint.safetensors'}. Resume "
        f"with: {resume_command(stopped)}"
    )
    status = json.loads((stopped / "metrics.json").read_text())
    assert status == {"status": "interrupted", **stopped_at, "signal": "SIGTERM"}
    monkeypatch.setattr(owner, method, real)
    with caplog.at_level("INFO", logger="bdl"):
        metrics = runner.run(config(uci_root, "checkpoint_every=100", "resume=true"), stopped)
    assert outputs(stopped) == outputs(tmp_path / "whole")
    resumed = f"resuming at epoch {stopped_at['epoch'] + 1}, step {stopped_at['step']}"
    said = [message for message in caplog.messages if message.startswith(("run dir", "resum"))]
    assert said == [f"run directory: {stopped}", resumed, f"run directory: {stopped}"]
    # the resumed run's verdict: its error, every warning, reason and note, each said once
    # under its own heading (its 4 draws of one chain are too few to judge convergence)
    resumed_messages = caplog.messages[caplog.messages.index(resumed) :]
    assert metrics["reasons"] and metrics["notes"]
    said_of_verdict = [
        *(f"WARNING: {warning}" for warning in metrics["warnings"]),
        *(f"NOT CONVERGED: {reason}" for reason in metrics["reasons"]),
        *(f"note: {note}" for note in metrics["notes"]),
    ]
    if metrics["status"] == "unsound":  # 6 epochs at the UCI step: no better than the mean
        kept = f"the 4 samples taken before are kept in {stopped / 'samples'}"
        said_of_verdict.insert(0, f"NOT A RESULT: {metrics['error']}; {kept}")
    assert [m for m in resumed_messages if m.startswith(("NOT ", "WARNING", "note"))] == (
        said_of_verdict
    )


@pytest.mark.parametrize("chains", [1, 2])
def test_a_compiled_epoch_stopped_between_its_programs_resumes_bitwise(
    uci_root, tmp_path, monkeypatch, compiler, chains
):
    """With ``compile=true`` an epoch of SGHMC runs as programs of a span of steps each (here
    three, then the one left of the tiny set's four); a signal is heard between them, and the run
    stopped there resumes to the run not stopped, bit for bit."""
    numel = 3 * 8 + 8 + 8 + 1 + 1  # the tiny MLP's weights and biases, and the noise precision
    monkeypatch.setattr(steppers, "PROGRAM_DRAWS", 3 * numel * chains)
    overrides = ["compile=true", f"chains={chains}", "checkpoint_every=100"]
    runner.run(config(uci_root, *overrides), tmp_path / "whole")
    real = steppers.Stepper.advance
    spans = []

    def signalled(self, *args, **kwargs):
        if len(spans) == 4:  # the first span of epoch 3
            signal.raise_signal(signal.SIGTERM)
        spans.append(real(self, *args, **kwargs))
        return spans[-1]

    monkeypatch.setattr(steppers.Stepper, "advance", signalled)
    with pytest.raises(Interrupted):
        runner.run(config(uci_root, *overrides), tmp_path / "stopped")
    assert spans == [3, 1, 3, 1, 3]  # the epochs' steps were the programs'
    status = json.loads((tmp_path / "stopped" / "metrics.json").read_text())
    assert (status["epoch"], status["step"]) == (2, 3)
    monkeypatch.setattr(steppers.Stepper, "advance", real)
    runner.run(config(uci_root, *overrides, "resume=true"), tmp_path / "stopped")
    assert outputs(tmp_path / "stopped") == outputs(tmp_path / "whole")


def test_a_directory_holding_a_run_is_refused_and_left_alone(uci_root, tmp_path):
    cfg = config(uci_root)
    runner.run(cfg, tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="already holds a run.*resume=true.*fresh directory"):
        runner.run(config(uci_root, "seed=1"), tmp_path)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_directory_in_use_by_another_run_is_refused(uci_root, tmp_path):
    holder = RunDirectory(tmp_path)
    holder.claim(config(uci_root), resume=False)
    try:
        with pytest.raises(ConfigError, match="another bdl-run is writing into"):
            runner.run(config(uci_root), tmp_path)
    finally:
        holder.release()


def test_resume_refuses_what_it_cannot_continue(uci_root, tmp_path, caplog):
    cfg = config(uci_root, "epochs=4")
    runner.run(cfg, tmp_path / "done")
    # a requeued job whose run had completed: nothing to redo, and nothing changed
    before = {p: p.read_bytes() for p in (tmp_path / "done").rglob("*") if p.is_file()}
    with caplog.at_level("INFO", logger="bdl"):
        again = runner.run(config(uci_root, "epochs=4", "resume=true"), tmp_path / "done")
    assert f"the run in {tmp_path / 'done'} has completed; nothing to resume" in caplog.text
    assert again == json.loads((tmp_path / "done" / "metrics.json").read_text())
    assert {p: p.read_bytes() for p in (tmp_path / "done").rglob("*") if p.is_file()} == before

    directory = tmp_path / "done"
    (directory / "metrics.json").unlink()  # as if killed before its end
    with pytest.raises(ConfigError, match=r"another config: epochs \(4 there, 5 now\)"):
        runner.run(config(uci_root, "epochs=5", "resume=true"), directory)
    with pytest.raises(ConfigError, match=r"sampler\._target_"):
        runner.run(config(uci_root, "epochs=4", "sampler=sgld", "resume=true"), directory)

    path = directory / bdl.storage.outputs.CHECKPOINT
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # one flipped bit in the tensor data
    path.write_bytes(bytes(data))
    before = {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    with pytest.raises(CheckpointError, match="corrupt.*delete checkpoint.safetensors"):
        runner.run(config(uci_root, "epochs=4", "resume=true"), directory)
    path.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        runner.run(config(uci_root, "epochs=4", "resume=true"), directory)
    before[path] = path.read_bytes()
    assert {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()} == before
    # the way out the message names: without the checkpoint, resume=true runs it again
    path.unlink()
    runner.run(config(uci_root, "epochs=4", "resume=true"), directory)
    runner.run(cfg, tmp_path / "whole")
    assert outputs(directory) == outputs(tmp_path / "whole")


def test_a_completed_run_without_its_checkpoint_is_not_run_again(uci_root, tmp_path):
    runner.run(config(uci_root, "epochs=4"), tmp_path)
    (tmp_path / bdl.storage.outputs.CHECKPOINT).unlink()
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="completed run whose checkpoint.safetensors is gone"):
        runner.run(config(uci_root, "epochs=4", "resume=true"), tmp_path)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    ("chains", "kill_after"),
    [
        (1, 0),  # as soon as the run has its directory: its config alone
        (1, 4),  # after epoch 4 and two samples
        (2, 1),  # after epoch 1: empty samples/chain_0/ and chain_1/
        (2, 4),  # after samples of both chains
    ],
)
def test_a_run_killed_before_its_first_checkpoint_is_finished_by_resume(
    uci_root, tmp_path, monkeypatch, caplog, chains, kill_after
):
    overrides = [f"chains={chains}", "checkpoint_every=100"]  # no checkpoint before the end
    runner.run(config(uci_root, *overrides), tmp_path / "whole")
    real_epoch_end = Sampling._checkpoint_due
    real_stores = RunDirectory.open_stores
    epochs = {"n": 0}

    def dying(self):
        epochs["n"] += 1
        if epochs["n"] == kill_after:
            raise Kill
        return real_epoch_end(self)

    def stores(self, count):
        if kill_after == 0:
            raise Kill
        return real_stores(self, count)

    monkeypatch.setattr(Sampling, "_checkpoint_due", dying)
    monkeypatch.setattr(RunDirectory, "open_stores", stores)
    with pytest.raises(Kill):
        runner.run(config(uci_root, *overrides), tmp_path / "killed")
    monkeypatch.undo()
    killed = tmp_path / "killed"
    assert not (killed / bdl.storage.outputs.CHECKPOINT).exists()
    with caplog.at_level("WARNING", logger="bdl"):
        runner.run(config(uci_root, *overrides, "resume=true"), killed)
    assert f"{killed} has no checkpoint: starting the run from the beginning" in caplog.text
    assert outputs(killed) == outputs(tmp_path / "whole")
    assert len(outputs(killed)[2]) == chains


def test_a_run_that_diverged_before_its_first_checkpoint_is_finished_by_resume(
    uci_root, tmp_path, monkeypatch
):
    cfg = config(uci_root, "checkpoint_every=100")
    real = Loop.check_stability

    def diverging(loop, experiment, mean_potential, name):
        if loop.epoch == 4:  # after two samples
            raise DivergedError("the chain diverged in epoch 5")
        return real(loop, experiment, mean_potential, name)

    monkeypatch.setattr(Loop, "check_stability", diverging)
    with pytest.raises(DivergedError, match="the 2 samples taken before are kept"):
        runner.run(cfg, tmp_path / "run")
    monkeypatch.undo()
    # the way out that the refusal of a second start names
    with pytest.raises(ConfigError, match="already holds a run.*add resume=true"):
        runner.run(cfg, tmp_path / "run")
    runner.run(config(uci_root, "checkpoint_every=100", "resume=true"), tmp_path / "run")
    runner.run(cfg, tmp_path / "whole")
    assert outputs(tmp_path / "run") == outputs(tmp_path / "whole")


def as_format_4(path: Path) -> tuple[dict, dict]:
    """Rewrite the run's checkpoint at ``path`` as bdl wrote format 4: each chain's curve and
    accept rates in its header's ``loop``, as JSON; its tensors and header."""
    from safetensors.torch import save

    tensors, header = bdl.runner.checkpoint.load(path)
    for k, chain in enumerate(header["chains"]):
        prefix, fields = f"chain_{k}/loop/", chain.pop("curve_fields")
        values, kinds = (tensors.pop(f"{prefix}{name}") for name in ("curve", "curve_kinds"))
        chain["loop"]["curve"] = list(Curve.from_tensors(fields, values, kinds))
        chain["loop"]["accept_rates"] = tensors.pop(f"{prefix}accept_rates").tolist()
    header["format_version"] = 4
    header["sha256"] = bdl.runner.checkpoint._digest(tensors, header)
    path.write_bytes(save(tensors, metadata={"bdl_checkpoint": json.dumps(header)}))
    return tensors, header


def as_format_3(path: Path) -> None:
    """Rewrite the run's checkpoint at ``path`` as bdl wrote format 3: format 4's, with the
    Metropolis kernels' ``(U, ∇U)`` as ``info/potential`` and the buffer ``grad``, naive
    SGHMC's trajectory start as ``info/start_potential`` and ``info/start_energy``."""
    from safetensors.torch import save

    tensors, header = as_format_4(path)
    for k, chain in enumerate(header["chains"]):
        prefix, sampler = f"chain_{k}/sampler/", chain["sampler"]
        cached = sampler.pop("cached")
        if "current" in cached:
            tensors[f"{prefix}info/potential"] = tensors.pop(f"{prefix}cached/current/0")
            sampler["buffers"]["grad"] = cached["current"][1]
            for i in range(cached["current"][1]):
                grad = tensors.pop(f"{prefix}cached/current/1/{i}")
                tensors[f"{prefix}buffers/grad/{i}"] = grad
        if "start" in cached:
            for i, name in enumerate(("start_potential", "start_energy")):
                tensors[f"{prefix}info/{name}"] = tensors.pop(f"{prefix}cached/start/{i}")
        assert not any("cached/" in name for name in tensors)
    header["format_version"] = 3
    header["sha256"] = bdl.runner.checkpoint._digest(tensors, header)
    path.write_bytes(save(tensors, metadata={"bdl_checkpoint": json.dumps(header)}))


#: kernels that cache between steps: naive SGHMC's trajectory start (trajectories of three steps,
#: epochs of four: the checkpoint after epoch 2 falls within one), the full-data (U, ∇U) kept
#: between iterations
CACHING = {
    "naive sghmc mh": ["sampler=naive_sghmc", "sampler.mh=true", "sampler.resample_every=3"],
    "rwmh": ["sampler=rwmh"],
}
#: the runs whose checkpoints a test rewrites in an older format: the caching kernels, and chains
#: stacked (a curve with a chain column) for format 4
OLDER = {**CACHING, "sghmc, two chains": ["sampler=sghmc", "chains=2"]}


@pytest.mark.parametrize(
    ("name", "rewrite"),
    [*((name, as_format_3) for name in CACHING), ("sghmc, two chains", as_format_4)],
)
def test_a_checkpoint_of_an_older_format_resumes_bitwise(
    uci_root, tmp_path, monkeypatch, name, rewrite
):
    cfg = config(uci_root, *OLDER[name])
    runner.run(cfg, tmp_path / "whole")
    real_save = bdl.runner.checkpoint.save_run
    saves = {"n": 0}

    def save_then_die(*args, **kwargs):  # killed after the checkpoint of epoch 2
        real_save(*args, **kwargs)
        saves["n"] += 1
        if saves["n"] == 2:
            raise Kill

    monkeypatch.setattr(bdl.runner.checkpoint, "save_run", save_then_die)
    with pytest.raises(Kill):
        runner.run(cfg, tmp_path / "killed")
    monkeypatch.setattr(bdl.runner.checkpoint, "save_run", real_save)
    path = tmp_path / "killed" / bdl.storage.outputs.CHECKPOINT
    tensors, header = bdl.runner.checkpoint.load(path)
    if rewrite is as_format_3:
        assert header["chains"][0]["sampler"]["cached"]  # something cached to carry over
    assert tensors["chain_0/loop/curve"].shape[0] == 2  # a curve to carry over
    rewrite(path)
    runner.run(config(uci_root, *OLDER[name], "resume=true"), tmp_path / "killed")
    assert outputs(tmp_path / "killed") == outputs(tmp_path / "whole")


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (bdl.runner.checkpoint.FORMAT_VERSION + 1, "newer bdl"),
        (bdl.runner.checkpoint.OLDEST_FORMAT - 1, "older bdl"),
    ],
)
def test_a_checkpoint_of_another_format_is_refused(tmp_path, version, message):
    path = tmp_path / bdl.storage.outputs.CHECKPOINT
    bdl.runner.checkpoint.save(path, {"x": torch.zeros(2)}, {})
    tensors, header = bdl.runner.checkpoint.load(path)
    from safetensors.torch import save

    header["format_version"] = version
    path.write_bytes(save(tensors, metadata={"bdl_checkpoint": json.dumps(header)}))
    with pytest.raises(CheckpointError, match=message):
        bdl.runner.checkpoint.load(path)


def test_a_diverged_chain_is_a_status_in_strict_json(uci_root, tmp_path):
    # burn_in=0: no epoch in which the step could back off (bdl.runner.stability)
    cfg = config(uci_root, "sampler=sgld", "sampler.lr=1e4", "burn_in=0")
    with pytest.raises(DivergedError) as error:
        runner.run(cfg, tmp_path)
    assert str(error.value) == (
        "the chain diverged in epoch 1 (its parameters or potential are not finite). Lower "
        f"sampler.lr; the 0 samples taken before are kept in {tmp_path / 'samples'}"
    )
    text = (tmp_path / "metrics.json").read_text()
    metrics = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert metrics["status"] == "diverged" and metrics["diverged_epoch"] == 1
    assert metrics["num_samples"] == 0


def test_a_completed_run_says_so(uci_root, tmp_path):
    metrics = runner.run(config(uci_root, "epochs=60"), tmp_path)
    assert metrics["status"] == "completed"
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "completed"


def test_a_run_worse_than_ignoring_the_inputs_is_unsound(uci_root, tmp_path):
    """Six epochs learn nothing of the tiny set: the training targets' mean and variance predict
    its test targets better, and the run says so rather than 'completed'."""
    metrics = runner.run(config(uci_root), tmp_path)
    data = load_data(config(uci_root))
    y_train = data.y_train.double() * data.target_std + data.target_mean
    y_test = data.y_test.double() * data.target_std + data.target_mean
    rmse = (y_test - y_train.mean()).square().mean().sqrt().item()
    normal = torch.distributions.Normal(y_train.mean(), y_train.std())
    assert metrics["trivial"]["test_rmse"] == pytest.approx(rmse, rel=1e-9)
    assert metrics["trivial"]["test_ll"] == pytest.approx(normal.log_prob(y_test).mean().item())
    assert metrics["test_rmse"] > rmse
    assert metrics["status"] == "unsound" and "worse than ignoring the inputs" in metrics["error"]
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "unsound"


@pytest.mark.parametrize("average", ["classification", "regression"])
def test_a_model_average_restored_from_its_state_continues_exactly(average):
    generator = torch.Generator().manual_seed(0)
    y = torch.randn(5, generator=generator)

    def fresh():
        return ClassificationAverage() if average == "classification" else RegressionAverage(y)

    def draw():
        if average == "classification":
            return torch.rand(5, 3, generator=generator).softmax(-1)
        return torch.stack(
            [torch.randn(5, generator=generator), torch.rand(5, generator=generator)], -1
        )

    draws = [draw() for _ in range(4)]
    whole, first = fresh(), fresh()
    for d in draws:
        whole.update(d)
    for d in draws[:2]:
        first.update(d)
    resumed = fresh()
    resumed.load_state_dict({k: v.clone() for k, v in first.state_dict().items()})
    for d in draws[2:]:
        resumed.update(d)
    assert resumed.count == 4
    assert torch.equal(resumed.predictive(), whole.predictive())


@pytest.mark.parametrize("damage", ["deleted", "altered"])
def test_resume_checks_the_samples_it_keeps(uci_root, tmp_path, monkeypatch, damage):
    cfg = config(uci_root)
    runner.run(cfg, tmp_path / "whole")
    real_epoch_end = Sampling._checkpoint_due

    def dying(self):
        if self.epoch == 5:  # after the checkpoint of epoch 4, which counts two samples
            raise Kill
        return real_epoch_end(self)

    monkeypatch.setattr(Sampling, "_checkpoint_due", dying)
    with pytest.raises(Kill):
        runner.run(cfg, tmp_path / "killed")
    monkeypatch.undo()
    # the shard of the 3 samples that the killed run's failure listed, 2 of which the checkpoint
    # counts
    sample = tmp_path / "killed" / "samples" / "draws_0000000-0000003.safetensors"
    if damage == "deleted":
        sample.unlink()
    else:
        data = bytearray(sample.read_bytes())
        data[-1] ^= 0x01
        sample.write_bytes(bytes(data))
    before = {p: p.read_bytes() for p in (tmp_path / "killed").rglob("*") if p.is_file()}
    problem = "is missing" if damage == "deleted" else r"is corrupt or incomplete \(sha256"
    with pytest.raises(
        bdl.storage.store.StoreError, match=f"sample file {sample} {problem}.*delete"
    ):
        runner.run(config(uci_root, "resume=true"), tmp_path / "killed")
    assert {p: p.read_bytes() for p in (tmp_path / "killed").rglob("*") if p.is_file()} == before
    # the way out the message names
    (tmp_path / "killed" / bdl.storage.outputs.CHECKPOINT).unlink()
    runner.run(config(uci_root, "resume=true"), tmp_path / "killed")
    assert outputs(tmp_path / "killed") == outputs(tmp_path / "whole")


def test_a_finished_run_leaves_no_temporary_file(uci_root, tmp_path, monkeypatch):
    """A kill inside a write leaves its temporary; the next claim removes it, and a run removes
    those of its own writes that an error interrupted before it ends."""
    (tmp_path / ".checkpoint.safetensors.0badf00d.tmp").write_bytes(b"half")
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / ".config.yaml.0badf00d.tmp").write_bytes(b"half")
    real = Sampling._finish

    def stray_then_finish(self):
        (tmp_path / ".metrics.json.12345678.tmp").write_bytes(b"")
        return real(self)

    monkeypatch.setattr(Sampling, "_finish", stray_then_finish)
    runner.run(config(uci_root), tmp_path)
    assert not [p for p in tmp_path.rglob(".*.tmp")]


def mnist_config(root: Path, *overrides: str):
    """Two chains on the generated MNIST, scored against Fashion-MNIST at each kept sample."""
    base = [
        f"dataset.root={root}",
        "dataset=mnist",
        "dataset.validation=59000",
        "ood=fashion_mnist",
        "chains=2",
        "epochs=4",
        "burn_in=1",
        "batch_size=250",
        "checkpoint_every=1",
        "figures=false",
    ]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return compose("config", [*base, *overrides])


@pytest.mark.parametrize(
    "checkpoint_kept",
    ["its averages", pytest.param("none (an older bdl's)", marks=pytest.mark.slow)],
)
def test_out_of_distribution_scores_resume_bitwise(
    fake_data_root, isolated_cache, tmp_path, monkeypatch, caplog, checkpoint_kept
):
    """A run killed after some samples were scored against the ``ood=`` set ends with the
    metrics of a run never stopped: from the averages its checkpoint carried, or, from the
    checkpoint of a bdl that kept none, by scoring its stored samples at the end."""
    cfg = mnist_config(fake_data_root)
    runner.run(cfg, tmp_path / "whole")
    whole = outputs(tmp_path / "whole")
    assert whole[0]["ood"] == "fashion_mnist" and whole[0]["num_samples"] == 6
    # killed at the last epoch's first sample: two of each chain kept before
    killed_at_call(
        monkeypatch, Sampling, "_collect", 5, lambda: runner.run(cfg, tmp_path / "killed")
    )
    path = tmp_path / "killed" / "checkpoint.safetensors"
    tensors, header = bdl.runner.checkpoint.load(path)
    assert tensors["chain_1/detection/outside/count"] == 2  # two samples scored before
    if checkpoint_kept != "its averages":
        kept = {k: t for k, t in tensors.items() if "/detection/" not in k}
        header.pop("sha256"), header.pop("format_version")
        bdl.runner.checkpoint.save(path, kept, header)
    with caplog.at_level("INFO", logger="bdl"):
        runner.run(mnist_config(fake_data_root, "resume=true"), tmp_path / "killed")
    assert outputs(tmp_path / "killed") == whole
    rescored = "out-of-distribution scores of the 6 stored samples (fashion_mnist)..."
    assert (rescored in caplog.messages) == (checkpoint_kept != "its averages")
