"""Sampling: the run's one epoch loop, from its first step (or where it stopped) to its outputs.

`Sampling` moves every chain of a run through its epochs by `bdl.runner.steppers` (one
stepper for chains stacked as one, else one per chain, in turn), and closes each chain's epoch:
the stability check (`bdl.runner.stability`), the sample kept at the epochs the schedule collects,
the curve row. It checkpoints every ``checkpoint_every`` epochs (by default about once a minute)
and on SIGTERM or SIGINT (`bdl.runner.interrupts`), and writes the outputs at the end
(`bdl.runner.results`).

**Run until converged** (``until_converged=true``, `Budget`): at the last epoch the verdict
(`bdl.runner.results.current_verdict`) is taken; while it fails and the budget lasts, the
epochs are extended so that the draws after burn-in grow by half (checks at growing intervals,
each costing a verdict) and the run samples on. The epochs reached are in every checkpoint, so
a killed run resumes to the same end; ``metrics.json``'s ``ended_by`` says what ended it:
``converged``, ``max_epochs`` or ``max_minutes``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import signal
import time
from typing import Any

import torch

from bdl import diagnostics
from bdl.composition.network import named_parameters, sample_tensors
from bdl.metrics import pool
from bdl.runner import checkpoint, distributed, results, stability
from bdl.runner.experiment import Experiment
from bdl.runner.interrupts import Interrupted, Signals, resume_command
from bdl.runner.loop import Loop
from bdl.runner.progress import Progress, say
from bdl.runner.stability import DivergedError
from bdl.runner.steppers import Stepper, steppers
from bdl.storage import outputs
from bdl.storage.outputs import RunDirectory
from bdl.storage.store import StoreError

log = logging.getLogger("bdl")

#: Seconds of work between checkpoints when ``checkpoint_every`` is not set.
CHECKPOINT_SECONDS = 60.0
#: A run until converged extends its draws after burn-in by this factor at each failed check.
GROWTH = 1.5


@dataclasses.dataclass(frozen=True)
class Budget:
    """What a run until converged may spend: ``max_epochs`` epochs in all, ``max_minutes`` of
    wall time (its sessions' together); None: no limit of that kind."""

    max_epochs: int | None = None
    max_minutes: float | None = None

    @classmethod
    def of(cls, cfg: Any) -> Budget | None:
        """The budget of config ``cfg``; None unless ``until_converged``."""
        if not cfg.until_converged:
            return None
        return cls(cfg.max_epochs, cfg.max_minutes)

    def spent(self, epoch: int, elapsed_s: float) -> str | None:
        """The budget spent at ``epoch`` after ``elapsed_s`` seconds (``max_epochs`` or
        ``max_minutes``); None while some is left."""
        if self.max_epochs is not None and epoch >= self.max_epochs:
            return "max_epochs"
        if self.max_minutes is not None and elapsed_s >= 60 * self.max_minutes:
            return "max_minutes"
        return None

    def next_check(self, epoch: int, burn_in: int) -> int:
        """The epoch of the next check after one at ``epoch``: the draws after ``burn_in``
        grown by `GROWTH` (at least one epoch more), within ``max_epochs``."""
        grown = max(epoch + 1, burn_in + math.ceil(GROWTH * (epoch - burn_in)))
        return grown if self.max_epochs is None else min(grown, self.max_epochs)


class Sampling:
    """Runs the chains of a run, one `Loop` each, to the end: an epoch of every
    chain, then the next epoch. Writes into ``directory`` (under ``torchrun``, only rank 0 writes:
    the others' ``directory`` is not a ``writer``). ``config`` is the run's config as its
    checkpoint records it (`bdl.runner.checkpoint.resumable_config`)."""

    def __init__(
        self,
        experiments: list[Experiment],
        loops: list[Loop],
        directory: RunDirectory,
        config: dict[str, Any],
        signals: Signals,
        group: distributed.Group | None = None,
        elapsed_s: float = 0.0,
        wandb_run: Any = None,
        budget: Budget | None = None,
        epochs: int | None = None,
    ) -> None:
        self.budget = budget
        self.ended_by: str | None = None
        if budget is not None and epochs is not None:  # where a run until converged had got to
            self._extend(experiments, epochs)
        self.experiments = experiments
        self.experiment = experiments[0]  # the first chain, whose run settings all share
        self.loops = loops
        self.directory = directory
        self.config = config
        self.signals = signals
        self.group = group
        self.wandb_run = wandb_run
        self.stores = directory.open_stores(len(loops))
        if self.stores is not None:  # the rank that writes (every run outside torchrun)
            for store, loop in zip(self.stores, loops, strict=True):
                store.truncate(loop.num_samples)
        self.fields = ["chain"] if len(loops) > 1 else []
        self.fields += ["epoch", "potential", "lr_scale", "num_samples", "test_metric"]
        self.fields += ["wall_time_s", "accept_rate", "divergences"]
        self.fields += list(self.experiment.potential.hyperparameters())
        directory.write_curve(self.fields, self._curve())
        self.steppers = steppers(experiments, loops)
        self.stopped: Stepper | None = None  # the stepper a signal stopped
        self.elapsed_before = elapsed_s  # wall time of earlier sessions of this run
        self.started = self.last_checkpoint = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.started

    @property
    def epoch(self) -> int:
        """The epochs that every chain has completed."""
        return min(loop.epoch for loop in self.loops)

    def _curve(self) -> list[dict[str, Any]]:
        """The curve rows of all chains in the order they were written: by epoch, then chain."""
        rows = [row for loop in self.loops for row in loop.curve]
        return sorted(rows, key=lambda row: (row["epoch"], row.get("chain", 0)))

    def run(self) -> dict[str, Any]:
        """Sample to the last epoch and write the outputs; returns the metrics."""
        exp = self.experiment
        progress = Progress(exp, self.epoch, shown=self.directory.writer)
        try:
            while True:
                while self.epoch < exp.run.epochs:
                    if not self.step_epoch():
                        self._interrupt()
                    row = self._summary_row()
                    progress.update(row)
                    if self.wandb_run is not None:
                        headline = exp.run.task.headline
                        self.wandb_run.log(outputs.wandb_row(row, headline), step=row["epoch"])
                    if self._checkpoint_due():
                        self._checkpoint()
                    if self.budget and self.budget.spent(self.epoch, self.elapsed):
                        self._extend(self.experiments, self.epoch)  # the time is up: end here
                if not self._sample_on():
                    break
                progress.extend(exp.run.epochs)
            self._checkpoint()
            metrics = self._finish()
        except DivergedError as error:
            self._write_metrics("diverged", diverged_epoch=self.epoch + 1)
            raise DivergedError(f"{error}; {self._kept()}") from None
        except Interrupted:
            raise
        except BaseException as error:
            with contextlib.suppress(StoreError):  # a full disk: keep the error that came first
                self.directory.write_metrics(
                    {
                        "status": "failed",
                        "epoch": self.epoch,
                        "error": f"{type(error).__name__}: {error}",
                    }
                )
                self._sync_stores()
            raise
        finally:
            progress.close()
        return metrics

    def _sample_on(self) -> bool:
        """Run until converged: at the last epoch, whether to sample on. The verdict taken; if it
        fails and the budget lasts, the epochs extended (`Budget.next_check`) and checkpointed."""
        if self.budget is None:
            return False
        exp, epoch = self.experiment, self.epoch
        reasons = results.current_verdict(exp, self.loops)
        self.ended_by = "converged" if not reasons else self.budget.spent(epoch, self.elapsed)
        if self.ended_by is not None:
            return False
        target = self.budget.next_check(epoch, exp.run.burn_in)
        log.info(
            "until_converged: not converged at epoch %d (%d cause%s: %s); sampling on to epoch %d",
            epoch,
            len(reasons),
            "s" * (len(reasons) > 1),
            reasons[0].split(" (")[0],
            target,
        )
        self._extend(self.experiments, target)
        self._checkpoint()
        return True

    @staticmethod
    def _extend(experiments: list[Experiment], epochs: int) -> None:
        """Every chain's run settings at ``epochs`` epochs (a run until converged's)."""
        for experiment in experiments:
            experiment.run = dataclasses.replace(experiment.run, epochs=epochs)

    def step_epoch(self) -> bool:
        """An epoch of every chain (after a stop mid-epoch, of the chains behind); False if a
        signal stopped a chain first."""
        epoch = self.epoch
        for stepper in self.steppers:
            if stepper.loops[0].epoch == epoch and not self._epoch(stepper):
                self.stopped = stepper
                return False
        # a back-off in one chain takes every chain's step down with it
        scale = min(loop.step_scale for loop in self.loops)
        if scale < 1 and self.epoch == self.experiment.run.burn_in:
            scale /= 2
            log.info(
                "burn-in over: the step is frozen at %.3g x sampler.lr, half the largest that "
                "held (a step that burn-in had to back off from sits near its limit)",
                scale,
            )
        for loop in self.loops:
            loop.step_scale = scale
        return True

    def _epoch(self, stepper: Stepper) -> bool:
        """Steps the chains of ``stepper`` to the end of their epoch (from wherever they stopped
        in it); False if a signal stopped them first."""
        exp, position = stepper.experiment, stepper.loops[0]
        epoch, scale = position.epoch, position.step_scale
        stepper.begin_epoch()
        first, end = epoch * exp.run.steps_per_epoch, exp.run.steps_per_epoch

        def setting(i: int) -> tuple[float, bool]:
            return exp.run.schedule(first + i) * scale, not exp.run.schedule.explores(first + i)

        i = position.step
        while i < end:
            if self._stop_requested():
                stepper.sync()
                return False
            # one step, or a span of them as one program (never where a Gibbs step comes between)
            i += stepper.advance(i, end, setting, tune=epoch < exp.run.burn_in)
            if (first + i) % exp.run.gibbs_every == 0 and exp.potential.has_gibbs_step:
                stepper.gibbs_step()
        stepper.sync()
        if self._stop_requested():
            return False
        rows = []
        try:
            for chain in stepper.chains:
                rows.append(self._end_epoch(chain))
        finally:  # one write for all chains' rows; those before a diverged chain's included
            self.directory.append_curve(self.fields, rows)
        return True

    def _stop_requested(self) -> bool:
        """Whether a signal asks to stop; under ``torchrun``, whether any rank caught one, so
        that all ranks stop at the same step."""
        caught = self.signals.caught is not None
        return caught if self.group is None else self.group.any(caught)

    def _name(self, chain: int) -> str:
        return f"chain {chain}" if len(self.loops) > 1 else stability.ONE_CHAIN

    def _end_epoch(self, chain: int) -> dict[str, Any]:
        """Close chain ``chain``'s epoch (stability check, the sample kept); its curve row, which
        the caller writes."""
        exp, loop = self.experiments[chain], self.loops[chain]
        epoch = loop.epoch
        mean_potential = (
            torch.stack(loop.potentials).double().sum().item() / exp.run.steps_per_epoch
        )
        stands = loop.check_stability(exp, mean_potential, self._name(chain))
        store = None if self.stores is None else self.stores[chain]
        if store is not None and len(store) > loop.num_samples:  # a back-off dropped draws
            store.truncate(loop.num_samples)
        # a backed-off epoch ends at its snapshot, a state before the climb: no draw of its own
        if stands and exp.collects(epoch):
            self._collect(chain, epoch)
        accepted, divergences = torch.stack([loop.accepted, loop.divergences]).tolist()  # one sync
        accept_rate = accepted / loop.tests if loop.tests else None
        if accept_rate is not None and epoch >= exp.run.burn_in:
            loop.accept_rates.append(accept_rate)
            loop.sampling_tests += loop.tests
        row = {"chain": chain} if len(self.loops) > 1 else {}
        row |= {
            "epoch": epoch + 1,
            # a backed-off epoch's potential may be infinite, which JSON and the curve cannot hold
            "potential": mean_potential if math.isfinite(mean_potential) else None,
            "lr_scale": exp.run.schedule((epoch + 1) * exp.run.steps_per_epoch - 1)
            * loop.step_scale,
            "num_samples": loop.average.count,
            "test_metric": self._test_metric(chain),
            "wall_time_s": round(self.elapsed, 3),
            "accept_rate": "" if accept_rate is None else accept_rate,
            "divergences": round(divergences) if loop.tests else "",
        }
        # so may a hyperparameter after a step too large (a noise precision e^s past float's
        # range), which the next epoch's potential shows and backs off from
        hyperparameters = {k: v.item() for k, v in exp.potential.hyperparameters().items()}
        row.update({k: v if math.isfinite(v) else None for k, v in hyperparameters.items()})
        loop.curve.append(row)
        loop.epoch, loop.step, loop.order = epoch + 1, 0, None
        loop.potentials, loop.accepted, loop.tests = [], torch.zeros_like(loop.accepted), 0
        loop.divergences = torch.zeros_like(loop.divergences)
        return row

    def _test_metric(self, chain: int) -> float | str:
        """The curve's test metric: the running model average's; for an optimiser or a
        variational fit, which keep no samples along the way, its current point's (the lines
        of SGD in Chen et al.'s Fig. 3); blank in burn-in."""
        exp, loop = self.experiments[chain], self.loops[chain]
        if loop.average.count:
            return exp.run.task.headline_value(loop.average)
        if exp.sampler.declaration.injects_noise:
            return ""
        current = exp.run.task.average()
        current.update(exp.predict_test())
        return exp.run.task.headline_value(current)

    def _summary_row(self) -> dict[str, Any]:
        """The epoch's curve row of a run of one chain; of several, the chains pooled: mean
        potential and accept rate, and the headline metric of the model average over all."""
        rows = [loop.curve[-1] for loop in self.loops]
        if len(rows) == 1:
            return rows[0]
        average = pool([loop.average for loop in self.loops])
        rates = [row["accept_rate"] for row in rows if row["accept_rate"] != ""]
        divergences = [row["divergences"] for row in rows if row["divergences"] != ""]
        potentials = [row["potential"] for row in rows if row["potential"] is not None]
        return {
            "epoch": rows[0]["epoch"],
            "potential": sum(potentials) / len(potentials) if potentials else None,
            "lr_scale": rows[0]["lr_scale"],
            "num_samples": average.count,
            "test_metric": self.experiment.run.task.headline_value(average)
            if average.count
            else "",
            "wall_time_s": rows[-1]["wall_time_s"],
            "accept_rate": sum(rates) / len(rates) if rates else "",
            "divergences": sum(divergences) if divergences else "",
        }

    def _collect(self, chain: int, epoch: int) -> None:
        exp, loop = self.experiments[chain], self.loops[chain]
        model, likelihood = exp.potential.model, exp.potential.likelihood
        prediction = exp.predict_test()
        loop.average.update(prediction)
        loop.log_likelihoods.append(exp.run.task.log_likelihoods(prediction).float())
        loop.probes.append(diagnostics.weight_probes(named_parameters(model, likelihood).values()))
        if loop.validation is not None:
            loop.validation.update(exp.predict_validation())
        if loop.detection is not None:
            loop.detection.update(prediction, exp.predict_ood())
        if self.stores is not None:
            self.stores[chain].add(sample_tensors(model, likelihood), epoch=epoch)
        loop.num_samples = loop.average.count

    def _checkpoint_due(self) -> bool:
        every = self.experiment.run.checkpoint_every
        if every is not None:
            return self.epoch % every == 0
        return time.perf_counter() - self.last_checkpoint >= CHECKPOINT_SECONDS

    def _checkpoint(self) -> None:
        self.elapsed_before = self.elapsed
        self.started = self.last_checkpoint = time.perf_counter()
        if not self.directory.writer:
            return
        self._sync_stores()  # the samples the checkpoint counts are on disk before it
        checkpoint.save_run(
            self.directory.checkpoint,
            self.config,
            self.experiments,
            self.loops,
            elapsed_s=self.elapsed_before,
            epochs=self.experiment.run.epochs,  # a run until converged's, extended
            wandb_id=getattr(self.wandb_run, "id", None),
            threads=torch.get_num_threads(),  # what a resumed run must compute with
        )

    def _interrupt(self) -> None:
        # a rank that caught nothing stops because another did: torchrun passes on SIGTERM
        signum = self.signals.caught or signal.SIGTERM
        stepper = self.stopped
        chain, loop = stepper.chains[0], stepper.loops[0]
        name = signal.Signals(signum).name
        self._checkpoint()
        exp = self.experiments[chain]
        where = f"epoch {loop.epoch + 1} of {exp.run.epochs}"
        status = {"status": "interrupted", "epoch": loop.epoch, "step": loop.step}
        if len(stepper.chains) < len(self.loops):  # chains stepped in turn stop one by one
            where += f", chain {chain}"
            status["chain"] = chain
        if loop.step:
            where += f", after step {loop.step} of {exp.run.steps_per_epoch}"
        self.directory.write_metrics({**status, "signal": name})
        raise Interrupted(
            signum,
            f"{name}: stopped in {where}; checkpoint {self.directory.checkpoint}. Resume with: "
            f"{resume_command(self.directory.path)}",
        )

    def _kept(self) -> str:
        samples = self.directory.path / "samples"
        kept = sum(loop.num_samples for loop in self.loops)
        return f"the {kept} samples taken before are kept in {samples}"

    def _finish(self) -> dict[str, Any]:
        for chain, (experiment, loop) in enumerate(zip(self.experiments, self.loops, strict=True)):
            for _ in experiment.sampler.final_samples(loop.sampler):
                self._collect(chain, experiment.run.epochs - 1)
        kept = sum(loop.num_samples for loop in self.loops)
        if self.directory.writer and kept:
            log.info(
                "sampled in %.0f s; the metrics and diagnostics of the %d samples...",
                self.elapsed,
                kept,
            )
        ended = {} if self.budget is None else {"ended_by": self.ended_by}
        metrics = self._write_metrics("completed", **ended)
        log.info("%s", outputs.summary_table(metrics))
        if self.budget is not None:
            spent = {"max_epochs": self.budget.max_epochs, "max_minutes": self.budget.max_minutes}
            said = "the verdict passed" if self.ended_by == "converged" else "its budget is spent"
            if self.ended_by in spent:
                said += f" ({self.ended_by}={spent[self.ended_by]:g})"
            log.info("until_converged: ended at epoch %d: %s", self.epoch, said)
        if metrics["status"] == "unsound":
            log.error("NOT A RESULT: %s; %s", metrics["error"], self._kept())
        for warning in metrics.get("warnings", []):
            log.warning("WARNING: %s", warning)
        for reason in metrics.get("reasons", []):
            say(logging.WARNING, f"NOT CONVERGED: {reason}")
        for note in metrics.get("notes", []):
            say(logging.INFO, f"note: {note}")
        if self.experiment.run.pruning_samples is not None and self.stores is not None:
            results.write_pruning(self.experiment, self.loops[0], self.directory)
        if self.directory.writer and self.experiment.run.figures:
            log.info("drawing the figures...")
            from bdl.analysis.plots import write_summary  # matplotlib is imported only to draw

            write_summary(self.directory.path)
        log.info("run directory: %s", self.directory.path)
        return metrics

    def _write_metrics(self, status: str, **extra: Any) -> dict[str, Any]:
        self._sync_stores()
        metrics = results.write_metrics(
            status, self.experiment, self.loops, self.directory, self.elapsed, **extra
        )
        if self.wandb_run is not None:  # the run's final metrics and status, as metrics.json's
            self.wandb_run.summary.update(outputs.strict_json(metrics))
        return metrics

    def _sync_stores(self) -> None:
        for store in self.stores or []:
            store.sync()
