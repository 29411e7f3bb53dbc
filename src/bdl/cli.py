"""``bdl-run``: the Hydra entry point. All the work is in :mod:`bdl.run`."""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from omegaconf import DictConfig

import bdl.config  # noqa: F401  (registers the root schema `base_config`)
from bdl.data import DataError
from bdl.run import DivergedError, run
from bdl.store import StoreError

# Mistakes a user can make: reported as one line, without a traceback.
USER_ERRORS = (ValueError, DataError, StoreError, DivergedError, InstantiationException)


@hydra.main(version_base="1.3", config_path="pkg://bdl.conf", config_name="config")
def _app(cfg: DictConfig) -> float | None:
    try:
        metrics = run(cfg, HydraConfig.get().runtime.output_dir)
    except USER_ERRORS as error:
        if isinstance(error, InstantiationException) and isinstance(error.__cause__, USER_ERRORS):
            error = error.__cause__  # the constructor's own message names the key
        # SystemExit passes through Hydra's error handler, which would print a stack trace.
        raise SystemExit(f"bdl-run: error: {error}") from None
    headline = metrics.get("test_accuracy", metrics.get("test_rmse"))
    return headline


def main() -> None:
    _app()


if __name__ == "__main__":
    sys.exit(main())
