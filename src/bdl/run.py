"""The runner: build an experiment from one config, sample, write the outputs.

Read top to bottom, :func:`run` is the whole story:

1. :func:`build` turns the config into an :class:`Experiment`: the data on the run's device, the
   task (classification or regression, :mod:`bdl.task`), the model, prior and potential, the
   sampler and its schedule, and the random generators. Nothing in it changes while sampling.
2. :class:`Loop` holds everything that does change: the sampler's state, the position in the
   run, the running model average, the curve so far. A checkpoint is a ``Loop`` written out
   (:meth:`Loop.save`), so resuming is loading one and carrying on.
3. :class:`Sampling` runs epochs on a ``Loop``: minibatch steps (or one full-data step for the
   Metropolis kernels), Gibbs steps of the hyperparameters, a sample kept at the epochs the
   schedule collects, checkpoints every ``checkpoint_every`` epochs (by default about once a
   minute) and on SIGTERM or SIGINT, and the outputs at the end (:mod:`bdl.outputs`).

On the CPU a resumed run is bitwise the uninterrupted one: every generator's state, the epoch's
minibatch order and the partial sums of an interrupted epoch are part of the checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from bdl import checkpoint, diagnostics, distributed, outputs, pruning, stability
from bdl.chains import ChainStack, unsupported
from bdl.config import ConfigError, short_run, validate
from bdl.data import Dataset
from bdl.data.augment import random_crop_flip
from bdl.instantiation import instantiate
from bdl.metrics import agreement, pool, total_variation
from bdl.noise import Generator
from bdl.outputs import FINAL_STATUSES, RunDirectory, start_wandb
from bdl.potential import Potential
from bdl.samplers.base import Sampler, SamplerState
from bdl.schedules import Schedule
from bdl.store import StoreError, load_reference, load_samples
from bdl.task import Task

log = logging.getLogger("bdl")

#: A potential above this multiple of its starting value (or of N, if larger) has diverged: no
#: sampler recovers from a jump of six orders of magnitude, and a NaN would follow.
DIVERGENCE_FACTOR = 1e6
#: Draws per chain below which no R-hat is computed: split R-hat needs two halves of two.
MIN_DIAGNOSTIC_DRAWS = 4
#: Seconds of work between checkpoints when ``checkpoint_every`` is not set.
CHECKPOINT_SECONDS = 60.0
#: Config keys that may differ when resuming: where things are, how often to report.
_RESUMABLE_CHANGES = (
    "resume",
    "checkpoint_every",
    "log_every",
    "wandb",
    "device",
    "dataset.root",
    "distributed",
)


class DivergedError(RuntimeError):
    """The chain's potential or parameters became non-finite, or the potential exploded."""


class Interrupted(Exception):
    """SIGTERM or SIGINT: the run was checkpointed (if it had begun) and stopped; ``exit_code``
    is 128 + the signal's number, as a shell reports a process the signal ended."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class Signals:
    """Catches SIGTERM (a cluster's preemption) and SIGINT (Ctrl-C) for the ``with`` block, so
    that the run stops where it can checkpoint; a second signal stops it at once.

    Under submitit (``hydra/launcher=slurm``), SIGUSR2 announces the time limit or a preemption
    and submitit's handler requeues the job and exits: it is caught too, and handed on to
    submitit once the run has stopped and checkpointed."""

    caught: int | None = None

    def __enter__(self) -> Signals:
        signals = [signal.SIGTERM, signal.SIGINT]
        if callable(signal.getsignal(signal.SIGUSR2)):
            signals.append(signal.SIGUSR2)
        self.previous = {s: signal.signal(s, self._on) for s in signals}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        if self.caught == signal.SIGUSR2:
            self.previous[signal.SIGUSR2](signal.SIGUSR2, None)

    def _on(self, signum: int, frame: Any) -> None:
        if self.caught is not None:
            raise KeyboardInterrupt
        self.caught = signum

    def check(self) -> None:
        """Raise :class:`Interrupted` for a signal caught before sampling began."""
        if self.caught is not None:
            name = signal.Signals(self.caught).name
            raise Interrupted(self.caught, f"{name} before sampling began; nothing to resume")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but CUDA is not available here: use device=auto or cpu")
    return torch.device(name)


@torch.no_grad()
def predict(model: nn.Module, likelihood: nn.Module, x: Tensor, chunk: int = 2048) -> Tensor:
    """The predictive of the current parameters on ``x`` (probabilities, or mean and variance)."""
    return torch.cat([likelihood.predict(model(part)) for part in x.split(chunk)])


def named_parameters(potential: Potential) -> dict[str, Tensor]:
    named = dict(potential.model.named_parameters())
    named.update({f"likelihood.{k}": v for k, v in potential.likelihood.named_parameters()})
    return named


def sample_tensors(potential: Potential) -> dict[str, Tensor]:
    """What a posterior sample holds: the parameters, and the likelihood's Gibbs-sampled
    buffers (a noise precision), without which its predictive could not be rebuilt."""
    named = named_parameters(potential)
    named.update({f"likelihood.{k}": v for k, v in potential.likelihood.named_buffers()})
    return named


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
    for name, p in sample_tensors(potential).items():
        if name in last:
            p.copy_(last[name])


# --------------------------------------------------------------------------------------------
# 1. Build


@dataclass
class Experiment:
    """Everything a config builds; fixed while sampling."""

    cfg: DictConfig
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
    #: halve the step during burn-in when the potential climbs (bdl.stability)
    backs_off: bool = False
    #: the potential's stationary rise that bdl.stability measures climbs against, and the
    #: epochs over which it takes the lowest potential
    rise_limit: float = math.inf
    stability_window: int = stability.MIN_WINDOW

    def collects(self, epoch: int) -> bool:
        """Whether the state after (0-based) ``epoch`` is kept as a posterior sample."""
        return self.sampler.injects_noise and self.schedule.collects(epoch, self.burn_in, self.thin)

    def train_chunks(self):
        return zip(
            self.x_train.split(self.batch_size), self.y_train.split(self.batch_size), strict=True
        )

    def predict_test(self) -> Tensor:
        return predict(self.potential.model, self.potential.likelihood, self.x_test).cpu()

    def predict_validation(self) -> Tensor:
        return predict(self.potential.model, self.potential.likelihood, self.x_validation).cpu()


def load_data(cfg: DictConfig) -> Dataset:
    """The dataset of ``cfg``: ``cfg.dataset`` holds its loader's arguments."""
    return instantiate(cfg.dataset)


def build_network(cfg: DictConfig, data: Dataset) -> tuple[nn.Module, nn.Module]:
    """The network of ``cfg`` for ``data``'s shapes, and the likelihood of ``data``'s task."""
    model = instantiate(cfg.model)(input_shape=data.input_shape, out_features=data.out_features)
    return model, Task(data, data.y_test).likelihood(cfg.likelihood)


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
        reference = load_reference(cfg.reference) if cfg.reference else None
        data = load_data(cfg)
        _check_reference(cfg, data, reference)
    else:
        reference, data = like.reference, like.data
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
    if sampler.needs_trained_start and not cfg.init_from:
        raise ConfigError(
            f"{type(sampler).__name__} expands the posterior around a trained network, and this "
            "run would expand it around its random start: train one first (the same command "
            "with sampler=sgd) and give its directory as init_from=<run directory>"
        )
    batch_size = min(cfg.batch_size, data.num_train)
    if sampler.minibatch_noise and batch_size == data.num_train:
        # its step 2D/ΣV would come from the drift of the full gradient along the path: far
        # past the stability limit, a chain that diverges within epochs
        raise ConfigError(
            f"{type(sampler).__name__} samples with the noise of minibatch gradients alone, and "
            f"batch_size={cfg.batch_size} takes all {data.num_train} training points (the UCI "
            "protocol takes full batches): set a smaller batch_size, e.g. batch_size=32 or "
            "protocol=uci_minibatch"
        )
    if group is not None and sampler.full_batch:
        # a full-batch kernel's chunk size is a memory bound, not a statistic: small enough to
        # give every rank its share whatever batch_size says (the UCI protocol's takes all)
        batch_size = min(batch_size, max(data.num_train // group.world_size, 1))
    distributed.check_supported(
        group, type(sampler).__name__, sampler.full_batch, data.num_train, batch_size
    )
    shard = slice(None) if group is None else group.shard(data.num_train, batch_size)
    # A full-batch kernel (HMC) takes one step per epoch; batch_size is then its chunk size.
    steps_per_epoch = 1 if sampler.full_batch else data.num_train // batch_size
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
        cfg=cfg,
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
        # plain ints: a config node's attribute costs ~50 µs, and collects() is asked every epoch
        burn_in=cfg.burn_in,
        thin=cfg.thin,
        gibbs_every=cfg.gibbs_every or steps_per_epoch,
        augment=cfg.protocol.augment,
        reference=reference,
        generators=generators,
        chain=chain,
        x_validation=x_validation,
        validation=None if x_validation is None else Task(data, data.y_validation),
        backs_off=sampler.backs_off and cfg.burn_in > 0,
        rise_limit=stability.rise_limit(sum(p.numel() for p in potential.params)),
        stability_window=stability.window(cfg.burn_in),
    )
    sampler.attach(potential, experiment.train_chunks)  # a Laplace fit reads the training set
    if sampler.injects_noise and not any(map(experiment.collects, range(cfg.epochs))):
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
        f" per datum = step {sampler.lr:.3g} on U" if sampler.lr_per_datum else "",
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
    """The sampler of ``cfg`` on ``potential``'s scale, drawing from ``generator`` (a list: the
    chains' generators, for chains stacked as one)."""
    factory = instantiate(cfg.sampler)
    lr = cfg.sampler.lr
    return factory(
        lr=potential.step_size(lr) if factory.func.lr_per_datum else lr, generator=generator
    )


def build_chains(cfg: DictConfig, group: distributed.Group | None = None) -> list[Experiment]:
    """The experiment of each of the ``cfg.chains`` chains, sharing one copy of the data."""
    first = build(cfg, group)
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


# --------------------------------------------------------------------------------------------
# 2. The loop's state


@dataclass
class Loop:
    """Everything that changes in one chain while sampling. Positions count completed work:
    ``epoch`` epochs are done, and ``step`` steps of the next one (whose minibatch order is
    ``order`` and whose per-step potentials so far are ``potentials``)."""

    sampler: SamplerState
    average: Any
    epoch: int = 0
    step: int = 0
    order: Tensor | None = None
    potentials: list[Tensor] = field(default_factory=list)
    # Metropolis acceptances in the epoch so far: a tensor, so that no step waits for the device
    accepted: Tensor = field(default_factory=lambda: torch.zeros((), dtype=torch.float64))
    tests: int = 0  # Metropolis tests in the epoch so far
    curve: list[dict[str, Any]] = field(default_factory=list)
    accept_rates: list[float] = field(default_factory=list)  # per sampling epoch
    initial_potential: float | None = None  # U at the first step: the divergence yardstick
    #: the mean potentials of the last epochs (bdl.stability's yardstick is their lowest, the
    #: ``level``); during burn-in, the state the chain began the lowest of them in (to return to
    #: when a step proves too large), and the state it began this epoch in (whose potential this
    #: epoch's steps measure)
    recent: list[float] = field(default_factory=list)
    snapshot: dict[str, Tensor] | None = None
    epoch_start: dict[str, Tensor] | None = None
    #: the multiplier on the sampler's step that burn-in settled on (halved at each back-off;
    #: the same in every chain of a run)
    step_scale: float = 1.0
    #: the largest rise of an epoch's potential above ``level`` after burn-in, in rise limits
    rise_max: float = 0.0
    num_samples: int = 0
    # per sample kept: log p(y_i | x_i, θ) of every test point, and the weight probes
    # (bdl.diagnostics)
    log_likelihoods: list[Tensor] = field(default_factory=list)
    probes: list[Tensor] = field(default_factory=list)
    validation: Any = None  # the model average on the validation points, if the data hold some

    _POSITION = (
        "epoch",
        "step",
        "tests",
        "curve",
        "accept_rates",
        "initial_potential",
        "recent",
        "step_scale",
        "rise_max",
        "num_samples",
    )
    _PER_SAMPLE = ("log_likelihoods", "probes")

    @classmethod
    def start(cls, experiment: Experiment) -> Loop:
        loop = cls(
            sampler=experiment.sampler.init(experiment.potential.params),
            average=experiment.task.average(),
            validation=None if experiment.validation is None else experiment.validation.average(),
        )
        if experiment.backs_off:
            loop.snapshot = stability.snapshot(loop.live_state(experiment))
            loop.epoch_start = loop.snapshot
        return loop

    @property
    def level(self) -> float | None:
        return min(self.recent, default=None)

    def live_state(self, experiment: Experiment) -> dict[str, Tensor]:
        """The tensors that a back-off returns to their snapshot (:mod:`bdl.stability`): the
        parameters, the sampler's buffers and the Gibbs-sampled hyperparameters."""
        state = self.sampler
        live = {f"params/{i}": p for i, p in enumerate(state.params)}
        for key, values in state.buffers.items():
            if values is not state.params:
                live.update({f"buffers/{key}/{i}": t for i, t in enumerate(values)})
        live.update({f"potential/{k}": t for k, t in experiment.potential.state_dict().items()})
        return live

    def state(self, experiment: Experiment) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """This chain's tensors and JSON header, for a checkpoint (:meth:`Sampling._checkpoint`)."""
        sampler_tensors, sampler_header = checkpoint.sampler_state(self.sampler)
        tensors = {f"sampler/{k}": t for k, t in sampler_tensors.items()}
        for name, generator in experiment.generators.items():
            tensors[f"generator/{name}"] = generator.get_state()
        tensors.update({f"potential/{k}": t for k, t in experiment.potential.state_dict().items()})
        tensors.update({f"average/{k}": t for k, t in self.average.state_dict().items()})
        if self.validation is not None:
            state = self.validation.state_dict()
            tensors.update({f"validation/{k}": t for k, t in state.items()})
        if self.order is not None:
            tensors["loop/order"] = self.order
        if self.potentials:
            tensors["loop/potentials"] = torch.stack(self.potentials)
        tensors["loop/accepted"] = self.accepted
        for name in self._PER_SAMPLE:
            if getattr(self, name):
                tensors[f"loop/{name}"] = torch.stack(getattr(self, name))
        for name in ("snapshot", "epoch_start"):
            tensors.update({f"{name}/{k}": t for k, t in (getattr(self, name) or {}).items()})
        header = {
            "sampler": sampler_header,
            "loop": {name: getattr(self, name) for name in self._POSITION},
        }
        return tensors, header

    @classmethod
    def restore(
        cls, experiment: Experiment, tensors: dict[str, Tensor], header: dict[str, Any]
    ) -> Loop:
        """The loop :meth:`state` wrote, with the experiment's generators and potential set."""
        loop = cls.start(experiment)
        checkpoint.restore_sampler_state(
            loop.sampler, _prefixed(tensors, "sampler/"), header["sampler"]
        )
        for name, generator in experiment.generators.items():
            generator.set_state(tensors[f"generator/{name}"])
        experiment.potential.load_state_dict(_prefixed(tensors, "potential/"))
        loop.average.load_state_dict(_prefixed(tensors, "average/"))
        if loop.validation is not None:
            loop.validation.load_state_dict(_prefixed(tensors, "validation/"))
        device = experiment.device
        loop.order = tensors["loop/order"].to(device) if "loop/order" in tensors else None
        if "loop/potentials" in tensors:
            loop.potentials = list(tensors["loop/potentials"].to(device).unbind())
        loop.accepted = tensors["loop/accepted"].to(device)
        for name in cls._PER_SAMPLE:
            if f"loop/{name}" in tensors:
                setattr(loop, name, list(tensors[f"loop/{name}"].unbind()))
        for name in ("snapshot", "epoch_start"):
            saved = _prefixed(tensors, f"{name}/")
            setattr(loop, name, {k: t.to(device) for k, t in saved.items()} or None)
        for name, value in header["loop"].items():
            setattr(loop, name, value)
        return loop


def _g(value: float | None) -> str:
    """A potential for a message: 4 significant digits, or "none" before there is one."""
    return "none" if value is None else f"{value:.4g}"


def _prefixed(tensors: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """The entries of ``tensors`` under ``prefix``, without it."""
    return {k[len(prefix) :]: t for k, t in tensors.items() if k.startswith(prefix)}


def resumable_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as flat ``key: value`` pairs, less what a resumed run may change."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        elif not any(prefix[:-1] == k or prefix.startswith(f"{k}.") for k in _RESUMABLE_CHANGES):
            flat[prefix[:-1]] = node

    walk(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), "")
    return flat


def _check_same_config(cfg: DictConfig, header: dict[str, Any], path: Path) -> None:
    saved, now = header["config"], resumable_config(cfg)
    differ = sorted(k for k in saved.keys() | now.keys() if saved.get(k) != now.get(k))
    if differ:
        shown = ", ".join(f"{k} ({saved.get(k)!r} there, {now.get(k)!r} now)" for k in differ[:6])
        raise ConfigError(
            f"{path} belongs to another config: {shown}{' ...' if len(differ) > 6 else ''}. "
            "Resume with the run's own overrides (see .hydra/overrides.yaml there), or start "
            "afresh in a new directory"
        )


# --------------------------------------------------------------------------------------------
# 3. Sampling


class Sampling:
    """Runs the chains of a run, one :class:`Loop` each, to the end: an epoch of every chain
    (stacked as one where :mod:`bdl.chains` can, else in turn), then the next epoch. Writes into
    ``directory`` (under ``torchrun``, only rank 0 writes: the others' ``directory`` is not a
    ``writer``)."""

    def __init__(
        self,
        experiments: list[Experiment],
        directory: RunDirectory,
        loops: list[Loop],
        signals: Signals,
        group: distributed.Group | None = None,
        elapsed_s: float = 0.0,
        wandb_id: str | None = None,
    ) -> None:
        self.experiments = experiments
        self.experiment = experiments[0]  # what the chains share: the config, data and task
        self.directory = directory
        self.loops = loops
        self.cfg = self.experiment.cfg
        self.group = group
        self.stores = directory.open_stores(len(loops))
        if self.stores is not None:  # the rank that writes (every run outside torchrun)
            for store, loop in zip(self.stores, loops, strict=True):
                store.truncate(loop.num_samples)
        self.fields = ["chain"] if len(loops) > 1 else []
        self.fields += ["epoch", "potential", "lr_scale", "num_samples", "test_metric"]
        self.fields += ["wall_time_s", "accept_rate", *self.experiment.potential.hyperparameters()]
        directory.write_curve(self.fields, self._curve())
        self.stack = self._stack() if len(loops) > 1 and self.cfg.vectorise else None
        self.signals = signals
        self.stopped = 0  # the chain a signal stopped
        self.elapsed_before = elapsed_s  # wall time of earlier sessions of this run
        self.wandb_id = wandb_id
        self.started = time.perf_counter()
        self.last_checkpoint = time.perf_counter()

    def _stack(self) -> ChainStack | None:
        """The chains stacked as one (:mod:`bdl.chains`), or None (logged) where they cannot."""
        first = self.experiment
        reason = unsupported(first)
        if reason is not None:
            log.info("the %d chains are stepped in turn: %s", len(self.loops), reason)
            return None
        generators = [experiment.generators["noise"] for experiment in self.experiments]
        sampler = make_sampler(self.cfg, first.potential, generators)
        return ChainStack(self.experiments, self.loops, sampler)

    @property
    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.started

    @property
    def epoch(self) -> int:
        """The epochs that every chain has completed."""
        return min(loop.epoch for loop in self.loops)

    def _curve(self) -> list[dict[str, Any]]:
        """The curve rows of all chains in the order they were written: by epoch, then chain."""
        rows = [row for loop in self.loops for row in loop.curve]
        return sorted(rows, key=lambda row: (row["epoch"], row.get("chain", 0)))

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        self.signals.check()
        wandb_run = None
        if self.directory.writer:
            wandb_run = start_wandb(cfg, self.directory.path, self.wandb_id)
            self.wandb_id = getattr(wandb_run, "id", None)
        progress = Progress(self.experiment, self.epoch, shown=self.directory.writer)
        try:
            while self.epoch < cfg.epochs:
                if not self.step_epoch():
                    self._interrupt()
                row = self._summary_row()
                progress.update(row)
                if wandb_run is not None:
                    wandb_run.log(row)
                if self._checkpoint_due():
                    self._checkpoint()
            self._checkpoint()
            metrics = self._finish()
            if wandb_run is not None:
                wandb_run.summary.update(metrics)
        except DivergedError as error:
            self._write_metrics("diverged", diverged_epoch=self.epoch + 1)
            raise DivergedError(f"{error}; {self._kept()}") from None
        except Interrupted:
            raise
        except BaseException as error:
            with contextlib.suppress(StoreError):  # a full disk: keep the error that came first
                self.directory.write_metrics(
                    {
                        "status": "failed",
                        "epoch": self.epoch,
                        "error": f"{type(error).__name__}: {error}",
                    }
                )
                self._sync_stores()
            raise
        finally:
            progress.close()
            if wandb_run is not None:
                wandb_run.finish()
        return metrics

    def step_epoch(self) -> bool:
        """An epoch of every chain (after a stop mid-epoch, of the chains behind); False if a
        signal stopped a chain first."""
        if self.stack is not None:
            completed = self._stacked_epoch()
        else:
            epoch = self.epoch
            for chain, loop in enumerate(self.loops):
                if loop.epoch == epoch and not self._epoch(chain):
                    self.stopped = chain
                    return False
            completed = True
        if completed:  # a back-off in one chain takes every chain's step down with it
            scale = min(loop.step_scale for loop in self.loops)
            if scale < 1 and self.epoch == self.experiment.burn_in:
                scale /= 2
                log.info(
                    "burn-in over: the step is frozen at %.3g x sampler.lr, half the largest that "
                    "held (a step that burn-in had to back off from sits near its limit)",
                    scale,
                )
            for loop in self.loops:
                loop.step_scale = scale
        return completed

    def _stacked_epoch(self) -> bool:
        """An epoch of all chains stepped as one (their positions are always the same)."""
        exp, stack, first = self.experiment, self.stack, self.loops[0]
        for chain in range(len(self.loops)):
            self._draw_order(chain)
        stack.begin_epoch()
        for i in range(first.step, exp.steps_per_epoch):
            if self._stop_requested():
                stack.sync()
                return False
            t = first.epoch * exp.steps_per_epoch + i
            stack.step(
                stack.closure(i),
                lr_scale=exp.schedule(t) * first.step_scale,
                noise=not exp.schedule.explores(t),
                tune=first.epoch < exp.burn_in,
            )
        stack.sync()
        if self._stop_requested():
            return False
        rows = []
        try:
            for chain in range(len(self.loops)):
                rows.append(self._end_epoch(chain))
        finally:  # one write for all chains' rows; those before a diverged chain's included
            self.directory.append_curve(self.fields, rows)
        return True

    def _draw_order(self, chain: int) -> None:
        """Draw chain ``chain``'s minibatch order for its epoch, unless it has one: a stop caught
        between epochs checkpoints the order already drawn, which must never be drawn twice."""
        exp, loop = self.experiments[chain], self.loops[chain]
        if loop.order is None and not exp.sampler.full_batch:
            loop.order = torch.randperm(
                exp.data.num_train, generator=exp.generators["data"], device=exp.device
            )

    def _epoch(self, chain: int) -> bool:
        """Steps chain ``chain`` to the end of its epoch (from wherever it stopped in it); False
        if a signal stopped it first."""
        exp, loop = self.experiments[chain], self.loops[chain]
        sampler = exp.sampler
        self._draw_order(chain)
        for i in range(loop.step, exp.steps_per_epoch):
            if self._stop_requested():
                return False
            t = loop.epoch * exp.steps_per_epoch + i
            loop.sampler = sampler.step(
                loop.sampler,
                self._closure(chain, i),
                lr_scale=exp.schedule(t) * loop.step_scale,
                noise=not exp.schedule.explores(t),
                tune=loop.epoch < exp.burn_in,
            )
            info = loop.sampler.info
            loop.potentials.append(info["potential"])
            if loop.initial_potential is None:
                loop.initial_potential = info["potential"].item()
            if "accepted" in info:  # this step made a Metropolis test
                loop.accepted = loop.accepted + info["accepted"].double().mean()
                loop.tests += 1
            if (t + 1) % exp.gibbs_every == 0 and exp.potential.has_gibbs_step:
                exp.potential.gibbs_step(exp.generators["gibbs"], exp.train_chunks)
                loop.sampler.buffers.pop("grad", None)  # U changed: a kernel's cached ∇U is stale
            loop.step = i + 1
        if self._stop_requested():
            return False
        self.directory.append_curve(self.fields, [self._end_epoch(chain)])
        return True

    def _stop_requested(self) -> bool:
        """Whether a signal asks to stop; under ``torchrun``, whether any rank caught one, so
        that all ranks stop at the same step."""
        caught = self.signals.caught is not None
        return caught if self.group is None else self.group.any(caught)

    def _closure(self, chain: int, i: int):
        exp = self.experiments[chain]
        if exp.sampler.full_batch:
            return exp.potential.full_closure(exp.train_chunks)
        index = self.loops[chain].order[i * exp.batch_size : (i + 1) * exp.batch_size]
        x, y = exp.x_train.index_select(0, index), exp.y_train.index_select(0, index)
        if exp.augment:
            x = random_crop_flip(x, exp.generators["data"])
        return exp.potential.closure(x, y, exp.sampler.prior_weight(i, exp.steps_per_epoch))

    def _end_epoch(self, chain: int) -> dict[str, Any]:
        """Close chain ``chain``'s epoch (divergence check, the sample kept); its curve row,
        which the caller writes."""
        exp, loop = self.experiments[chain], self.loops[chain]
        epoch = loop.epoch
        mean_potential = torch.stack(loop.potentials).double().sum().item() / exp.steps_per_epoch
        self._check_stability(chain, mean_potential)
        if exp.collects(epoch):
            self._collect(chain, epoch)
        accept_rate = loop.accepted.item() / loop.tests if loop.tests else None
        if accept_rate is not None and epoch >= exp.burn_in:
            loop.accept_rates.append(accept_rate)
        row = {"chain": chain} if len(self.loops) > 1 else {}
        row |= {
            "epoch": epoch + 1,
            # a backed-off epoch's potential may be infinite, which JSON and the curve cannot hold
            "potential": mean_potential if math.isfinite(mean_potential) else None,
            "lr_scale": exp.schedule((epoch + 1) * exp.steps_per_epoch - 1) * loop.step_scale,
            "num_samples": loop.average.count,
            "test_metric": self._test_metric(chain),
            "wall_time_s": round(self.elapsed, 3),
            "accept_rate": "" if accept_rate is None else accept_rate,
        }
        row.update({k: v.item() for k, v in exp.potential.hyperparameters().items()})
        loop.curve.append(row)
        loop.epoch, loop.step, loop.order = epoch + 1, 0, None
        loop.potentials, loop.accepted, loop.tests = [], torch.zeros_like(loop.accepted), 0
        return row

    def _test_metric(self, chain: int) -> float | str:
        """The curve's test metric: the running model average's; for an optimiser or a
        variational fit, which keep no samples along the way, its current point's (the lines
        of SGD in Chen et al.'s Fig. 3); blank in burn-in."""
        exp, loop = self.experiments[chain], self.loops[chain]
        if loop.average.count:
            return exp.task.headline_value(loop.average)
        if exp.sampler.injects_noise:
            return ""
        current = exp.task.average()
        current.update(exp.predict_test())
        return exp.task.headline_value(current)

    def _summary_row(self) -> dict[str, Any]:
        """The epoch's curve row of a run of one chain; of several, the chains pooled: mean
        potential and accept rate, and the headline metric of the model average over all."""
        rows = [loop.curve[-1] for loop in self.loops]
        if len(rows) == 1:
            return rows[0]
        average = pool([loop.average for loop in self.loops])
        rates = [row["accept_rate"] for row in rows if row["accept_rate"] != ""]
        potentials = [row["potential"] for row in rows if row["potential"] is not None]
        return {
            "epoch": rows[0]["epoch"],
            "potential": sum(potentials) / len(potentials) if potentials else None,
            "lr_scale": rows[0]["lr_scale"],
            "num_samples": average.count,
            "test_metric": self.experiment.task.headline_value(average) if average.count else "",
            "wall_time_s": rows[-1]["wall_time_s"],
            "accept_rate": sum(rates) / len(rates) if rates else "",
        }

    def _check_stability(self, chain: int, mean_potential: float) -> None:
        """Hold chain ``chain``'s epoch against its level, the lowest mean potential of its last
        epochs (:mod:`bdl.stability`): during burn-in, a climb or a non-finite state returns the
        chain to its snapshot and halves the run's step; after burn-in (and for kernels that do
        not back off), a climb past :data:`~bdl.stability.DIVERGENCE_LIMITS` limits, or a
        non-finite state, is a divergence."""
        exp, loop = self.experiments[chain], self.loops[chain]
        finite = torch.stack(torch._foreach_norm(loop.sampler.params)).isfinite().all().item()
        finite = finite and math.isfinite(mean_potential)
        level = loop.level
        # the first epoch sets the yardstick; a non-finite one is an infinite rise
        rise = math.inf if not finite else 0.0 if level is None else mean_potential - level
        burning_in = exp.backs_off and loop.epoch < exp.burn_in
        if burning_in and not rise <= exp.rise_limit:  # True for NaN
            self._back_off(chain, mean_potential)
            return
        if finite:
            if burning_in and (level is None or mean_potential <= level):
                loop.snapshot = loop.epoch_start
            loop.recent = [*loop.recent, mean_potential][-exp.stability_window :]
        if burning_in and loop.epoch + 1 < exp.burn_in:
            loop.epoch_start = stability.snapshot(loop.live_state(exp))
        else:  # the step is frozen: nothing to return to
            loop.snapshot = loop.epoch_start = None
        if exp.sampler.injects_noise:
            if finite and loop.epoch >= exp.burn_in:
                loop.rise_max = max(loop.rise_max, rise / exp.rise_limit)
            limit = stability.DIVERGENCE_LIMITS * exp.rise_limit
            diverged = not rise <= limit
            what = (
                f"U per step rose {rise:.4g} above its lowest of the last "
                f"{exp.stability_window} epochs, {_g(level)}: more than "
                f"{stability.DIVERGENCE_LIMITS:g} x {exp.rise_limit:.4g}, the rise a stationary "
                "chain exceeds once in 10^9 epochs"
            )
        else:  # an optimiser's or a variational fit's objective: only an explosion is certain
            limit = DIVERGENCE_FACTOR * max(abs(loop.initial_potential), exp.data.num_train)
            diverged = not mean_potential <= limit
            what = f"U per step = {mean_potential:.4g}, over {DIVERGENCE_FACTOR:.0e} x its start"
        if finite and not diverged:
            return
        if not finite:
            what = "its parameters or potential are not finite"
        fix = exp.sampler.divergence_fix(loop.sampler)
        if loop.step_scale < 1:
            fix += (
                f" (burn-in had already taken the step down to {loop.step_scale:.3g} x "
                f"sampler.lr={self.cfg.sampler.lr:g}; try "
                f"sampler.lr={self.cfg.sampler.lr * loop.step_scale / 4:.3g} or a longer burn_in)"
            )
        raise DivergedError(
            f"{self._name(chain)} diverged in epoch {loop.epoch + 1} ({what}). {fix}"
        )

    def _name(self, chain: int) -> str:
        return f"chain {chain}" if len(self.loops) > 1 else "the chain"

    def _back_off(self, chain: int, mean_potential: float) -> None:
        """Return chain ``chain`` to its snapshot and halve its step (every chain's, at the
        end of the epoch)."""
        exp, loop = self.experiments[chain], self.loops[chain]
        if loop.step_scale <= 2.0**-stability.MAX_BACKOFFS:
            lr = self.cfg.sampler.lr
            raise DivergedError(
                f"{self._name(chain)} still climbs in epoch {loop.epoch + 1} of burn-in after "
                f"the step was halved {stability.MAX_BACKOFFS} times, to {loop.step_scale:.3g} x "
                f"sampler.lr={lr:g} (U per step {mean_potential:.4g}, lowest {_g(loop.level)}): "
                f"start from a smaller step, sampler.lr={lr * loop.step_scale / 10:.3g}, and if "
                "that climbs too, check the model and data with sampler=hmc"
            )
        stability.restore(loop.live_state(exp), loop.snapshot)
        exp.sampler.restart(loop.sampler)
        loop.epoch_start = loop.snapshot
        loop.step_scale /= 2
        log.info(
            "epoch %d%s: U per step %.4g, above its lowest (%s) by more than %.4g: back to "
            "that point, step "
            "halved to %.3g x sampler.lr (burn-in adapts it; it is frozen from epoch %d on)",
            loop.epoch + 1,
            f", chain {chain}" if len(self.loops) > 1 else "",
            mean_potential,
            _g(loop.level),
            exp.rise_limit,
            loop.step_scale,
            exp.burn_in + 1,
        )

    def _collect(self, chain: int, epoch: int) -> None:
        exp, loop = self.experiments[chain], self.loops[chain]
        prediction = exp.predict_test()
        loop.average.update(prediction)
        loop.log_likelihoods.append(exp.task.log_likelihoods(prediction).float())
        loop.probes.append(diagnostics.weight_probes(named_parameters(exp.potential).values()))
        if loop.validation is not None:
            loop.validation.update(exp.predict_validation())
        if self.stores is not None:
            self.stores[chain].add(sample_tensors(exp.potential), epoch=epoch)
        loop.num_samples = loop.average.count

    def _checkpoint_due(self) -> bool:
        every = self.cfg.checkpoint_every
        if every is not None:
            return self.epoch % every == 0
        return time.perf_counter() - self.last_checkpoint >= CHECKPOINT_SECONDS

    def _checkpoint(self) -> None:
        self.elapsed_before = self.elapsed
        self.started = self.last_checkpoint = time.perf_counter()
        if not self.directory.writer:
            return
        self._sync_stores()  # the samples the checkpoint counts are on disk before it
        tensors, chains = {}, []
        for chain, (experiment, loop) in enumerate(zip(self.experiments, self.loops, strict=True)):
            chain_tensors, header = loop.state(experiment)
            tensors.update({f"chain_{chain}/{k}": t for k, t in chain_tensors.items()})
            chains.append(header)
        header = {
            "config": resumable_config(self.cfg),
            "elapsed_s": self.elapsed_before,
            "wandb_id": self.wandb_id,
            "chains": chains,
        }
        checkpoint.save(self.directory.checkpoint, tensors, header)

    def _interrupt(self) -> None:
        # a rank that caught nothing stops because another did: torchrun passes on SIGTERM
        signum = self.signals.caught or signal.SIGTERM
        chain, loop = self.stopped, self.loops[self.stopped]
        name = signal.Signals(signum).name
        self._checkpoint()
        where = f"epoch {loop.epoch + 1} of {self.cfg.epochs}"
        status = {"status": "interrupted", "epoch": loop.epoch, "step": loop.step}
        if len(self.loops) > 1 and self.stack is None:  # stacked chains stop at the same step
            where += f", chain {chain}"
            status["chain"] = chain
        if loop.step:
            where += f", after step {loop.step} of {self.experiments[chain].steps_per_epoch}"
        self.directory.write_metrics({**status, "signal": name})
        raise Interrupted(
            signum,
            f"{name}: stopped in {where}; checkpoint {self.directory.checkpoint}. Resume with: "
            f"{resume_command(self.directory.path)}",
        )

    def _kept(self) -> str:
        samples = self.directory.path / "samples"
        kept = sum(loop.num_samples for loop in self.loops)
        return f"the {kept} samples taken before are kept in {samples}"

    def _finish(self) -> dict[str, Any]:
        for chain, (experiment, loop) in enumerate(zip(self.experiments, self.loops, strict=True)):
            for _ in experiment.sampler.final_samples(loop.sampler):
                self._collect(chain, self.cfg.epochs - 1)
        metrics = self._write_metrics("completed")
        log.info("%s", outputs.summary_table(metrics))
        if metrics["status"] == "unsound":
            log.error("NOT A RESULT: %s; %s", metrics["error"], self._kept())
        for warning in metrics.get("warnings", []):
            log.warning("WARNING: %s", warning)
        if self.cfg.pruning and self.stores is not None:
            self._pruning()
        log.info("run directory: %s", self.directory.path)
        return metrics

    def _write_metrics(self, status: str, **extra: Any) -> dict[str, Any]:
        exp = self.experiment
        average = pool([loop.average for loop in self.loops])
        metrics: dict[str, Any] = {"status": status, **extra}
        if average.count:
            metrics.update(average.metrics(exp.task.y_test))
            predictive = average.predictive()
            if exp.reference is not None:
                metrics["agreement"] = agreement(predictive, exp.reference)
                metrics["total_variation"] = total_variation(predictive, exp.reference)
            self.directory.write_predictive(predictive, exp.task.targets())
        if exp.validation is not None and average.count:
            validation = pool([loop.validation for loop in self.loops])
            for key, value in validation.metrics(exp.validation.y_test).items():
                metrics[key.replace("test_", "val_", 1)] = value
        metrics.update(
            num_samples=average.count,
            epochs=self.cfg.epochs,
            grad_evals=sum(loop.sampler.grad_evals for loop in self.loops),
            wall_time_s=round(self.elapsed, 3),
        )
        rates = [rate for loop in self.loops for rate in loop.accept_rates]
        if rates:
            metrics["accept_rate"] = sum(rates) / len(rates)
        if exp.backs_off:
            metrics["step_scale"] = self.loops[0].step_scale
        if exp.sampler.injects_noise:
            metrics["rise_max"] = max(loop.rise_max for loop in self.loops)
        if len(self.loops) > 1:
            metrics["chains"] = len(self.loops)
            self._write_chain_metrics()
        metrics.update(self._diagnostics())
        if status == "completed" and average.count:
            self._judge(metrics)
        self._sync_stores()
        self.directory.write_metrics(metrics)
        return metrics

    def _judge(self, metrics: dict[str, Any]) -> None:
        """Set ``metrics``' verdict: ``unsound`` (with the ``error``) where the trivial predictor
        does better on held-out data; ``warnings`` for what is a judgement, not a certainty."""
        task = self.experiment.task
        trivial = metrics["trivial"] = task.trivial_metrics()
        worse = task.worse_than(metrics, trivial, (task.headline,))
        if worse:
            metrics["status"] = "unsound"
            metrics["error"] = (
                f"the posterior predicts worse than ignoring the inputs: {worse[0]} (the trivial "
                "predictor's in brackets). Try another sampler, a smaller sampler.lr or more "
                "epochs"
            )
        warnings = [diagnostics.warning(metrics)]
        for density in task.worse_than(metrics, trivial, (task.calibration,)):
            warnings.append(
                f"the predictive density is worse than ignoring the inputs: {density} (the "
                "trivial predictor's in brackets); its point predictions beat it, its spread "
                "does not (an overconfident fit)"
            )
        if len(self.loops) == 1 and self.experiment.sampler.injects_noise:
            warnings.append(
                "R-hat needs chains>=2: one chain cannot show that it has converged (chains=4)"
            )
        metrics["warnings"] = [w for w in warnings if w is not None]

    def _sync_stores(self) -> None:
        for store in self.stores or []:
            store.sync()

    def _write_chain_metrics(self) -> None:
        """``chains.csv``: each chain's own model average, work and accept rate."""
        task, rows = self.experiment.task, []
        for chain, loop in enumerate(self.loops):
            row: dict[str, Any] = {"chain": chain, "num_samples": loop.average.count}
            if loop.average.count:
                row.update(loop.average.metrics(task.y_test))
            row["grad_evals"] = loop.sampler.grad_evals
            if loop.accept_rates:
                row["accept_rate"] = sum(loop.accept_rates) / len(loop.accept_rates)
            rows.append(row)
        fields = list(dict.fromkeys(key for row in rows for key in row))
        self.directory.write_table(outputs.CHAINS, fields, rows)

    def _diagnostics(self) -> dict[str, float]:
        """R-hat and ESS over the chains' first draws (as many as the shortest chain has), in
        function space per test point (``diagnostics.csv``) and on the weight probes."""
        draws = min(len(loop.log_likelihoods) for loop in self.loops)
        if draws < MIN_DIAGNOSTIC_DRAWS:
            return {}
        pointwise = np.stack(
            [torch.stack(loop.log_likelihoods[:draws]).numpy() for loop in self.loops]
        )
        probes = np.stack([torch.stack(loop.probes[:draws]).numpy() for loop in self.loops])
        metrics, table = diagnostics.summarise(pointwise, probes)
        rows = [
            dict(zip(table, values, strict=True)) for values in zip(*table.values(), strict=True)
        ]
        self.directory.write_table(diagnostics.FILE, list(table), rows)
        return metrics

    def _pruning(self) -> None:
        """``pruning.csv`` and ``pruning.png``: the model average's test metric as the weights
        with the lowest signal-to-noise ratio are removed (:mod:`bdl.pruning`); one chain's.
        ``signal_to_noise.{csv,png}``: the distribution of σ and of the ratio it ranked by."""
        exp = self.experiment
        live = named_parameters(exp.potential)
        moments = exp.sampler.posterior_moments(self.loops[0].sampler)
        if moments is not None:
            moments = tuple(dict(zip(live, m, strict=True)) for m in moments)
        rows, mean, std = pruning.curve_from_store(
            self.stores[0].directory,
            live,
            list(exp.potential.model_params),
            moments,
            exp.predict_test,
            exp.task.pruning_score,
            self.cfg.pruning_samples,
        )
        path = pruning.write_curve(self.directory.path, rows, exp.task.pruning_metric)
        pruning.write_signal_to_noise(self.directory.path, mean, std)
        log.info(
            "pruning curve in %s: %s",
            path,
            ", ".join(f"{r['fraction_removed']:.0%} {r['score']:.4f}" for r in rows),
        )


class Progress:
    """A progress bar on a terminal; plain lines every ``log_every`` epochs otherwise (logs, CI).
    Not ``shown`` on the ranks of a run under ``torchrun`` but rank 0."""

    def __init__(self, experiment: Experiment, epoch: int, shown: bool = True) -> None:
        self.experiment = experiment
        self.cfg = experiment.cfg
        self.shown = shown
        self.bar = None
        if shown and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=self.cfg.epochs, initial=epoch, unit="epoch", dynamic_ncols=True)

    def update(self, row: dict[str, Any]) -> None:
        exp, epoch = self.experiment, row["epoch"]
        potential = row["potential"]
        parts = {"U/N": "inf" if potential is None else f"{potential / exp.data.num_train:.4g}"}
        if row["num_samples"]:
            parts[exp.task.headline] = f"{row['test_metric']:.4f}"
        else:
            parts["phase"] = "burn-in" if exp.sampler.injects_noise else "optimising"
        if row["accept_rate"] != "":
            parts["accept"] = f"{row['accept_rate']:.2f}"
        if self.bar is not None:
            self.bar.set_postfix(parts, refresh=False)
            self.bar.update(1)
        elif self.shown and (epoch % self.cfg.log_every == 0 or epoch == self.cfg.epochs):
            log.info(
                "epoch %d/%d  %s  samples %d",
                epoch,
                self.cfg.epochs,
                "  ".join(f"{k} {v}" for k, v in parts.items()),
                row["num_samples"],
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def resume_command(directory: Path) -> str:
    """The command line that continues the run in ``directory`` (under ``torchrun`` as it ran:
    the same number of ranks per node, and on several nodes ``torchrun``'s own options)."""
    from hydra.core.hydra_config import HydraConfig

    overrides = []
    if HydraConfig.initialized():
        overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith("resume=")]
    command = [_program(), *overrides, f"hydra.run.dir={directory}", "resume=true"]
    size = distributed.world_size()
    if size > 1:
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", size))
        nodes = "--standalone" if per_node == size else f"--nnodes={size // per_node} ..."
        command = ["torchrun", nodes, f"--nproc_per_node={per_node}", "--no-python", *command]
    return " ".join(command)


def _program() -> str:
    """``bdl-run`` as the shell finds it; the path it was started by where the shell would not
    find that one (a virtual environment not activated), so that the command runs as printed."""
    started, found = Path(sys.argv[0]), shutil.which("bdl-run")
    if started.name != "bdl-run" or (found and Path(found).resolve() == started.resolve()):
        return "bdl-run"
    return str(started.resolve())


# --------------------------------------------------------------------------------------------


def run(cfg: DictConfig, directory: str | Path = ".") -> dict[str, Any]:
    """Run the experiment ``cfg`` into ``directory`` (continuing it there if ``cfg.resume``);
    returns the metrics written to ``metrics.json``. Under ``torchrun`` every rank runs this
    (:mod:`bdl.distributed`): rank 0 owns ``directory``, the others only read it on resume."""
    validate(cfg)  # before anything is written: a typo leaves no trace
    group = distributed.join(cfg.distributed.backend, resolve_device(cfg.device.name))
    output = RunDirectory(directory, writer=group is None or group.leader)
    try:
        with Signals() as signals:
            distributed.on_leader(group, lambda: output.claim(cfg, cfg.resume))
            try:
                return _run_in(cfg, output, signals, group)
            finally:
                output.release()
    finally:
        if group is not None:
            group.close()


def _run_in(
    cfg: DictConfig, output: RunDirectory, signals: Signals, group: distributed.Group | None
) -> dict[str, Any]:
    log.info("run directory: %s", output.path)
    if not cfg.resume or not output.checkpoint.exists():  # claim started it afresh
        experiments = build_chains(cfg, group)
        loops = [Loop.start(experiment) for experiment in experiments]
        return Sampling(experiments, output, loops, signals, group).run()
    tensors, header = checkpoint.load(output.checkpoint)
    _check_same_config(cfg, header, output.checkpoint)
    if output.read_status() in FINAL_STATUSES:
        # a requeued job whose run had ended (perhaps killed on its way out): nothing to redo
        log.info("the run in %s has completed; nothing to resume", output.path)
        return output.read_metrics()
    experiments = build_chains(cfg, group)
    loops = [
        Loop.restore(experiment, _prefixed(tensors, f"chain_{k}/"), header["chains"][k])
        for k, experiment in enumerate(experiments)
    ]
    log.info("resuming at epoch %d, step %d", loops[0].epoch + 1, loops[0].step)
    sampling = Sampling(
        experiments, output, loops, signals, group, header["elapsed_s"], header["wandb_id"]
    )
    return sampling.run()
