"""The documentation site builds without a warning, and its tutorials run as written, shortened.

The build is MkDocs' own ``--strict`` one (a broken link, a missing page or anchor, or a
docstring mkdocstrings cannot read fails it). Each tutorial's commands are read from its page and
run on the generated data of ``fake_data_root`` with fewer epochs; its Python block is executed on
the run it made.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import command_env
from omegaconf import OmegaConf

import bdl
from bdl.analysis.evaluate import main as bdl_eval
from bdl.analysis.tables import WIDTH
from bdl.storage.outputs import summary_table

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as ``make docs`` builds it, once for the tests that read its pages."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]' (dev includes it)")
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WARNING" not in result.stderr, result.stderr[-3000:]
    return site_dir


def test_the_site_builds_strict_and_offline(site):
    reference = (site / "reference" / "config" / "index.html").read_text()
    # generated from conf/ and the schema: a key of each, with its value
    assert "sampler.grad_var" in reference and "checkpoint_every" in reference
    assert "hydra.launcher.signal_delay_s" in reference


def article(page: Path) -> str:
    """The page's content as built, without the theme's navigation."""
    html = page.read_text(encoding="utf-8")
    return html[html.index("<article") : html.index("</article>")]


def built_pages(site: Path, folder: str = "") -> list[Path]:
    pages = sorted((site / folder).rglob("index.html"))
    return [p for p in pages if "<article" in p.read_text(encoding="utf-8")]


# A role or directive of reStructuredText that mkdocstrings would print as written
RAW_MARKUP = re.compile(
    r":(?:py:)?(?:class|meth|func|attr|mod|data|obj|exc|ref|math):|\.\. [a-z-]+::"
)
# Python-Markdown folds a list item's line or a code block into the paragraph above when they are
# indented as CommonMark would allow (a block in a list item wants 8 spaces, a paragraph after
# it 4): the page then shows "- **…**" or a command as prose.
PARAGRAPH = re.compile(r"<p>(.*?)</p>", re.S)
LIST_ITEM_AS_TEXT = re.compile(r"^[ \t]*[-*+] \S", re.M)
COMMAND_AS_TEXT = re.compile(
    r'\s*(?:[A-Z_]+=(?:"[^"]*"|\S+)\s+)+\S'  # SEEDS="0 1" OMP_NUM_THREADS=1 …
    r"|\s*(?:nice |python |bash )\S*scripts/"
)


def test_no_page_shows_raw_markup_or_an_empty_heading(site):
    """Docstrings are Markdown with $TeX$ (docs/hooks/math.py draws it as MathML): no reST role,
    directive or undrawn formula reaches a page, no list item or command is folded into a
    paragraph, and every heading says something."""
    faults = []
    for page in built_pages(site):
        html = article(page)
        text = re.sub(r"<[^>]+>", "", html)
        name = page.parent.relative_to(site)
        faults += [f"{name}: raw {m[0]!r}" for m in RAW_MARKUP.finditer(text)]
        for paragraph in PARAGRAPH.findall(html):
            if LIST_ITEM_AS_TEXT.search(paragraph) or COMMAND_AS_TEXT.match(paragraph):
                faults.append(f"{name}: a list item or command shown as text: {paragraph[:80]!r}")
        faults += [f"{name}: undrawn formula" for _ in re.finditer('class="arithmatex"', html)]
        for heading in re.findall(r"<h([1-6])[^>]*>(.*?)</h\1>", html, re.S):
            if not re.sub(r"<[^>]+>|¶", "", heading[1]).strip():
                faults.append(f"{name}: an empty h{heading[0]}")
    assert not faults, "\n".join(faults[:20])
    api = article(site / "reference" / "api" / "index.html")
    assert api.count("<math") > 100  # the samplers' update rules, drawn


def test_guide_pages_have_sections_and_tutorials_show_output_and_a_figure(site):
    for page in built_pages(site, "guide"):
        assert article(page).count("<h2") >= 2, f"{page.parent.name}: no sections"
    tutorials = built_pages(site, "tutorials")
    assert len(tutorials) == len(list((DOCS / "tutorials").glob("*.md")))
    for page in tutorials:
        name = page.parent.name
        source = (DOCS / "tutorials" / f"{name}.md").read_text(encoding="utf-8")
        assert re.search(r"^```text\n[^`]", source, re.M), f"{name}: no output block"
        assert re.search(r'<img[^>]+src="[./]*figures/tutorials/', article(page)), name


def page_commands(page: str, program: str = "bdl-") -> list[str]:
    """The command lines of a page's indented code blocks that start with ``program``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return [
        line.strip()
        for line in text.splitlines()
        if line.startswith("    ") and line.strip().startswith(program)
    ]


def page_python(page: str) -> str:
    (block,) = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)
    return block


def page_output(page: str, program: str, index: int = 1) -> str:
    """The page's output block for its ``index``-th ``program`` command, as
    ``scripts/tutorial_outputs.py`` wrote it from the real run."""
    text = (DOCS / page).read_text(encoding="utf-8")
    marker = re.escape(f"<!-- output: {program} {index} -->")
    (block,) = re.findall(marker + r"\n```text\n(.*?)```", text, re.S)
    return block


def table_keys(table: str) -> list[str]:
    """The keys of an end-of-run table, in order: the first word of each indented line."""
    return [line.split()[0] for line in table.splitlines() if line.startswith("  ")]


#: The lines a run prints after its table (`bdl.runner.sampling`), by their start.
AFTER_TABLE = (
    "NOT CONVERGED: ",
    "note: ",
    "WARNING: ",
    "NOT A RESULT: ",
    "until_converged: ",
    "pruning curve in ",
)


def assert_shows_a_run_of_today(shown: str, metrics: dict, run_dir: Path) -> None:
    """A page's end-of-run block in the form a run prints it now: the rows of the table that the
    shortened run printed (its ``metrics``), the ``converged`` row as `summary_table` writes it
    for the block's own causes, after the table only the lines a run prints there, each cause
    and note one line of at most 100 columns, each cause naming what to run: overrides of keys
    that the run's config has (``run_dir``'s ``.hydra/config.yaml``), or ``sampler.lr``."""
    assert table_keys(shown) == table_keys(summary_table(metrics))
    status, *lines = shown.splitlines()
    assert status.endswith(" (metrics.json):"), status
    after = [line for line in lines if not line.startswith("  ")]
    assert all(line.startswith(AFTER_TABLE) for line in after), after
    causes = [line for line in after if line.startswith("NOT CONVERGED: ")]
    verdict = summary_table({"status": "", "converged": not causes, "reasons": causes})
    assert verdict.splitlines()[-1] in lines
    for line in after:
        assert not line.startswith(("NOT CONVERGED", "note")) or len(line) <= 100, line
    config = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    for cause in causes:
        advice = [word for word in cause.rsplit(": ", 1)[-1].split() if "=" in word]
        assert advice or "sampler.lr" in cause, cause
        for word in advice:
            key = word.partition("=")[0]
            assert OmegaConf.select(config, key, default=KeyError) is not KeyError, cause


def report_blocks(page: str) -> list[str]:
    """The page's output blocks of ``bdl-report``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(r"<!-- output: bdl-report \d+ -->\n```text\n(.*?)```", text, re.S)


def columns(printed: str) -> list[str]:
    """The column names of the first Markdown table in ``printed``."""
    header = next(line for line in printed.splitlines() if line.startswith("|"))
    return [name.strip() for name in header.strip("|").split("|")]


@pytest.mark.parametrize(
    "page",
    [
        p.name
        for p in sorted((DOCS / "tutorials").glob("*.md"))
        if report_blocks(f"tutorials/{p.name}")
    ],
)
def test_report_blocks_show_what_bdl_report_prints_now(page):
    """A page's ``bdl-report`` block as bdl-report prints it on a terminal: its table within
    `WIDTH` columns (the rest named under it), no HTML entity, and each run averaged in without
    converging listed with causes that each name what to run."""
    for block in report_blocks(f"tutorials/{page}"):
        lines = block.splitlines()
        assert max(len(line) for line in lines if line.startswith("|")) <= WIDTH
        assert not re.search(r"&[a-z]+;", block)
        unconverged = False
        for line in lines:
            unconverged = line.startswith("Averaged in without converging") or (
                unconverged and line.startswith("- ")
            )
            if unconverged and line.startswith("- "):
                for cause in line.split(": ", 1)[1].split("; "):
                    assert "=" in cause.rsplit(": ", 1)[-1] or "sampler.lr" in cause, cause


def shortened(command: str, **values: str) -> list[str]:
    """The command's arguments with ``values`` replacing (or adding) those keys."""
    program, *args = shlex.split(command, comments=True)
    args = [a for a in args if a.partition("=")[0] not in values]
    return [*args, *(f"{key}={value}" for key, value in values.items())]


@pytest.fixture(scope="module")
def env(tmp_path_factory, fake_data_root) -> dict[str, str]:
    cache = tmp_path_factory.mktemp("cache")
    return command_env(fake_data_root, cache)


@pytest.fixture
def data_here(env, monkeypatch) -> None:
    """This process reads the generated data too (a tutorial's Python block loads them)."""
    for key in ("BDL_DATA_DIR", "BDL_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.setenv(key, env[key])


def bdl_run(args: list[str], env: dict[str, str], cwd: Path, module: str = "bdl.cli"):
    return subprocess.run(
        [sys.executable, "-m", module, *args], env=env, cwd=cwd, capture_output=True, text=True
    )


def test_tutorial_uci_chains(env, data_here, tmp_path):
    (command,) = page_commands("tutorials/uci-chains.md", "bdl-run")
    run_dir = tmp_path / "yacht-hmc"
    args = shortened(command, epochs="24", burn_in="8", thin="2")
    result = bdl_run([*args, f"hydra.run.dir={run_dir}"], env, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "completed" and metrics["chains"] == 4
    assert metrics["num_samples"] == 4 * 8  # epochs 9..24, every second one, per chain
    assert 1.0 <= metrics["rhat_max"] < math.inf
    # the page shows the table that ends the real run: the keys this run printed
    assert_shows_a_run_of_today(page_output("tutorials/uci-chains.md", "bdl-run"), metrics, run_dir)
    (report,) = page_commands("tutorials/uci-chains.md", "bdl-report")
    _, *report_args = shlex.split(report.replace("runs/yacht-hmc", str(run_dir)))
    assert bdl_run(report_args, env, tmp_path, "bdl.analysis.report").returncode == 0
    assert any(p.name.startswith("rhat_") for p in (run_dir / "plots").iterdir())
    namespace = {"bdl": bdl, "run_dir": run_dir}
    exec(page_python("tutorials/uci-chains.md"), namespace)
    assert namespace["posterior"].num_chains == 4
    assert namespace["error"].shape == namespace["std"].shape == (len(namespace["mean"]),)


def test_tutorial_shift(env, data_here, tmp_path):
    (command,) = page_commands("tutorials/shift.md", "bdl-run")
    run_dir = tmp_path / "mnist-sghmc"
    args = shortened(command, epochs="2", burn_in="1", **{"hydra.run.dir": str(run_dir)})
    result = bdl_run(args, env, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    for line in page_commands("tutorials/shift.md", "bdl-eval"):
        _, *options = shlex.split(line.replace("runs/mnist-sghmc", str(run_dir)))
        assert bdl_eval(options) == 0, line  # in this process: torch is imported once
    rotated = json.loads((run_dir / "eval" / "mnist-test-rotate30" / "metrics.json").read_text())
    shown = page_output("tutorials/shift.md", "bdl-eval")
    assert json.loads(shown[: shown.rindex("}") + 1]).keys() == rotated.keys()
    namespace = {"bdl": bdl, "run_dir": run_dir}
    exec(page_python("tutorials/shift.md"), namespace)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    rows = {degrees: row for degrees, *row in namespace["rows"]}
    assert rows[0][0] == pytest.approx(metrics["test_accuracy"], abs=1e-4)
    assert rows[30][0] == pytest.approx(rotated["test_accuracy"], abs=1e-6)
    assert rows[90][0] < rows[0][0]  # the generated digits are not rotation-invariant


@pytest.mark.slow  # 15 s: a run of MNIST's full network (test_tutorial_uci_chains is quicker)
def test_tutorial_chen_mnist(env, tmp_path):
    command = page_commands("tutorials/chen-mnist.md", "bdl-run")[0]
    run_dir = tmp_path / "chen"
    # 4 draws: the fewest the table's diagnostics rows need
    args = shortened(command, epochs="6", burn_in="2", **{"hydra.run.dir": str(run_dir)})
    result = bdl_run(args, env, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    shown = page_output("tutorials/chen-mnist.md", "bdl-run")
    assert_shows_a_run_of_today(shown, metrics, run_dir)


# 15 s: two runs of MNIST's full network (tests/runner/test_resume_cli.py is quicker)
@pytest.mark.slow
def test_tutorial_resume(env, tmp_path):
    first, again = page_commands("tutorials/resume.md", "bdl-run")
    run_dir = tmp_path / "chen"
    short = {"epochs": "6", "burn_in": "2", "checkpoint_every": "1"}
    args = shortened(first.replace("runs/chen", str(run_dir)), **short)
    process = subprocess.Popen(
        [sys.executable, "-m", "bdl.cli", *args],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (run_dir / "checkpoint.safetensors").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate(timeout=60)[1]
    status = json.loads((run_dir / "metrics.json").read_text())["status"]
    # the signal may come as the run ends; otherwise it stops and says how to resume
    assert (process.returncode, status) in [(143, "interrupted"), (0, "completed")], stderr
    if process.returncode == 143:
        assert "resume=true" in stderr
    assert "resume=true" in page_output("tutorials/resume.md", "bdl-run", 1)
    result = bdl_run(shortened(again.replace("runs/chen", str(run_dir)), **short), env, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "completed" and metrics["num_samples"] == 4
    assert_shows_a_run_of_today(page_output("tutorials/resume.md", "bdl-run", 2), metrics, run_dir)


@pytest.mark.slow  # 67 s on a busy core: four runs, each scoring 10 000 test images per sample
def test_tutorial_hmc_reference(env, data_here, tmp_path):
    """The reference, one sampler of the sweep and the SGD run, shortened; the page's Python
    comparison gives the agreement and total variation that bdl wrote into metrics.json."""
    page = "tutorials/hmc-reference.md"
    reference, sweep, sgd = page_commands(page, "bdl-run")
    root = tmp_path / "runs" / "izmailov"
    # 1 000 training images; HMC needs more than three trajectories to beat guessing
    short = {"epochs": "3", "burn_in": "1", "thin": "1", "dataset.validation": "59000"}
    for command, overrides in (
        (reference, {"chains": "2", "epochs": "20", "burn_in": "10", "sampler.num_steps": "10"}),
        (sweep.replace("sgld,sghmc,psgld", "sgld"), {}),
        (sgd, {"burn_in": "0"}),
    ):
        args = shortened(command, **{**short, **overrides})
        result = bdl_run(args, env, tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
    (report,) = page_commands(page, "bdl-report")
    _, *report_args = shlex.split(report)
    result = bdl_run(report_args, env, tmp_path, "bdl.analysis.report")
    assert result.returncode == 0 and "agreement" in result.stdout, result.stderr[-2000:]
    # the page's table has the columns the report prints
    (shown,) = report_blocks(page)
    assert columns(shown) == columns(result.stdout)
    (run_dir,) = [p.parent for p in (root / "sg").glob("*/metrics.json")]
    namespace = {"bdl": bdl, "run_dir": run_dir, "reference_dir": root / "hmc"}
    exec(page_python(page), namespace)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert namespace["agreement"] == pytest.approx(metrics["agreement"], abs=1e-6)
    assert namespace["total_variation"] == pytest.approx(metrics["total_variation"], abs=1e-5)
