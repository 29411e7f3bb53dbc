"""Checkpoints: a run's whole state in one safetensors file, written atomically.

A checkpoint is one ``checkpoint.safetensors``: every tensor of the loop's state (parameters,
sampler buffers, generator states, hyperparameters, the running model average) under a flat
name, and a JSON header (the safetensors metadata) with everything else (positions, counters, the
curve so far, the config it belongs to). One file replaced atomically, so a kill at any moment
leaves the previous checkpoint or the new one, never a mixture. The header records the SHA-256 of
the tensor data, so a file damaged after it was written is refused by name rather than resumed
from. Nothing here unpickles: safetensors and JSON cannot execute code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save
from torch import Tensor

from bdl.samplers.base import SamplerState
from bdl.store import StoreError, atomic_write

FILE = "checkpoint.safetensors"
# 2: the state of each chain under chain_<k>/ (bdl-run chains=K)
FORMAT_VERSION = 2
_HEADER = "bdl_checkpoint"
_BASE_FIELDS = {f.name for f in dataclasses.fields(SamplerState)}


class CheckpointError(StoreError):
    """A checkpoint that cannot be resumed from; the message names the file and the way out."""


def _digest(tensors: dict[str, Tensor]) -> str:
    sha = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name]
        sha.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        sha.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()


def save(path: Path, tensors: dict[str, Tensor], header: dict[str, Any]) -> None:
    """Write ``tensors`` and the JSON-serialisable ``header`` to ``path`` atomically."""
    cpu = {name: t.detach().to("cpu", copy=True).contiguous() for name, t in tensors.items()}
    header = {**header, "format_version": FORMAT_VERSION, "sha256": _digest(cpu)}
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
        data = path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"{path} cannot be read ({error.strerror or error}); {fix}") from None
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
    if version < FORMAT_VERSION:
        raise CheckpointError(
            f"{path} was written by an older bdl (checkpoint format {version}; this bdl resumes "
            f"format {FORMAT_VERSION}): finish it with the bdl that started it, or {fix}"
        )
    if _digest(tensors) != header.get("sha256"):
        raise CheckpointError(f"{path} is corrupt (its tensors fail their sha256 check); {fix}")
    return tensors, header


def _metadata(data: bytes) -> dict[str, str]:
    """The safetensors header's ``__metadata__`` (the format: an 8-byte little-endian length,
    then that many bytes of JSON)."""
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + length])["__metadata__"]


def sampler_state(state: SamplerState) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """A sampler state as flat tensors and a JSON header. Buffers that are the parameter list
    itself (a variational mean) are recorded as aliases, not stored twice."""
    tensors = {f"params/{i}": p for i, p in enumerate(state.params)}
    buffers, aliases = {}, []
    for key, values in state.buffers.items():
        if values is state.params:
            aliases.append(key)
            continue
        buffers[key] = len(values)
        tensors.update({f"buffers/{key}/{i}": t for i, t in enumerate(values)})
    tensors.update({f"info/{key}": t for key, t in state.info.items()})
    extra = {
        f.name: dataclasses.asdict(getattr(state, f.name))
        for f in dataclasses.fields(state)
        if f.name not in _BASE_FIELDS
    }
    header = {
        "step": state.step,
        "grad_evals": state.grad_evals,
        "buffers": buffers,
        "aliases": aliases,
        "extra": extra,
    }
    return tensors, header


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
