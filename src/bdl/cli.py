"""``bdl-run``: the Hydra entry point. All the work is in `bdl.runner.run`.

Mistakes a user can make end in one line, without a traceback. In a sweep (``-m``) a failing job
is reported and the sweep goes on with the others; ``bdl-run`` then exits non-zero at the end,
listing the failed jobs from their directories' ``metrics.json`` (`SweepFailures`), so that
jobs run by a launcher in other processes (joblib, SLURM) are listed too.

Under ``torchrun`` every rank runs ``bdl-run`` (`bdl.runner.distributed`): rank 0 logs, writes and
reports errors; the other ranks log nothing, leave no directory behind and exit with rank 0.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from bdl.composition.config import (
    ConfigError,
    constructor_error,
    print_sweep,
)
from bdl.composition.overrides import check as check_command_line
from bdl.composition.overrides import check_composition
from bdl.data import DataError
from bdl.runner import distributed
from bdl.runner.interrupts import Interrupted
from bdl.runner.run import run
from bdl.runner.stability import DivergedError
from bdl.storage.outputs import METRICS, RunDirectory, refuse_links
from bdl.storage.store import StoreError

log = logging.getLogger("bdl")

# Mistakes a user can make: reported as one line, without a traceback.
USER_ERRORS = (ValueError, DataError, StoreError, DivergedError, InstantiationException)

#: Jobs of this sweep that failed, as (job directory, message).
_failed_jobs: list[tuple[str, str]] = []
_JOBLIB = ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher")
_SUBMITIT = ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher")
#: hydra/launcher options of the `launchers` extra: the module and the package that provide them.
LAUNCHERS = {
    "joblib": _JOBLIB,
    "submitit_local": _SUBMITIT,
    "submitit_slurm": _SUBMITIT,
    "slurm": _SUBMITIT,
}


@hydra.main(version_base="1.3", config_path="pkg://bdl.conf", config_name="config")
def _app(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    # Under torchrun, rank 0 speaks for all: the others fail with it, silently.
    follower = distributed.rank() > 0
    try:
        metrics = run(cfg, hydra_cfg.runtime.output_dir)
    except Interrupted as stop:
        if not follower:
            print(f"bdl-run: {stop}", file=sys.stderr)
        raise SystemExit(stop.exit_code) from None
    except KeyboardInterrupt:
        raise SystemExit("bdl-run: interrupted before sampling began; nothing to resume") from None
    except USER_ERRORS as error:
        error = constructor_error(error, USER_ERRORS)
        message = f"bdl-run: error: {error}"
        if follower:
            raise SystemExit(1) from None
        if hydra_cfg.mode != RunMode.MULTIRUN:
            _remove_if_unstarted(Path(hydra_cfg.runtime.output_dir))
            # SystemExit passes through Hydra's error handler, which would print a stack trace.
            raise SystemExit(message) from None
        log.error(message)
        RunDirectory(hydra_cfg.runtime.output_dir).record_failure(cfg, str(error))
        _failed_jobs.append((hydra_cfg.runtime.output_dir, str(error)))
        return None
    if metrics.get("status") == "unsound":
        message = f"bdl-run: error: {metrics['error']}"
        if follower:
            raise SystemExit(1) from None
        if hydra_cfg.mode != RunMode.MULTIRUN:
            raise SystemExit(message)
        _failed_jobs.append((hydra_cfg.runtime.output_dir, metrics["error"]))
        return None
    # what a sweeper (e.g. Optuna) tunes on: the validation metric, never the test set's
    return metrics.get("val_accuracy", metrics.get("val_rmse"))


def _remove_if_unstarted(directory: Path) -> None:
    """The directory Hydra made for a run that stopped before writing anything (holding only
    Hydra's log of it), removed: a command that never started leaves no trace."""
    if not directory.is_dir() or any(
        p.suffix != ".log" or not p.is_file() for p in directory.iterdir()
    ):
        return
    shutil.rmtree(directory, ignore_errors=True)
    # and the folders Hydra made for it (outputs/<dataset>/<sampler>/), now empty
    here = Path.cwd().resolve()
    for parent in directory.resolve().parents:
        if here not in parent.parents:
            break
        try:
            parent.rmdir()
        except OSError:
            break


class SweepFailures(Callback):
    """After a sweep, in the process that launched it: adds to the failed jobs those whose
    ``metrics.json`` does not say ``completed`` (a launcher's jobs fail in other processes)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        listed = {str(Path(directory).resolve()) for directory, _ in _failed_jobs}
        for directory, message in sweep_failures(Path(config.hydra.sweep.dir)):
            if str(directory.resolve()) not in listed:
                _failed_jobs.append((str(directory), message))


def sweep_failures(sweep: Path) -> list[tuple[Path, str]]:
    """The jobs of ``sweep`` that did not complete, in job order, with what their
    ``metrics.json`` says."""

    def job_number(path: Path) -> int:
        match = re.match(r"\d+", path.name)
        return int(match.group()) if match else -1

    failed = []
    for path in sorted(sweep.glob(f"*/{METRICS}"), key=lambda p: job_number(p.parent)):
        try:
            metrics = json.loads(path.read_text())
        except (OSError, ValueError):
            failed.append((path.parent, f"{path} is unreadable"))
            continue
        status = metrics.get("status")
        if status == "completed":
            continue
        if status == "diverged":
            message = f"the chain diverged in epoch {metrics.get('diverged_epoch')}"
        else:
            message = metrics.get("error") or f"{status} (epoch {metrics.get('epoch')})"
        failed.append((path.parent, message))
    return failed


def _check_output_root(argv: list[str]) -> None:
    """Refuse, before Hydra tries to create it (with a traceback), an output directory that
    cannot be created: a file in its path, or a read-only parent."""
    multirun = any(arg in ("-m", "--multirun") for arg in argv)
    key = "hydra.sweep.dir=" if multirun else "hydra.run.dir="
    given = [arg[len(key) :] for arg in argv if arg.startswith(key)]
    path = Path(given[-1] if given else ("multirun" if multirun else "outputs")).absolute()
    if "${" in str(path):
        return  # an interpolation: Hydra resolves it
    if path.is_dir():
        # Hydra appends its log (cli.log) to the directory before the run claims it
        try:
            refuse_links(path)
        except ConfigError as error:
            raise SystemExit(f"bdl-run: error: {error}") from None
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise SystemExit(
            f"bdl-run: error: cannot create the run directory {path}: {existing} is a file; "
            f"choose another {key[:-1]}"
        )
    if not os.access(existing, os.W_OK):
        raise SystemExit(
            f"bdl-run: error: cannot create the run directory {path}: {existing} is read-only; "
            f"choose a writable {key[:-1]}"
        )


def _check_launcher(argv: list[str]) -> None:
    """A launcher option whose plugin is not installed: name the extra that installs it."""
    for arg in argv:
        name = arg.partition("hydra/launcher=")[2]
        module, package = LAUNCHERS.get(name, (None, None))
        if module is not None and importlib.util.find_spec(module) is None:
            raise SystemExit(
                f"bdl-run: error: hydra/launcher={name} is not installed: install bdl's "
                f"launchers extra, pip install 'bdl[launchers]' (or pip install {package})"
            )
    register_launchers()


def register_launchers() -> None:
    """bdl's own launchers made known to Hydra. Hydra finds plugins by walking the folders of
    the ``hydra_plugins`` namespace, and an editable install (``pip install -e .``) maps bdl's
    module there without a folder to walk."""
    from hydra.core.plugins import Plugins

    from hydra_plugins import bdl_launcher

    if getattr(bdl_launcher, "SlurmLauncher", None) is not None:  # the launchers extra
        Plugins.instance().register(bdl_launcher.SlurmLauncher)


def _torchrun_overrides(argv: list[str]) -> tuple[list[str], str | None]:
    """Overrides for a rank under torchrun. Rank 0: none. The others: no logging, and (unless
    the run's directory is given, where rank 0 writes and every rank reads a checkpoint) a
    temporary directory for Hydra to create instead of a second timestamped one, returned too
    to be removed. A sweep is refused."""
    if any(arg in ("-m", "--multirun") for arg in argv):
        raise SystemExit(
            "bdl-run: error: a sweep (-m) under torchrun: run the sweep's jobs with a launcher "
            "(hydra/launcher=slurm), each job its own torchrun"
        )
    if distributed.rank() == 0:
        return [], None
    overrides = ["hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
    if any(arg.startswith("hydra.run.dir=") for arg in argv):
        return overrides, None
    scratch = tempfile.mkdtemp(prefix="bdl-rank-")
    return [*overrides, f"hydra.run.dir={scratch}"], scratch


def main() -> None:
    argv = sys.argv[1:]
    try:
        check_command_line(argv)
        check_composition(argv, __name__)
    except ConfigError as error:
        raise SystemExit(1 if distributed.rank() > 0 else f"bdl-run: error: {error}") from None
    if print_sweep(argv):  # bdl-run -m <sweep> --cfg job
        return
    _check_launcher(argv)
    scratch = None
    if distributed.world_size() > 1:
        overrides, scratch = _torchrun_overrides(argv)
        sys.argv += overrides
    _check_output_root(argv)
    try:
        _app()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if _failed_jobs:
        lines = "\n".join(f"  {directory}: {message}" for directory, message in _failed_jobs)
        raise SystemExit(f"bdl-run: {len(_failed_jobs)} job(s) of the sweep failed:\n{lines}")


if __name__ == "__main__":
    # `python -m bdl.cli` (as torchrun -m runs it): the main of the module bdl.cli, whose failed
    # jobs list is the one SweepFailures (imported by Hydra as bdl.cli) fills, not __main__'s
    from bdl.cli import main as cli_main

    sys.exit(cli_main())
