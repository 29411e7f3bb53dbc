"""Building a run: the config turned into an `Experiment` per chain, fixed while sampling.

`build_chains` builds every chain of a run (`build`), in steps: the data read once (`_read`), and
for each chain the network initialised from its seed, its prior and potential (`_potential`), its
random generators (`_generators`) and its sampler, the step converted to its unit
(`make_sampler`, `bdl.samplers.base.Declaration`). What the chains share, the data on the device,
the task, the batches, schedule and lengths and the runner's settings, is built once with the
first chain (`_settings`) into the `RunSettings` every chain's experiment holds. Every refusal a
config can earn from what it builds (a reference of the wrong shape, a sampler that needs a
trained start, a run too short to keep a sample, chains that do not fit in memory) is raised
here, before the first step.
"""

from __future__ import annotations

import logging
import math
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from torch import Tensor

from bdl.composition.config import ConfigError, short_run
from bdl.composition.instantiation import instantiate, resolve
from bdl.composition.network import (
    build_network,
    load_data,
    predict,
    resolve_device,
    sample_tensors,
)
from bdl.data import Dataset
from bdl.data.ood import check_name, ood_inputs
from bdl.noise import Generator
from bdl.potential import Potential
from bdl.runner import distributed, stability, threads
from bdl.samplers.base import Sampler
from bdl.schedules import Schedule
from bdl.storage.store import StoreError, load_reference, load_samples
from bdl.task import Task

log = logging.getLogger("bdl")


@dataclass(frozen=True)
class RunSettings:
    """What every chain of a run shares, resolved (plain values, not config nodes: a node's
    attribute costs tens of microseconds, and the loop reads these every step); fixed while
    sampling: the data, on the device once for all chains, and their task, the run's lengths and
    schedule, and the runner's settings."""

    device: torch.device
    data: Dataset
    task: Task
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    reference: Tensor | None
    schedule: Schedule
    batch_size: int
    steps_per_epoch: int
    epochs: int
    burn_in: int
    thin: int
    gibbs_every: int
    augment: bool
    #: held-out training points (MNIST's last 10,000 images), scored as val_* metrics
    x_validation: Tensor | None = None
    validation: Task | None = None
    #: halve the step during burn-in when the potential climbs (bdl.runner.stability)
    backs_off: bool = False
    #: the potential's stationary rise that bdl.runner.stability measures climbs against
    rise_limit: float = math.inf
    #: the config's sampler.lr, in the sampler's own unit (for messages that suggest another)
    lr: float = 1.0
    #: checkpoint every this many epochs; None: about once a minute
    checkpoint_every: int | None = None
    log_every: int = 1
    #: the samples a pruning curve averages over; None: no pruning curve
    pruning_samples: int | None = None
    #: draw the run's summary figures at its end
    figures: bool = True
    #: step the chains stacked as one where they can (bdl.runner.steppers); every chain draws the
    #: first chain's minibatch order
    vectorise: bool = True
    shared_minibatches: bool = False
    #: the out-of-distribution set (``ood=``) and its inputs, whose detection metrics.json reports
    ood: str | None = None
    x_ood: Tensor | None = None

    def train_chunks(self):
        return zip(
            self.x_train.split(self.batch_size), self.y_train.split(self.batch_size), strict=True
        )


@dataclass
class Experiment:
    """One chain of a run: its network's potential, its sampler and its random generators, and
    the settings it shares with the others (``run``); fixed while sampling."""

    run: RunSettings
    potential: Potential
    sampler: Sampler
    #: data: minibatch order and augmentation; noise: the sampler's; gibbs: hyperparameters'
    generators: dict[str, torch.Generator]
    chain: int = 0

    def collects(self, epoch: int) -> bool:
        """Whether the state after (0-based) ``epoch`` is kept as a posterior sample."""
        run = self.run
        return self.sampler.declaration.injects_noise and run.schedule.collects(
            epoch, run.burn_in, run.thin
        )

    def predict_test(self) -> Tensor:
        return predict(self.potential.model, self.potential.likelihood, self.run.x_test).cpu()

    def predict_validation(self) -> Tensor:
        potential = self.potential
        return predict(potential.model, potential.likelihood, self.run.x_validation).cpu()

    def predict_ood(self) -> Tensor:
        return predict(self.potential.model, self.potential.likelihood, self.run.x_ood).cpu()


def stream_seed(seed: int, stream: int) -> int:
    """The seed of random stream ``stream`` of the chain seeded ``seed``, hashed from both by
    numpy's ``SeedSequence``: chain ``k`` of a run is seeded ``seed + k`` (the run ``seed=seed+k``
    of one chain), and seeds offset by the stream's number would make one chain's sampler noise
    the next chain's initial weights."""
    return int(np.random.SeedSequence([seed, stream]).generate_state(1, np.uint64)[0])


def build_chains(
    cfg: DictConfig, group: distributed.Group | None = None, resumed_threads: int | None = None
) -> list[Experiment]:
    """The experiment of each of the ``cfg.chains`` chains, sharing one copy of the data, with
    torch's thread count set (`bdl.runner.threads`; ``resumed_threads``: the count a resumed run's
    checkpoint recorded, kept under ``threads=auto``)."""
    first = build(cfg, group)
    parameters = sum(p.numel() for p in first.potential.params)
    threads.apply(resumed_threads or cfg.threads, parameters, first.run.device)
    if cfg.chains > 1:
        _check_chains(cfg, group, first)
        log.info("%d chains, seeded %d..%d", cfg.chains, cfg.seed, cfg.seed + cfg.chains - 1)
    return [first, *(build(cfg, group, k, first.run) for k in range(1, cfg.chains))]


def build(
    cfg: DictConfig,
    group: distributed.Group | None = None,
    chain: int = 0,
    run: RunSettings | None = None,
) -> Experiment:
    """The experiment ``cfg`` (validated) describes for its chain ``chain``, the model
    initialised from ``seed + chain``; ``run``: the settings it shares with the chains built
    before it, else those of ``cfg``, the data read here. Under ``torchrun`` (``group``), the
    training set is this rank's shard of it and the potential sums its data term over the
    ranks."""
    device = resolve_device(cfg.device.name) if group is None else group.device
    if run is None:
        data, reference, x_ood = _read(cfg, device)
    else:
        data, reference, x_ood = run.data, run.reference, run.x_ood
    potential = _potential(cfg, data, device, group, cfg.seed + chain)
    generators = _generators(cfg, device, chain)
    sampler = make_sampler(cfg, potential, generators["noise"])
    if run is None:
        run = _settings(cfg, group, device, (data, reference, x_ood), sampler, potential)
    sampler.attach(potential, run.train_chunks)  # a Laplace fit reads the training set
    sampler.plan_burn_in(cfg.burn_in * run.steps_per_epoch)
    return Experiment(run, potential, sampler, generators, chain)


def _read(cfg: DictConfig, device: torch.device) -> tuple[Dataset, Tensor | None, Tensor | None]:
    """The data set, the reference predictions (``reference=``) and the out-of-distribution
    inputs (``ood=``, on ``device``), each name checked before anything large is read."""
    if cfg.ood:
        check_name(cfg.ood)
    reference = load_reference(cfg.reference) if cfg.reference else None
    data = load_data(cfg)
    _check_reference(cfg, data, reference)
    x_ood = ood_inputs(cfg.ood, data, cfg.dataset).to(device) if cfg.ood else None
    return data, reference, x_ood


def _potential(
    cfg: DictConfig,
    data: Dataset,
    device: torch.device,
    group: distributed.Group | None,
    seed: int,
) -> Potential:
    """The potential of a network initialised from ``seed`` (or from ``init_from``)."""
    torch.manual_seed(seed)
    model, likelihood = build_network(cfg, data)
    potential = Potential(
        model.to(device),
        likelihood.to(device),
        instantiate(cfg.prior),
        data.num_train,
        cfg.temperature,
        reduce=None if group is None else group.all_reduce,
        compile=cfg.compile,
        compile_mode=cfg.compile_mode.value,
    )
    if cfg.init_from:
        load_initial(potential, cfg.init_from)
    return potential


def _generators(cfg: DictConfig, device: torch.device, chain: int) -> dict[str, torch.Generator]:
    """Chain ``chain``'s random streams (`Experiment.generators`), each seeded by
    `stream_seed`; with ``shared_minibatches`` every chain draws the first chain's minibatch
    orders."""
    seed = cfg.seed + chain
    data_seed = cfg.seed if cfg.shared_minibatches else seed
    streams = (("data", data_seed), ("noise", seed), ("gibbs", seed))
    return {
        name: torch.Generator(device).manual_seed(stream_seed(root, stream))
        for stream, (name, root) in enumerate(streams)
    }


def make_sampler(cfg: DictConfig, potential: Potential, generator: Generator) -> Sampler:
    """The sampler of ``cfg``, its step converted from the unit it declares to ``potential``'s
    scale, drawing from ``generator`` (a list: the chains' generators, for chains stacked as
    one)."""
    unit = resolve(cfg.sampler).declaration.step_unit
    lr = potential.step_size(cfg.sampler.lr) if unit == "per datum" else cfg.sampler.lr
    return instantiate(cfg.sampler)(lr=lr, generator=generator)


def _settings(
    cfg: DictConfig,
    group: distributed.Group | None,
    device: torch.device,
    read: tuple[Dataset, Tensor | None, Tensor | None],
    sampler: Sampler,
    potential: Potential,
) -> RunSettings:
    """The settings every chain shares, the data of `_read` on the device, for the first
    chain's ``sampler`` and ``potential``: its batches and schedule, refused where they
    cannot sample."""
    data, reference, x_ood = read
    _check_sampler(cfg, sampler, data)
    batch_size = _batch_size(cfg, group, sampler, data.num_train)
    shard = slice(None) if group is None else group.shard(data.num_train, batch_size)
    # A full-batch kernel (HMC) takes one step per epoch; batch_size is then its chunk size.
    steps_per_epoch = 1 if sampler.declaration.full_batch else data.num_train // batch_size
    schedule = instantiate(cfg.schedule)(
        total_steps=cfg.epochs * steps_per_epoch, steps_per_epoch=steps_per_epoch
    )
    parameters = sum(p.numel() for p in potential.params)
    host = (data.x_train[shard], data.y_train[shard], data.x_test, data.x_validation)
    x_train, y_train, x_test, x_validation = (None if t is None else t.to(device) for t in host)
    run = RunSettings(
        device=device,
        data=data,
        task=Task(data, data.y_test),
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        reference=reference,
        schedule=schedule,
        batch_size=batch_size,
        steps_per_epoch=steps_per_epoch,
        epochs=cfg.epochs,
        burn_in=cfg.burn_in,
        thin=cfg.thin,
        gibbs_every=cfg.gibbs_every or steps_per_epoch,
        augment=cfg.protocol.augment,
        x_validation=x_validation,
        validation=None if x_validation is None else Task(data, data.y_validation),
        backs_off=sampler.declaration.backs_off and cfg.burn_in > 0,
        rise_limit=stability.rise_limit(parameters, cfg.temperature),
        lr=cfg.sampler.lr,
        checkpoint_every=cfg.checkpoint_every,
        log_every=cfg.log_every,
        pruning_samples=cfg.pruning_samples if cfg.pruning else None,
        figures=cfg.figures,
        vectorise=cfg.vectorise,
        shared_minibatches=cfg.shared_minibatches,
        ood=cfg.ood,
        x_ood=x_ood,
    )
    _check_samples(cfg, run, sampler)
    _log_run(cfg, group, run, sampler, parameters, shard)
    return run


def _check_sampler(cfg: DictConfig, sampler: Sampler, data: Dataset) -> None:
    """Refuse a sampler that cannot sample from where this run starts or with its batches."""
    name = type(sampler).__name__
    if sampler.declaration.needs_trained_start and not cfg.init_from:
        raise ConfigError(
            f"{name} expands the posterior around a trained network, and this "
            "run would expand it around its random start: train one first (the same command "
            "with sampler=sgd) and give its directory as init_from=<run directory>"
        )
    if sampler.declaration.minibatch_noise and cfg.batch_size >= data.num_train:
        # its step 2D/ΣV would come from the drift of the full gradient along the path: far
        # past the stability limit, a chain that diverges within epochs
        raise ConfigError(
            f"{name} samples with the noise of minibatch gradients alone, and "
            f"batch_size={cfg.batch_size} takes all {data.num_train} training points (the UCI "
            "protocol takes full batches): set a smaller batch_size, e.g. batch_size=32 or "
            "protocol=uci_minibatch"
        )


def _batch_size(
    cfg: DictConfig, group: distributed.Group | None, sampler: Sampler, num_train: int
) -> int:
    """The minibatch size (a full-batch kernel's chunk size), refused under ``torchrun`` where
    the sampler or the split cannot be spread over the ranks."""
    batch_size = min(cfg.batch_size, num_train)
    full_batch = sampler.declaration.full_batch
    if group is not None and full_batch:
        # a full-batch kernel's chunk size is a memory bound, not a statistic: small enough to
        # give every rank its share whatever batch_size says (the UCI protocol's takes all)
        batch_size = min(batch_size, max(num_train // group.world_size, 1))
    distributed.check_supported(group, type(sampler).__name__, full_batch, num_train, batch_size)
    return batch_size


def _check_samples(cfg: DictConfig, run: RunSettings, sampler: Sampler) -> None:
    """Refuse a run of posterior samples in which no epoch would keep one."""
    if not sampler.declaration.injects_noise:
        return
    if not any(run.schedule.collects(e, run.burn_in, run.thin) for e in range(run.epochs)):
        raise ConfigError(
            f"no epoch would keep a sample (epochs={cfg.epochs}, burn_in={cfg.burn_in}, "
            f"thin={cfg.thin}, schedule={cfg.schedule._target_.rsplit('.', 1)[-1]}): "
            f"raise epochs, or {short_run(cfg.epochs, cfg.thin)}"
        )


def _log_run(
    cfg: DictConfig,
    group: distributed.Group | None,
    run: RunSettings,
    sampler: Sampler,
    parameters: int,
    shard: slice,
) -> None:
    log.info(
        "%s on %s: N=%d, n=%d, T=%g, %d steps/epoch, lr %g%s, %d parameters, device %s",
        type(sampler).__name__,
        run.data.name,
        run.data.num_train,
        run.batch_size,
        cfg.temperature,
        run.steps_per_epoch,
        cfg.sampler.lr,
        f" per datum = step {sampler.lr / cfg.temperature:.3g} on U"
        + (f", {sampler.lr:.3g} on U_T" if cfg.temperature != 1 else "")
        if sampler.declaration.step_unit == "per datum"
        else "",
        parameters,
        run.device,
    )
    if group is not None:
        log.info(
            "data-parallel: rank %d of %d holds training points [%d, %d)",
            group.rank,
            group.world_size,
            shard.start,
            shard.stop,
        )


def _check_chains(cfg: DictConfig, group: distributed.Group | None, first: Experiment) -> None:
    """Refuse ``cfg.chains`` chains where they cannot run together."""
    if group is not None:
        raise ConfigError(
            "chains>1 under torchrun is not supported: run the chains as a sweep "
            "(seed=0,1,2,3) or drop torchrun"
        )
    if cfg.pruning:
        raise ConfigError(
            "pruning=true reads one chain's samples: run it with chains=1, or pruning=false"
        )
    _check_memory(first, cfg.chains)


def _check_memory(experiment: Experiment, chains: int) -> None:
    """Refuse ``chains`` whose state would not fit where it lives: counted as four copies of the
    parameters (themselves, their gradient, and up to two sampler buffers: a momentum, a
    preconditioner or a variational scale), the model's activations aside."""
    params = experiment.potential.params
    per_chain = 4 * sum(p.numel() * p.element_size() for p in params)
    if experiment.run.device.type == "cuda":
        free = torch.cuda.mem_get_info(experiment.run.device)[0]
    else:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if per_chain * chains > free:
        raise ConfigError(
            f"chains={chains} needs about {per_chain * chains / 2**30:.2f} GiB for the chains' "
            f"parameters and sampler state ({per_chain / 2**20:.1f} MiB each), and "
            f"{experiment.run.device.type} has {free / 2**30:.2f} GiB free: lower chains"
        )


def _check_reference(cfg: DictConfig, data: Dataset, reference: Tensor | None) -> None:
    if reference is None:
        return
    if data.task != "classification":
        raise ConfigError("reference= compares class probabilities: classification only")
    expected = (data.x_test.shape[0], data.out_features)
    if tuple(reference.shape) != expected:
        raise ConfigError(
            f"reference={cfg.reference} holds predictions of shape {tuple(reference.shape)}, "
            f"but this test set needs {expected}: point reference= at a run on the same dataset"
        )


@torch.no_grad()
def load_initial(potential: Potential, run_directory: str) -> None:
    """Start from the last sample of an earlier run (``init_from=``), e.g. MFVI's mean from an SGD
    solution (Izmailov et al. 2021). The network's parameters must match by name and shape."""
    samples = Path(run_directory) / "samples"
    last = deque((sample for sample, _ in load_samples(samples)), maxlen=1)
    if not last:
        raise StoreError(f"init_from={run_directory}: {samples} holds no samples to start from")
    last = last[0]
    wrong = [
        n for n, p in potential.model_params.items() if n not in last or last[n].shape != p.shape
    ]
    if wrong:
        raise ConfigError(
            f"init_from={run_directory} has no parameters matching this run's {', '.join(wrong)}: "
            "point it at a run of the same model on the same dataset"
        )
    for name, p in sample_tensors(potential.model, potential.likelihood).items():
        if name in last:
            p.copy_(last[name])
