"""Everything Hydra composes passes bdl's allow-list before Hydra builds any of it: the ``hydra``
node of a preset loaded with ``--config-dir``, of a primary config (``-cp``/``-cn``), of each
option a sweep or the sweeper's ``params`` choose (callbacks, launcher, sweeper, logging);
``--experimental-rerun`` (which unpickles its file) is refused; a run directory is never a config.

The payloads are real: a module in the folder a researcher was handed, whose class writes a
marker file holding an environment secret when Hydra builds it; each is first shown to write its
marker through Hydra's own ``instantiate``, so that a refusal below is a refusal of a payload that
works. ``bdl.cli.main`` runs in this process from that folder (``python -m bdl.cli``'s
``sys.path``)."""

from __future__ import annotations

import importlib
import pickle
import sys
from pathlib import Path

import pytest
from hydra.utils import instantiate as hydra_instantiate

from bdl import cli

SECRET = "s3cr3t-53"
PAYLOAD = """\
import os
from pathlib import Path


class Marker:
    def __init__(self, *args, **kwargs):
        Path(os.environ["BDL_TEST_MARKER"]).write_text(os.environ["BDL_TEST_SECRET"])

    def __reduce__(self):
        return (Marker, ())
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A handed-over folder holding ``payload53.py``, made the working directory and importable,
    with a secret in the environment."""
    (tmp_path / "payload53.py").write_text(PAYLOAD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("BDL_TEST_MARKER", str(tmp_path / "marker"))
    monkeypatch.setenv("BDL_TEST_SECRET", SECRET)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path


def preset(folder: Path, group: str, name: str, text: str) -> None:
    path = folder / "presets" / group / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# @package _global_\n" + text)


#: A sweep that, were it not refused, would end in seconds.
TINY_SWEEP = ["dataset=yacht", "epochs=2", "burn_in=1", "thin=1", "seed=0,1"]
CALLBACK = "hydra:\n  callbacks:\n    evil:\n      _target_: payload53.Marker\n"


def bdl_run(monkeypatch: pytest.MonkeyPatch, folder: Path, *args: str) -> str:
    """``bdl-run ARGS`` in this process: the line it ends with."""
    monkeypatch.setattr(sys, "argv", ["bdl-run", *args, f"hydra.run.dir={folder / 'run'}"])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    return str(stop.value.code)


def test_the_payload_runs_when_hydra_builds_it(folder):
    hydra_instantiate({"_target_": "payload53.Marker"})
    assert (folder / "marker").read_text() == SECRET


@pytest.mark.parametrize(
    ("args", "text", "refused"),
    [
        # a callback in an experiment preset of --config-dir
        (["-cd", "presets", "experiment=evil"], CALLBACK, "hydra.callbacks.evil._target_"),
        # the same preset chosen by the second job of a sweep
        (
            ["-m", "-cd", "presets", "experiment=uci_sghmc,evil", "seed=0,1"],
            CALLBACK,
            "hydra.callbacks.evil._target_",
        ),
        # ... or by a glob over the group's options
        (["-m", "-cd", "presets", "experiment=glob(ev*)"], CALLBACK, "hydra.callbacks.evil"),
        # a launcher or sweeper that is neither bdl's nor one it ships a config for
        (
            ["-m", "-cd", "presets", "experiment=evil", "seed=0,1"],
            "hydra:\n  launcher:\n    _target_: payload53.Marker\n",
            "hydra.launcher._target_=payload53.Marker",
        ),
        (
            ["-m", "-cd", "presets", "experiment=evil", "seed=0,1"],
            "hydra:\n  sweeper:\n    _target_: payload53.Marker\n",
            "hydra.sweeper._target_=payload53.Marker",
        ),
        # Python's logging builds a handler's "()" and "class", imports an "ext://"
        (
            ["-cd", "presets", "experiment=evil"],
            "hydra:\n  job_logging:\n    handlers:\n      console:\n        (): payload53.Marker\n",
            "hydra.job_logging.handlers.console.()=payload53.Marker",
        ),
        (
            ["-cd", "presets", "experiment=evil"],
            "hydra:\n  hydra_logging:\n    handlers:\n      console:\n"
            "        class: payload53.Marker\n",
            "hydra.hydra_logging.handlers.console.class=payload53.Marker",
        ),
        (
            ["-cd", "presets", "experiment=evil"],
            "hydra:\n  job_logging:\n    handlers:\n      console:\n"
            "        stream: ext://payload53.Marker\n",
            "hydra.job_logging.handlers.console.stream=ext://payload53.Marker",
        ),
    ],
)
def test_a_preset_cannot_make_hydra_build_code(monkeypatch, folder, args, text, refused):
    preset(folder, "experiment", "evil", text)
    line = bdl_run(monkeypatch, folder, *args)
    assert line.startswith(f"bdl-run: error: {refused}")
    assert len(line.splitlines()) == 1
    assert not (folder / "marker").exists()
    assert not (folder / "run").exists()


def test_a_sweep_file_cannot_choose_a_preset_that_builds_code(monkeypatch, folder):
    # the sweeper's params (a sweep file) choose a sampler option of --config-dir in one job
    preset(
        folder, "experiment", "sweep", "hydra:\n  sweeper:\n    params:\n      sampler: sgld,evil\n"
    )
    preset(folder, "sampler", "evil", CALLBACK)
    line = bdl_run(monkeypatch, folder, "-m", "-cd", "presets", "experiment=sweep")
    assert line.startswith("bdl-run: error: hydra.callbacks.evil._target_=payload53.Marker")
    assert not (folder / "marker").exists()


def test_a_primary_config_passes_the_same_allow_list(monkeypatch, folder):
    (folder / "mine").mkdir()
    (folder / "mine" / "main.yaml").write_text(CALLBACK)
    line = bdl_run(monkeypatch, folder, "-cp", str(folder / "mine"), "-cn", "main")
    assert line.startswith("bdl-run: error: hydra.callbacks.evil._target_=payload53.Marker")
    assert not (folder / "marker").exists()


def payload_package(folder: Path) -> None:
    """``payload_package``, whose import writes the marker, with a ``conf`` folder of configs."""
    (folder / "payload_package" / "conf").mkdir(parents=True)
    (folder / "payload_package" / "__init__.py").write_text(
        "import payload53\npayload53.Marker()\n"
    )
    (folder / "payload_package" / "conf" / "__init__.py").write_text("")


def test_a_primary_config_cannot_make_hydra_import_a_package(monkeypatch, folder):
    payload_package(folder)
    (folder / "mine").mkdir()
    primary = folder / "mine" / "main.yaml"
    primary.write_text(
        "defaults:\n  - config\nhydra:\n  searchpath:\n    - pkg://payload_package.conf\n"
    )
    line = bdl_run(monkeypatch, folder, "-cp", str(folder / "mine"), "-cn", "main")
    assert line == (
        f"bdl-run: error: {primary}: hydra.searchpath names pkg://payload_package.conf, a search "
        "path that is not bdl's nor an installed plugin's (Hydra would import a package's code "
        "to read its configs): add configs with --config-dir DIR"
    )
    assert not (folder / "marker").exists()


def test_a_search_path_on_the_command_line_imports_nothing(monkeypatch, folder):
    payload_package(folder)
    for override in (
        "hydra.searchpath=[pkg://payload_package.conf]",
        "+hydra.searchpath=[pkg://payload_package.conf]",
        "++hydra.searchpath=[file://presets]",
    ):
        line = bdl_run(monkeypatch, folder, override)
        assert line == (
            f"bdl-run: error: {override} is refused: a search path adds configs from elsewhere, "
            "and Hydra imports a pkg:// one's package (running its code); add configs with "
            "--config-dir DIR"
        )
    assert not (folder / "marker").exists()
    importlib.import_module("payload_package")  # the payload is real

    assert (folder / "marker").read_text() == SECRET


EVIL_SCRIPT = '#!/bin/sh\necho "$BDL_TEST_SECRET" > "$BDL_TEST_MARKER"\nexec c++ "$@"\n'


@pytest.mark.parametrize(
    "variable", ["CXX", "CC", "LD_PRELOAD", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"]
)
def test_a_preset_s_environment_runs_no_compiler_of_its_own(monkeypatch, folder, variable):
    """``env_set: {CXX: ./evil.sh}`` with ``compile=true``: torch's compiler would run the
    preset's script."""
    script = folder / "evil.sh"
    script.write_text(EVIL_SCRIPT)
    script.chmod(0o755)
    preset(
        folder,
        "experiment",
        "evil",
        f"compile: true\nhydra:\n  job:\n    env_set:\n      {variable}: {script}\n",
    )
    line = bdl_run(monkeypatch, folder, "-cd", "presets", "experiment=evil", "epochs=2")
    assert line.startswith(f"bdl-run: error: hydra.job.env_set.{variable} is refused: a config")
    assert "set it in the shell that runs bdl-run" in line and len(line.splitlines()) == 1
    assert not (folder / "marker").exists() and not (folder / "run").exists()


def victim(folder: Path, name: str = "victim.sh") -> tuple[Path, bytes]:
    path = folder / "home" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"# a file of the user's own\n")
    return path, path.read_bytes()


def test_a_preset_s_logging_writes_nothing_anywhere(monkeypatch, folder):
    """A file handler to the user's shell start-up file, with a formatter whose lines are shell
    commands: each logged line would append one to it."""
    bashrc, before = victim(folder, ".bashrc")
    text = (
        "hydra:\n  job_logging:\n    formatters:\n      simple:\n"
        f"        format: 'touch {folder / 'marker'} # %(message)s'\n"
        f"    handlers:\n      file:\n        filename: {bashrc}\n"
    )
    preset(folder, "experiment", "evil", text)
    import logging.config

    from omegaconf import OmegaConf

    config = OmegaConf.to_container(OmegaConf.create(text).hydra.job_logging)
    # disable_existing_loggers: bdl's loggers must outlive the test (later tests read them)
    config = {"version": 1, **config, "root": {"handlers": ["file"], "level": "INFO"}}
    config["disable_existing_loggers"] = False
    config["handlers"]["file"] |= {"class": "logging.FileHandler", "formatter": "simple"}
    line = bdl_run(monkeypatch, folder, "-cd", "presets", "experiment=evil")
    assert line.startswith("bdl-run: error: hydra.job_logging.formatters.simple.format=touch ")
    assert "is refused: configures logging" in line and len(line.splitlines()) == 1
    assert bashrc.read_bytes() == before and not (folder / "run").exists()
    try:  # the payload is real: Python's logging, so configured, appends the shell line
        logging.config.dictConfig(config)
        logging.getLogger().info("x")
        assert bashrc.read_bytes().startswith(before + f"touch {folder / 'marker'}".encode())
    finally:
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
        for handler in logging.getLogger().handlers[:]:
            handler.close()
            logging.getLogger().removeHandler(handler)


def test_a_preset_s_output_subdir_overwrites_no_config(monkeypatch, folder):
    config, before = victim(folder, "config.yaml")
    preset(folder, "experiment", "evil", f"hydra:\n  output_subdir: {config.parent}\n")
    line = bdl_run(monkeypatch, folder, "-cd", "presets", "experiment=evil", "epochs=2")
    assert line.startswith(f"bdl-run: error: hydra.output_subdir={config.parent} is refused")
    assert config.read_bytes() == before and not (folder / "run").exists()


@pytest.mark.parametrize(
    "text, refused",
    [
        # a bdl target is still not a callback: Hydra would call it
        (
            "hydra:\n  callbacks:\n    mine:\n      _target_: bdl.cli.SweepFailures\n",
            "hydra.callbacks.mine._target_=bdl.cli.SweepFailures is refused",
        ),
        # submitit's setup lines run in the job's shell script
        (
            "defaults:\n  - override /hydra/launcher: slurm\nhydra:\n  launcher:\n"
            "    setup: ['touch MARKER']\n",
            "hydra.launcher.setup=['touch MARKER'] is refused: holds shell lines",
        ),
        (
            "defaults:\n  - override /hydra/launcher: slurm\nhydra:\n  launcher:\n"
            "    additional_parameters:\n      output: VICTIM\n",
            "hydra.launcher.additional_parameters.output=VICTIM is refused",
        ),
        # the log file's name, and Hydra's record of the command line (the jobs' directories)
        ("hydra:\n  job:\n    name: ../../VICTIM\n", "hydra.job.name=../../VICTIM is refused"),
        (
            "hydra:\n  overrides:\n    task: [dataset.root=/x]\n",
            "hydra.overrides is refused",
        ),
        ("hydra:\n  sweep:\n    dir: VICTIM\n", "hydra.sweep.dir=VICTIM is refused"),
        ("hydra:\n  job:\n    env_copy: [BDL_TEST_SECRET]\n", "hydra.job.env_copy"),
    ],
)
def test_a_preset_sets_nothing_in_hydra_outside_the_list(monkeypatch, folder, text, refused):
    target, before = victim(folder)
    text = text.replace("MARKER", str(folder / "marker")).replace("VICTIM", str(target))
    preset(folder, "experiment", "evil", text)
    refused = refused.replace("MARKER", str(folder / "marker")).replace("VICTIM", str(target))
    line = bdl_run(monkeypatch, folder, "-m", "-cd", "presets", "experiment=evil", *TINY_SWEEP)
    assert line.startswith(f"bdl-run: error: {refused}"), line
    assert len(line.splitlines()) == 1
    assert not (folder / "marker").exists() and target.read_bytes() == before
    assert not (folder / "multirun").exists()


def test_a_run_directory_is_never_a_config(monkeypatch, folder):
    run = folder / "handed"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(CALLBACK)
    (run / "metrics.json").write_text("{}")
    for args in (
        ["-cp", str(run / ".hydra"), "-cn", "config"],
        ["-cp", str(run), "-cn", ".hydra/config"],
        ["-cd", str(run / ".hydra"), "-cn", "config"],
    ):
        line = bdl_run(monkeypatch, folder, *args)
        assert line.startswith(f"bdl-run: error: {run}")
        assert f"is in the run directory {run}: a run's files are data" in line
    assert not (folder / "marker").exists()


def test_experimental_rerun_unpickles_nothing(monkeypatch, folder):
    from payload53 import Marker

    (folder / "config.pickle").write_bytes(pickle.dumps(Marker.__new__(Marker)))
    line = bdl_run(monkeypatch, folder, "--experimental-rerun", str(folder / "config.pickle"))
    assert line.startswith("bdl-run: error: --experimental-rerun")
    assert "unpickles that file" in line
    assert not (folder / "marker").exists()
    pickle.loads((folder / "config.pickle").read_bytes())  # the payload is real
    assert (folder / "marker").read_text() == SECRET


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["-m", "hydra/launcher=joblib", "seed=0,1"],
        ["-m", "hydra/launcher=slurm", "sampler=sgld,sghmc"],
        ["-m", "hydra/launcher=submitit_local", "experiment=csgld,csghmc"],
        ["hydra/job_logging=disabled", "hydra/hydra_logging=disabled"],
    ],
)
def test_bdl_s_own_hydra_configs_pass(args):
    from bdl.composition.overrides import check_composition

    check_composition(args, "bdl.cli")


@pytest.mark.parametrize(
    "args, composed",
    [
        (["sampler=sgld", "seed=3"], False),
        (["-m", "experiment=uci_sghmc", "dataset=concrete,yacht"], False),
        (["-cd", "presets", "experiment=mine"], True),
        (["--config-dir=presets"], True),
        (["-cp", "mine", "-cn", "main"], True),
        (["hydra/launcher=joblib"], True),
        (["+hydra.callbacks.x._target_=payload53.Marker"], True),
        (["~hydra.job_logging"], True),
        (["++hydra.run.dir=out"], True),
    ],
)
def test_hydra_s_node_is_composed_and_checked_where_the_command_line_reaches_it(
    monkeypatch, args, composed
):
    """Only a primary config, a folder of presets or an override of ``hydra`` can put what the
    packaged configs do not hold into Hydra's node; without one, no composition is spent on it."""
    from hydra._internal.hydra import Hydra

    from bdl.composition import overrides

    def create(*_, **__):
        raise overrides.ConfigError("composed")

    monkeypatch.setattr(Hydra, "create_main_hydra2", create)
    monkeypatch.setattr(overrides, "_run_directory", lambda path: None)
    if composed:
        with pytest.raises(overrides.ConfigError, match="composed"):
            overrides.check_composition(args, "bdl.cli")
    else:
        overrides.check_composition(args, "bdl.cli")


def test_hydra_s_groups_take_no_option_of_a_preset_folder(monkeypatch, folder):
    """A launcher (or logging) option of one's own in a ``--config-dir`` folder is refused: its
    keys could be anything; bdl's and the installed plugins' options are the only ones."""
    script, before = victim(folder)
    (folder / "presets" / "hydra" / "job_logging").mkdir(parents=True)
    (folder / "presets" / "hydra" / "job_logging" / "mine.yaml").write_text(
        f"version: 1\nhandlers:\n  file:\n    class: logging.FileHandler\n    filename: {script}\n"
        "root:\n  handlers: [file]\n"
    )
    line = bdl_run(monkeypatch, folder, "-cd", "presets", "hydra/job_logging=mine")
    assert line == (
        "bdl-run: error: hydra/job_logging=mine is refused: Hydra's groups take options of bdl "
        "and of the installed Hydra plugins only (bdl-run --hydra-help lists them)"
    )
    assert script.read_bytes() == before and not (folder / "run").exists()
