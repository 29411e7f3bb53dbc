"""Extension by installation (`bdl.composition.plugins`): the tutorial's package, installed, runs
through ``bdl-run`` (a sweep too), ``bdl-report``, ``bdl-eval`` and ``load_run``; what is not
installed, or passes for bdl, is refused in one line.

"Installed" here is what ``pip install`` leaves for ``importlib.metadata`` to find: a
``.dist-info`` folder with ``entry_points.txt`` on the path (``sys.path``, or a subprocess's
``PYTHONPATH``), so that nothing is installed into the environment the other tests share.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import command_env
from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from test_docs import (
    DOCS,
    ROOT,
    assert_shows_a_run_of_today,
    columns,
    page_commands,
    page_output,
    report_blocks,
    shortened,
)

import bdl
from bdl.composition import plugins
from bdl.composition.config import ConfigError, validate
from bdl.runner.run import run

PAGE = "tutorials/own-model.md"
SHORT = ["epochs=3", "burn_in=1", "thin=1"]


def write_package(root: Path, files: dict[str, str], name: str = "mylab") -> Path:
    """``files`` under ``root``, and the ``.dist-info`` that installing the package leaves, its
    entry points those of ``pyproject.toml``."""
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    info = root / f"{name}-0.1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    # pyproject's [project.entry-points."<group>"] tables, as entry_points.txt writes them
    tables = re.split(
        r'^\[project\.entry-points\."([^"]+)"\]$', files["pyproject.toml"], flags=re.M
    )
    sections = [
        f"[{group}]\n"
        + "".join(
            f"{key} = {value}\n"
            for key, value in re.findall(r'^(\w+) = "([^"]+)"$', body.split("\n[")[0], re.M)
        )
        for group, body in zip(tables[1::2], tables[2::2])
    ]
    (info / "entry_points.txt").write_text("\n".join(sections))
    return root


def tutorial_files() -> dict[str, str]:
    """The package the tutorial builds: its files as the page shows them (``title="..."``)."""
    text = (DOCS / PAGE).read_text(encoding="utf-8")
    return {
        **dict(re.findall(r'```\w+ title="([^"]+)"\n(.*?)```', text, re.S)),
        "mylab/__init__.py": "",
    }


@pytest.fixture(scope="module")
def mylab(tmp_path_factory) -> Path:
    return write_package(tmp_path_factory.mktemp("mylab"), tutorial_files())


def forget_plugins() -> None:
    for cached in (plugins.discover, plugins._installed_targets):
        cached.cache_clear()


@pytest.fixture
def install(monkeypatch):
    """Install (put on ``sys.path``) a folder written by `write_package` in this process,
    for the test's length."""
    registered = []

    def go(root: Path) -> None:
        monkeypatch.syspath_prepend(str(root))
        forget_plugins()
        plugins.register()
        registered.extend(plugins.discover()[0])

    yield go
    monkeypatch.undo()
    forget_plugins()
    for name in [n for n in sys.modules if n == "mylab" or n.startswith("mylab.")]:
        del sys.modules[name]
    repo = ConfigStore.instance().repo
    for option in registered:
        repo.get(option.group, {}).pop(f"{option.name}.yaml", None)


def test_the_tutorials_package_runs_and_is_read_back_then_refused_once_uninstalled(
    mylab, install, tmp_path, monkeypatch
):
    install(mylab)
    assert plugins.options("model") == ["tinynet"] and plugins.options("dataset") == ["sine"]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", ["model=tinynet", "dataset=sine", "chains=2", *SHORT])
    assert cfg.protocol.prior_scale == 0.3  # the dataset's YAML chose the UCI protocol
    metrics = run(cfg, tmp_path / "run")
    assert metrics["status"] == "completed" and metrics["chains"] == 2
    posterior = bdl.load_run(tmp_path / "run")
    model, _ = posterior.network()
    assert type(model).__module__ == "mylab.nets" and model.layers[1].out_features == 16
    # uninstalled: the run names a package that is not there, and nothing is imported
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(mylab)])
    for name in [n for n in sys.modules if n == "mylab" or n.startswith("mylab.")]:
        monkeypatch.delitem(sys.modules, name)
    forget_plugins()
    with pytest.raises(ConfigError, match=r"its package mylab is not installed: install it"):
        bdl.load_run(tmp_path / "run").network()
    assert "mylab" not in sys.modules


def bad_plugin(root: Path, group: str, entry: str, yaml: tuple[str, str] | None = None) -> Path:
    files = {
        "pyproject.toml": f'[project]\nname = "bad"\n[project.entry-points."{group}"]\n{entry}\n',
        "badpkg/__init__.py": "def load():\n    pass\n",
    }
    if yaml:
        files[f"badpkg/conf/{yaml[0]}"] = yaml[1]
    return write_package(root, files, "bad")


OWN = "a plugin's targets are its own"


@pytest.mark.parametrize(
    "group, entry, yaml, message",
    [
        (
            "bdl.models",
            'mlp = "badpkg:load"',
            None,
            "bad's entry point bdl.models:mlp shadows bdl's own model=mlp: the plugin must choose "
            "another name",
        ),
        (
            "bdl.datasets",
            'mine = "bdl.data.files:load"',
            None,
            f"bad's entry point bdl.datasets:mine names bdl.data.files.load, inside bdl: {OWN}",
        ),
        (
            "bdl.datasets",
            'mine = "badpkg:load"',
            ("dataset/mine.yaml", "_target_: numpy.load\nfile: x.npy\nallow_pickle: true\n"),
            "{yaml} must say _target_: badpkg.load, the object bad's entry point "
            "bdl.datasets:mine declares",
        ),
        (
            "bdl.datasets",
            'mine = "badpkg:load"',
            ("dataset/mine.yaml", "_target_: badpkg.load\nnested:\n  _target_: os.system\n"),
            "{yaml}: nested._target_=os.system is neither one of bad's entry points nor one of "
            "bdl's own targets",
        ),
        (
            "bdl.datasets",
            'mine = "badpkg:load"',
            ("dataset/mine.yaml", "- a list\n"),
            "{yaml} must say _target_: badpkg.load, the object bad's entry point "
            "bdl.datasets:mine declares",
        ),
        (
            "bdl.samplers",
            'mine = "badpkg"',
            None,
            "bad's entry point bdl.samplers:mine = badpkg names no object: write it as "
            "module:object",
        ),
        (
            "bdl.datasets",
            'mine = "numpy:load"',
            None,
            f"bad's entry point bdl.datasets:mine names numpy.load, of numpy: {OWN}",
        ),
        (
            "bdl.datasets",
            'mine = "os:system"',
            None,
            f"bad's entry point bdl.datasets:mine names os.system, of the standard library: {OWN}",
        ),
    ],
)
def test_a_plugin_that_passes_for_bdl_or_names_other_code_is_refused(
    install, tmp_path, group, entry, yaml, message
):
    install(bad_plugin(tmp_path, group, entry, yaml))
    assert plugins.discover()[0] == ()  # nothing of it joins the groups or the allow-list
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", [])
    with pytest.raises(ConfigError) as refusal:
        validate(cfg)
    yaml_path = tmp_path / "badpkg" / "conf" / (yaml[0] if yaml else "")
    assert str(refusal.value) == message.format(yaml=yaml_path)


def test_a_plugin_sampler_is_held_to_the_sampler_contract(install, tmp_path):
    install(bad_plugin(tmp_path, "bdl.samplers", 'fake = "badpkg:load"'))
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", ["sampler=fake"])
    with pytest.raises(ConfigError, match=r"sampler._target_=badpkg.load is no bdl.samplers"):
        validate(cfg)


LANGEVIN = {
    "pyproject.toml": '[project]\nname = "lab"\n[project.entry-points."bdl.samplers"]\n'
    'langevin = "labsampler:Langevin"\n',
    "labsampler/__init__.py": "from bdl.samplers.sgld import SGLD\n\n\nclass Langevin(SGLD):\n"
    '    """SGLD (Welling & Teh 2011) under a name of the plugin\'s own."""\n',
    "labsampler/conf/sampler/langevin.yaml": "_target_: labsampler.Langevin\n_partial_: true\n"
    "lr: 10.0\n",
}


def test_the_every_sampler_tests_pick_up_an_installed_plugin_sampler(tmp_path, fake_data_root):
    root = write_package(tmp_path / "lab", LANGEVIN, "lab")
    env = {**command_env(fake_data_root, tmp_path / "cache"), "PYTHONPATH": str(root)}
    test = (
        "tests/runner/test_stability.py::test_every_sampler_at_its_defaults_ends_sound_or_refuses"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", test],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    collected = re.findall(r"\[([\w ]+)-(\w+)\]", result.stdout)
    assert {(data, sampler) for data, sampler in collected if sampler == "langevin"} == {
        ("classification", "langevin"),
        ("sharp regression", "langevin"),
    }, result.stdout[-3000:]


@pytest.mark.slow  # about 25 s: three runs of four chains, a report and an evaluation
def test_the_tutorials_commands_run_a_sweep_a_report_and_an_evaluation(
    mylab, tmp_path, fake_data_root
):
    env = {**command_env(fake_data_root, tmp_path / "cache"), "PYTHONPATH": str(mylab)}
    sweep = next(c for c in page_commands(PAGE, "bdl-run") if c.startswith("bdl-run -m"))
    # long enough for burn-in to halve a step that is too large for this network
    # (bdl.runner.stability), and for the 4 draws a chain the table's diagnostics rows need
    args = shortened(sweep, epochs="40", burn_in="20", thin="5")
    args = [a.replace("multirun/sine", str(tmp_path / "sine")) for a in args]
    commands = [
        [sys.executable, "-m", "bdl.cli", *args],
        [sys.executable, "-m", "bdl.analysis.report", str(tmp_path / "sine")],
    ]
    for command in commands:
        result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-3000:]
    jobs = sorted(p.parent for p in (tmp_path / "sine").glob("*/metrics.json"))
    statuses = [json.loads((job / "metrics.json").read_text())["status"] for job in jobs]
    assert len(jobs) == 3 and set(statuses) <= {"completed", "unsound"}
    assert "| sgld" in (tmp_path / "sine" / "report.md").read_text()
    # the page shows the report's columns, and the table that ends its first run (sghmc's)
    (shown,) = report_blocks(PAGE)
    assert columns(shown) == columns(result.stdout)
    (evaluate,) = page_commands(PAGE, "bdl-eval")
    _, *rest = shlex.split(evaluate.replace("runs/sine-sghmc", str(jobs[0])))
    result = subprocess.run(
        [sys.executable, "-m", "bdl.analysis.evaluate", *rest],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    evaluated = json.loads(next((jobs[0] / "eval").glob("*/metrics.json")).read_text())
    ran = json.loads((jobs[0] / "metrics.json").read_text())
    assert evaluated["test_rmse"] == pytest.approx(ran["test_rmse"], rel=1e-5)
    assert_shows_a_run_of_today(page_output(PAGE, "bdl-run", 1), ran, jobs[0])


@pytest.mark.slow  # about 20 s: two runs of 2000 epochs, as the page prints them
def test_the_tutorials_files_run_and_python_call_give_the_same_posterior(mylab, tmp_path):
    """The page's claim: the CSV files and bdl.run_model on the same points, standardised
    alike and seeded alike, print the same test RMSE and R-hat."""
    work = tmp_path / "work"
    shutil.copytree(mylab, work)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(work)}
    files_run = next(c for c in page_commands(PAGE, "bdl-run") if "dataset=files" in c)
    _, *args = shlex.split(files_run)
    for command in (["make_csv.py"], ["-m", "bdl.cli", *args]):
        result = subprocess.run(
            [sys.executable, *command], cwd=work, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr[-3000:]
    assert "read as regression" in result.stdout
    run_dir = work / "runs" / "files-sghmc"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert_shows_a_run_of_today(page_output(PAGE, "bdl-run", 3), metrics, run_dir)
    shutil.rmtree(work / "mylab-0.1.0.dist-info")  # the Python call needs no plugin
    result = subprocess.run(
        [sys.executable, "own_run.py"], cwd=work, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rmse, rhat = map(float, result.stdout.split()[-2:])
    assert (rmse, rhat) == pytest.approx((metrics["test_rmse"], metrics["rhat_max"]), rel=1e-6)


def test_an_object_handed_over_is_recorded_by_the_name_that_finds_it_again():
    assert plugins.dotted(ConfigError) == "bdl.errors.ConfigError"

    def local():
        pass

    for obj in (local, lambda x: x, 3):
        with pytest.raises(ConfigError) as refusal:
            plugins.dotted(obj)
        assert str(refusal.value) == (
            f"{obj!r} cannot be found again by its name: define it at the top level of a module "
            "of its own (mynet.py, imported), which a run records and load_run imports"
        )

    class Impostor:  # claims a name that finds another object
        pass

    Impostor.__module__, Impostor.__qualname__ = "bdl.errors", "ConfigError"
    with pytest.raises(ConfigError) as refusal:
        plugins.dotted(Impostor)
    assert str(refusal.value) == (
        f"bdl.errors.ConfigError is not {Impostor!r}: define it at the top level of its module"
    )


def test_a_plugins_options_are_stored_under_its_package_name(mylab, install):
    """Hydra's config store credits each option to the package that declared it (what
    ``bdl-run --info`` shows as its provider)."""
    from hydra.core.config_store import ConfigStore

    install(mylab)
    store = ConfigStore.instance()
    for group, name in (("model", "tinynet"), ("dataset", "sine")):
        node = store.load(f"{group}/{name}.yaml")
        assert node.provider == "mylab", (group, name)
        assert node.node._target_ == next(
            o.target for o in plugins.discover()[0] if (o.group, o.name) == (group, name)
        )
