"""Checkpoints: a run's whole state in one safetensors file, written atomically.

A checkpoint is one ``checkpoint.safetensors``: every tensor of each chain's loop state
(`bdl.runner.loop.Loop`: parameters, sampler buffers and what a kernel cached, generator states,
hyperparameters, the running model average) under ``chain_<k>/`` and a flat name, and a JSON
header (the safetensors metadata) with everything else (positions, counters, the config it
belongs to). What grows with the epochs, the curve so far and the accept rates, is kept as tensors
too: safetensors caps its header at 100 MB, which four chains' curves as JSON passed at about
100 000 epochs.
This module is the one place that lays it out (`save_run`, `load_run`). One file
replaced atomically, so a kill at any moment leaves the previous checkpoint or the new one, never a
mixture. The header records the SHA-256 of itself and the tensor data, so a file damaged or
edited after it was written is refused by name rather than resumed from. Nothing here unpickles:
safetensors and JSON cannot execute code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from enum import Enum
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from safetensors import SafetensorError
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save
from torch import Tensor

from bdl.composition.config import ConfigError, RunConfig
from bdl.runner.curve import Curve
from bdl.runner.experiment import Experiment
from bdl.runner.loop import Loop
from bdl.samplers.base import Cached, SamplerState, cached
from bdl.storage.store import StoreError, atomic_write, read_safetensors

# 2: the state of each chain under chain_<k>/ (bdl-run chains=K)
# 3: divergent transitions; the header inside the SHA-256
# 4: a kernel's cached evaluations in its state's fields (``cached/``), no longer in ``info/`` and
#    ``buffers/grad`` (format 3, still read: `_upgrade_from_3`)
# 5: each chain's curve and accept rates as tensors (``loop/curve``: `bdl.runner.curve`), no longer
#    in the JSON header (formats 3 and 4, still read: `_upgrade_from_4`)
FORMAT_VERSION = 5
#: the oldest format this bdl resumes
OLDEST_FORMAT = 3
_HEADER = "bdl_checkpoint"
#: What of a Loop the JSON header holds; its tensors are named by `_chain_state`.
_POSITION = (
    "epoch",
    "step",
    "tests",
    "sampling_tests",
    "initial_potential",
    "recent",
    "snapshot_epoch",
    "step_scale",
    "late_backoffs",
    "rise_max",
    "num_samples",
)
_PER_SAMPLE = ("log_likelihoods", "probes")
#: Config keys that may differ when resuming: where things are, how often to report, whether to
#: draw the figures.
_RESUMABLE_CHANGES = (
    "resume",
    "max_epochs",  # a run until converged may be given more budget
    "max_minutes",
    "checkpoint_every",
    "log_every",
    "figures",
    "wandb",
    "device",
    "dataset.root",
    "distributed",
)


class CheckpointError(StoreError):
    """A checkpoint that cannot be resumed from; the message names the file and the way out."""


def _digest(tensors: dict[str, Tensor], header: dict[str, Any]) -> str:
    """The SHA-256 of the header (less its ``sha256``) and the tensors: an edited header (an
    empty chain list, a huge epoch, a negative sample count) fails it as damaged data does."""
    sha = hashlib.sha256()
    fields = {key: value for key, value in header.items() if key != "sha256"}
    sha.update(json.dumps(fields, sort_keys=True, allow_nan=False).encode())
    for name in sorted(tensors):
        t = tensors[name]
        sha.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        sha.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()


def save(path: Path, tensors: dict[str, Tensor], header: dict[str, Any]) -> None:
    """Write ``tensors`` and the JSON-serialisable ``header`` to ``path`` atomically."""
    cpu = {name: t.detach().to("cpu", copy=True).contiguous() for name, t in tensors.items()}
    header = {**header, "format_version": FORMAT_VERSION}
    header["sha256"] = _digest(cpu, header)
    text = json.dumps(header, allow_nan=False)
    atomic_write(path, _st_save(cpu, metadata={_HEADER: text}))


def load(path: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The tensors and header of the checkpoint at ``path``, checked for damage and version."""
    fix = (
        f"delete {path.name} to run it again from the beginning (resume=true then starts over), "
        "or start afresh in another directory (hydra.run.dir=...), which leaves the samples here "
        "readable"
    )
    try:
        data = read_safetensors(path)
    except OSError as error:
        raise CheckpointError(f"{path} cannot be read ({error.strerror or error}); {fix}") from None
    except StoreError as error:
        raise CheckpointError(f"{path} is truncated or corrupt ({error}); {fix}") from None
    try:
        tensors = _st_load(data)
        header = json.loads(_metadata(data)[_HEADER])
    except (SafetensorError, ValueError, KeyError, RuntimeError) as error:
        raise CheckpointError(f"{path} is truncated or corrupt ({error}); {fix}") from None
    version = header.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} was written by a newer bdl (checkpoint format {version}, this bdl reads up "
            f"to {FORMAT_VERSION}): upgrade bdl to resume it"
        )
    if version < OLDEST_FORMAT:
        raise CheckpointError(
            f"{path} was written by an older bdl (checkpoint format {version}; this bdl resumes "
            f"formats {OLDEST_FORMAT} to {FORMAT_VERSION}): finish it with the bdl that "
            f"started it, or {fix}"
        )
    if _digest(tensors, header) != header.get("sha256"):
        raise CheckpointError(
            f"{path} is corrupt (its tensors or header fail their sha256 check); {fix}"
        )
    if version == 3:
        _upgrade_from_3(tensors, header)
    if version <= 4:
        _upgrade_from_4(tensors, header)
    return tensors, header


def _upgrade_from_4(tensors: dict[str, Tensor], header: dict[str, Any]) -> None:
    """A run's checkpoint of format 4 (or 3) laid out as format 5, in place: each chain's curve
    and accept rates out of its header's ``loop``, into tensors."""
    for k, chain in enumerate(header.get("chains", [])):
        loop = chain["loop"]
        curve, chain["curve_fields"] = _curve_state(
            Curve.of(loop.pop("curve")), loop.pop("accept_rates")
        )
        tensors.update({f"chain_{k}/{name}": t for name, t in curve.items()})


def _curve_state(curve: Curve, accept_rates: list[float]) -> tuple[dict[str, Tensor], list[str]]:
    """A chain's curve and accept rates as its checkpoint's tensors, and the curve's fields."""
    values, kinds = curve.tensors()
    tensors = {"loop/curve": values, "loop/curve_kinds": kinds}
    tensors["loop/accept_rates"] = torch.tensor(accept_rates, dtype=torch.float64)
    return tensors, curve.fields or []


def _upgrade_from_3(tensors: dict[str, Tensor], header: dict[str, Any]) -> None:
    """A run's checkpoint of format 3 laid out as format 4, in place: the Metropolis kernels'
    ``(U, ∇U)`` at their position (``info/potential`` and ``buffers/grad/<i>`` then) become
    their state's ``current``, naive SGHMC's trajectory start (``info/start_potential`` and
    ``info/start_energy``) its ``start``."""
    for k, chain in enumerate(header.get("chains", [])):
        prefix, sampler = f"chain_{k}/sampler/", chain["sampler"]
        sampler["cached"] = {}
        count = sampler["buffers"].pop("grad", None)
        if count is not None:
            grads = [tensors.pop(f"{prefix}buffers/grad/{i}") for i in range(count)]
            value = tensors[f"{prefix}info/potential"].double()
            _put_cached(tensors, sampler["cached"], prefix, "current", (value, grads))
        if f"{prefix}info/start_energy" in tensors:
            value = tensors.pop(f"{prefix}info/start_potential").double()
            start = (value, tensors.pop(f"{prefix}info/start_energy"))
            _put_cached(tensors, sampler["cached"], prefix, "start", start)


def _metadata(data: bytes) -> dict[str, str]:
    """The safetensors header's ``__metadata__`` (the format: an 8-byte little-endian length,
    then that many bytes of JSON)."""
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + length])["__metadata__"]


def sampler_state(state: SamplerState) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """A sampler state as flat tensors and a JSON header. Buffers that are the parameter list
    itself (a variational mean) are recorded as aliases, not stored twice. A kernel's own fields
    are dataclasses of plain values (its adaptation's statistics), in the header, or what it
    cached between steps (`bdl.samplers.base.cached`), among the tensors."""
    tensors = {f"params/{i}": p for i, p in enumerate(state.params)}
    buffers, aliases = {}, []
    for key, values in state.buffers.items():
        if values is state.params:
            aliases.append(key)
            continue
        buffers[key] = len(values)
        tensors.update({f"buffers/{key}/{i}": t for i, t in enumerate(values)})
    tensors.update({f"info/{key}": t for key, t in state.info.items()})
    layouts: dict[str, Any] = {}
    for name, value in cached(state).items():
        if value is not None:
            _put_cached(tensors, layouts, "", name, value)
    extra = {
        f.name: dataclasses.asdict(value)
        for f in dataclasses.fields(state)
        if dataclasses.is_dataclass(value := getattr(state, f.name))
    }
    header = {
        "step": state.step,
        "grad_evals": state.grad_evals,
        "buffers": buffers,
        "aliases": aliases,
        "extra": extra,
        "cached": layouts,
    }
    return tensors, header


def _put_cached(
    tensors: dict[str, Tensor],
    layout: dict[str, Any],
    prefix: str,
    name: str,
    value: Cached,
) -> None:
    """A state's field ``name`` holding ``value`` (`bdl.samplers.base.Cached`) as ``tensors``
    under ``{prefix}cached/{name}/``, and its layout as ``layout[name]``: per item, None for a
    tensor or the length of a list."""
    layout[name] = []
    for i, item in enumerate(value):
        where = f"{prefix}cached/{name}/{i}"
        if isinstance(item, Tensor):
            tensors[where] = item
            layout[name].append(None)
        else:
            tensors.update({f"{where}/{j}": t for j, t in enumerate(item)})
            layout[name].append(len(item))


@torch.no_grad()
def restore_sampler_state(
    state: SamplerState, tensors: dict[str, Tensor], header: dict[str, Any]
) -> None:
    """Put a saved sampler state into ``state`` (fresh from ``sampler.init``): the parameters are
    written in place, so that the model sees them."""
    device = state.params[0].device
    for i, p in enumerate(state.params):
        p.copy_(tensors[f"params/{i}"])
    state.buffers = {key: state.params for key in header["aliases"]}
    for key, count in header["buffers"].items():
        state.buffers[key] = [tensors[f"buffers/{key}/{i}"].to(device) for i in range(count)]
    prefix = "info/"
    state.info = {
        k[len(prefix) :]: t.to(device) for k, t in tensors.items() if k.startswith(prefix)
    }
    state.step = header["step"]
    state.grad_evals = header["grad_evals"]
    for name, fields in header["extra"].items():
        setattr(state, name, type(getattr(state, name))(**fields))
    for name, layout in header["cached"].items():
        where = f"cached/{name}"
        value = tuple(
            tensors[f"{where}/{i}"].to(device)
            if count is None
            else [tensors[f"{where}/{i}/{j}"].to(device) for j in range(count)]
            for i, count in enumerate(layout)
        )
        setattr(state, name, value)


def save_run(
    path: Path,
    config: dict[str, Any],
    experiments: list[Experiment],
    loops: list[Loop],
    **header: Any,
) -> None:
    """Checkpoint every chain of a run (``config``: `resumable_config` of its config;
    ``header``: the run's own JSON-serialisable fields, its elapsed time, wandb id and
    thread count)."""
    tensors, chains = {}, []
    for k, (experiment, loop) in enumerate(zip(experiments, loops, strict=True)):
        chain_tensors, chain_header = _chain_state(loop, experiment)
        tensors.update({f"chain_{k}/{name}": t for name, t in chain_tensors.items()})
        chains.append(chain_header)
    save(path, tensors, {"config": config, **header, "chains": chains})


def load_run(path: Path, cfg: DictConfig) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The tensors and header of the run checkpointed at ``path``, refused if ``cfg`` is not the
    run's config."""
    tensors, header = load(path)
    check_same_config(cfg, header, path)
    return tensors, header


def restore_loops(
    experiments: list[Experiment], tensors: dict[str, Tensor], header: dict[str, Any]
) -> list[Loop]:
    """The loops of a run's checkpoint (`load_run`), each chain's generators and potential
    set in its experiment."""
    return [
        _restore_chain(experiment, _prefixed(tensors, f"chain_{k}/"), header["chains"][k])
        for k, experiment in enumerate(experiments)
    ]


def _chain_state(loop: Loop, experiment: Experiment) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """One chain's tensors and JSON header."""
    sampler_tensors, sampler_header = sampler_state(loop.sampler)
    tensors = {f"sampler/{k}": t for k, t in sampler_tensors.items()}
    for name, generator in experiment.generators.items():
        tensors[f"generator/{name}"] = generator.get_state()
    tensors.update({f"potential/{k}": t for k, t in experiment.potential.state_dict().items()})
    tensors.update({f"average/{k}": t for k, t in loop.average.state_dict().items()})
    for name in ("validation", "detection"):
        if getattr(loop, name) is not None:
            state = getattr(loop, name).state_dict()
            tensors.update({f"{name}/{k}": t for k, t in state.items()})
    if loop.order is not None:
        tensors["loop/order"] = loop.order
    if loop.potentials:
        tensors["loop/potentials"] = torch.stack(loop.potentials)
    tensors["loop/accepted"] = loop.accepted
    tensors["loop/divergent"] = loop.divergences  # the key of the checkpoints written so far
    for name in _PER_SAMPLE:
        if getattr(loop, name):
            tensors[f"loop/{name}"] = torch.stack(getattr(loop, name))
    for name in ("snapshot", "epoch_start", "snapshot_averages"):
        tensors.update({f"{name}/{k}": t for k, t in (getattr(loop, name) or {}).items()})
    curve, fields = _curve_state(loop.curve, loop.accept_rates)
    tensors.update(curve)
    header = {
        "sampler": sampler_header,
        "loop": {name: getattr(loop, name) for name in _POSITION},
        "curve_fields": fields,
    }
    return tensors, header


def _restore_chain(
    experiment: Experiment, tensors: dict[str, Tensor], header: dict[str, Any]
) -> Loop:
    """The loop `_chain_state` wrote, with the experiment's generators and potential set."""
    loop = Loop.start(experiment)
    restore_sampler_state(loop.sampler, _prefixed(tensors, "sampler/"), header["sampler"])
    for name, generator in experiment.generators.items():
        generator.set_state(tensors[f"generator/{name}"])
    experiment.potential.load_state_dict(_prefixed(tensors, "potential/"))
    loop.average.load_state_dict(_prefixed(tensors, "average/"))
    if loop.validation is not None:
        loop.validation.load_state_dict(_prefixed(tensors, "validation/"))
    # a checkpoint of a bdl that kept no out-of-distribution averages has none: the run's end
    # then scores its stored samples (bdl.runner.results.ood_metrics)
    if loop.detection is not None and _prefixed(tensors, "detection/"):
        loop.detection.load_state_dict(_prefixed(tensors, "detection/"))
    device = experiment.run.device
    loop.order = tensors["loop/order"].to(device) if "loop/order" in tensors else None
    if "loop/potentials" in tensors:
        loop.potentials = list(tensors["loop/potentials"].to(device).unbind())
    loop.accepted = tensors["loop/accepted"].to(device)
    loop.divergences = tensors["loop/divergent"].to(device)
    for name in _PER_SAMPLE:
        if f"loop/{name}" in tensors:
            setattr(loop, name, list(tensors[f"loop/{name}"].unbind()))
    for name in ("snapshot", "epoch_start"):
        saved = _prefixed(tensors, f"{name}/")
        setattr(loop, name, {k: t.to(device) for k, t in saved.items()} or None)
    # on the CPU, as the averages. A bdl that kept none had no snapshot after burn-in either (a
    # back-off waits for the next quiet epoch, which saves them) and no draws in burn-in
    saved = _prefixed(tensors, "snapshot_averages/")
    loop.snapshot_averages = saved or loop.snapshot_averages
    loop.curve = Curve.from_tensors(
        header["curve_fields"], tensors["loop/curve"], tensors["loop/curve_kinds"]
    )
    loop.accept_rates = tensors["loop/accept_rates"].tolist()
    for name, value in header["loop"].items():
        setattr(loop, name, value)
    return loop


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


#: The root's keys and their defaults: a checkpoint written before a key existed ran as its default.
#: (An option's, by its name, as `resumable_config` writes it.)
_ROOT_DEFAULTS = {
    field.name: field.default.name if isinstance(field.default, Enum) else field.default
    for field in dataclasses.fields(RunConfig)
    if field.default is not dataclasses.MISSING
}


def check_same_config(cfg: DictConfig, header: dict[str, Any], path: Path) -> None:
    now = resumable_config(cfg)
    added = (now.keys() - header["config"].keys()) & _ROOT_DEFAULTS.keys()
    saved = {k: _ROOT_DEFAULTS[k] for k in added} | header["config"]
    differ = sorted(k for k in saved.keys() | now.keys() if saved.get(k) != now.get(k))
    if differ:
        shown = ", ".join(f"{k} ({saved.get(k)!r} there, {now.get(k)!r} now)" for k in differ[:6])
        raise ConfigError(
            f"{path} belongs to another config: {shown}{' ...' if len(differ) > 6 else ''}. "
            "Resume with the run's own overrides (see .hydra/overrides.yaml there), or start "
            "afresh in a new directory"
        )
