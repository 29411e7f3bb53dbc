"""The command line checked before Hydra acts on it: a mistake ends in one line with a "did you
mean", and nothing is written for a command that never starts.

Hydra answers a misspelt option of a group (``sampler=SGHMC``) with its whole search path, a
misspelt key (``epoch=20``) with the advice to add it (``+epoch=20``, which the schema then
refuses), a key given without its group (``lr=0.01`` for ``sampler.lr``) the same way, and a
``--key value`` with argparse's usage; and it creates the run's directory before the config is
validated. `check` finds these in the overrides, against the options of the packaged config
groups and the keys of the config they compose, and (for a single run) composes and validates
the whole config before Hydra creates anything.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Glob, Override, RangeSweep
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bdl.composition import plugins
from bdl.composition.config import RUNTIME_ARGUMENTS, ConfigError, options, validate
from bdl.composition.hydra_node import check_hydra_node
from bdl.errors import did_you_mean

#: Hydra's own flags, and whether each takes a value (``--info``'s is optional, so never read).
HYDRA_FLAGS = {
    **dict.fromkeys(["-h", "--help", "--hydra-help", "--version", "--resolve"], False),
    **dict.fromkeys(["-m", "--multirun", "-r", "--run", "-sc", "--shell-completion"], False),
    **dict.fromkeys(["-i", "--info"], False),
    **dict.fromkeys(["-c", "--cfg", "-p", "--package", "--experimental-rerun"], True),
    **dict.fromkeys(["-cp", "--config-path", "-cn", "--config-name"], True),
    **dict.fromkeys(["-cd", "--config-dir"], True),
}
#: Flags after which the config is not bdl's packaged one, or no run is composed: left to Hydra.
NOT_CHECKED = {"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir"}
NOT_CHECKED |= {"--experimental-rerun", "-sc", "--shell-completion"}
#: Flags that print rather than run: the overrides are checked, the config is not validated.
PRINTING = {"-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info"}


def groups() -> list[str]:
    """The config groups of bdl's packaged configs (``conf/``): its folders."""
    return sorted(
        entry.name
        for entry in files("bdl.conf").iterdir()
        if entry.is_dir() and not entry.name.startswith(("_", ".")) and entry.name != "hydra"
    )


def group_options(group: str) -> list[str]:
    """The options of a config group: the names of its YAML files, and those that installed
    plugins add (`bdl.composition.plugins`)."""
    return sorted(
        [
            entry.name.removesuffix(".yaml")
            for entry in files("bdl.conf").joinpath(group).iterdir()
            if entry.name.endswith(".yaml")
        ]
        + plugins.options(group)
    )


def config_keys(cfg: DictConfig) -> list[str]:
    """Every key of ``cfg`` by its dotted path, nodes and leaves (``sampler``, ``sampler.lr``),
    Hydra's own ``hydra`` node left out; unresolved, so that no interpolation is evaluated."""
    keys: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            keys.append(path)
            if isinstance(value, dict):
                walk(value, f"{path}.")

    tree = OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False)
    walk({k: v for k, v in tree.items() if k != "hydra"}, "")
    return keys


def key_error(key: str, value: str, cfg: DictConfig, program: str = "bdl-run") -> ConfigError:
    """The line for an override of ``key``, which ``cfg`` lacks: the key meant, or for an
    argument that the group's constructor takes but its config does not set, the ``+`` that
    adds it."""
    group, _, option = key.partition(".")
    if group in RUNTIME_ARGUMENTS and option and group in cfg and "_target_" in cfg[group]:
        module, _, name = str(cfg[group]._target_).rpartition(".")
        try:
            target = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            target = None
        if target is not None and option in options(group, target):
            return ConfigError(
                f"{key} is an argument of {name} that the {group}'s config does not set: "
                f"add it with +{key}={value}"
            )
    where = f"of {key.rpartition('.')[0]}" if "." in key else "of the config"
    hint = did_you_mean(key, config_keys(cfg), value) or f" ({program} --help lists the keys)"
    return ConfigError(f"{key} is not a key {where}{hint}")


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The flags and the overrides of a command line; a flag that is not Hydra's is a key given
    argparse-style (``--epochs 20``), answered with the override meant."""
    flags, overrides = [], []
    args = iter(argv)
    for arg in args:
        if not arg.startswith("-"):
            overrides.append(arg)
            continue
        name, sep, value = arg.partition("=")
        if name in HYDRA_FLAGS:
            flags.append(name)
            if HYDRA_FLAGS[name] and not sep:
                next(args, None)
            continue
        if not sep:
            value = next(args, "<value>")
        key = name.lstrip("-").replace("-", "_")
        with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
            keys = config_keys(compose("config"))
        hint = did_you_mean(key, [*keys, *groups()], value) or (": bdl-run --help lists the keys")
        raise ConfigError(f"{name} is not a flag of bdl-run (overrides are key=value){hint}")
    return flags, overrides


def _values(override: Override) -> list[Any]:
    """The values of an override, each of a sweep's; none for a sweep given by an expression
    only the sweeper expands (``interval(0, 1)``, ``glob(*)``)."""
    value = override.value()
    if isinstance(value, ChoiceSweep):
        return list(value.list)
    if isinstance(value, RangeSweep):
        return list(override.sweep_iterator())
    if override.is_sweep_override():
        return []
    return [value]


def check_group(group: str, value: Any) -> None:
    """``group=value`` names one of the group's options."""
    known = group_options(group)
    if value is None or str(value) in known:
        return
    hint = did_you_mean(str(value), known) or f" (options: {', '.join(known)})"
    hint = hint.replace("did you mean ", f"did you mean {group}=")
    raise ConfigError(f"{group}={value} is not an option of the {group} group{hint}")


def check(argv: Sequence[str]) -> None:
    """Check ``bdl-run``'s command line; raises `ConfigError` with the line for the first
    mistake. A single run's config is composed and validated, so that a mistake Hydra would
    only find after creating the run's directory is found before."""
    try:
        flags, overrides = _split(argv)
        if NOT_CHECKED & set(flags):
            return
        parsed = [
            o
            for o in OverridesParser.create().parse_overrides(overrides)
            if not o.key_or_group.startswith("hydra")
        ]
        known_groups = set(groups())
        choices: dict[str, list[Any]] = {}
        for override in parsed:
            if override.key_or_group in known_groups and not override.is_delete():
                values = _values(override)
                for value in values:
                    check_group(override.key_or_group, value)
                choices[override.key_or_group] = values or [None]
        keys = [o for o in parsed if o.key_or_group not in known_groups and not o.is_add()]
        with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
            for combination in itertools.product(*choices.values()):
                chosen = [
                    f"{g}={v}" for g, v in zip(choices, combination, strict=True) if v is not None
                ]
                cfg = compose("config", chosen)
                present = set(config_keys(cfg))
                for override in keys:
                    if override.key_or_group not in present:
                        value = override.input_line.partition("=")[2]
                        raise key_error(override.key_or_group, value, cfg)
            if {"-m", "--multirun"} & set(flags) or PRINTING & set(flags):
                return
            validate(compose("config", [o.input_line for o in parsed]))
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(_first_lines(error)) from None


def _first_lines(error: BaseException) -> str:
    """Hydra's error in one line: its first line, and its cause's where that says more."""
    lines = [str(error).strip().splitlines()[0]] if str(error).strip() else []
    cause = error.__cause__
    if cause is not None and str(cause).strip():
        lines.append(str(cause).strip().splitlines()[0])
    return ": ".join(lines) or type(error).__name__


#: What marks a directory as a run's (`bdl.storage.outputs`): data, never a config to compose.
_RUN_MARKS = (".hydra/config.yaml", "metrics.json")


def _run_directory(path: Path) -> Path | None:
    """The run directory ``path`` is or lies in (its ``.hydra/`` included), or None."""
    for folder in (path, *path.parents):
        if folder.name == ".hydra" or any((folder / mark).is_file() for mark in _RUN_MARKS):
            return folder.parent if folder.name == ".hydra" else folder
    return None


def check_composition(argv: Sequence[str], calling_module: str) -> None:
    """Compose, as Hydra will for the command line ``argv`` of the app in ``calling_module``,
    the config with its ``hydra`` node (a primary config of ``-cp``/``-cn``, presets of
    ``--config-dir``, the options a sweep or the sweeper's ``params`` choose) and refuse, before
    Hydra builds anything, any key of that node that bdl's packaged configs do not set as it
    does, but those a config may set (`bdl.composition.hydra_node`); refuse a search path
    from the command line or a primary config, ``--experimental-rerun`` (it unpickles its file)
    and a run directory as a config folder."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_automatic_config_search_path, get_args_parser
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    try:
        args = get_args_parser().parse_args(list(argv))
    except SystemExit:
        return  # Hydra refuses the same command line with its usage, before composing anything
    if args.experimental_rerun is not None:
        raise ConfigError(
            f"--experimental-rerun {args.experimental_rerun}: Hydra unpickles that file, and a "
            "pickle runs code; continue a run with bdl-run hydra.run.dir=RUN resume=true"
        )
    if args.help or args.hydra_help or not _reaches_hydra(args):
        return
    parsed = _parsed(args.overrides)
    for override in parsed:
        if override.key_or_group.startswith("hydra.searchpath"):
            raise ConfigError(
                f"{override.input_line} is refused: a search path adds configs from elsewhere, "
                "and Hydra imports a pkg:// one's package (running its code); add configs with "
                "--config-dir DIR"
            )
    packaged = create_automatic_config_search_path(None, calling_module, "pkg://bdl.conf")
    search_path = create_automatic_config_search_path(
        None, calling_module, args.config_path or "pkg://bdl.conf"
    )
    if args.config_dir is not None:
        search_path.prepend(
            "command-line",
            f"file://{Path(args.config_dir).absolute()}",
            SearchPathQuery(provider="schema"),
        )
    name = args.config_name or "config"
    for entry in search_path.get_path():
        if entry.path is None or "://" in entry.path.removeprefix("file://"):
            continue  # a package's configs (pkg://), a schema's (structured://)
        folder = Path(entry.path.removeprefix("file://")).absolute()
        run = _run_directory(folder) or _run_directory((folder / name).parent)
        if run is not None:
            raise ConfigError(
                f"{folder} is in the run directory {run}: a run's files are data, never a "
                f"config to compose; rerun it with bdl-run hydra.run.dir={run} resume=true, or "
                "copy what you need into a preset of your own (--config-dir)"
            )
        _refuse_searchpath(folder / f"{name}.yaml", packaged)
    mode = RunMode.MULTIRUN if args.multirun else RunMode.RUN
    typed = frozenset(
        o.key_or_group.removeprefix("hydra.") for o in parsed if o.key_or_group.startswith("hydra.")
    )
    try:
        hydra = Hydra.create_main_hydra2(task_name="bdl-run", config_search_path=search_path)
        baseline = _Baseline(packaged)
        jobs = [(args.overrides, mode)]
        cfg = None
        while jobs:
            overrides, run_mode = jobs.pop(0)
            composed = hydra.compose_config(
                name, overrides, run_mode=run_mode, with_log_configuration=False
            )
            lines = _parsed(overrides)
            check_hydra_node(
                OmegaConf.to_container(composed.hydra, resolve=False),
                baseline.node(composed.hydra.runtime.choices, run_mode),
                typed,
                (
                    [o.input_line for o in lines if not o.is_hydra_override()],
                    [o.input_line for o in lines if o.is_hydra_override()],
                ),
            )
            if cfg is None:
                cfg = composed
                jobs += [(job, RunMode.RUN) for job in _sweep_choices(hydra, cfg, overrides)]
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(_first_lines(error)) from None
    finally:
        GlobalHydra.instance().clear()


def _reaches_hydra(args: Any) -> bool:
    """Whether the command line can put into Hydra's own node anything the packaged configs
    (bdl's, and those of packages the user installed) do not hold: a primary config or a folder
    of presets (``-cp``, ``-cn``, ``--config-dir``), or an override of ``hydra`` itself. Without
    one, that node is the packages' and is trusted as they are: composing it would only cost a
    composition (a third of ``bdl-run``'s start)."""
    if args.config_path or args.config_name or args.config_dir:
        return True
    try:
        parsed = OverridesParser.create().parse_overrides(args.overrides)
    except HydraException:
        return True  # Hydra refuses the override as it composes: let the composition say how
    return any(o.key_or_group.split("/")[0].split(".")[0] == "hydra" for o in parsed)


def _parsed(overrides: Sequence[str]) -> list[Override]:
    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return []  # Hydra refuses the override as it composes: let the composition say how


class _Baseline:
    """Hydra's node as bdl's packaged configs (and the installed plugins') compose it, with the
    options of Hydra's own groups (``hydra/launcher``, ``hydra/job_logging``...) that a config
    chose: what `check_hydra_node` compares a config's node with."""

    def __init__(self, search_path: Any) -> None:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        self.loader = ConfigLoaderImpl(config_search_path=search_path)
        self.nodes: dict[tuple, dict] = {}

    def _compose(self, overrides: tuple[str, ...], mode: Any) -> dict:
        if (overrides, mode) not in self.nodes:
            cfg = self.loader.load_configuration("config", list(overrides), run_mode=mode)
            self.nodes[overrides, mode] = OmegaConf.to_container(cfg.hydra, resolve=False)
        return self.nodes[overrides, mode]

    def node(self, choices: Any, mode: Any) -> dict:
        default = self._compose((), mode)["runtime"]["choices"]
        picks = []
        for group, option in choices.items():
            if group.startswith("hydra/") and option != default.get(group):
                picks.append(f"{group}={option}" if option is not None else f"~{group}")
        try:
            return self._compose(tuple(picks), mode)
        except (HydraException, OmegaConfBaseException):
            raise ConfigError(
                f"{' '.join(picks)} is refused: Hydra's groups take options of bdl and of the "
                "installed Hydra plugins only (bdl-run --hydra-help lists them)"
            ) from None


def _refuse_searchpath(primary: Path, packaged: Any) -> None:
    """Refuse a primary config whose ``hydra.searchpath`` adds a folder or package that is not
    already searched (bdl's, Hydra's, the installed plugins'): Hydra imports a ``pkg://`` one's
    package (running its ``__init__``) while composing, before any check."""
    if not primary.is_file():
        return
    from bdl.composition.instantiation import load_yaml

    known = {entry.path for entry in packaged.get_path()}
    entries = OmegaConf.select(load_yaml(primary), "hydra.searchpath", default=None) or []
    for entry in entries:
        if str(entry) not in known:
            raise ConfigError(
                f"{primary}: hydra.searchpath names {entry}, a search path that is not bdl's nor "
                "an installed plugin's (Hydra would import a package's code to read its "
                "configs): add configs with --config-dir DIR"
            )


def _sweep_choices(hydra: Any, cfg: DictConfig, overrides: Sequence[str]) -> list[list[str]]:
    """Overrides for one job per option that a sweep (on the command line or in the sweeper's
    ``params``) gives a config group, the other overrides as given and each other sweep at its
    first value: every preset a sweep's jobs compose is composed once."""
    parser = OverridesParser.create()
    given = parser.parse_overrides(list(overrides))
    params = OmegaConf.to_container(cfg.hydra.sweeper, resolve=False).get("params") or {}
    keys = {o.key_or_group for o in given}
    lines = [f"{key}={value}" for key, value in params.items() if key not in keys]
    parsed = [*given, *parser.parse_overrides(lines)]
    choices = set(cfg.hydra.runtime.choices)
    swept = [o.key_or_group in choices and o.is_sweep_override() for o in parsed]
    axes = [_group_values(o, hydra) if o.key_or_group in choices else _first(o) for o in parsed]
    first = [values[:1] for values in axes]
    jobs = []
    for i, values in enumerate(axes):
        if swept[i]:
            jobs += [sum([*first[:i], [v], *first[i + 1 :]], []) for v in values]
    return jobs


def _first(override: Override) -> list[str]:
    """The override for one job: a sweep's first value; none for a sweep only its sweeper
    expands (``interval(0, 1)``), which sets a value, never a group's option."""
    if not override.is_sweep_override():
        return [override.input_line]
    try:
        return [f"{override.get_key_element()}={next(iter(override.sweep_string_iterator()))}"]
    except (HydraException, StopIteration):
        return []


def _group_values(override: Override, hydra: Any) -> list[str]:
    """``group=option`` for each option that the override of a config group chooses (each of a
    sweep's, the options matching a ``glob``)."""
    value = override.value()
    if isinstance(value, Glob):
        return [
            f"{override.get_key_element()}={v}"
            for v in value.filter(hydra.config_loader.get_group_options(override.key_or_group))
        ]
    if not override.is_sweep_override():
        return [override.input_line]
    return [f"{override.get_key_element()}={v}" for v in override.sweep_string_iterator()]
