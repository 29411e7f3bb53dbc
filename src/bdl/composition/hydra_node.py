"""What a config may set in Hydra's own node: deny by default.

Hydra's node (``hydra:``) is code by another name: its callbacks, launcher and sweeper are
built, its logging configuration names the classes Python's logging builds and the files it
writes, ``job.env_set`` exports variables that later processes obey (``CXX`` for
``torch.compile``'s compiler, ``LD_PRELOAD``), ``searchpath`` imports packages, and ``setup``
lines of a SLURM job run in its shell. A preset handed from one researcher to another, or a
primary config, may therefore set only the keys of `ALLOWED` below, each with its value checked;
everything else in the node must be as bdl's packaged configs compose it (the *baseline*: the
same options of Hydra's own groups, ``hydra/launcher=slurm`` and the like, chosen from bdl and
the installed plugins only). The command line passes the same list; only where a path may lie is
left to it (a ``hydra.run.dir`` typed by the user is the user's).

Hydra's record of the run (``runtime``, ``job.config_name``, ``job.override_dirname``) is
written by Hydra as it composes and is not compared; ``overrides`` must be the command line's.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator
from typing import Any

from bdl.errors import ConfigError

#: What a refusal tells the user to do, once, at the end of its line.
FIX = "remove it from the config or preset that sets it (the list: docs/guide/configuration.md)"

#: Environment variables a config may set, with the values each may take: thread counts and
#: which GPUs, never one that makes a process load or run code (``CXX``, ``CC``, ``LD_*``,
#: ``PYTHON*``, ``TORCHINDUCTOR_*``, ``TRITON_*``).
ENVIRONMENT = {
    "OMP_NUM_THREADS": r"\d{1,4}",
    "MKL_NUM_THREADS": r"\d{1,4}",
    "OPENBLAS_NUM_THREADS": r"\d{1,4}",
    "CUDA_VISIBLE_DEVICES": r"[\w,-]{0,200}",
    "CUBLAS_WORKSPACE_CONFIG": r"(:\d+:\d+,?)+",
}

#: Characters of a launcher's text parameter: each becomes an ``#SBATCH --key=value`` line of a
#: shell script, so no whitespace, quote, ``$``, ``;``, backtick or newline.
_SLURM_TEXT = re.compile(r"[\w.,:=@%+/\[\]-]{1,200}")
#: ``additional_parameters`` a config may pass to sbatch; not ``output``, ``error``, ``chdir``
#: (files written elsewhere), ``export`` (the environment), ``wrap`` (a command).
SBATCH_PARAMETERS = frozenset(
    {
        "requeue",
        "time",
        "mail_type",
        "mail_user",
        "reservation",
        "nodelist",
        "licenses",
        "hint",
        "exclusive",
    }
)
#: The interpolations a directory a config sets may hold: the time, the run's choices, the job.
_DIRECTORY_INTERPOLATION = re.compile(
    r"\$\{(now:[^${}]*|hydra:runtime\.choices\.[\w/]+|hydra\.runtime\.choices\.[\w/]+"
    r"|hydra\.job\.(num|id|name|override_dirname)|hydra\.sweep\.dir)\}"
)


class _Missing:
    def __repr__(self) -> str:
        return "<removed>"


MISSING = _Missing()


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _integer(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _boolean(value: Any) -> bool:
    return isinstance(value, bool)


def _slurm_text(value: Any) -> bool:
    return value is None or (
        isinstance(value, str | int) and _SLURM_TEXT.fullmatch(str(value)) is not None
    )


def _choice(*values: Any) -> Callable[[Any], bool]:
    return lambda value: value in values


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _verbose(value: Any) -> bool:
    return isinstance(value, bool | str) or _strings(value)


def _inside(value: Any) -> bool:
    """A relative path that stays inside the folder it is relative to (interpolations of the
    time, the run's choices and the job's number and name allowed)."""
    if not isinstance(value, str):
        return False
    text = _DIRECTORY_INTERPOLATION.sub("x", value)
    if "${" in text or "\n" in text or text.startswith(("/", "~")):
        return False
    if value.startswith("${hydra.sweep.dir}"):  # submitit's folder, inside the sweep's
        text = text.removeprefix("x")
    return ".." not in re.split(r"[/\\]", text)


#: A directory: from a file, a relative path inside the working directory; typed on the command
#: line, anywhere the user chose.
_DIRECTORY = (
    _inside,
    "a relative path inside the working directory, without '..' (a "
    "directory elsewhere is given on the command line)",
)

#: The keys (below ``hydra.``) a config may set, with what each value must be; ``*`` is one key.
#: ``job.env_set.VAR`` too, for the variables of `ENVIRONMENT` (`_check_environment`).
ALLOWED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "run.dir": _DIRECTORY,
    "sweep.dir": _DIRECTORY,
    "sweep.subdir": (_inside, "a relative path without '..' (inside the sweep's directory)"),
    "job.chdir": (_boolean, "true or false"),
    "mode": (_choice(None, "RUN", "MULTIRUN"), "RUN or MULTIRUN"),
    "verbose": (_verbose, "true, false or logger names"),
    "job.config.override_dirname.exclude_keys": (_strings, "a list of keys"),
    "sweeper.params.*": (
        lambda value: isinstance(value, str | int | float | bool),
        "a sweep's values (sampler: sgld,sghmc)",
    ),
    "sweeper.max_batch_size": (_integer, "an integer or null"),
    # bdl's launchers (hydra/launcher=slurm, submitit_local, joblib): their resources
    **dict.fromkeys(
        [
            "launcher.timeout_min",
            "launcher.cpus_per_task",
            "launcher.gpus_per_node",
            "launcher.tasks_per_node",
            "launcher.nodes",
            "launcher.signal_delay_s",
            "launcher.max_num_timeout",
            "launcher.array_parallelism",
            "launcher.cpus_per_gpu",
            "launcher.gpus_per_task",
            "launcher.n_jobs",
            "launcher.verbose",
        ],
        (_integer, "an integer or null"),
    ),
    **dict.fromkeys(["launcher.mem_gb", "launcher.timeout"], (_number, "a number or null")),
    **dict.fromkeys(
        [
            "launcher.partition",
            "launcher.qos",
            "launcher.account",
            "launcher.constraint",
            "launcher.exclude",
            "launcher.gres",
            "launcher.comment",
            "launcher.mem_per_gpu",
            "launcher.mem_per_cpu",
            "launcher.additional_parameters.*",
        ],
        (_slurm_text, "one word of letters, digits and .,:=@%+/[]- (one #SBATCH line)"),
    ),
    "launcher.stderr_to_stdout": (_boolean, "true or false"),
    "launcher.submitit_folder": _DIRECTORY,
    "launcher.backend": (_choice(None, "loky", "multiprocessing", "threading"), "loky, ..."),
    "launcher.prefer": (_choice(None, "processes", "threads"), "processes or threads"),
    "launcher.require": (_choice(None, "sharedmem"), "sharedmem or null"),
    "launcher.pre_dispatch": (
        lambda value: _integer(value) or re.fullmatch(r"(\d+\*)?n_jobs|all", str(value)),
        "an integer, all or k*n_jobs",
    ),
    "launcher.batch_size": (lambda v: v == "auto" or _integer(v), "auto or an integer"),
    "launcher.max_nbytes": (lambda v: v is None or re.fullmatch(r"\d+[KMG]?", str(v)), "1M"),
    "launcher.mmap_mode": (_choice(None, "r+", "r", "w+", "c"), "r+, r, w+, c or null"),
    "launcher.temp_folder": (lambda v: v is None or _inside(v), _DIRECTORY[1]),
}
#: Keys whose value the command line may put anywhere: a path the user typed is the user's.
_TYPED_ANYWHERE = {"run.dir", "sweep.dir", "launcher.submitit_folder", "launcher.temp_folder"}

#: Why a key outside `ALLOWED` is refused, by where it lies.
_WHY = [
    ("job.env_copy", "copies variables into the jobs' environment"),
    ("job.env_set", "sets a variable a later process obeys"),
    (
        "job_logging",
        "configures logging, whose handlers and formatters write what and where "
        "they say (bdl's own logging only; hydra/job_logging=disabled silences it)",
    ),
    (
        "hydra_logging",
        "configures logging, whose handlers and formatters write what and where "
        "they say (bdl's own logging only; hydra/hydra_logging=disabled silences it)",
    ),
    ("callbacks", "is a Hydra callback, which Hydra builds and calls"),
    (
        "output_subdir",
        "would make Hydra write the run's config before the run owns its "
        "directory (bdl writes .hydra/ itself)",
    ),
    (
        "searchpath",
        "adds configs from elsewhere (configs come from bdl, installed plugins and "
        "--config-dir DIR only)",
    ),
    ("launcher.setup", "holds shell lines the job's script would run"),
    ("launcher.srun_args", "holds arguments srun would run the job with"),
    ("launcher._target_", "is a launcher Hydra would build (choose one with hydra/launcher=)"),
    ("launcher", "is not a parameter of bdl's launchers that a config may set"),
    ("sweeper", "is not a key of the sweeper that a config may set (sweeper.params)"),
    ("job.name", "names the run's log file"),
    ("overrides", "is Hydra's record of the command line"),
]


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")


def _severity(difference: tuple[str, Any]) -> int:
    """The order in which differences are told: what runs code or writes elsewhere first."""
    return next((i for i, (prefix, _) in enumerate(_WHY) if _under(difference[0], prefix)), 99)


def _key_matches(path: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern) and path.count(".") == pattern.count(".")


def _allowed(path: str) -> tuple[Callable[[Any], bool], str] | None:
    for pattern, check in ALLOWED.items():
        if _key_matches(path, pattern):
            return check
    return None


def _differences(actual: Any, baseline: Any, path: str) -> Iterator[tuple[str, Any]]:
    """``(path, value)`` of each leaf where ``actual`` differs from ``baseline`` (`MISSING`
    where ``actual`` removed it), in ``actual``'s order; lists compare whole."""
    if isinstance(actual, dict) and isinstance(baseline, dict):
        for key in [*actual, *(k for k in baseline if k not in actual)]:
            yield from _differences(
                actual.get(key, MISSING), baseline.get(key, MISSING), f"{path}{key}."
            )
    elif isinstance(actual, dict) and actual and baseline in (None, MISSING):
        for key, value in actual.items():
            yield from _differences(value, MISSING, f"{path}{key}.")
    elif actual != baseline:
        yield path.rstrip("."), actual


def _shown(value: Any) -> str:
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
    text = repr(text) if isinstance(text, str) and "\n" in text else str(text)
    return text if len(text) <= 200 else text[:197] + "..."


def _check_environment(variable: str, value: Any) -> None:
    pattern = ENVIRONMENT.get(variable)
    if pattern is None:
        raise ConfigError(
            f"hydra.job.env_set.{variable} is refused: a config may set only "
            f"{', '.join(ENVIRONMENT)} (a variable such as CXX, CC, LD_PRELOAD, PYTHONPATH, "
            "TORCHINDUCTOR_* or TRITON_* makes a later process run code from where it says); "
            "set it in the shell that runs bdl-run"
        )
    if value is MISSING or not re.fullmatch(pattern, str(value)):
        raise ConfigError(
            f"hydra.job.env_set.{variable}={_shown(value)} is refused: not a value of "
            f"{variable} ({pattern}); {FIX}"
        )


def check_hydra_node(
    actual: dict[str, Any],
    baseline: dict[str, Any],
    typed: frozenset[str] = frozenset(),
    overrides: tuple[list[str], list[str]] | None = None,
) -> None:
    """Refuse, in one line naming the key and why, a composed ``hydra`` node (a mapping, its
    interpolations unresolved) that differs from ``baseline`` (bdl's packaged configs, with the
    same options of Hydra's groups) anywhere but at a key of `ALLOWED` with a value it
    admits. ``typed``: the keys (below ``hydra.``) the command line sets, where a directory may
    lie anywhere; ``overrides``: the command line's (task, hydra) overrides, which
    ``hydra.overrides`` must be."""
    if overrides is not None:
        recorded = actual.get("overrides") or {}
        if (recorded.get("task"), recorded.get("hydra")) != tuple(overrides):
            raise ConfigError(
                f"hydra.overrides is refused: it is Hydra's record of the command "
                f"line, never a config's; {FIX}"
            )
    ignored = {"runtime", "overrides", "job.config_name", "job.override_dirname"}
    for path, value in sorted(_differences(actual, baseline, ""), key=_severity):
        if path in ignored or path.split(".")[0] in ignored:
            continue
        if _key_matches(path, "job.env_set.*"):
            _check_environment(path.rpartition(".")[2], value)
            continue
        if path.startswith("sweeper.params.hydra"):
            raise ConfigError(
                f"hydra.{path} is refused: a sweep's params set the run's keys, not Hydra's; "
                "set Hydra's keys in the preset itself, where they are checked"
            )
        parameter = path.removeprefix("launcher.additional_parameters.")
        if parameter != path and parameter not in SBATCH_PARAMETERS:
            raise ConfigError(
                f"hydra.{path}={_shown(value)} is refused: sbatch takes from a config only "
                f"{', '.join(sorted(SBATCH_PARAMETERS))} (output, error, chdir, export or wrap "
                f"would write elsewhere or run a command); {FIX}"
            )
        check = _allowed(path)
        if check is None or value is MISSING:
            why = next(
                (why for prefix, why in _WHY if _under(path, prefix)),
                "is not one of the keys of hydra a config may set",
            )
            shown = "" if value is MISSING else f"={_shown(value)}"
            action = "removing it " if value is MISSING else ""
            raise ConfigError(f"hydra.{path}{shown} is refused: {action}{why}; {FIX}")
        admits, expected = check
        if path in _TYPED_ANYWHERE and any(_under(path, key) for key in typed):
            continue
        if not admits(value):
            raise ConfigError(
                f"hydra.{path}={_shown(value)} is refused: it must be {expected}; {FIX}"
            )
