"""The root config's schema and its validation: every mistake in a config fails before any data is
read, with one message naming the key.

Hydra merges the YAML files of ``conf/`` into `RunConfig` (registered as ``base_config``),
so a misspelt override (``epoch=3``) or a value of the wrong type (``seed=abc``) is rejected at
composition. `validate` checks the rest: keys added with ``+`` (which Hydra lets through
even into a schema), the ranges of the top-level keys, and each option group (``dataset``,
``model``, ``prior``, ``sampler``, ``schedule``) against the signature of the ``_target_`` it names
(unknown keys, values of the wrong type or not finite); it then builds the objects that need no
data once, so that their constructors' own range checks run before the data are read.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import itertools
import math
import sys
import types
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bdl.composition import plugins
from bdl.composition.instantiation import check_targets, instantiate
from bdl.errors import ConfigError
from bdl.likelihoods import Gaussian
from bdl.schedules import Schedule


class Device(Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class CompileMode(Enum):
    """``torch.compile``'s modes, by the names a command line can type."""

    default = "default"
    # CUDA graphs: a compiled function's kernels launched as one graph, for the small networks'
    # launch-bound steps on a GPU; on the CPU the same as default
    reduce_overhead = "reduce-overhead"
    max_autotune = "max-autotune"
    max_autotune_no_cudagraphs = "max-autotune-no-cudagraphs"


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
    # null: "<dataset>-<sampler>-seed<seed>", a sweep's job by its directory (bdl.storage.outputs)
    name: str | None = None
    group: str | None = None  # null: a sweep's directory, so that its runs are grouped
    tags: list[str] = field(default_factory=list)  # beside the dataset and sampler, always tagged
    job_type: str | None = None


@dataclass
class MLPProtocol:
    # The benchmark's fully connected network (read by model=mlp): widths of the hidden layers,
    # their activation, and the initial weights' standard deviation (None: PyTorch's default).
    hidden: list[int] = MISSING
    activation: str = MISSING
    init_std: float | None = None


@dataclass
class ProtocolConfig:
    """A benchmark's protocol beyond the top-level keys it sets (``conf/protocol/``)."""

    mlp: MLPProtocol = field(default_factory=MLPProtocol)
    prior_scale: float = 1.0  # the Gaussian prior's scale (prior=gaussian)
    augment: bool = False  # random crop + flip of each training minibatch (images)


@dataclass
class DistributedConfig:
    # torchrun's all-reduce: auto (nccl on GPUs, gloo on the CPU), gloo or nccl
    backend: str = "auto"


@dataclass
class RunConfig:
    seed: int = 0  # chain k of a run is seeded seed + k
    chains: int = 1  # independent chains in one run (seeded seed, seed + 1, ...)
    # step the chains as one batched computation (torch.func.vmap) where the sampler, prior and
    # data allow (bdl.runner.steppers); false: one after the other, an epoch each in turn
    vectorise: bool = True
    # every chain steps on the first chain's minibatches (its data seed): cheaper when stacked (one
    # gather, one input read by all chains' products), at the price of chains whose minibatch
    # noise is the same sequence; false: each chain draws its own order (bdl.runner.steppers)
    shared_minibatches: bool = False
    device: Device = Device.auto
    # torch's CPU threads: auto (one for a network under 10 000 parameters or on a busy machine,
    # else the free cores: bdl.runner.threads) or a number
    threads: Any = "auto"
    # differentiate the data term by torch.compile (bdl.potential.Potential), and run HMC's whole
    # trajectory as one compiled program where the training set is one chunk, an SGLD, SGHMC or
    # SGD epoch as one (bdl.runner.steppers): a small network's step several times faster after a
    # compile of seconds, gradients equal to float rounding
    compile: bool = False
    # torch.compile's mode for compile=true (reduce_overhead: CUDA graphs on a GPU)
    compile_mode: CompileMode = CompileMode.default
    epochs: int = 800
    batch_size: int = 500
    burn_in: int = 50  # epochs before the first sample is kept
    thin: int = 1  # keep one sample every `thin` epochs after burn-in
    temperature: float = 1.0
    reference: str | None = None  # run directory or probabilities file to compare against
    # out-of-distribution set whose detection metrics a classification run reports (bdl.data.ood:
    # a dataset of the same input shape, or noise); the image protocols name one
    ood: str | None = None
    log_every: int = 10  # epochs between progress lines
    # sampler steps between Gibbs updates of the hyperparameters (Gamma-distributed precisions of
    # the prior and of the regression noise); None: once per epoch, at its end
    gibbs_every: int | None = None
    init_from: str | None = None  # run directory whose last sample is the starting point
    pruning: bool = False  # write the signal-to-noise pruning curve (pruning.csv, pruning.png)
    # draw summary.png and reliability.png at the end (bdl.analysis.plots.write_summary draws them
    # for a finished run too); false saves a sweep of many short runs the drawing
    figures: bool = True
    pruning_samples: int = 10  # samples in the pruning curve's model average (bounds its cost)
    resume: bool = False  # continue the run in hydra.run.dir from its checkpoint
    # epochs between checkpoints; None: at the first epoch end a minute after the last one
    checkpoint_every: int | None = None
    # sample on past `epochs` until the convergence verdict passes or a budget is spent: at most
    # max_epochs epochs, at most max_minutes of wall time (bdl.runner.sampling); at least one
    until_converged: bool = False
    max_epochs: int | None = None
    max_minutes: float | None = None
    likelihood: LikelihoodConfig = field(default_factory=LikelihoodConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    dataset: Any = None
    model: Any = None
    prior: Any = None
    sampler: Any = None
    schedule: Any = None


@functools.cache
def register() -> None:
    """Put in Hydra's config store what ``config.yaml`` names beside its files: this schema (as
    ``base_config``) and the installed packages' options (`bdl.composition.plugins`). The
    package ``bdl.conf`` calls it when Hydra imports it to read the files, so that every way of
    composing them finds both, while ``import bdl`` (which reads no config) loads no Hydra."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="base_config", node=RunConfig)
    plugins.register()


# The groups whose config names a ``_target_``, and the arguments the runner passes when it builds
# each one (the data's shapes, the run's length), which are therefore no options of the config.
# Keyword-only arguments (a sampler's ``generator`` and ``foreach``) are no options either.
RUNTIME_ARGUMENTS = {
    "dataset": (),
    "model": ("input_shape", "out_features"),
    "prior": (),
    "sampler": (),
    "schedule": ("total_steps", "steps_per_epoch"),
}

# Scalar types of the targets' annotations, as a message names them.
SCALARS = {float: "a finite number", int: "an integer", bool: "true or false", str: "a string"}


def validate(cfg: Any) -> None:
    """Check a composed config before any data is read; raises `ConfigError` naming the
    key and the fix."""
    plugins.check()
    check_targets(cfg)  # before _check_group imports a target
    try:
        _check_keys(cfg, RunConfig)
        _check_ranges(cfg)
        for group in RUNTIME_ARGUMENTS:
            _check_group(cfg, group)
        _check_data_root(cfg)
        _build_without_data(cfg)
    except OmegaConfBaseException as error:  # an interpolation that does not resolve
        raise ConfigError(str(error).splitlines()[0]) from None


def _check_keys(node: DictConfig, schema: type, prefix: str = "") -> None:
    """Keys added with ``+`` (``+unknown_key=1``) bypass Hydra's check against the schema."""
    names = [f.name for f in fields(schema)]
    where = f"of {prefix.rstrip('.')}" if prefix else "of the config (top level)"
    for key in node:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            fix = f"did you mean {prefix}{close[0]}? " if close else ""
            raise ConfigError(
                f"{prefix}{key} is not a key {where}: {fix}(the keys: {', '.join(names)})"
            )
    for name, kind in typing.get_type_hints(schema).items():
        if is_dataclass(kind):
            _check_keys(node[name], kind, f"{prefix}{name}.")


def _check_ranges(cfg: Any) -> None:
    checks = [
        (
            "seed",
            0 <= cfg.seed <= 2**64 - cfg.chains,  # torch seeds are 64-bit; chain k gets seed + k
            "seed=0 or more, below 2^64 (torch's seeds are 64-bit) less the chains",
        ),
        ("chains", cfg.chains >= 1, "chains=1 or more independent chains"),
        (
            "threads",
            cfg.threads == "auto" or (isinstance(cfg.threads, int) and cfg.threads >= 1),
            "threads=auto or a number of threads, 1 or more",
        ),
        ("epochs", cfg.epochs >= 1, "a positive number of epochs, e.g. epochs=10"),
        ("batch_size", cfg.batch_size >= 1, "a positive minibatch size, e.g. batch_size=128"),
        ("burn_in", cfg.burn_in >= 0, "burn_in=0 or more epochs"),
        ("thin", cfg.thin >= 1, "thin=1 or more epochs"),
        (
            "temperature",
            0 < cfg.temperature < math.inf,
            "a positive, finite temperature (1 = Bayes posterior)",
        ),
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
            "max_epochs",
            cfg.max_epochs is None or cfg.max_epochs > cfg.epochs,
            f"max_epochs above epochs={cfg.epochs}, or null",
        ),
        (
            "max_minutes",
            cfg.max_minutes is None or 0 < cfg.max_minutes < math.inf,
            "max_minutes above 0, or null",
        ),
        (
            "until_converged",
            not cfg.until_converged or cfg.max_epochs is not None or cfg.max_minutes is not None,
            f"until_converged=true with a budget: max_epochs={4 * cfg.epochs} or max_minutes=60",
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
    if not cfg.compile and cfg.compile_mode != CompileMode.default:
        raise ConfigError(
            f"compile_mode={cfg.compile_mode.name} compiles nothing without compile=true: add "
            "compile=true, or drop compile_mode"
        )


def options(group: str, target: Any) -> dict[str, inspect.Parameter]:
    """The arguments of a group's ``_target_`` that its config may set."""
    parameters = inspect.signature(target, eval_str=True).parameters.values()
    return {
        p.name: p
        for p in parameters
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        and p.name not in RUNTIME_ARGUMENTS[group]
    }


def _check_group(cfg: Any, group: str) -> None:
    node = cfg[group]
    module, _, attribute = str(node._target_).rpartition(".")
    try:
        target = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError(
            f"{group}._target_={node._target_} cannot be imported: choose a {group} option "
            "listed by bdl-run --help"
        ) from None
    # Sampler by the module already loaded: a target that subclasses it imported it, and the
    # composition stays below the samplers in the layers (docs/development.md)
    base = sys.modules.get("bdl.samplers.base")
    if group == "sampler" and not (
        base and inspect.isclass(target) and issubclass(target, base.Sampler)
    ):
        raise ConfigError(
            f"sampler._target_={node._target_} is no bdl.samplers.base.Sampler: a sampler "
            "subclasses it and declares what it is (docs/adding-a-sampler.md)"
        )
    # A class by its name (an alias, Constant, keeps the config's); a function by its path.
    name = attribute if inspect.isclass(target) else node._target_
    allowed = options(group, target)
    for key in node:
        if key.startswith("_") and key.endswith("_"):  # Hydra's own keys (_target_, _partial_)
            continue
        if key not in allowed:
            raise ConfigError(
                f"{group}.{key} is not an option of {name} "
                f"(options: {', '.join(allowed) or 'none'})"
            )
        _check_type(f"{group}.{key}", node[key], allowed[key].annotation)
    for key, parameter in allowed.items():
        if parameter.default is inspect.Parameter.empty and key not in node:
            raise ConfigError(f"{group}.{key} is required by {name}: set {group}.{key}=<value>")
    if group == "sampler" and cfg.until_converged and not target.declaration.injects_noise:
        raise ConfigError(
            f"until_converged=true needs a sampler with a convergence verdict: {name} is an "
            "optimiser or a variational fit; drop until_converged"
        )
    if group == "schedule" and cfg.until_converged and not _extendable(target):
        raise ConfigError(
            f"until_converged=true needs schedule=constant: {name}'s steps depend on epochs, "
            "which the run extends"
        )
    if group == "sampler" and target.declaration.injects_noise and cfg.burn_in >= cfg.epochs:
        # Optimisers and variational methods keep their final state or draws from q: for them
        # burn-in is moot, and a protocol's burn_in must not stop a short run.
        raise ConfigError(
            f"burn_in={cfg.burn_in} leaves no epoch to sample in (epochs={cfg.epochs}): "
            f"raise epochs, or {short_run(cfg.epochs, cfg.thin)}"
        )


def _extendable(target: object) -> bool:
    return inspect.isclass(target) and issubclass(target, Schedule) and target.extendable()


def short_run(epochs: int, thin: int) -> str:
    """Settings of burn_in and thin under which ``epochs`` keep about ten samples or more, as a
    message's advice: every key that must change, at once (a protocol's thinning, 20 on the UCI
    sets, would refuse a short run again once its burn-in fitted)."""
    burn_in = epochs // 2
    thin = max(1, min(thin, (epochs - burn_in) // 10))
    return f"keep epochs={epochs} with burn_in={burn_in} thin={thin}"


def _check_data_root(cfg: Any) -> None:
    """An empty ``dataset.root`` written as such (``dataset.root=$DATA`` with ``DATA`` unset) is
    refused rather than read as null; ``${oc.env:BDL_DATA_DIR,null}`` of an empty variable is
    not written empty, and still reads as null."""
    if OmegaConf.to_container(cfg.dataset, resolve=False).get("root") == "":
        raise ConfigError(
            "dataset.root is empty (a shell variable that is not set?): give a folder, "
            "dataset.root=/path/to/data, or dataset.root=null for $BDL_DATA_DIR or the cache"
        )


def _check_type(key: str, value: Any, annotation: Any) -> None:
    """A value against a scalar annotation (``float``, ``int | None``, ``float | str``...);
    containers and paths are left to the constructors."""
    union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
    kinds = typing.get_args(annotation) if union else (annotation,)
    nullable = type(None) in kinds
    kinds = tuple(k for k in kinds if k is not type(None))
    if not kinds or not all(k in SCALARS for k in kinds):
        return
    fits = (
        (value is None and nullable)
        or (isinstance(value, bool) and bool in kinds)
        or (isinstance(value, int) and not isinstance(value, bool) and {int, float} & set(kinds))
        or (isinstance(value, float) and float in kinds and math.isfinite(value))
        or (isinstance(value, str) and str in kinds)
    )
    if not fits:
        expected = " or ".join([SCALARS[k] for k in kinds] + (["null"] if nullable else []))
        if value is None:  # a key without a default, left out
            raise ConfigError(f"{key} is not set: give it, {key}=VALUE ({expected})")
        raise ConfigError(f"{key}={_shown(value)} must be {expected}")


def _shown(value: Any) -> str:
    """A value as it is written on the command line."""
    if isinstance(value, DictConfig | ListConfig):
        value = OmegaConf.to_container(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)


def constructor_error(error: Exception, kinds: tuple[type[Exception], ...]) -> Exception:
    """The constructor's own error inside Hydra's ``InstantiationException`` when it is one of
    ``kinds`` (its message names the key or the fix, e.g. where the data should be); else
    ``error``."""
    from hydra.errors import InstantiationException

    if isinstance(error, InstantiationException) and isinstance(error.__cause__, kinds):
        return error.__cause__
    return error


def _build_without_data(cfg: Any) -> None:
    """Build once what needs no data (prior, likelihood, sampler, schedule), so that their
    constructors' range checks fail before the data are read; the runner builds them again."""
    from hydra.errors import InstantiationException

    try:
        instantiate(cfg.prior)
        Gaussian(**cfg.likelihood)
        instantiate(cfg.sampler)()
        instantiate(cfg.schedule)(total_steps=cfg.epochs, steps_per_epoch=1)
    except InstantiationException as error:
        if isinstance(error.__cause__, ValueError):
            raise ConfigError(str(error.__cause__)) from None
        raise
    except ValueError as error:
        raise ConfigError(str(error)) from None


def print_sweep(argv: list[str]) -> bool:
    """``bdl-run -m <sweep> --cfg job [--resolve]``: print the config of each job the sweep would
    launch (Hydra refuses to combine ``-m`` and ``--cfg``); ``False``, printing nothing, for any
    other command line. A mistake ends the program with one line."""
    from hydra import compose, initialize_config_module
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if not {"-m", "--multirun"} & set(argv) or not {"-c", "--cfg"} & set(argv):
        return False
    after_cfg = [arg for flag, arg in itertools.pairwise(argv) if flag in ("-c", "--cfg")]
    try:
        if after_cfg != ["job"]:
            raise ConfigError("a sweep (-m) prints each job's config with --cfg job only")
        overrides = [arg for arg in argv if not arg.startswith("-") and arg not in after_cfg]
        axes = [
            [f"{o.get_key_element()}={value}" for value in o.sweep_string_iterator()]
            if o.is_sweep_override()
            else [o.input_line]
            for o in OverridesParser.create().parse_overrides(overrides)
        ]
        with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
            for number, job in enumerate(itertools.product(*axes)):
                cfg = compose("config", list(job))
                print(f"# job {number}: {' '.join(job)}")
                print(OmegaConf.to_yaml(cfg, resolve="--resolve" in argv))
    except (ConfigError, HydraException, OmegaConfBaseException) as error:
        raise SystemExit(f"bdl-run: error: {str(error).splitlines()[0]}") from None
    return True
