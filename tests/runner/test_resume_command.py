"""The printed "Resume with:" command runs as printed: the shell gives ``bdl-run`` exactly the
words meant (no command substitution, no split at a space), and Hydra reads back the run's
directory as it is named (a sweep job's ``0_sampler=sgld,seed=0``, quotes, backslashes, an
``${oc.env:...}`` that is a name and no lookup)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from bdl.runner.interrupts import resume_command

NAMES = [
    "multirun/2026-11-27_08-00-00.000000/3_sampler=sgld,seed=0",
    "with space/run 1",
    "ünïcode/运行",
    "$(touch MARKER)",
    "`touch MARKER`; touch MARKER | touch MARKER & touch MARKER",
    'it\'s "quoted" and back\\slashed\\',
    "${oc.env:BDL_TEST_SECRET}",
    "123",
    "true",
]
RECORDED = ["sampler=sgld", "seed=0", "dataset.root='/data/with space'", "resume=true"]


@pytest.fixture
def fake_bdl_run(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A ``bdl-run`` first on the PATH that writes the words it was given, NUL-separated."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "bdl-run"
    script.write_text('#!/bin/sh\nprintf "%s\\0" "$@" > "$ARGS_FILE"\n')
    script.chmod(0o755)
    args = tmp_path / "args"
    env = {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}", "ARGS_FILE": str(args)}
    return {**env, "BDL_TEST_SECRET": "s3cr3t"}, args


@pytest.mark.parametrize("name", NAMES)
def test_the_resume_command_runs_as_printed(tmp_path, fake_bdl_run, name):
    env, args_file = fake_bdl_run
    directory = tmp_path / name
    printed = resume_command(directory, RECORDED)
    assert printed.startswith("bdl-run ")
    subprocess.run(["sh", "-c", printed], env=env, cwd=tmp_path, check=True)
    assert not (tmp_path / "MARKER").exists()
    given = args_file.read_bytes().decode().split("\0")[:-1]
    assert given == shlex.split(printed)[1:]
    overrides = OverridesParser.create().parse_overrides(given)
    values = {o.key_or_group: o.value() for o in overrides}
    # what Hydra sets the keys to, once OmegaConf reads the value as the config holds it
    assert OmegaConf.create({"d": values["hydra.run.dir"]}).d == str(directory)
    assert values["dataset.root"] == "/data/with space"
    assert [o.input_line for o in overrides][:3] == RECORDED[:3]
    assert values["resume"] is True
    assert [o.key_or_group for o in overrides].count("resume") == 1


def test_a_plain_directory_is_printed_plainly(tmp_path):
    assert resume_command(Path("outputs/boston/sghmc/2026-11-27_08-00-00.1"), ["seed=1"]) == (
        "bdl-run seed=1 hydra.run.dir=outputs/boston/sghmc/2026-11-27_08-00-00.1 resume=true"
    )


def test_under_torchrun_the_command_starts_as_many_ranks_as_ran(monkeypatch):
    """One node: torchrun --standalone with the ranks per node; several: the node count and
    "..." where the cluster's rendezvous options go."""
    run = Path("outputs/run")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert resume_command(run, ["seed=1"]) == (
        "torchrun --standalone --nproc_per_node=4 --no-python bdl-run seed=1 "
        "hydra.run.dir=outputs/run resume=true"
    )
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert resume_command(run, ["resume=false"]) == (
        "torchrun --nnodes=4 ... --nproc_per_node=2 --no-python bdl-run hydra.run.dir=outputs/run "
        "resume=true"
    )


def test_a_signal_before_sampling_began_leaves_nothing_to_resume():
    import signal

    from bdl.runner.interrupts import Interrupted, Signals

    signals = Signals()
    signals.check()  # nothing caught: nothing raised
    signals.caught = signal.SIGTERM
    with pytest.raises(Interrupted) as stop:
        signals.check()
    assert str(stop.value) == "SIGTERM before sampling began; nothing to resume"
    assert stop.value.exit_code == 128 + signal.SIGTERM
