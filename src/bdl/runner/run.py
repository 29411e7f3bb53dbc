"""The runner: one config in, a run directory of samples and metrics out.

`run` is the whole story of a run, top to bottom:

1. **Validate** the config (`bdl.composition.config.validate`): a typo fails before anything is
   written. Under ``torchrun``, join the other ranks (`bdl.runner.distributed`).
2. **Claim the run directory** (`bdl.storage.outputs.RunDirectory`): one writer at a time, and a
   directory that holds another run is refused unless ``resume=true``.
3. **Build** every chain's `Experiment` (`bdl.runner.experiment`): the data,
   task, network, prior, potential, sampler, schedule and generators, fixed while sampling.
4. **Start or resume the loops** (`bdl.runner.loop`): fresh ones, or those of the checkpoint
   (`bdl.runner.checkpoint`, refused if it belongs to another config; a run that had ended is
   not run again).
5. **Sample** (`bdl.runner.sampling`): the one epoch loop over the chains' steppers
   (`bdl.runner.steppers`), with the stability check (`bdl.runner.stability`), checkpoints, and a
   clean stop on SIGTERM or SIGINT (`bdl.runner.interrupts`); with ``until_converged=true``, on
   past ``epochs`` until the verdict passes or the budget is spent.
6. **Write the outputs** (`bdl.runner.results`): metrics and their verdict, the predictive, the
   chains' table and diagnostics, the pruning curve.

On the CPU a resumed run is bitwise the uninterrupted one: every generator's state, the epoch's
minibatch order and the partial sums of an interrupted epoch are part of the checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from bdl.composition.config import validate
from bdl.composition.network import resolve_device
from bdl.data import files
from bdl.runner import checkpoint, distributed
from bdl.runner.experiment import build_chains
from bdl.runner.interrupts import Signals
from bdl.runner.loop import Loop
from bdl.runner.sampling import Budget, Sampling
from bdl.storage.outputs import FINAL_STATUSES, RunDirectory, start_wandb

log = logging.getLogger("bdl")


def run(cfg: DictConfig, directory: str | Path = ".") -> dict[str, Any]:
    """Run the experiment ``cfg`` into ``directory`` (continuing it there if ``cfg.resume``);
    returns the metrics written to ``metrics.json``. Under ``torchrun`` every rank runs this
    (`bdl.runner.distributed`): rank 0 owns ``directory``, the others only read it on resume."""
    validate(cfg)  # before anything is written: a typo leaves no trace
    group = distributed.join(cfg.distributed.backend, resolve_device(cfg.device.name))
    output = RunDirectory(directory, writer=group is None or group.leader)
    cfg, kept = files.keep_in_run(cfg, output.path)  # the run reads its own copy of the data
    try:
        with Signals() as signals:
            distributed.on_leader(group, lambda: _claim(output, cfg, kept))
            try:
                return _run_in(cfg, output, signals, group)
            finally:
                output.release()
    finally:
        if group is not None:
            group.close()


def _claim(output: RunDirectory, cfg: DictConfig, kept: list[tuple[Path, Path]]) -> None:
    """The directory made this run's, and the data files copied into it: afresh for a run
    started anew, checked against the originals for one resumed."""
    output.claim(cfg, cfg.resume)
    files.copy_into_run(kept, resumed=cfg.resume and output.checkpoint.exists())


def _run_in(
    cfg: DictConfig, output: RunDirectory, signals: Signals, group: distributed.Group | None
) -> dict[str, Any]:
    log.info("run directory: %s", output.path)
    config = checkpoint.resumable_config(cfg)
    header: dict[str, Any] = {"elapsed_s": 0.0, "wandb_id": None}
    resuming = cfg.resume and output.checkpoint.exists()  # else claim started it afresh
    if resuming:
        tensors, header = checkpoint.load_run(output.checkpoint, cfg)
        if output.read_status() in FINAL_STATUSES:
            # a requeued job whose run had ended (perhaps killed on its way out): nothing to redo
            log.info("the run in %s has completed; nothing to resume", output.path)
            return output.read_metrics()
    experiments = build_chains(cfg, group, header.get("threads"))
    if resuming:
        loops = checkpoint.restore_loops(experiments, tensors, header)
        log.info("resuming at epoch %d, step %d", loops[0].epoch + 1, loops[0].step)
    else:
        loops = [Loop.start(experiment) for experiment in experiments]
    signals.check()
    wandb_run = start_wandb(cfg, output.path, header["wandb_id"]) if output.writer else None
    try:
        sampling = Sampling(
            experiments,
            loops,
            output,
            config,
            signals,
            group,
            header["elapsed_s"],
            wandb_run,
            Budget.of(cfg),
            header.get("epochs"),
        )
        return sampling.run()
    finally:
        if wandb_run is not None:
            wandb_run.finish()
