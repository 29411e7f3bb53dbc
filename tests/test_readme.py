"""Every `bdl-run`, `bdl-report`, `bdl-check` and `bdl-eval` command shown in README.md and in
the documentation site's pages (docs/**/*.md) must parse.

The pages are read at test time, so a command added or edited there is checked as written:
training commands are composed by the real ``bdl-run`` with ``--cfg job`` appended (composition
only: no data, no training), the others go through their own argument parsers.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
import torch
import yaml
from composition.test_plugins import tutorial_files, write_package
from conftest import bdl_run_in_one_process
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from bdl.analysis import evaluate, report
from bdl.checks import check
from bdl.models.mlp import MLP

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The pages whose commands are checked: the README and every page of the site.
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
PROGRAMS = ("bdl-run", "bdl-report", "bdl-check", "bdl-eval")
_COMMAND = re.compile(rf"^\$?\s*({'|'.join(PROGRAMS)})(\s|$)")


def _code_lines(text: str) -> tuple[list[str], str]:
    """Lines of fenced and indented code blocks, and the prose with those blocks removed."""
    code, prose, fenced = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced or line.startswith(("    ", "\t")):
            code.append(line.strip())
        else:
            prose.append(line)
    # Backslash continuations join a command split over lines.
    return "\n".join(code).replace("\\\n", " ").splitlines(), "\n".join(prose)


def readme_commands(text: str) -> list[str]:
    """The command lines of the README: code-block lines and inline code spans that start with a
    program name and give it arguments (a bare ``bdl-report`` in prose names the program)."""
    lines, prose = _code_lines(text)
    spans = [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", prose)]
    commands, shell = [], {}
    for candidate in [*lines, *spans]:
        # A shell variable set in a code block (the first value given) stands in for $NAME.
        for name, value in re.findall(r"\b([A-Z][A-Z_]*)=([^\s;$]+)", candidate):
            shell.setdefault(name, value)
        if _COMMAND.match(candidate) and len(candidate.split()) > 1:
            for name, value in shell.items():
                candidate = candidate.replace(f"${name}", value)
            commands.append(re.sub(r"^\$\s*", "", candidate))
    return list(dict.fromkeys(commands))


def _argv(command: str) -> tuple[str, list[str]]:
    """Tokens as the shell gives them; ``<placeholder>``, ``[optional]`` and ``...`` of a
    synopsis become a plain value, the option itself and nothing."""
    command = re.sub(r"<[^<>]*>", "placeholder", command)
    tokens = shlex.split(command, comments=True)
    tokens = [t if "=[" in t else t.strip("[]") for t in tokens]  # key=[a,b] is a list value
    return tokens[0], [t for t in tokens[1:] if t not in ("", "...", "…")]


def _compositions(args: list[str]) -> list[list[str]]:
    """``--cfg job`` command lines for ``bdl-run`` arguments.

    ``--cfg`` composes one job, so a sweep (``-m a=x,y b=1,2``) becomes one line per swept value,
    the other overrides at their first value: every value is composed, not every combination.
    """
    if "--cfg" in args or "-c" in args or "--help" in args or "-h" in args:
        return [args]  # bdl-run prints each job of a sweep (-m) itself
    # A value left for the reader to fill (``dataset=<set>``, ``epochs=E``, ``prior.…``) is
    # dropped: the overrides around it are still composed.
    args = [
        a
        for a in args
        if a not in ("-m", "--multirun")
        and "…" not in a
        and not re.fullmatch(r"[^=]+=(placeholder|[A-Z])", a)
    ]
    try:
        overrides = OverridesParser.create().parse_overrides(args)
    except OverrideParseException:
        return [[*args, "--cfg", "job"]]  # for bdl-run itself to refuse, in its own words
    values = [
        list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.input_line]
        for o in overrides
    ]
    keys = [o.key_or_group if o.is_sweep_override() else None for o in overrides]

    def line(choice: list[str]) -> list[str]:
        return [v if k is None else f"{k}={v}" for k, v in zip(keys, choice)] + ["--cfg", "job"]

    first = [v[0] for v in values]
    lines = [line(first)]
    for i, options in enumerate(values):
        for option in options[1:]:
            lines.append(line([*first[:i], option, *first[i + 1 :]]))
    return lines


def _run_cli(argvs: list[list[str]], plugins: Path | None = None) -> list[dict]:
    """``bdl-run`` on each of ``argvs``, in one interpreter; ``plugins``: a folder of installed
    plugin packages (the own-model tutorial's) put on its path."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    if plugins is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugins), env.get("PYTHONPATH")]))
    return bdl_run_in_one_process([{"argv": argv} for argv in argvs], env)


def test_readme_extraction_finds_commands_and_options():
    """The parser sees code blocks, inline spans split over lines, sweeps and synopses."""
    text = (
        "Run it:\n\n    bdl-run -m sampler=sgd,sgld seed=0,1\n    bdl-report runs/   # a table\n\n"
        "Prose with `bdl-run --cfg\njob` and `bdl-report` alone and `sampler.lr=0.1`.\n\n"
        "```\nbdl-check [--quick] [--targets gaussian_2d ...]\n```\n"
    )
    commands = readme_commands(text)
    assert commands == [
        "bdl-run -m sampler=sgd,sgld seed=0,1",
        "bdl-report runs/   # a table",
        "bdl-check [--quick] [--targets gaussian_2d ...]",
        "bdl-run --cfg job",
    ]
    assert _argv(commands[2]) == ("bdl-check", ["--quick", "--targets", "gaussian_2d"])
    assert _argv(commands[1]) == ("bdl-report", ["runs/"])
    assert _compositions(_argv(commands[0])[1]) == [
        ["sampler=sgd", "seed=0", "--cfg", "job"],
        ["sampler=sgld", "seed=0", "--cfg", "job"],
        ["sampler=sgd", "seed=1", "--cfg", "job"],
    ]


def _parses(program: str, args: list[str]) -> bool:
    """Whether ``bdl-report``, ``bdl-check`` or ``bdl-eval`` accepts the arguments."""
    try:
        if program == "bdl-eval":
            evaluate._parse(args)  # checks the options' names and values, reads no run
        else:
            (report._parser() if program == "bdl-report" else check._parser()).parse_args(args)
    except (SystemExit, ValueError):
        return False
    return True


#: The per-layer prior syntax the README documents, and its former syntax (quoted keys), which
#: Hydra's grammar refuses.
PER_LAYER = ["prior.layers={*.bias: 10.0, layers.2.*: 0.1}", "--cfg", "job"]
FORMER_PER_LAYER = _compositions(_argv("""bdl-run prior.layers='{"*.bias": 10.0}'""")[1])


@pytest.fixture(scope="module")
def documented(tmp_path_factory) -> tuple[list[str], list, dict]:
    """The documented commands of every page, the ``bdl-run`` compositions they make (each with
    the command it came from) and what ``bdl-run`` answered to each, the per-layer prior's lines
    among them: one interpreter for all."""
    commands = {
        (page.relative_to(ROOT).as_posix(), command)
        for page in PAGES
        for command in readme_commands(page.read_text(encoding="utf-8"))
    }
    runs: list[tuple[str, list[str]]] = []
    for page, command in sorted(commands):
        program, args = _argv(command)
        if program == "bdl-run":
            runs.extend((f"{page}: {command}", argv) for argv in _compositions(args))
    unique = list(dict.fromkeys([*(tuple(argv) for _, argv in runs), tuple(PER_LAYER)]))
    unique += [tuple(argv) for argv in FORMER_PER_LAYER]
    # the own-model tutorial's commands name its plugin package's options: installed, as there
    plugins = write_package(tmp_path_factory.mktemp("plugins"), tutorial_files())
    results = dict(zip(unique, _run_cli([list(argv) for argv in unique], plugins)))
    return sorted(commands), runs, results


def test_every_documented_command_parses(documented):
    commands, runs, results = documented
    readme = [c for page, c in commands if page == "README.md"]
    assert sum(c.startswith("bdl-run ") for c in readme) >= 3, readme
    assert {c.split()[0] for _, c in commands} == set(PROGRAMS)
    refused = [
        f"{page}: {command}"
        for page, command in commands
        for program, args in [_argv(command)]
        if program != "bdl-run" and not _parses(program, args)
    ]
    assert not refused, "documented commands that do not parse:\n" + "\n".join(refused)
    failures = [
        f"{command}\n  as: bdl-run {shlex.join(argv)}\n  {result['err'].strip()[-600:]}"
        for command, argv in runs
        for result in [results[tuple(argv)]]
        if result["code"] != 0 or ("--cfg" in argv and "sampler:" not in result["out"])
    ]
    assert not failures, "documented commands that bdl-run refuses:\n" + "\n".join(failures)


def test_per_layer_prior_through_the_cli_and_a_model(documented):
    """The documented per-layer syntax composes to the intended mapping and the priors use it;
    the former syntax is refused."""
    results = documented[2]
    result = results[tuple(PER_LAYER)]
    (refused,) = (results[tuple(argv)] for argv in FORMER_PER_LAYER)
    assert refused["code"] != 0 and "no viable alternative" in refused["err"]
    assert result["code"] == 0, result["err"]
    composed = yaml.safe_load(result["out"])
    assert composed["prior"]["layers"] == {"*.bias": 10.0, "layers.2.*": 0.1}
    cfg = OmegaConf.create(composed)
    model = MLP((4,), out_features=3, hidden=[5], activation="relu")
    params = dict(model.named_parameters())
    for option in ("gaussian", "laplace", "student_t"):
        node = OmegaConf.merge(
            OmegaConf.load(
                Path(__file__).resolve().parents[1] / "conf" / "prior" / f"{option}.yaml"
            ),
            {"layers": cfg.prior.layers, "scale": 2.0},
        )
        prior = instantiate(node)
        prior.bind(params)
        scales = {name: prior.scale_of(name, p) for name, p in params.items()}
        assert scales == {
            "layers.0.weight": 2.0,
            "layers.0.bias": 10.0,
            "layers.2.weight": 0.1,
            "layers.2.bias": 10.0,  # first match wins
        }
        assert torch.isfinite(prior.log_prob(params))
