"""A config or a run directory builds only what bdl's own config groups name.

The payloads are real: pickles that create a marker file when they are unpickled. Each is first
shown to write its marker through Hydra's unchecked ``instantiate`` (so that a refusal below is a
refusal of something that would have run), then placed in a run directory's
``.hydra/config.yaml`` or on the command line, where bdl must refuse it in one line and leave no
marker."""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import joblib
import pytest
import torch
import yaml
from hydra import compose, initialize_config_module
from hydra.utils import instantiate as unchecked_instantiate
from omegaconf import OmegaConf

from bdl.analysis.evaluate import main as bdl_eval
from bdl.analysis.posterior import load_run
from bdl.analysis.report import main as bdl_report
from bdl.composition.config import ConfigError, validate
from bdl.composition.instantiation import allowed_targets, inert, instantiate


class Payload:
    """Unpickled, it creates the file ``marker`` (``open(marker, "w")``)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def payload_file(directory: Path, loader: str, marker: Path) -> Path:
    path = directory / f"payload-{loader}"
    if loader == "numpy":
        path.write_bytes(pickle.dumps(Payload(marker)))
    elif loader == "torch":
        torch.save(Payload(marker), path)
    else:
        joblib.dump(Payload(marker), path)
    return path


def dataset_node(loader: str, path: Path) -> dict:
    """The dataset config that makes ``loader`` unpickle ``path``."""
    if loader == "numpy":
        return {"_target_": "numpy.load", "file": str(path), "allow_pickle": True}
    if loader == "torch":
        return {"_target_": "torch.load", "f": str(path), "weights_only": False}
    return {"_target_": "joblib.load", "filename": str(path)}


def crafted_run(directory: Path, dataset: dict) -> Path:
    """A run directory as a download might hold it: a config, and an empty sample store."""
    (directory / ".hydra").mkdir(parents=True)
    text = yaml.safe_dump({"seed": 0, "dataset": dataset})
    (directory / ".hydra" / "config.yaml").write_text(text)
    (directory / "samples").mkdir()
    (directory / "samples" / "manifest.json").write_text("[]\n")
    (directory / "metrics.json").write_text('{"status": "completed"}\n')
    return directory


LOADERS = ["numpy", "torch", "joblib"]


@pytest.mark.parametrize("loader", LOADERS)
def test_the_payloads_run_when_nothing_checks_them(tmp_path, loader):
    marker = tmp_path / "marker"
    node = OmegaConf.create(dataset_node(loader, payload_file(tmp_path, loader, marker)))
    # the loaded object may fail afterwards: what matters is that the payload ran
    with contextlib.suppress(Exception):
        unchecked_instantiate(node)
    assert marker.exists()


@pytest.mark.parametrize("loader", LOADERS)
def test_a_run_directory_naming_a_foreign_target_is_refused_by_bdl_eval(tmp_path, loader, capsys):
    marker = tmp_path / "marker"
    dataset = dataset_node(loader, payload_file(tmp_path, loader, marker))
    run = crafted_run(tmp_path / "run", dataset)
    assert bdl_eval([str(run)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    target = dataset_node(loader, Path())["_target_"]
    assert line == (
        f"bdl-eval: error: dataset._target_={target} is not one of bdl's own targets: choose a "
        "dataset option listed by bdl-run --help"
    )
    with pytest.raises(ConfigError, match=f"dataset._target_={target} is not one of bdl's own"):
        _ = load_run(run).data
    assert bdl_report([str(run)]) == 0  # a report reads the config as text, building nothing
    assert not marker.exists()


@pytest.mark.parametrize(
    "target, owner",
    [
        ("bdl.cli.SweepFailures", "the target of no option"),
        ("bdl.models.mlp.MLP", "the target of a model option"),
    ],
)
def test_a_target_of_one_group_is_refused_in_another(tmp_path, capsys, target, owner):
    """bdl's own targets, each allowed where it belongs: a model's class (or bdl's sweep
    callback) as the dataset, in a run directory or on the command line, is one line."""
    line = (
        f"dataset._target_={target} is {owner}, not a dataset's: choose a dataset option listed "
        "by bdl-run --help"
    )
    run = crafted_run(tmp_path / "run", {"_target_": target})
    assert bdl_eval([str(run)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"bdl-eval: error: {line}"]
    with pytest.raises(ConfigError) as error:
        _ = load_run(run).data
    assert str(error.value) == line
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", [f"dataset._target_={target}"])
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    assert str(error.value) == line
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        validate(compose("config", ["dataset=yacht", "model=linear", "prior=laplace"]))


def test_the_command_line_cannot_name_a_foreign_target(tmp_path):
    marker = tmp_path / "marker"
    path = payload_file(tmp_path, "numpy", marker)
    overrides = [
        "dataset._target_=numpy.load",
        "+dataset.allow_pickle=true",
        f"+dataset.file={path}",
    ]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", overrides)
    with pytest.raises(ConfigError, match="dataset._target_=numpy.load is not one of bdl's own"):
        validate(cfg)
    result = subprocess.run(
        [sys.executable, "-m", "bdl.cli", *overrides, f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "bdl-run: error: dataset._target_=numpy.load is not one of bdl's own targets: choose a "
        "dataset option listed by bdl-run --help"
    ]
    assert not marker.exists()


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        # an allowed loader, given a key that is none of its arguments
        (
            {"_target_": "bdl.data.uci.load", "name": "yacht", "allow_pickle": True},
            "dataset.allow_pickle is not an option of bdl.data.uci.load",
        ),
        # positional arguments, which no name checks
        ({"_target_": "bdl.data.uci.load", "_args_": ["yacht"]}, "dataset._args_ is not an option"),
        # a target nested in an argument, which Hydra would build first
        (
            {"_target_": "bdl.data.uci.load", "name": {"_target_": "numpy.load", "file": "x"}},
            r"dataset.name._target_=numpy.load is not one of bdl's own targets",
        ),
        # a target that an interpolation would choose
        ({"_target_": "${oc.env:HOME}"}, r"dataset._target_=\$\{oc.env:HOME\} is not one of"),
    ],
)
def test_no_key_beside_an_allowed_target_reaches_anything_else(tmp_path, dataset, message):
    with pytest.raises(ConfigError, match=message):
        instantiate(OmegaConf.create({"dataset": dataset}).dataset)


def test_every_target_in_the_packaged_configs_is_allowed_and_nothing_else():
    named = set()

    def walk(node):
        if isinstance(node, dict):
            if "_target_" in node:
                named.add(node["_target_"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    conf = Path(str(files("bdl.conf")))
    for path in conf.rglob("*.yaml"):
        walk(yaml.safe_load(path.read_text()))
    assert {"bdl.samplers.sghmc.SGHMC", "bdl.data.mnist.load", "bdl.priors.Gaussian"} <= named
    assert allowed_targets() == named


def test_a_run_directory_reads_no_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BDL_TEST_SECRET", "hunter2")
    monkeypatch.setenv("BDL_DATA_DIR", str(tmp_path / "nowhere"))
    dataset = {
        "_target_": "bdl.data.uci.load",
        "name": "yacht",
        "root": "${oc.env:BDL_TEST_SECRET}",
        "download": False,
    }
    run = crafted_run(tmp_path / "run", dataset)
    assert bdl_eval([str(run)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "bdl-eval: error: dataset.root=${oc.env:BDL_TEST_SECRET} is an interpolation that a saved "
        "run may not resolve"
    )
    assert "hunter2" not in line
    # bdl's own default, the data root of whoever reads the run, reads as null: the loaders
    # then consult $BDL_DATA_DIR themselves
    default = {"root": "${oc.env:BDL_DATA_DIR,null}", "x": "a${oc.env:BDL_TEST_SECRET,b}"}
    assert inert(default) == {"root": None, "x": "a\\${oc.env:BDL_TEST_SECRET,b}"}
    assert OmegaConf.create(inert(default)).x == "a${oc.env:BDL_TEST_SECRET,b}"


def test_a_yaml_alias_of_its_own_enclosing_node_is_refused_in_one_line(tmp_path):
    """A node that holds an alias of itself (a cycle, which YAML allows and bdl never writes)
    is refused by name before OmegaConf follows it until Python's stack ends; an alias of a
    sibling, shared twice, is read."""
    from bdl.composition.instantiation import load_yaml

    cycle = tmp_path / "cycle.yaml"
    cycle.write_text("a: &a [1, 2, *a]\n")
    with pytest.raises(ConfigError, match=r"cycle\.yaml holds a YAML alias of its own enclosing"):
        load_yaml(cycle)
    shared = tmp_path / "shared.yaml"
    shared.write_text("a: &a [1, 2]\nb: [*a, *a]\n")
    assert load_yaml(shared).b == [[1, 2], [1, 2]]


def test_a_run_directory_yaml_that_is_not_a_config_is_one_line(tmp_path):
    from bdl.composition.instantiation import MAX_YAML_BYTES, load_yaml, refuse_recursion

    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:  # a sparse file: its size, not its bytes, is read
        handle.truncate(MAX_YAML_BYTES + 1)
    with pytest.raises(ConfigError) as error:
        load_yaml(big)
    assert str(error.value) == (
        f"{big} holds {MAX_YAML_BYTES + 1} bytes, more than a run's config ever does"
    )
    duplicate = tmp_path / "duplicate.yaml"
    duplicate.write_text("a: 1\na: 2\n")
    with pytest.raises(ConfigError) as error:
        load_yaml(duplicate)
    assert str(error.value).startswith(f"{duplicate} is not a config: ")
    with pytest.raises(ConfigError) as error:
        refuse_recursion({"a": "${b}", "b": "${a}"}, tmp_path / "config.yaml")
    assert str(error.value) == (
        f"{tmp_path / 'config.yaml'}: a=${{b}} refers back to itself (a recursive "
        "interpolation): give the value itself"
    )
    refuse_recursion({"a": "${b}", "b": 1, "c": "${hydra:runtime.cwd}"}, tmp_path / "ok.yaml")
