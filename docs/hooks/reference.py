"""MkDocs hook: the reference pages' generated parts, written at build time from the code.

``reference/config.md`` gets every top-level key of the root schema
(``bdl.composition.config.RunConfig``, with the comments of its source) and every option of every
config group under ``conf/`` (each key with its value, type and comment, and the target's other
arguments with their defaults);
``reference/cli.md`` gets the ``--help`` of each command. A marker line in the page
(``<!-- generated: config -->``, ``<!-- generated: cli -->``) is replaced; nothing is copied by
hand, so the pages follow the configs and the code.
"""

from __future__ import annotations

import inspect
import io
import json
import re
import subprocess
import sys
import tokenize
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from enum import Enum
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_method
from omegaconf import OmegaConf

from bdl.composition import config as schema

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
# The groups in the order a reader meets them; hydra/launcher holds bdl's own SLURM launcher.
GROUPS = ("dataset", "protocol", "model", "prior", "sampler", "schedule", "experiment")
TARGET_GROUPS = tuple(schema.RUNTIME_ARGUMENTS)
# Prints each program's --help, in one interpreter so that torch and Hydra are imported once.
_HELP_DRIVER = """
import contextlib, io, json, sys
from bdl import cli
from bdl.analysis import evaluate, report
from bdl.checks import check
helps = {}
for program, main in [("bdl-run", cli.main), ("bdl-report", report.main),
                      ("bdl-check", check.main), ("bdl-eval", evaluate.main)]:
    sys.argv = [program, "--help"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["--help"]) if program != "bdl-run" else main()
        except SystemExit:
            pass
    helps[program] = out.getvalue()
sys.stdout.write(json.dumps(helps))
"""


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "<!-- generated: config -->" in markdown:
        markdown = markdown.replace("<!-- generated: config -->", config_reference())
    if "<!-- generated: cli -->" in markdown:
        markdown = markdown.replace("<!-- generated: cli -->", cli_reference())
    return markdown


# --------------------------------------------------------------------------- comments


def _python_comments(cls: type) -> dict[str, str]:
    """Each field of a dataclass with its source's comments: the comment lines right above it
    and the one at the end of its line."""
    lines, _ = inspect.getsourcelines(cls)
    comments: dict[int, str] = {}
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO("".join(lines)).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.add(token.start[0])
    described = {}
    for number, line in enumerate(lines, start=1):
        match = re.match(r"\s+(\w+):", line)
        if not match or number not in code_lines:
            continue
        above, k = [], number - 1
        while k in comments and k not in code_lines:
            above.insert(0, comments[k])
            k -= 1
        described[match.group(1)] = " ".join([*above, comments.get(number, "")]).strip()
    return described


def _yaml_comments(path: Path) -> tuple[str, dict[str, str]]:
    """A YAML file's leading comment (Hydra's ``@package`` line left out) and each key, dotted,
    with the comment on its line, the indented comment lines that continue it and the comment
    lines right above it."""
    header: list[str] = []
    keys: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    last = None
    in_header = True
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            if in_header:
                if not text.startswith("@package"):
                    header.append(text)
            elif last is not None and line.startswith(" ") and keys.get(last):
                keys[last] += " " + text  # a key's comment continued on the next lines
            else:
                pending.append(text)
            continue
        in_header = False
        if not stripped:
            pending, last = [], None
            continue
        match = re.match(r"(\s*)([\w.@/]+):(.*)$", line)
        if not match or match.group(2) == "defaults":
            last = None
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3)
        stack = [(i, k) for i, k in stack if i < indent]
        dotted = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        inline = rest.split(" #", 1)[1].strip() if " #" in rest else ""
        keys[dotted] = " ".join([*pending, inline]).strip()
        pending, last = [], dotted
    return " ".join(header), keys


# --------------------------------------------------------------------------- rendering


def _type_name(kind) -> str:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        return " or ".join(_type_name(k) for k in typing.get_args(kind))
    if kind is type(None):
        return "null"
    if kind is typing.Any or kind is inspect.Parameter.empty:
        return ""
    if inspect.isclass(kind) and issubclass(kind, Enum):
        return " | ".join(member.value for member in kind)
    if typing.get_origin(kind) is not None:
        return str(kind).replace("typing.", "")
    return getattr(kind, "__name__", str(kind))


def _value(value) -> str:
    """A value as the command line writes it."""
    if isinstance(value, Enum):
        value = value.value
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=False)
    text = json.dumps(value) if not isinstance(value, str) else value
    return f"`{text}`".replace("|", "\\|")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _schema_rows(cls: type, prefix: str = "") -> list[tuple[str, ...]]:
    rows = []
    comments = _python_comments(cls)
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        kind = hints[f.name]
        if is_dataclass(kind):
            rows += _schema_rows(kind, f"{prefix}{f.name}.")
            continue
        if (CONF / f.name).is_dir():  # a config group: its options are listed below
            rows.append((f"`{prefix}{f.name}`", "group", "", f"[the {f.name} group](#{f.name})"))
            continue
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        shown = "set by the protocol" if default == "???" else _value(default)
        rows.append(
            (f"`{prefix}{f.name}`", _cell(_type_name(kind)), shown, _cell(comments.get(f.name, "")))
        )
    return rows


def _choices(raw) -> str:
    """The group options a file's defaults list chooses, as ``group=option``."""
    chosen = [
        f"`{key.replace('override /', '').split('@')[0]}={value}`"
        for entry in raw.get("defaults", [])
        if OmegaConf.is_dict(entry)
        for key, value in entry.items()
    ]
    return "Chooses " + ", ".join(chosen) + "." if chosen else ""


def _comments(path: Path) -> tuple[str, dict[str, str]]:
    """`_yaml_comments` of an option's file, with those of the files it includes
    (``/uci_loader@_here_``) for the keys it leaves undescribed."""
    header, comments = _yaml_comments(path)
    for entry in OmegaConf.load(path).get("defaults", []):
        if isinstance(entry, str) and entry.endswith("@_here_"):
            included = CONF / f"{entry.lstrip('/').removesuffix('@_here_')}.yaml"
            shared_header, shared = _yaml_comments(included)
            header = header or shared_header
            comments = {**shared, **{k: v for k, v in comments.items() if v}}
    return header, comments


def _target_option(group: str, path: Path, node, comments: dict[str, str]) -> str:
    target = get_method(node._target_)
    allowed = schema.options(group, target)
    rows = []
    for key, parameter in allowed.items():
        if key in node:
            value = _value(OmegaConf.to_container(node, resolve=False)[key])
        elif parameter.default is inspect.Parameter.empty:
            value = "required"
        else:
            value = f"{_value(parameter.default)} (the target's default)"
        rows.append(
            (
                f"`{group}.{key}`",
                value,
                _cell(_type_name(parameter.annotation)),
                _cell(comments.get(key, "")),
            )
        )
    built = f"`{node._target_}`" + (
        ", given the runtime arguments" if node.get("_partial_") else ""
    )
    table = _table(("key", "value", "type", "note"), rows) if rows else "No keys."
    choices = _choices(OmegaConf.load(path))
    return "\n\n".join(part for part in (f"Builds {built}.", choices, table) if part)


def _global_option(path: Path, comments: dict[str, str], prefix: str = "") -> str:
    """An option that sets keys anywhere (``@package _global_``: protocols and presets)."""
    raw = OmegaConf.load(path)
    rows = []

    def walk(node, prefix: str) -> None:
        for key, value in node.items_ex(resolve=False) if OmegaConf.is_dict(node) else []:
            if key == "defaults":
                continue
            dotted = f"{prefix}{key}"
            if OmegaConf.is_dict(value):
                walk(value, f"{dotted}.")
            else:
                note = _cell(comments.get(dotted.removeprefix(top), ""))
                rows.append((f"`{dotted}`", _value(value), note))

    top = prefix
    walk(raw, prefix)
    table = _table(("key", "value", "note"), rows) if rows else ""
    return "\n\n".join(part for part in (_choices(raw), table) if part)


def config_reference() -> str:
    sections = [
        "## Top-level keys",
        "The root schema, `bdl.composition.config.RunConfig`: Hydra checks every override "
        "against it, so a misspelt key or a value of the wrong type fails at composition. The "
        "protocol sets `epochs`, `batch_size`, `burn_in`, `thin`, `log_every` and `protocol.*` "
        "per dataset.",
        _table(("key", "type", "default", "note"), _schema_rows(schema.RunConfig)),
    ]
    GlobalHydra.instance().clear()
    schema.register()  # a folder of configs, not the package bdl.conf whose import registers
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for group in GROUPS:
            sections.append(f"## {group}")
            for path in sorted((CONF / group).glob("*.yaml")):
                header, comments = _comments(path)
                sections.append(f"### {group}={path.stem}")
                if header:
                    sections.append(header)
                if group in TARGET_GROUPS:
                    node = compose("config", [f"{group}={path.stem}"])[group]
                    sections.append(_target_option(group, path, node, comments))
                else:
                    sections.append(_global_option(path, comments))
    launcher = CONF / "hydra" / "launcher" / "slurm.yaml"
    header, comments = _yaml_comments(launcher)
    sections += [
        "## hydra/launcher",
        "`hydra/launcher=joblib` is Hydra's joblib launcher (`hydra.launcher.n_jobs`); "
        "`hydra/launcher=slurm` is bdl's (keys under `hydra.launcher.`, on top of Hydra's "
        "submitit SLURM launcher's: `bdl-run hydra/launcher=slurm --cfg hydra` shows them all).",
        "### hydra/launcher=slurm",
        header,
        _global_option(launcher, comments, "hydra.launcher."),
    ]
    return "\n\n".join(sections)


def cli_reference() -> str:
    result = subprocess.run(
        [sys.executable, "-c", _HELP_DRIVER], capture_output=True, text=True, check=True
    )
    helps = json.loads(result.stdout)
    return "\n\n".join(
        f"## {program}\n\n```text\n{text.rstrip()}\n```" for program, text in helps.items()
    )
