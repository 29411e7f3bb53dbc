"""The loop's state: everything that changes in one chain while it samples, and the check of
each of its epochs against the yardstick of `bdl.runner.stability`.

A `Loop` is what a checkpoint holds of a chain (`bdl.runner.checkpoint` writes and reads it),
so resuming a run is loading its loops and carrying on.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from bdl.metrics import Detection
from bdl.runner import stability
from bdl.runner.curve import Curve
from bdl.runner.experiment import Experiment
from bdl.runner.progress import say
from bdl.runner.stability import (
    DIVERGENCE_FACTOR,
    DIVERGENCE_LIMITS,
    MAX_BACKOFFS,
    ONE_CHAIN,
    DivergedError,
    rounded,
)
from bdl.samplers.base import SamplerState

log = logging.getLogger("bdl")


@dataclass
class Loop:
    """Everything that changes in one chain while sampling. Positions count completed work:
    ``epoch`` epochs are done, and ``step`` steps of the next one (whose minibatch order is
    ``order`` and whose per-step potentials so far are ``potentials``)."""

    sampler: SamplerState
    average: Any
    epoch: int = 0
    step: int = 0
    order: Tensor | None = None
    potentials: list[Tensor] = field(default_factory=list)
    # Metropolis acceptances in the epoch so far: a tensor, so that no step waits for the device
    accepted: Tensor = field(default_factory=lambda: torch.zeros((), dtype=torch.float64))
    tests: int = 0  # Metropolis tests in the epoch so far
    # divergent transitions in the epoch so far (bdl.samplers.metropolis), a tensor like accepted
    divergences: Tensor = field(default_factory=lambda: torch.zeros((), dtype=torch.float64))
    sampling_tests: int = 0  # Metropolis tests after burn-in: the divergences' denominator
    curve: Curve = field(default_factory=Curve)
    accept_rates: list[float] = field(default_factory=list)  # per sampling epoch
    initial_potential: float | None = None  # U at the first step: the yardstick of a diverged chain
    #: the mean potentials of the last epochs (bdl.runner.stability's yardstick is their lowest, the
    #: ``level``); the state to return to when a step proves too large (during burn-in, the
    #: state the chain began the lowest of them in; after it, the state it began its last epoch
    #: within one rise limit of the level in) and the epochs completed at it; and the state it
    #: began this epoch in (whose potential this epoch's steps measure)
    recent: list[float] = field(default_factory=list)
    snapshot: dict[str, Tensor] | None = None
    snapshot_epoch: int = 0
    epoch_start: dict[str, Tensor] | None = None
    #: the multiplier on the sampler's step that burn-in settled on (halved at each back-off;
    #: the same in every chain of a run)
    step_scale: float = 1.0
    #: this chain's back-offs after burn-in (each halved the step for the rest of the run)
    late_backoffs: int = 0
    #: for a chain that backs off after burn-in, its model averages as they were at ``snapshot``
    #: (``average/``, ``validation/``, ``detection/``, on the CPU as they are): a back-off
    #: returns them there, dropping the draws kept since
    snapshot_averages: dict[str, Tensor] | None = None
    #: the largest rise of an epoch's potential above ``level`` after burn-in, in rise limits
    rise_max: float = 0.0
    num_samples: int = 0
    # per sample kept: log p(y_i | x_i, θ) of every test point, and the weight probes
    # (bdl.diagnostics)
    log_likelihoods: list[Tensor] = field(default_factory=list)
    probes: list[Tensor] = field(default_factory=list)
    validation: Any = None  # the model average on the validation points, if the data hold some
    #: the model averages on the test and out-of-distribution inputs (``ood=``), if asked for
    detection: Detection | None = None

    @classmethod
    def start(cls, experiment: Experiment) -> Loop:
        loop = cls(
            sampler=experiment.sampler.init(experiment.potential.params),
            average=experiment.run.task.average(),
            validation=None
            if experiment.run.validation is None
            else experiment.run.validation.average(),
            detection=None if experiment.run.x_ood is None else Detection(),
        )
        if experiment.run.backs_off:
            loop.snapshot = stability.snapshot(loop.live_state(experiment))
            loop.epoch_start = loop.snapshot
        if loop.backs_off_late(experiment):  # the averages at that snapshot: no draws yet
            loop.snapshot_averages = stability.snapshot(loop.averages())
        return loop

    @property
    def level(self) -> float | None:
        # a checkpoint of a bdl whose window was longer keeps more
        return min(self.recent[-stability.WINDOW :], default=None)

    def live_state(self, experiment: Experiment) -> dict[str, Tensor]:
        """The tensors that a back-off returns to their snapshot (`bdl.runner.stability`): the
        parameters, the sampler's buffers and the Gibbs-sampled hyperparameters."""
        state = self.sampler
        live = {f"params/{i}": p for i, p in enumerate(state.params)}
        for key, values in state.buffers.items():
            if values is not state.params:
                live.update({f"buffers/{key}/{i}": t for i, t in enumerate(values)})
        live.update({f"potential/{k}": t for k, t in experiment.potential.state_dict().items()})
        return live

    def check_stability(self, experiment: Experiment, mean_potential: float, name: str) -> bool:
        """Hold this chain's epoch (the chain ``name``d, of ``experiment``), whose mean
        potential was ``mean_potential``, against its level, the lowest mean potential of its last
        epochs (`bdl.runner.stability`): during burn-in, a climb or a non-finite state returns the
        chain to its snapshot and halves the run's step; after burn-in, a climb past
        `DIVERGENCE_LIMITS` limits returns a chain that backs off to its snapshot, drops the draws
        kept since and halves the step for the rest of the run, and ends the run otherwise
        (kernels that do not back off, a non-finite state, or `MAX_BACKOFFS` spent): the chain
        diverged (not a divergent transition, which a Metropolis test counts:
        `bdl.samplers.metropolis`). Returns whether the epoch stands: a backed-off epoch's state
        is its snapshot's, not a draw to keep."""
        exp = experiment
        finite = torch.stack(torch._foreach_norm(self.sampler.params)).isfinite().all().item()
        finite = finite and math.isfinite(mean_potential)
        level = self.level
        # the first epoch sets the yardstick; a non-finite one is an infinite rise
        rise = math.inf if not finite else 0.0 if level is None else mean_potential - level
        burning_in = exp.run.backs_off and self.epoch < exp.run.burn_in
        if burning_in and not rise <= exp.run.rise_limit:  # True for NaN
            self._back_off(exp, mean_potential, name)
            return False
        if exp.sampler.declaration.injects_noise:
            if finite and self.epoch >= exp.run.burn_in:
                self.rise_max = max(self.rise_max, rise / exp.run.rise_limit)
            limit = DIVERGENCE_LIMITS * exp.run.rise_limit
            diverged = not rise <= limit
            what = (
                f"U per step rose {rise:.4g} above its lowest of the last "
                f"{stability.WINDOW} epochs, {rounded(level)}: more than "
                f"{DIVERGENCE_LIMITS:g} x {exp.run.rise_limit:.4g}, the rise a stationary "
                "chain exceeds once in 10^9 epochs"
            )
        else:  # an optimiser's or a variational fit's objective: only an explosion is certain
            limit = DIVERGENCE_FACTOR * max(abs(self.initial_potential), exp.run.data.num_train)
            diverged = not mean_potential <= limit
            what = f"U per step = {mean_potential:.4g}, over {DIVERGENCE_FACTOR:.0e} x its start"
        if finite and not diverged:
            self._hold(exp, mean_potential, burning_in, quiet=rise <= exp.run.rise_limit)
            return True
        # (a run resumed from a checkpoint of a bdl that kept no snapshot after burn-in has none
        # until its next quiet epoch)
        late = self.backs_off_late(exp) and self.snapshot is not None
        if finite and late and self.step_scale > 2.0**-MAX_BACKOFFS:
            self._back_off(exp, mean_potential, name)
            return False
        if not finite:
            what = "its parameters or potential are not finite"
        fix = exp.sampler.divergence_fix(self.sampler)
        if self.step_scale < 1:
            fix += (
                f" (the back-offs had already taken the step down to {self.step_scale:.3g} x "
                f"sampler.lr={exp.run.lr:g}; try "
                f"sampler.lr={exp.run.lr * self.step_scale / 4:.3g} or a longer burn_in)"
            )
        raise DivergedError(f"{name} diverged in epoch {self.epoch + 1} ({what}). {fix}")

    @staticmethod
    def backs_off_late(exp: Experiment) -> bool:
        """Whether a climb after burn-in is backed off (`bdl.runner.stability`): for samplers
        that back off and keep draws; an optimiser's limit is an explosion, past saving."""
        return exp.run.backs_off and exp.sampler.declaration.injects_noise

    def _hold(self, exp: Experiment, mean_potential: float, burning_in: bool, quiet: bool) -> None:
        """An epoch within its limits: its potential joins the level's window, and the snapshot
        moves on, to where this epoch began: during burn-in if it is the lowest, after it if its
        rise is ``quiet``, within one rise limit (an epoch's potential measures the state it
        began in and the steps taken from it: the state at its end, and a draw kept there, are
        judged by the next epoch; a rise past one limit, which a stationary chain makes once in
        10^9 epochs, is the start of a climb)."""
        late = self.backs_off_late(exp)
        lowest = self.level is None or mean_potential <= self.level
        moves_on = lowest if burning_in else late and quiet
        if moves_on:
            self.snapshot, self.snapshot_epoch = self.epoch_start, self.epoch
            saved = self.snapshot_averages
            if late and (saved is None or int(saved["average/count"]) != self.average.count):
                self.snapshot_averages = stability.snapshot(self.averages())
        self.recent = [*self.recent, mean_potential][-stability.WINDOW :]
        if late or (burning_in and self.epoch + 1 < exp.run.burn_in):
            self.epoch_start = stability.snapshot(self.live_state(exp))
        else:  # the step is frozen: nothing to return to
            self.snapshot = self.epoch_start = None

    def averages(self) -> dict[str, Tensor]:
        """The states of the chain's model averages, each name prefixed by the average's."""
        return {
            f"{name}/{key}": value
            for name in ("average", "validation", "detection")
            if getattr(self, name) is not None
            for key, value in getattr(self, name).state_dict().items()
        }

    def _drop_draws(self) -> int:
        """Return the model averages to ``snapshot_averages``, dropping the per-sample rows of
        the draws kept since (the caller cuts the stored ones); how many they were."""
        for name in ("average", "validation", "detection"):
            if getattr(self, name) is not None:
                prefix = f"{name}/"
                saved = self.snapshot_averages.items()
                getattr(self, name).load_state_dict(
                    {k[len(prefix) :]: v.clone() for k, v in saved if k.startswith(prefix)}
                )
        dropped = self.num_samples - self.average.count
        self.num_samples = self.average.count
        del self.log_likelihoods[self.num_samples :], self.probes[self.num_samples :]
        return dropped

    def _back_off(self, exp: Experiment, mean_potential: float, name: str) -> None:
        """Return the chain to its snapshot and halve its step (every chain's, at the end of the
        epoch): in burn-in, while it adapts; after it, for the rest of the run."""
        late = self.epoch >= exp.run.burn_in
        if self.step_scale <= 2.0**-MAX_BACKOFFS:
            lr = exp.run.lr
            raise DivergedError(
                f"{name} still climbs in epoch {self.epoch + 1} of burn-in after the step was "
                f"halved {MAX_BACKOFFS} times, to {self.step_scale:.3g} x sampler.lr={lr:g} "
                f"(U per step {mean_potential:.4g}, lowest {rounded(self.level)}): start from "
                f"a smaller step, sampler.lr={lr * self.step_scale / 10:.3g}, and if that "
                "climbs too, check the model and data with sampler=hmc"
            )
        stability.restore(self.live_state(exp), self.snapshot)
        exp.sampler.restart(self.sampler)
        self.step_scale /= 2
        chain = "" if name == ONE_CHAIN else f", {name}"
        self.epoch_start = self.snapshot
        if late:  # one line, bare on a terminal, as the verdict's are
            self.late_backoffs += 1
            rise = (mean_potential - self.level) / exp.run.rise_limit
            dropped = self._drop_draws()
            what = f", {dropped} draw{'s' * (dropped > 1)} dropped" if dropped else ""
            say(
                logging.INFO,
                f"epoch {self.epoch + 1}{chain}: U rose {rise:.3g} limits; back to epoch "
                f"{self.snapshot_epoch}{what}; step now {self.step_scale:.3g} x sampler.lr",
            )
            return
        log.info(
            "epoch %d%s: U per step %.4g, above its lowest (%s) by more than %.4g: back to "
            "that point, step halved to %.3g x sampler.lr (burn-in adapts it; it is frozen from "
            "epoch %d on)",
            self.epoch + 1,
            chain,
            mean_potential,
            rounded(self.level),
            exp.run.rise_limit,
            self.step_scale,
            exp.run.burn_in + 1,
        )
