"""``bdl-run``: the Hydra entry point. All the work is in :mod:`bdl.run`.

Mistakes a user can make end in one line, without a traceback. In a sweep (``-m``) a failing job
is reported and the sweep goes on with the others; ``bdl-run`` then exits non-zero at the end.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from omegaconf import DictConfig

import bdl.config  # noqa: F401  (registers the root schema `base_config`)
from bdl.data import DataError
from bdl.run import DivergedError, Interrupted, run
from bdl.store import StoreError

log = logging.getLogger("bdl")

# Mistakes a user can make: reported as one line, without a traceback.
USER_ERRORS = (ValueError, DataError, StoreError, DivergedError, InstantiationException)

#: Jobs of this process's sweep that failed, as (job directory, message).
_failed_jobs: list[tuple[str, str]] = []


@hydra.main(version_base="1.3", config_path="pkg://bdl.conf", config_name="config")
def _app(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    try:
        metrics = run(cfg, hydra_cfg.runtime.output_dir)
    except Interrupted as stop:
        print(f"bdl-run: {stop}", file=sys.stderr)
        raise SystemExit(stop.exit_code) from None
    except KeyboardInterrupt:
        raise SystemExit("bdl-run: interrupted before sampling began; nothing to resume") from None
    except USER_ERRORS as error:
        if isinstance(error, InstantiationException) and isinstance(error.__cause__, USER_ERRORS):
            error = error.__cause__  # the constructor's own message names the key
        message = f"bdl-run: error: {error}"
        if hydra_cfg.mode != RunMode.MULTIRUN:
            # SystemExit passes through Hydra's error handler, which would print a stack trace.
            raise SystemExit(message) from None
        log.error(message)
        _failed_jobs.append((hydra_cfg.runtime.output_dir, str(error)))
        return None
    return metrics.get("test_accuracy", metrics.get("test_rmse"))


def _check_output_root(argv: list[str]) -> None:
    """Refuse, before Hydra tries to create it (with a traceback), an output directory that
    cannot be created: a file in its path, or a read-only parent."""
    multirun = any(arg in ("-m", "--multirun") for arg in argv)
    key = "hydra.sweep.dir=" if multirun else "hydra.run.dir="
    given = [arg[len(key) :] for arg in argv if arg.startswith(key)]
    path = Path(given[-1] if given else ("multirun" if multirun else "outputs")).absolute()
    if "${" in str(path):
        return  # an interpolation: Hydra resolves it
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


def main() -> None:
    if bdl.config.print_sweep(sys.argv[1:]):  # bdl-run -m <sweep> --cfg job
        return
    _check_output_root(sys.argv[1:])
    _app()
    if _failed_jobs:
        lines = "\n".join(f"  {directory}: {message}" for directory, message in _failed_jobs)
        raise SystemExit(f"bdl-run: {len(_failed_jobs)} job(s) of the sweep failed:\n{lines}")


if __name__ == "__main__":
    sys.exit(main())
