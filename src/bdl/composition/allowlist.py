"""bdl's own targets: every ``_target_`` its packaged configs (``bdl.conf``) name, those of each
config group, and where the targets of a config tree are. The allow-list of
`bdl.composition.instantiation` and the checks of `bdl.composition.plugins` both read it, so it
imports neither."""

from __future__ import annotations

import functools
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

from omegaconf import OmegaConf

CONF_PACKAGE = "bdl.conf"


def _yaml_files(folder: Traversable) -> list[Traversable]:
    found = []
    for entry in folder.iterdir():
        if entry.is_dir():
            found += _yaml_files(entry)
        elif entry.name.endswith(".yaml"):
            found.append(entry)
    return found


def targets_in(node: Any) -> list[tuple[str, Any]]:
    """``(path, node)`` of every mapping in ``node`` that holds a ``_target_``, at any depth."""
    found = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            if "_target_" in value:
                found.append((path, value))
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")

    walk(node, "")
    return found


@functools.cache
def allowed_targets() -> frozenset[str]:
    """Every ``_target_`` written in the YAML files of the packaged ``bdl.conf``."""
    targets = set()
    for path in _yaml_files(files(CONF_PACKAGE)):
        raw = OmegaConf.to_container(OmegaConf.create(path.read_text(encoding="utf-8")))
        targets.update(str(node["_target_"]) for _, node in targets_in(raw))
    return frozenset(targets)


#: The config groups whose node names the target that builds it.
GROUPS = ("dataset", "model", "prior", "sampler", "schedule")


@functools.cache
def group_targets(group: str) -> frozenset[str]:
    """The ``_target_`` of each packaged option of ``group`` (``conf/<group>/*.yaml``, with the
    shared pieces they include, ``- /uci_loader@_here_``)."""
    root = files(CONF_PACKAGE)
    targets = set()
    for path in _yaml_files(root.joinpath(group)):
        raw = OmegaConf.to_container(OmegaConf.create(path.read_text(encoding="utf-8")))
        pieces = [raw]
        for entry in raw.get("defaults") or []:
            name = str(entry).partition("@_here_")[0]
            if isinstance(entry, str) and entry.startswith("/") and entry.endswith("@_here_"):
                text = root.joinpath(f"{name.lstrip('/')}.yaml").read_text(encoding="utf-8")
                pieces.append(OmegaConf.to_container(OmegaConf.create(text)))
        targets.update(str(piece["_target_"]) for piece in pieces if "_target_" in piece)
    return frozenset(targets)
