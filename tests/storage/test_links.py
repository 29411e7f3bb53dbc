"""Nothing bdl writes, deletes or truncates in a run directory goes through a symbolic link: a
handed-over run whose ``samples/``, ``eval/<label>`` or log is a link to a victim folder is refused
in one line naming the link, and the victim's files are left as they were."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from runner.test_resume import Kill, config, write_tiny_uci

import bdl.storage.store
from bdl import cli
from bdl.analysis.evaluate import main as bdl_eval
from bdl.analysis.report import main as bdl_report
from bdl.composition.config import ConfigError
from bdl.runner import run as runner
from bdl.storage.outputs import RunDirectory


@pytest.fixture(scope="module")
def uci_root(tmp_path_factory) -> Path:
    return write_tiny_uci(tmp_path_factory.mktemp("data"))


def victim(tmp_path: Path) -> tuple[Path, dict[Path, bytes]]:
    """A folder outside the run, with files that must survive, and their contents."""
    folder = tmp_path / "victim"
    folder.mkdir()
    (folder / "precious.txt").write_text("keep me")
    (folder / "sample_00009.safetensors").write_bytes(b"not bdl's")
    return folder, snapshot(folder)


def snapshot(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_resume_deletes_nothing_through_a_linked_samples_folder(uci_root, tmp_path, monkeypatch):
    run = tmp_path / "run"
    cfg = config(uci_root, "checkpoint_every=2", "epochs=8")
    real_add, adds = bdl.storage.store.SampleStore.add, {"n": 0}

    def dying(self, *args, **kwargs):
        real_add(self, *args, **kwargs)
        adds["n"] += 1
        if adds["n"] == 4:  # after the checkpoint of epoch 4: resume truncates the store
            raise Kill

    monkeypatch.setattr(bdl.storage.store.SampleStore, "add", dying)
    with pytest.raises(Kill):
        runner.run(cfg, run)
    monkeypatch.undo()
    folder, before = victim(tmp_path)
    for path in (run / "samples").iterdir():
        path.rename(folder / path.name)
    (run / "samples").rmdir()
    (run / "samples").symlink_to(folder)
    before = snapshot(folder)
    resumed = config(uci_root, "checkpoint_every=2", "epochs=8", "resume=true")
    with pytest.raises(
        ConfigError, match=f"^{run / 'samples'} is a symbolic link \\(to {folder}\\)"
    ):
        runner.run(resumed, run)
    assert snapshot(folder) == before


def test_a_fresh_run_writes_nothing_through_a_linked_file(uci_root, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    folder, before = victim(tmp_path)
    (run / "curve.csv").symlink_to(folder / "precious.txt")
    with pytest.raises(ConfigError, match=f"^{run / 'curve.csv'} is a symbolic link"):
        runner.run(config(uci_root), run)
    assert snapshot(folder) == before
    assert not (folder / ".bdl.lock").exists()


@pytest.mark.parametrize(
    ("link", "said"),
    [(Path.symlink_to, "is a symbolic link"), (Path.hardlink_to, "has 1 other hard link(s): bdl")],
    ids=["symbolic", "hard"],
)
def test_hydra_s_log_is_not_appended_through_a_link(tmp_path, monkeypatch, link, said):
    """A resumed run appends to its ``cli.log``: one that is a link to a file elsewhere, symbolic
    or hard, would hand that file the lines."""
    run = tmp_path / "run"
    run.mkdir()
    folder, before = victim(tmp_path)
    link(run / "cli.log", folder / "precious.txt")
    monkeypatch.setattr(sys, "argv", ["bdl-run", f"hydra.run.dir={run}", "resume=true"])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    line = str(stop.value.code)
    assert line.startswith(f"bdl-run: error: {run / 'cli.log'} {said}")
    assert len(line.splitlines()) == 1
    assert snapshot(folder) == before


def test_bdl_eval_writes_nothing_through_a_linked_eval_folder(uci_root, tmp_path, capsys):
    run = tmp_path / "run"
    runner.run(config(uci_root, "epochs=4"), run)
    assert bdl_eval([str(run)]) == 0
    (label,) = (run / "eval").iterdir()
    folder, _ = victim(tmp_path)
    (folder / "metrics.json").write_text(json.dumps({"another run's": 1}))
    before = snapshot(folder)
    for path in label.iterdir():
        path.unlink()
    label.rmdir()
    label.symlink_to(folder)
    capsys.readouterr()
    assert bdl_eval([str(run)]) == 2
    assert capsys.readouterr().err.startswith(f"bdl-eval: error: {label} is a symbolic link")
    assert snapshot(folder) == before


def test_bdl_report_writes_nothing_through_a_linked_report(sweep, tmp_path, capsys):
    folder, before = victim(tmp_path)
    (sweep / "report.md").symlink_to(folder / "precious.txt")
    assert bdl_report([str(sweep)]) == 1
    err = capsys.readouterr().err
    assert f"bdl-report: error: {sweep / 'report.md'} is a symbolic link" in err
    assert snapshot(folder) == before
    assert not (sweep / "report.csv").exists()


def test_wandb_s_own_links_are_its_business(uci_root, tmp_path):
    run = tmp_path / "run"
    (run / "wandb" / "offline-run-1").mkdir(parents=True)
    (run / "wandb" / "latest-run").symlink_to(run / "wandb" / "offline-run-1")
    directory = RunDirectory(run)
    directory.claim(config(uci_root), resume=False)
    directory.release()


def test_a_run_writes_nothing_through_a_hard_linked_file(uci_root, tmp_path):
    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    folder, before = victim(tmp_path)
    (run / "samples" / "sample_00000.safetensors").hardlink_to(folder / "sample_00009.safetensors")
    with pytest.raises(ConfigError, match="sample_00000.safetensors has 1 other hard link"):
        runner.run(config(uci_root), run)
    assert snapshot(folder) == before


def test_bdl_eval_out_writes_into_no_other_run(uci_root, tmp_path, capsys):
    """``out=`` naming another run's directory, a folder inside it or a folder holding runs is
    refused, its files untouched; ``overwrite=true`` says the user means it."""
    run, other = tmp_path / "run", tmp_path / "sweep" / "other"
    runner.run(config(uci_root, "epochs=4"), run)
    runner.run(config(uci_root, "epochs=4", "seed=1"), other)
    before = snapshot(other)
    for out, held in [
        (other, f"is in the run directory {other}"),
        (other / "samples", f"is in the run directory {other}"),
        (tmp_path / "sweep", f"holds the run {other}"),
        (run, f"is in the run directory {run}"),  # the run's own metrics.json
    ]:
        capsys.readouterr()
        assert bdl_eval([str(run), f"out={out}"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"bdl-eval: error: out={out} {held}: bdl-eval writes"), err
        assert err.rstrip().endswith("add overwrite=true") and len(err.splitlines()) == 1
    assert snapshot(other) == before
    assert bdl_eval([str(run), f"out={run / 'mine'}"]) == 0  # a folder of the run's own
    assert bdl_eval([str(run), f"out={tmp_path / 'elsewhere'}"]) == 0
    assert bdl_eval([str(run), f"out={other}", "overwrite=true"]) == 0
    assert snapshot(other) != before


def test_bdl_report_writes_nothing_through_a_hard_linked_report(sweep, tmp_path, capsys):
    folder, before = victim(tmp_path)
    (sweep / "report.md").hardlink_to(folder / "precious.txt")
    assert bdl_report([str(sweep)]) == 1
    err = capsys.readouterr().err
    assert f"bdl-report: error: {sweep / 'report.md'} has another hard link" in err
    assert snapshot(folder) == before
