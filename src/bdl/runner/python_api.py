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
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf, open_dict
from safetensors.torch import save
from torch import Tensor, nn

from bdl.analysis.posterior import Posterior, load_run
from bdl.atomic import atomic_file
from bdl.composition import plugins
from bdl.errors import ConfigError
from bdl.runner.run import run

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


def _write_data(directory: Path, parts: Mapping[str, Part | None]) -> list[str]:
    """The data parts as safetensors files in ``directory/data``, and the overrides that read
    them; a resumed run's files must hold the same data."""
    folder = directory / "data"
    folder.mkdir(parents=True, exist_ok=True)
    overrides = ["dataset=files"]
    for name, part in parts.items():
        if part is None:
            continue
        path = folder / f"{name}.safetensors"
        content = save(_tensors(part, name))
        if path.is_file() and path.read_bytes() != content:
            raise ConfigError(
                f"{path} holds other {name} data than this call's: give the run a fresh "
                "directory, or the same data to resume it"
            )
        if not path.is_file():
            with atomic_file(path) as file:
                file.write(content)
        overrides.append(f"dataset.{name}={path}")
    return overrides


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
    if dataset is None:
        parts = {"train": train, "test": test, "validation": validation}
        given = [*_write_data(directory, parts), f"dataset.task={task}"]
    else:
        given = [f"dataset={dataset}"]
    if isinstance(model, str):
        given.append(f"model={model}")
    given += [f"sampler={sampler}", f"prior={prior}", f"chains={chains}", f"seed={seed}"]
    given += [f"likelihood.{key}={_value(value)}" for key, value in (likelihood or {}).items()]
    length = {"epochs": epochs, "burn_in": burn_in, "thin": thin}
    given += [f"{key}={value}" for key, value in length.items() if value is not None]
    given += [f"resume={str(resume).lower()}", *overrides]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", given)
    trust = () if isinstance(model, str) else (model,)
    with open_dict(cfg):
        if trust:
            cfg.model = {"_target_": plugins.dotted(model), "_partial_": True}
        cfg.model = OmegaConf.merge(cfg.model, dict(model_args or {}))
    with plugins.trusted(*trust):
        run(cfg, directory)
    return load_run(directory, trust=trust)
