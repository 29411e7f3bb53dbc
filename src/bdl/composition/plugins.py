"""Options that installed packages add to bdl's config groups: extension by installation.

A package declares each of its options by a Python entry point, one group per kind::

    [project.entry-points."bdl.models"]
    mynet = "mypkg.nets:MyNet"          # bdl-run model=mynet

    [project.entry-points."bdl.datasets"]
    mydata = "mypkg.data:load"          # bdl-run dataset=mydata

(``bdl.priors``, ``bdl.samplers`` and ``bdl.schedules`` alike). The entry point names the option
and the one class or function it builds. The option's YAML, if the package ships one, lies in the
package's ``conf`` folder by group and name, as bdl's own do: ``mypkg/conf/model/mynet.yaml``,
whose ``_target_`` is that class or function (``mypkg.nets.MyNet``); without one, the option is
the target alone, its arguments added on the command line (``+model.width=64``).

Installing the package is the act of trust, and the only one: the targets its entry points name join
bdl's own in the allow-list of `bdl.composition.instantiation`, and its YAML files join the config
groups (registered in Hydra's config store, so every ``compose`` of bdl's config finds them). A run
directory, a sweep file or an experiment preset can name a plugin's target only while its package is
installed; one naming a target of a package that is not is refused in one line naming the package.
Nothing here imports a plugin's code: the entry points and YAML files are read as text (the
package's folder found by ``importlib.util.find_spec``, which runs none of it).

A plugin may not pass for bdl, nor vouch for code that is not its own: an option named as one of
bdl's own in the same group, a target inside the ``bdl`` package, in the standard library or in
another installed distribution (``numpy.load``) is refused (`check`), and so is a YAML file
that names any target but the plugin's own and bdl's.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points, packages_distributions
from importlib.resources import files
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bdl.composition.allowlist import allowed_targets, targets_in
from bdl.errors import ConfigError

__all__ = [
    "GROUPS",
    "Option",
    "admits",
    "check",
    "discover",
    "group_of",
    "handed_over",
    "missing",
    "options",
    "register",
    "trusted",
]

#: The entry-point group of each config group a plugin may add options to.
GROUPS = {
    "bdl.models": "model",
    "bdl.datasets": "dataset",
    "bdl.priors": "prior",
    "bdl.samplers": "sampler",
    "bdl.schedules": "schedule",
}
#: Groups whose targets the runner calls again with runtime arguments (the data's shapes, the
#: run's length, the step and generator): a config without a YAML builds them partially.
_PARTIAL = {"model", "sampler", "schedule"}


@dataclass(frozen=True)
class Option:
    """One option a plugin adds: ``group=name`` builds ``target``; ``package`` is the
    distribution that declares it, ``config`` the option's node (its YAML, or the target)."""

    group: str
    name: str
    target: str
    package: str
    config: dict[str, Any]


def _bdl_options(group: str) -> set[str]:
    return {
        entry.name.removesuffix(".yaml")
        for entry in files("bdl.conf").joinpath(group).iterdir()
        if entry.name.endswith(".yaml")
    }


def _package_name(entry: EntryPoint) -> str:
    return entry.dist.name if entry.dist is not None else entry.module.partition(".")[0]


def _yaml_of(entry: EntryPoint, group: str) -> Path | None:
    """``<package>/conf/<group>/<name>.yaml`` of the entry point's top-level package, found
    without importing it."""
    try:
        spec = importlib.util.find_spec(entry.module.partition(".")[0])
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "conf" / group / f"{entry.name}.yaml"
        if path.is_file():
            return path
    return None


def _option(entry: EntryPoint, group: str, own_targets: frozenset[str]) -> Option:
    """The option ``entry`` declares; raises `ConfigError` for one bdl refuses."""
    package = _package_name(entry)
    where = f"{package}'s entry point {entry.group}:{entry.name}"
    if not entry.attr:
        raise ConfigError(f"{where} = {entry.value} names no object: write it as module:object")
    target = f"{entry.module}.{entry.attr}"
    if entry.name in _bdl_options(group):
        raise ConfigError(
            f"{where} shadows bdl's own {group}={entry.name}: the plugin must choose another name"
        )
    top = entry.module.partition(".")[0]
    if top == "bdl":
        raise ConfigError(f"{where} names {target}, inside bdl: a plugin's targets are its own")
    owners = _owners().get(top, [])
    if top in sys.stdlib_module_names or (owners and package not in owners):
        raise ConfigError(
            f"{where} names {target}, of {', '.join(owners) or 'the standard library'}: a "
            "plugin's targets are its own"
        )
    path = _yaml_of(entry, group)
    if path is None:
        config: dict[str, Any] = {"_target_": target}
        if group in _PARTIAL:
            config["_partial_"] = True
    else:
        try:
            config = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        except (OSError, OmegaConfBaseException) as error:
            raise ConfigError(f"{path} is not a YAML mapping ({error}): fix the file") from None
        if not isinstance(config, dict) or config.get("_target_") != target:
            raise ConfigError(f"{path} must say _target_: {target}, the object {where} declares")
    for key, node in targets_in(config):
        named = node["_target_"]
        if named not in own_targets and named not in allowed_targets():
            raise ConfigError(
                f"{path}: {key + '.' if key else ''}_target_={named} is neither one of "
                f"{package}'s entry points nor one of bdl's own targets"
            )
    return Option(group, entry.name, target, package, config)


@functools.cache
def _owners() -> dict[str, list[str]]:
    """The installed distributions that provide each top-level module (those that list their
    files)."""
    return packages_distributions()


@functools.cache
def discover() -> tuple[tuple[Option, ...], tuple[str, ...]]:
    """The options of the installed plugins, and a line for each entry point refused."""
    declared = [(entry, group) for ep, group in GROUPS.items() for entry in entry_points(group=ep)]
    found, refused, seen = [], [], {}
    for entry, group in declared:
        own_targets = frozenset(
            f"{e.module}.{e.attr}"
            for e, _ in declared
            if e.attr and _package_name(e) == _package_name(entry)
        )
        try:
            option = _option(entry, group, own_targets)
        except ConfigError as error:
            refused.append(str(error))
            continue
        other = seen.setdefault((group, option.name), option.package)
        if other != option.package:
            refused.append(
                f"{group}={option.name} is declared by both {other} and {option.package}: "
                "uninstall one of them"
            )
            continue
        found.append(option)
    return tuple(found), tuple(refused)


def check() -> None:
    """Refuse to run while an installed plugin declares what bdl refuses, in one line."""
    refused = discover()[1]
    if refused:
        raise ConfigError(refused[0])


def options(group: str) -> list[str]:
    """The names of the options installed plugins add to ``group``."""
    return sorted(o.name for o in discover()[0] if o.group == group)


@functools.cache
def _installed_targets() -> dict[str, str]:
    return {o.target: o.package for o in discover()[0]}


#: Targets that a Python caller handed over as objects, while its call lasts (`trusted`).
_trusted: list[str] = []


def admits(target: Any) -> bool:
    """Whether ``target`` is one that an installed plugin declares, or an object that this
    process's own code handed over (`trusted`)."""
    return isinstance(target, str) and (target in _installed_targets() or target in _trusted)


def group_of(target: Any) -> str | None:
    """The group of the installed plugin's option whose target ``target`` is, if any."""
    return next((o.group for o in discover()[0] if o.target == target), None)


def handed_over(target: Any) -> bool:
    """Whether this process's own code handed ``target`` over as an object (`trusted`): its
    group is the one the caller built it for."""
    return target in _trusted


def dotted(obj: Any) -> str:
    """Where ``obj`` (a class or function) lives, as a ``_target_``: what a run records in
    place of the object, so that reading it back imports it and never unpickles."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not callable(obj) or not module or not name or "<" in name or module == "__main__":
        raise ConfigError(
            f"{obj!r} cannot be found again by its name: define it at the top level of a module "
            "of its own (mynet.py, imported), which a run records and load_run imports"
        )
    target = f"{module}.{name}"
    found = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    if found is not obj:
        raise ConfigError(f"{target} is not {obj!r}: define it at the top level of its module")
    return target


@contextlib.contextmanager
def trusted(*objects: Any) -> Iterator[None]:
    """Admit the classes or functions ``objects`` as targets while the block runs: the caller's
    handing them over is its act of trust, as installing a plugin is."""
    targets = [dotted(obj) for obj in objects]
    _trusted.extend(targets)
    try:
        yield
    finally:
        for target in targets:
            _trusted.remove(target)


def missing(target: Any) -> str:
    """What a refusal of ``target`` adds where its package is not installed (a run directory of
    a plugin's model read where the plugin is not): the package to install."""
    top = str(target).partition(".")[0]
    if top == "bdl" or not top.isidentifier() or importlib.util.find_spec(top) is not None:
        return ""
    return (
        f" nor an installed plugin's (its package {top} is not installed: install it, or put "
        "the folder of a module of your own on PYTHONPATH)"
    )


def trust_hint(target: str) -> str:
    """How a run of `bdl.run_model` with a network of the caller's own (``target``) is read
    back: its object handed over again, in Python or to ``bdl-eval``."""
    name = target.rpartition(".")[2]
    return (
        f"a network of your own (bdl.run_model's) is trusted again by "
        f"bdl.load_run(RUN, trust=[{name}]) or bdl-eval RUN --trust {target}"
    )


def register() -> None:
    """Add the installed plugins' options to Hydra's config groups (the config store, which
    every ``compose`` of bdl's config searches)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for option in discover()[0]:
        store.store(
            group=option.group, name=option.name, node=option.config, provider=option.package
        )
