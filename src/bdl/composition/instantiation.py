"""What a config may build: only the classes and functions that bdl's own config groups name.

Hydra's ``instantiate`` imports and calls whatever a ``_target_`` says, with whatever keys sit
beside it: ``numpy.load`` with ``allow_pickle: true`` or ``torch.load`` with ``weights_only:
false`` in a downloaded run directory, an experiment preset or a sweep file would unpickle (run)
a payload. Every object bdl builds from a config is therefore built by `instantiate` here,
which first checks, before anything is imported or called, that every ``_target_`` in the node
is one that a YAML file of the packaged ``bdl.conf`` names (the list is read from those files, so
a new option is allowed by adding its file), written as plain text rather than interpolated, and
that every other key is an argument of that target's signature (Hydra's ``_args_``, positional
arguments that no name checks, are refused with the rest).

A run directory is data: `inert` makes the config it holds unable to call any resolver
(``${oc.env:...}``, ``${oc.decode:...}``) when it is read back, so that reading it never looks
into the environment of whoever reads it.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf._utils import get_yaml_loader
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from bdl.composition import plugins
from bdl.composition.allowlist import GROUPS, allowed_targets, group_targets, targets_in
from bdl.errors import ConfigError

__all__ = [
    "allowed_targets",
    "check_targets",
    "inert",
    "instantiate",
    "load_yaml",
    "refuse_recursion",
]

#: Hydra's keys that a bdl config may hold beside ``_target_``.
_HYDRA_KEYS = {"_target_", "_partial_"}
#: A resolver call (``${oc.env:HOME}``, ``${now:%H}``), as opposed to a reference to another key
#: of the config (``${protocol.mlp.hidden}``).
RESOLVER_CALL = re.compile(r"\$\{\s*[\w.]+\s*:")
#: ``${oc.env:VAR,default}`` alone: a run directory reads it as its default.
_ENV_WITH_DEFAULT = re.compile(r"\$\{\s*oc\.env\s*:\s*\w+\s*,\s*([^${}]*?)\s*\}")


def check_targets(node: Any, where: str = "") -> list[tuple[str, dict]]:
    """Refuse, before anything is imported, a ``_target_`` in ``node`` (a config or part of one)
    that no file of ``bdl.conf`` names; returns ``(key, mapping)`` of each target's node."""
    raw = OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig) else node
    found = []
    for path, spec in targets_in(raw):
        key = ".".join(part for part in (where, path) if part)
        target = spec["_target_"]
        if not isinstance(target, str) or not (
            target in allowed_targets() or plugins.admits(target)
        ):
            group = key.split(".")[0] or "config"
            fix = f"choose a {group} option listed by bdl-run --help"
            if group == "model" and isinstance(target, str):
                fix = f"{plugins.trust_hint(target)}; else {fix}"
            raise ConfigError(
                f"{key + '.' if key else ''}_target_={target} is not one of bdl's own targets"
                f"{plugins.missing(target)}: {fix}"
            )
        if key in GROUPS:
            _check_group_target(key, target)
        found.append((key, spec))
    return found


def _check_group_target(group: str, target: str) -> None:
    """A group's node builds one of that group's targets: a model's class as the dataset (or
    bdl's sweep callback) would be called with the dataset's arguments and fail inside."""
    if target in group_targets(group) or plugins.handed_over(target):
        return
    owner = plugins.group_of(target) or next(
        (other for other in GROUPS if target in group_targets(other)), None
    )
    if owner == group:
        return
    what = f"the target of a {owner} option" if owner else "the target of no option"
    raise ConfigError(
        f"{group}._target_={target} is {what}, not a {group}'s: choose a {group} option "
        "listed by bdl-run --help"
    )


def _import(target: str) -> Any:
    module, _, attribute = target.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def resolve(node: DictConfig) -> Any:
    """The class or function that ``node``'s ``_target_`` names, once it is one of bdl's own: what
    a sampler declares is read off its class before the sampler is made."""
    check_targets(node)
    return _import(node._target_)


def _check_arguments(key: str, spec: dict) -> None:
    """Refuse a key beside an allowed ``_target_`` that is no argument of its signature."""
    signature = inspect.signature(_import(spec["_target_"]))
    names = [
        name
        for name, p in signature.parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    for name in spec:
        if name not in _HYDRA_KEYS and name not in names:
            raise ConfigError(
                f"{key + '.' if key else ''}{name} is not an option of {spec['_target_']} "
                f"(options: {', '.join(names) or 'none'})"
            )


def instantiate(node: DictConfig, *args: Any, **kwargs: Any) -> Any:
    """Hydra's ``instantiate`` of ``node`` once every ``_target_`` in it is allowed and every key
    beside one is an argument of its target."""
    where = "" if node._key() is None else str(node._key())
    for key, spec in check_targets(node, where):
        _check_arguments(key, spec)
    # Resolved here, once, and handed over with no "${" left: Hydra resolves what it is given
    # again, so that a run directory's literal "${oc.env:...}" would call the resolver it names.
    resolved = OmegaConf.to_container(node, resolve=True)
    _refuse_interpolation_text(resolved, where)
    from hydra.utils import instantiate as hydra_instantiate  # Hydra loaded when first used

    return hydra_instantiate(OmegaConf.create(resolved), *args, **kwargs)


def _refuse_interpolation_text(value: Any, key: str) -> None:
    if isinstance(value, dict):
        for name, item in value.items():
            _refuse_interpolation_text(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _refuse_interpolation_text(item, f"{key}[{i}]")
    elif isinstance(value, str) and "${" in value:
        raise ConfigError(
            f"{key}={value} is an interpolation that a saved run may not resolve (it would read "
            f"the environment or call a resolver): give the value itself, e.g. bdl-eval RUN_DIR "
            f"{key}=..."
        )


def inert(raw: Any, as_written: bool = False) -> Any:
    """A run directory's raw config (``OmegaConf.to_container(..., resolve=False)``) that calls
    no resolver when it is read: any resolver call becomes literal text, except (unless
    ``as_written``, for a report that shows the config as it was written) an
    ``${oc.env:VAR,default}`` that is the whole value, which becomes its default: bdl's data
    root, ``${oc.env:BDL_DATA_DIR,null}``, reads as null, which the loaders take to mean
    ``$BDL_DATA_DIR`` themselves. References to other keys (``${protocol.mlp.hidden}``) still
    resolve."""
    if isinstance(raw, dict):
        return {key: inert(value, as_written) for key, value in raw.items()}
    if isinstance(raw, list):
        return [inert(value, as_written) for value in raw]
    if isinstance(raw, str) and RESOLVER_CALL.search(raw):
        default = None if as_written else _ENV_WITH_DEFAULT.fullmatch(raw.strip())
        if default is not None:
            return None if default.group(1) in ("null", "") else default.group(1)
        return raw.replace("${", "\\${")  # OmegaConf's escape: a literal "${"
    return raw


#: The most nodes a run directory's YAML file may expand to, its aliases expanded: a config and
#: Hydra's record of it hold a few thousand; an alias bomb (nine aliases of nine aliases of ...)
#: billions, which building the config would never finish.
MAX_YAML_NODES = 200_000
#: The largest run directory YAML file read, in bytes.
MAX_YAML_BYTES = 10_000_000


def load_yaml(path: Path) -> DictConfig | ListConfig:
    """The YAML file ``path`` of a run directory as OmegaConf reads it, once its size and the
    number of nodes its aliases expand to are known to be bounded; a file that is not YAML, or
    is too large, ends in one line naming it (`ConfigError`)."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise ConfigError(f"{path} holds {size} bytes, more than a run's config ever does")
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        root = yaml.compose(text, Loader=get_yaml_loader())
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not YAML: {str(error).splitlines()[0]}") from None
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def expanded(node: yaml.Node) -> int:
        if id(node) in open_nodes:  # OmegaConf would follow the cycle until Python's stack ends
            raise ConfigError(
                f"{path} holds a YAML alias of its own enclosing node (a cycle): not a config bdl "
                "wrote; regenerate it, or remove the run"
            )
        if id(node) not in sizes:
            open_nodes.add(id(node))
            children = node.value if isinstance(node.value, list) else []
            items = [
                part
                for child in children
                for part in (child if isinstance(child, tuple) else (child,))
            ]
            sizes[id(node)] = min(1 + sum(expanded(item) for item in items), MAX_YAML_NODES + 1)
            open_nodes.discard(id(node))
        return sizes[id(node)]

    if root is not None and expanded(root) > MAX_YAML_NODES:
        raise ConfigError(
            f"{path} expands to more than {MAX_YAML_NODES} values through its YAML aliases (an "
            "alias bomb): not a config bdl wrote; regenerate it, or remove the run"
        )
    try:
        return OmegaConf.create(text) if root is not None else OmegaConf.create()
    except yaml.YAMLError as error:  # a duplicate key
        raise ConfigError(f"{path} is not a config: {str(error).splitlines()[0]}") from None


def refuse_recursion(raw: Any, path: Path) -> None:
    """Refuse a run directory's config (``raw``, made `inert`) whose interpolation refers
    back to itself (``a: ${b}``, ``b: ${a}``), naming the key and ``path``: OmegaConf would only
    say "Recursive interpolation detected" when a builder first read it."""
    cfg = OmegaConf.create(raw)

    def walk(node: Any, prefix: str) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(value, f"{name}.")
            elif isinstance(value, str) and "${" in value:
                try:
                    OmegaConf.select(cfg, name, throw_on_resolution_failure=True)
                except InterpolationResolutionError as error:
                    if "Recursive" in str(error):
                        raise ConfigError(
                            f"{path}: {name}={value} refers back to itself (a recursive "
                            "interpolation): give the value itself"
                        ) from None
                except OmegaConfBaseException:
                    pass  # ${hydra:...} and the like resolve only inside Hydra: not recursion

    if isinstance(raw, dict):
        walk(raw, "")
