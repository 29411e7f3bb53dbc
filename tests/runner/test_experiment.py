"""What a run's experiment refuses before it starts (`bdl.runner.experiment`): a sampler that
cannot sample from where or with what the run gives it, chains that cannot run together, a
reference or a start of another run, a run that keeps no sample: each one line naming the fix.
The experiments that run are tested through the runner (test_run.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bdl.composition.config import ConfigError
from bdl.runner import experiment
from bdl.samplers import SGLD, ConstantSGD, Laplace
from bdl.schedules import Constant
from bdl.storage.store import SampleStore, StoreError

#: Laplace's class, for its declaration alone: building one imports laplace-torch (seconds)
LAPLACE = Laplace.__new__(Laplace)


def test_a_sampler_that_cannot_sample_from_this_run_names_the_fix():
    cfg = SimpleNamespace(init_from=None, batch_size=32)
    data = SimpleNamespace(num_train=100)
    with pytest.raises(ConfigError) as error:
        experiment._check_sampler(cfg, LAPLACE, data)
    assert str(error.value) == (
        "Laplace expands the posterior around a trained network, and this run would expand it "
        "around its random start: train one first (the same command with sampler=sgd) and give "
        "its directory as init_from=<run directory>"
    )
    experiment._check_sampler(SimpleNamespace(init_from="run", batch_size=32), LAPLACE, data)
    experiment._check_sampler(cfg, ConstantSGD(1e-3), data)  # 32 of 100 points: noisy enough
    full = SimpleNamespace(init_from=None, batch_size=100)
    with pytest.raises(ConfigError) as error:
        experiment._check_sampler(full, ConstantSGD(1e-3), data)
    assert str(error.value) == (
        "ConstantSGD samples with the noise of minibatch gradients alone, and batch_size=100 "
        "takes all 100 training points (the UCI protocol takes full batches): set a smaller "
        "batch_size, e.g. batch_size=32 or protocol=uci_minibatch"
    )
    experiment._check_sampler(full, SGLD(1e-3), data)  # SGLD injects its own noise


def _run(epochs: int, burn_in: int, thin: int):
    cfg = SimpleNamespace(
        epochs=epochs,
        burn_in=burn_in,
        thin=thin,
        schedule=SimpleNamespace(_target_="bdl.schedules.Constant"),
    )
    schedule = Constant(epochs * 10, 10)
    return cfg, SimpleNamespace(schedule=schedule, epochs=epochs, burn_in=burn_in, thin=thin)


def test_a_run_that_keeps_no_sample_is_refused_with_settings_that_keep_some():
    cfg, run = _run(epochs=10, burn_in=8, thin=5)  # samples after epochs 12, 17, ...: none
    with pytest.raises(ConfigError) as error:
        experiment._check_samples(cfg, run, SGLD(1e-3))
    assert str(error.value) == (
        "no epoch would keep a sample (epochs=10, burn_in=8, thin=5, schedule=Constant): raise "
        "epochs, or keep epochs=10 with burn_in=5 thin=1"
    )
    experiment._check_samples(cfg, run, LAPLACE)  # an optimiser's run keeps none by design
    experiment._check_samples(*_run(epochs=10, burn_in=8, thin=2), SGLD(1e-3))  # keeps epoch 9


def test_chains_that_cannot_run_together_are_refused():
    cfg = SimpleNamespace(pruning=False, chains=2)
    with pytest.raises(ConfigError) as error:
        experiment._check_chains(cfg, SimpleNamespace(world_size=2), None)
    assert str(error.value) == (
        "chains>1 under torchrun is not supported: run the chains as a sweep (seed=0,1,2,3) or "
        "drop torchrun"
    )
    with pytest.raises(ConfigError) as error:
        experiment._check_chains(SimpleNamespace(pruning=True, chains=2), None, None)
    assert str(error.value) == (
        "pruning=true reads one chain's samples: run it with chains=1, or pruning=false"
    )
    first = SimpleNamespace(
        potential=SimpleNamespace(params=[torch.zeros(2**18)]),  # 1 MiB of float32
        run=SimpleNamespace(device=torch.device("cpu")),
    )
    experiment._check_memory(first, 2)
    with pytest.raises(ConfigError) as error:
        experiment._check_memory(first, 2**40)  # 4 MiB of state each: 2^62 bytes in all
    text = str(error.value)
    assert text.startswith(
        "chains=1099511627776 needs about 4294967296.00 GiB for the chains' parameters and "
        "sampler state (4.0 MiB each), and cpu has "
    )
    assert text.endswith(" GiB free: lower chains")


def test_a_reference_of_another_test_set_is_refused():
    x = torch.zeros(5, 3)
    regression = SimpleNamespace(task="regression", x_test=x, out_features=1)
    cfg = SimpleNamespace(reference="ref.npy")
    with pytest.raises(ConfigError) as error:
        experiment._check_reference(cfg, regression, torch.zeros(5))
    assert str(error.value) == "reference= compares class probabilities: classification only"
    classes = SimpleNamespace(task="classification", x_test=x, out_features=10)
    experiment._check_reference(cfg, classes, torch.full((5, 10), 0.1))
    with pytest.raises(ConfigError) as error:
        experiment._check_reference(cfg, classes, torch.full((4, 10), 0.1))
    assert str(error.value) == (
        "reference=ref.npy holds predictions of shape (4, 10), but this test set needs (5, 10): "
        "point reference= at a run on the same dataset"
    )


def test_a_start_from_another_run_must_hold_this_runs_parameters(tmp_path):
    potential = SimpleNamespace(model_params={"layer.weight": torch.zeros(3, 2)})
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "manifest.json").write_text("[]")  # a store that kept nothing
    with pytest.raises(StoreError) as error:
        experiment.load_initial(potential, str(tmp_path))
    assert str(error.value) == (
        f"init_from={tmp_path}: {tmp_path / 'samples'} holds no samples to start from"
    )
    SampleStore(tmp_path / "samples").add({"layer.weight": torch.zeros(2, 3)})
    with pytest.raises(ConfigError) as error:
        experiment.load_initial(potential, str(tmp_path))
    assert str(error.value) == (
        f"init_from={tmp_path} has no parameters matching this run's layer.weight: point it at "
        "a run of the same model on the same dataset"
    )


def test_a_full_batch_kernel_under_torchrun_gives_each_rank_its_share_of_the_chunks():
    """The chunk size of a full-batch kernel is a memory bound: under two ranks it is at most
    half the training set (455 Boston points: 227), so that each rank holds chunks, whatever
    batch_size says (the UCI protocol's takes all); a smaller batch_size stays; one process
    keeps the whole set; a minibatch sampler is refused under torchrun."""
    from omegaconf import OmegaConf

    from bdl.runner.distributed import Group
    from bdl.samplers import HMC

    two = Group(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"))
    hmc = HMC(1e-3)

    def size(batch_size: int, group, sampler=hmc, num_train: int = 455) -> int:
        return experiment._batch_size(
            OmegaConf.create({"batch_size": batch_size}), group, sampler, num_train
        )

    assert size(100000, two) == 227
    assert size(100000, Group(1, 3, 1, torch.device("cpu")), num_train=10) == 3
    assert size(32, two) == 32
    assert size(100000, None) == 455
    with pytest.raises(ConfigError, match="^sampler SGLD does not run data-parallel"):
        size(32, two, SGLD(1e-3))
