"""The SLURM launcher of ``hydra/launcher=slurm``: Hydra's submitit launcher, whose jobs resume.

submitit requeues a job that SLURM signals before its time limit or at a preemption, submitting
again what `SlurmLauncher.checkpoint` returns. Hydra's launcher resubmits the job as it was
first submitted, which bdl would refuse (its directory already holds a run); this one adds
``resume=true``, so the requeued job carries on from its checkpoint, or, preempted before its
first one, starts again from the beginning.
``resume`` is not part of the job's directory name (``hydra.job.config.override_dirname``), so
the requeued job finds its own directory.
"""

from __future__ import annotations

from typing import Any

from hydra_plugins.hydra_submitit_launcher import submitit_launcher


class SlurmLauncher(submitit_launcher.SlurmLauncher):
    def checkpoint(self, sweep_overrides: list[str], *args: Any, **kwargs: Any) -> Any:
        """The submission that continues this job after a requeue."""
        kept = [o for o in sweep_overrides if not o.lstrip("+~").startswith("resume=")]
        return super().checkpoint([*kept, "resume=true"], *args, **kwargs)
