"""A run directory from Python: `run_model` runs a network and data of the caller's own
through the runner that ``bdl-run`` uses, and returns the `Posterior`.

The call composes the same config ``bdl-run`` would (the sampler, prior and schedule options, the
protocol's keys) and hands it to `bdl.runner.run.run`: chains, burn-in, thinning, checkpoints and
``resume``, the stability checks, the trivial-predictor verdict, R-hat and ESS, ``metrics.json``.
The run directory is one like any other, read by ``bdl-report``, ``bdl-eval`` and
`bdl.load_run`.

Nothing in it is a pickle. Tensors handed over as data are written into the run directory as
safetensors files (``data/train.safetensors`` ...) and read back by the ``files`` dataset
(`bdl.data.files`). A network is recorded by where it lives: a bdl option (``"mlp"``), an
installed plugin's option, or a class or function of the caller's own module, recorded as its
``module.name``; the caller's handing it over admits that target for this call alone
(`bdl.composition.plugins.trusted`), so that reading the run back in another process needs the
object again (``bdl.load_run(directory, trust=[MyNet])``) or the package installed as a plugin.

It behaves as a Python library: a mistake raises bdl's own `ConfigError` (or `DataError`,
`StoreError`, `DivergedError`) with the one line ``bdl-run`` would print, never Hydra's
wrapper around it; and where the program has not configured logging, the run's progress lines
and its closing table go to stderr, as ``bdl-run`` shows them (a program that calls
``logging.basicConfig`` or gives the ``bdl`` logger a handler decides for itself).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_module
from hydra.errors import HydraException, InstantiationException
from omegaconf import OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException
from safetensors.torch import save
from torch import Tensor, nn

from bdl.analysis.posterior import Posterior, load_run
from bdl.atomic import atomic_file
from bdl.composition import plugins
from bdl.composition.config import constructor_error
from bdl.composition.overrides import check
from bdl.data import DataError
from bdl.errors import ConfigError
from bdl.runner.run import run
from bdl.runner.stability import DivergedError
from bdl.storage.store import StoreError

__all__ = ["run_model"]

#: A part of the data: features and targets, or a map-style torch Dataset of (x, y) pairs.
Part = tuple[Tensor, Tensor] | torch.utils.data.Dataset


def _tensors(part: Part, name: str) -> dict[str, Tensor]:
    if isinstance(part, tuple | list) and len(part) == 2:
        x, y = part
    elif isinstance(part, torch.utils.data.Dataset):
        pairs = [part[i] for i in range(len(part))]  # type: ignore[arg-type]
        x = torch.stack([torch.as_tensor(p[0]) for p in pairs])
        y = torch.stack([torch.as_tensor(p[1]) for p in pairs])
    else:
        raise ConfigError(f"{name} must be a pair (x, y) of tensors or a torch Dataset of pairs")
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
        raise ConfigError(
            f"{name}: x of shape {tuple(x.shape)} and y of {tuple(y.shape)}; x needs one row per "
            "point (n, features...) and y one target per row (n,)"
        )
    return {"x": x.detach().cpu().contiguous(), "y": y.detach().cpu().contiguous()}


def _data_overrides(directory: Path, parts: Mapping[str, Part | None]) -> list[str]:
    """The overrides that read the data parts from ``directory/data`` (`_write_data`)."""
    given = [name for name, part in parts.items() if part is not None]
    return ["dataset=files", *(f"dataset.{n}={directory / 'data' / n}.safetensors" for n in given)]


def _write_data(directory: Path, parts: Mapping[str, Part | None]) -> None:
    """The data parts as safetensors files in ``directory/data``; a resumed run's files must
    hold the same data."""
    folder = directory / "data"
    contents = {
        name: save(_tensors(part, name)) for name, part in parts.items() if part is not None
    }
    for name, content in contents.items():
        path = folder / f"{name}.safetensors"
        if path.is_file() and path.read_bytes() != content:
            raise ConfigError(
                f"{path} holds other {name} data than this call's: give the run a fresh "
                "directory, or the same data to resume it"
            )
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in contents.items():
        path = folder / f"{name}.safetensors"
        if not path.is_file():
            with atomic_file(path) as file:
                file.write(content)


#: What a call may raise for a mistake of its caller's: raised as it is, in one line.
USER_ERRORS = (ValueError, DataError, StoreError, DivergedError, InstantiationException)
#: What `run_model`'s own arguments set: an override of one of them contradicts the argument.
ARGUMENTS = ("dataset", "model", "sampler", "prior", "chains", "seed", "epochs", "burn_in")
ARGUMENTS += ("thin", "resume")


@contextlib.contextmanager
def _console() -> Iterator[None]:
    """The ``bdl`` logger's lines on stderr for the call, where nothing else would show them
    (no handler on it or on the root logger): a run's progress and table, as ``bdl-run``
    shows them."""
    logger = logging.getLogger("bdl")
    if logger.handlers or logging.getLogger().handlers:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = logger.level
    logger.addHandler(handler)
    if level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _refuse_contradictions(
    dataset: str | None, given: Mapping[str, Any], overrides: Sequence[str]
) -> None:
    """An argument that a dataset option ignores, or an override of what an argument sets:
    either would be silently dropped, so neither is taken."""
    if dataset is not None:
        ignored = [key for key, value in given.items() if value not in (None, "auto")]
        if ignored:
            raise ConfigError(
                f"{ignored[0]}= describes train= data, which dataset={dataset!r} replaces: set "
                f"the option's own keys by overrides (dataset.validation=...), or drop dataset="
            )
    for override in overrides:
        key = override.partition("=")[0].lstrip("+~")
        if key in ARGUMENTS:
            raise ConfigError(
                f"overrides={[override]} sets {key}, which run_model's argument {key}= sets: "
                f"pass {key}= alone"
            )


def _value(value: Any) -> str:
    """A Python value as an override writes it."""
    return {None: "null", True: "true", False: "false"}.get(value, str(value))


def run_model(
    model: str | Callable[..., nn.Module],
    train: Part | None = None,
    test: Part | None = None,
    *,
    directory: str | os.PathLike,
    validation: Part | None = None,
    dataset: str | None = None,
    model_args: Mapping[str, Any] | None = None,
    sampler: str = "sghmc",
    prior: str = "gaussian",
    likelihood: Mapping[str, Any] | None = None,
    task: str = "auto",
    chains: int = 1,
    epochs: int | None = None,
    burn_in: int | None = None,
    thin: int | None = None,
    seed: int = 0,
    resume: bool = False,
    overrides: Sequence[str] = (),
) -> Posterior:
    """Run ``model`` on the data into ``directory`` and return its posterior.

    Args:
        model: a model option (``"mlp"``, or an installed plugin's), or a class or function of
            the caller's own module that takes ``input_shape`` and ``out_features`` (the data's
            shapes) and ``model_args`` and returns the network.
        train: ``(x, y)`` tensors, or a torch Dataset of pairs: regression targets of floats,
            or class labels 0..K-1 (``task`` declares which, else inferred as the ``files``
            dataset infers it); standardised on the training rows. Or instead ``dataset``.
        test: the test data, as ``train``.
        directory: the run directory (``hydra.run.dir`` of ``bdl-run``).
        validation: held-out data, as ``train``, or ``None``.
        dataset: a dataset option (``"boston"``, a plugin's), instead of ``train`` and ``test``.
        model_args: the network's arguments (for an option: keys of its config).
        sampler: a sampler option; further keys by ``overrides``.
        prior: a prior option; further keys by ``overrides``.
        likelihood: the regression noise's keys (``noise_std``, ``prior_shape``, ...).
        task: ``"classification"``, ``"regression"`` or ``"auto"`` (inferred from ``train``).
        chains: as ``bdl-run``'s ``chains``.
        epochs: as ``bdl-run``'s ``epochs``; ``None`` keeps the protocol's.
        burn_in: as ``bdl-run``'s ``burn_in``; ``None`` keeps the protocol's.
        thin: as ``bdl-run``'s ``thin``; ``None`` keeps the protocol's.
        seed: as ``bdl-run``'s ``seed``.
        resume: finish the interrupted run in ``directory`` (``bdl-run``'s ``resume=true``).
        overrides: any further ``bdl-run`` override (``"sampler.lr=0.05"``, ``"protocol=uci"``).
    """
    directory = Path(directory).absolute()
    if (dataset is None) == (train is None or test is None):
        raise ConfigError("give train= and test= data, or dataset= an option, not both")
    _refuse_contradictions(dataset, {"validation": validation, "task": task}, overrides)
    if dataset is None:
        parts = {"train": train, "test": test, "validation": validation}
        given = [*_data_overrides(directory, parts), f"dataset.task={task}"]
    else:
        given = [f"dataset={dataset}"]
    if isinstance(model, str):
        given.append(f"model={model}")
    given += [f"sampler={sampler}", f"prior={prior}", f"chains={chains}", f"seed={seed}"]
    given += [f"likelihood.{key}={_value(value)}" for key, value in (likelihood or {}).items()]
    length = {"epochs": epochs, "burn_in": burn_in, "thin": thin}
    given += [f"{key}={value}" for key, value in length.items() if value is not None]
    given += [f"resume={str(resume).lower()}", *overrides]
    check(given)  # a mistaken option or key in bdl-run's one line, "did you mean" where it applies
    try:
        with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
            cfg = compose("config", given)
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(str(error).strip().splitlines()[0]) from None
    if dataset is None:
        _write_data(directory, parts)
    trust = () if isinstance(model, str) else (model,)
    with open_dict(cfg):
        if trust:
            cfg.model = {"_target_": plugins.dotted(model), "_partial_": True}
        cfg.model = OmegaConf.merge(cfg.model, dict(model_args or {}))
    with plugins.trusted(*trust), _console():
        try:
            run(cfg, directory)
        except InstantiationException as error:
            raise constructor_error(error, USER_ERRORS) from None
    return load_run(directory, trust=trust)
