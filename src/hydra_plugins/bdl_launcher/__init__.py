"""The SLURM launcher of ``hydra/launcher=slurm``: Hydra's submitit launcher, whose jobs resume.

submitit requeues a job that SLURM signals before its time limit or at a preemption, submitting
again what `SlurmLauncher.checkpoint` returns. Hydra's launcher resubmits the job as it was
first submitted, which bdl would refuse (its directory already holds a run); this one adds
``resume=true``, so the requeued job carries on from its checkpoint, or, preempted before its
first one, starts again from the beginning.
``resume`` is not part of the job's directory name (``hydra.job.config.override_dirname``), so
the requeued job finds its own directory.

It lives in Hydra's ``hydra_plugins`` namespace because Hydra builds a launcher from there only
(any other module is refused as "not the hydra_plugins package"). Hydra imports every module of
that namespace at its start: without bdl's ``launchers`` extra (hydra-submitit-launcher), this
one defines nothing, and ``bdl-run`` names the extra (`bdl.cli`).
"""

from __future__ import annotations

from typing import Any

try:
    from hydra_plugins.hydra_submitit_launcher import submitit_launcher
except ImportError:  # the launchers extra is not installed
    submitit_launcher = None

if submitit_launcher is not None:

    class SlurmLauncher(submitit_launcher.SlurmLauncher):
        def checkpoint(self, sweep_overrides: list[str], *args: Any, **kwargs: Any) -> Any:
            """The submission that continues this job after a requeue."""
            kept = [o for o in sweep_overrides if not o.lstrip("+~").startswith("resume=")]
            return super().checkpoint([*kept, "resume=true"], *args, **kwargs)
