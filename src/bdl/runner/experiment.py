"""Building a run: the config turned into an `Experiment` per chain, fixed while sampling.

`build_chains` builds every chain of a run: the data (read once and shared), the task, the
network initialised from the chain's seed, prior and potential, the sampler (the step converted to
its unit, `bdl.samplers.base.Declaration`) and its schedule, and the random generators.
Every refusal a config can earn from what it builds (a reference of the wrong shape, a sampler that
needs a trained start, a run too short to keep a sample, chains that do not fit in memory) is
raised here, before the first step.
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


@dataclass
class Experiment:
    """Everything a config builds for one chain, resolved (plain values, not config nodes: a
    node's attribute costs tens of microseconds, and the loop reads these every step); fixed
    while sampling."""

    device: torch.device
    data: Dataset
    task: Task
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    potential: Potential
    sampler: Sampler
    schedule: Schedule
    batch_size: int
    steps_per_epoch: int
    burn_in: int
    thin: int
    gibbs_every: int
    augment: bool
    reference: Tensor | None
    #: data: minibatch order and augmentation; noise: the sampler's; gibbs: hyperparameters'
    generators: dict[str, torch.Generator]
    chain: int = 0
    #: held-out training points (MNIST's last 10,000 images), scored as val_* metrics
    x_validation: Tensor | None = None
    validation: Task | None = None
    #: halve the step during burn-in when the potential climbs (bdl.runner.stability)
    backs_off: bool = False
    #: the potential's stationary rise that bdl.runner.stability measures climbs against, and the
    #: epochs over which it takes the lowest potential
    rise_limit: float = math.inf
    stability_window: int = stability.MIN_WINDOW
    epochs: int = 1
    #: the config's sampler.lr, in the sampler's own unit (for messages that suggest another)
    lr: float = 1.0
    #: checkpoint every this many epochs; None: about once a minute
    checkpoint_every: int | None = None
    log_every: int = 1
    #: the samples a pruning curve averages over; None: no pruning curve
    pruning_samples: int | None = None
    #: step the chains stacked as one where they can (bdl.runner.steppers); every chain draws the
    #: first chain's minibatch order
    vectorise: bool = True
    shared_minibatches: bool = False
    #: the out-of-distribution set (``ood=``) and its inputs, whose detection metrics.json reports
    ood: str | None = None
    x_ood: Tensor | None = None

    def collects(self, epoch: int) -> bool:
        """Whether the state after (0-based) ``epoch`` is kept as a posterior sample."""
        return self.sampler.declaration.injects_noise and self.schedule.collects(
            epoch, self.burn_in, self.thin
        )

    def train_chunks(self):
        return zip(
            self.x_train.split(self.batch_size), self.y_train.split(self.batch_size), strict=True
        )

    def predict_test(self) -> Tensor:
        return predict(self.potential.model, self.potential.likelihood, self.x_test).cpu()

    def predict_validation(self) -> Tensor:
        return predict(self.potential.model, self.potential.likelihood, self.x_validation).cpu()


def stream_seed(seed: int, stream: int) -> int:
    """The seed of random stream ``stream`` of the chain seeded ``seed``, hashed from both by
    numpy's ``SeedSequence``: chain ``k`` of a run is seeded ``seed + k`` (the run ``seed=seed+k``
    of one chain), and seeds offset by the stream's number would make one chain's sampler noise
    the next chain's initial weights."""
    return int(np.random.SeedSequence([seed, stream]).generate_state(1, np.uint64)[0])


def build(
    cfg: DictConfig,
    group: distributed.Group | None = None,
    chain: int = 0,
    like: Experiment | None = None,
) -> Experiment:
    """The experiment ``cfg`` (validated) describes for its chain ``chain``: data read (or those
    of ``like``, another chain's experiment), model initialised from ``seed + chain``. Under
    ``torchrun`` (``group``), the training set is this rank's shard of it and the potential sums
    its data term over the ranks."""
    device = resolve_device(cfg.device.name) if group is None else group.device
    seed = cfg.seed + chain
    torch.manual_seed(seed)

    if like is None:
        if cfg.ood:
            check_name(cfg.ood)  # before the data are read
        reference = load_reference(cfg.reference) if cfg.reference else None
        data = load_data(cfg)
        _check_reference(cfg, data, reference)
        x_ood = ood_inputs(cfg.ood, data, cfg.dataset).to(device) if cfg.ood else None
    else:
        reference, data, x_ood = like.reference, like.data, like.x_ood
    task = Task(data, data.y_test)
    model, likelihood = build_network(cfg, data)
    potential = Potential(
        model.to(device),
        likelihood.to(device),
        instantiate(cfg.prior),
        data.num_train,
        cfg.temperature,
        reduce=None if group is None else group.all_reduce,
        compile=cfg.compile,
    )
    if cfg.init_from:
        load_initial(potential, cfg.init_from)

    # shared_minibatches: every chain draws the first chain's minibatch orders
    data_seed = cfg.seed if cfg.shared_minibatches else seed
    streams = (("data", data_seed), ("noise", seed), ("gibbs", seed))
    generators = {
        name: torch.Generator(device).manual_seed(stream_seed(root, stream))
        for stream, (name, root) in enumerate(streams)
    }
    sampler = make_sampler(cfg, potential, generators["noise"])
    declaration = sampler.declaration
    if declaration.needs_trained_start and not cfg.init_from:
        raise ConfigError(
            f"{type(sampler).__name__} expands the posterior around a trained network, and this "
            "run would expand it around its random start: train one first (the same command "
            "with sampler=sgd) and give its directory as init_from=<run directory>"
        )
    batch_size = min(cfg.batch_size, data.num_train)
    if declaration.minibatch_noise and batch_size == data.num_train:
        # its step 2D/ΣV would come from the drift of the full gradient along the path: far
        # past the stability limit, a chain that diverges within epochs
        raise ConfigError(
            f"{type(sampler).__name__} samples with the noise of minibatch gradients alone, and "
            f"batch_size={cfg.batch_size} takes all {data.num_train} training points (the UCI "
            "protocol takes full batches): set a smaller batch_size, e.g. batch_size=32 or "
            "protocol=uci_minibatch"
        )
    if group is not None and declaration.full_batch:
        # a full-batch kernel's chunk size is a memory bound, not a statistic: small enough to
        # give every rank its share whatever batch_size says (the UCI protocol's takes all)
        batch_size = min(batch_size, max(data.num_train // group.world_size, 1))
    distributed.check_supported(
        group, type(sampler).__name__, declaration.full_batch, data.num_train, batch_size
    )
    shard = slice(None) if group is None else group.shard(data.num_train, batch_size)
    # A full-batch kernel (HMC) takes one step per epoch; batch_size is then its chunk size.
    steps_per_epoch = 1 if declaration.full_batch else data.num_train // batch_size
    schedule = instantiate(cfg.schedule)(
        total_steps=cfg.epochs * steps_per_epoch, steps_per_epoch=steps_per_epoch
    )
    if like is None:
        host = (data.x_train[shard], data.y_train[shard], data.x_test, data.x_validation)
        on_device = [None if t is None else t.to(device) for t in host]
    else:  # the chains share one copy of the data on the device
        on_device = [like.x_train, like.y_train, like.x_test, like.x_validation]
    x_train, y_train, x_test, x_validation = on_device
    experiment = Experiment(
        device=device,
        data=data,
        task=task,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        potential=potential,
        sampler=sampler,
        schedule=schedule,
        batch_size=batch_size,
        steps_per_epoch=steps_per_epoch,
        burn_in=cfg.burn_in,
        thin=cfg.thin,
        gibbs_every=cfg.gibbs_every or steps_per_epoch,
        augment=cfg.protocol.augment,
        reference=reference,
        generators=generators,
        chain=chain,
        x_validation=x_validation,
        validation=None if x_validation is None else Task(data, data.y_validation),
        backs_off=declaration.backs_off and cfg.burn_in > 0,
        rise_limit=stability.rise_limit(sum(p.numel() for p in potential.params)),
        stability_window=stability.window(cfg.burn_in),
        epochs=cfg.epochs,
        lr=cfg.sampler.lr,
        checkpoint_every=cfg.checkpoint_every,
        log_every=cfg.log_every,
        pruning_samples=cfg.pruning_samples if cfg.pruning else None,
        vectorise=cfg.vectorise,
        shared_minibatches=cfg.shared_minibatches,
        ood=cfg.ood,
        x_ood=x_ood,
    )
    sampler.attach(potential, experiment.train_chunks)  # a Laplace fit reads the training set
    sampler.plan_burn_in(cfg.burn_in * steps_per_epoch)
    if declaration.injects_noise and not any(map(experiment.collects, range(cfg.epochs))):
        raise ConfigError(
            f"no epoch would keep a sample (epochs={cfg.epochs}, burn_in={cfg.burn_in}, "
            f"thin={cfg.thin}, schedule={cfg.schedule._target_.rsplit('.', 1)[-1]}): "
            f"raise epochs, or {short_run(cfg.epochs, cfg.thin)}"
        )
    if chain:
        return experiment
    log.info(
        "%s on %s: N=%d, n=%d, T=%g, %d steps/epoch, lr %g%s, %d parameters, device %s",
        type(sampler).__name__,
        data.name,
        data.num_train,
        batch_size,
        cfg.temperature,
        steps_per_epoch,
        cfg.sampler.lr,
        f" per datum = step {sampler.lr:.3g} on U" if declaration.step_unit == "per datum" else "",
        sum(p.numel() for p in potential.params),
        device,
    )
    if group is not None:
        log.info(
            "data-parallel: rank %d of %d holds training points [%d, %d)",
            group.rank,
            group.world_size,
            shard.start,
            shard.stop,
        )
    return experiment


def make_sampler(cfg: DictConfig, potential: Potential, generator: Generator) -> Sampler:
    """The sampler of ``cfg``, its step converted from the unit it declares to ``potential``'s
    scale, drawing from ``generator`` (a list: the chains' generators, for chains stacked as
    one)."""
    unit = resolve(cfg.sampler).declaration.step_unit
    lr = potential.step_size(cfg.sampler.lr) if unit == "per datum" else cfg.sampler.lr
    return instantiate(cfg.sampler)(lr=lr, generator=generator)


def build_chains(
    cfg: DictConfig, group: distributed.Group | None = None, resumed_threads: int | None = None
) -> list[Experiment]:
    """The experiment of each of the ``cfg.chains`` chains, sharing one copy of the data, with
    torch's thread count set (`bdl.runner.threads`; ``resumed_threads``: the count a resumed run's
    checkpoint recorded, kept under ``threads=auto``)."""
    first = build(cfg, group)
    parameters = sum(p.numel() for p in first.potential.params)
    threads.apply(resumed_threads or cfg.threads, parameters, first.device)
    if cfg.chains > 1:
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
        log.info("%d chains, seeded %d..%d", cfg.chains, cfg.seed, cfg.seed + cfg.chains - 1)
    return [first, *(build(cfg, group, k, like=first) for k in range(1, cfg.chains))]


def _check_memory(experiment: Experiment, chains: int) -> None:
    """Refuse ``chains`` whose state would not fit where it lives: counted as four copies of the
    parameters (themselves, their gradient, and up to two sampler buffers: a momentum, a
    preconditioner or a variational scale), the model's activations aside."""
    params = experiment.potential.params
    per_chain = 4 * sum(p.numel() * p.element_size() for p in params)
    if experiment.device.type == "cuda":
        free = torch.cuda.mem_get_info(experiment.device)[0]
    else:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if per_chain * chains > free:
        raise ConfigError(
            f"chains={chains} needs about {per_chain * chains / 2**30:.2f} GiB for the chains' "
            f"parameters and sampler state ({per_chain / 2**20:.1f} MiB each), and "
            f"{experiment.device.type} has {free / 2**30:.2f} GiB free: lower chains"
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
