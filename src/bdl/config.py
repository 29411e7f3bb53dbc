"""The root config's schema: a typo or a wrong type fails at composition, before any data is read.

Hydra merges the YAML files of ``conf/`` into :class:`RunConfig` (registered as ``base_config``),
so unknown top-level keys and values of the wrong type are rejected by OmegaConf with the key's
name. :func:`validate` adds the range checks a type cannot express. The option groups (``model``,
``prior``, ``sampler``, ``dataset``, ``schedule``) are validated by the constructors they name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf


class ConfigError(ValueError):
    """A config value out of its range; the message names the key and the fix."""


class Device(Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


@dataclass
class LikelihoodConfig:
    # Regression only. None: the noise precision is sampled (Gamma(prior_shape, prior_rate) prior).
    noise_std: float | None = None
    prior_shape: float = 1.0
    prior_rate: float = 1.0
    gibbs: bool = False  # resample the noise precision by Gibbs steps instead of with the sampler


@dataclass
class WandbConfig:
    mode: str = "disabled"  # disabled | offline | online
    project: str = "bdl"
    entity: str | None = None


@dataclass
class DistributedConfig:
    # torchrun's all-reduce: auto (nccl on GPUs, gloo on the CPU), gloo or nccl
    backend: str = "auto"


@dataclass
class RunConfig:
    seed: int = 0
    device: Device = Device.auto
    epochs: int = 800
    batch_size: int = 500
    burn_in: int = 50  # epochs before the first sample is kept
    thin: int = 1  # keep one sample every `thin` epochs after burn-in
    temperature: float = 1.0
    reference: str | None = None  # run directory or probabilities file to compare against
    log_every: int = 10  # epochs between progress lines
    # sampler steps between Gibbs updates of the hyperparameters (Gamma-distributed precisions of
    # the prior and of the regression noise); None: once per epoch, at its end
    gibbs_every: int | None = None
    init_from: str | None = None  # run directory whose last sample is the starting point
    pruning: bool = False  # write the signal-to-noise pruning curve (pruning.csv, pruning.png)
    pruning_samples: int = 10  # samples in the pruning curve's model average (bounds its cost)
    resume: bool = False  # continue the run in hydra.run.dir from its checkpoint
    # epochs between checkpoints; None: at the first epoch end a minute after the last one
    checkpoint_every: int | None = None
    likelihood: LikelihoodConfig = field(default_factory=LikelihoodConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    dataset: Any = None
    model: Any = None
    prior: Any = None
    sampler: Any = None
    schedule: Any = None


ConfigStore.instance().store(name="base_config", node=RunConfig)


def validate(cfg: Any) -> None:
    """Range checks of the top-level keys; raises :class:`ConfigError` naming the key."""
    checks = [
        ("epochs", cfg.epochs >= 1, "a positive number of epochs, e.g. epochs=10"),
        ("batch_size", cfg.batch_size >= 1, "a positive minibatch size, e.g. batch_size=128"),
        ("burn_in", cfg.burn_in >= 0, "burn_in=0 or more epochs"),
        ("thin", cfg.thin >= 1, "thin=1 or more epochs"),
        ("temperature", cfg.temperature > 0, "a positive temperature (1 = Bayes posterior)"),
        ("log_every", cfg.log_every >= 1, "log_every=1 or more epochs"),
        (
            "gibbs_every",
            cfg.gibbs_every is None or cfg.gibbs_every >= 1,
            "gibbs_every=1 or more steps, or null for once per epoch",
        ),
        ("pruning_samples", cfg.pruning_samples >= 1, "pruning_samples=1 or more"),
        (
            "checkpoint_every",
            cfg.checkpoint_every is None or cfg.checkpoint_every >= 1,
            "checkpoint_every=1 or more epochs, or null for about once a minute",
        ),
        (
            "wandb.mode",
            cfg.wandb.mode in ("disabled", "offline", "online"),
            "wandb.mode=disabled, offline or online",
        ),
        (
            "distributed.backend",
            cfg.distributed.backend in ("auto", "gloo", "nccl"),
            "distributed.backend=auto, gloo or nccl",
        ),
    ]
    for key, ok, fix in checks:
        if not ok:
            raise ConfigError(f"{key}={OmegaConf.select(cfg, key)} is out of range: use {fix}")
    if cfg.burn_in >= cfg.epochs:
        raise ConfigError(
            f"burn_in={cfg.burn_in} leaves no epoch to sample in (epochs={cfg.epochs}): "
            "use burn_in < epochs"
        )
