"""The loop's state: everything that changes in one chain while it samples.

A :class:`Loop` is what a checkpoint holds of a chain (:mod:`bdl.checkpoint` writes and reads it),
so resuming a run is loading its loops and carrying on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from bdl import stability
from bdl.experiment import Experiment
from bdl.samplers.base import SamplerState


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
    curve: list[dict[str, Any]] = field(default_factory=list)
    accept_rates: list[float] = field(default_factory=list)  # per sampling epoch
    initial_potential: float | None = None  # U at the first step: the divergence yardstick
    #: the mean potentials of the last epochs (bdl.stability's yardstick is their lowest, the
    #: ``level``); during burn-in, the state the chain began the lowest of them in (to return to
    #: when a step proves too large), and the state it began this epoch in (whose potential this
    #: epoch's steps measure)
    recent: list[float] = field(default_factory=list)
    snapshot: dict[str, Tensor] | None = None
    epoch_start: dict[str, Tensor] | None = None
    #: the multiplier on the sampler's step that burn-in settled on (halved at each back-off;
    #: the same in every chain of a run)
    step_scale: float = 1.0
    #: the largest rise of an epoch's potential above ``level`` after burn-in, in rise limits
    rise_max: float = 0.0
    num_samples: int = 0
    # per sample kept: log p(y_i | x_i, θ) of every test point, and the weight probes
    # (bdl.diagnostics)
    log_likelihoods: list[Tensor] = field(default_factory=list)
    probes: list[Tensor] = field(default_factory=list)
    validation: Any = None  # the model average on the validation points, if the data hold some

    @classmethod
    def start(cls, experiment: Experiment) -> Loop:
        loop = cls(
            sampler=experiment.sampler.init(experiment.potential.params),
            average=experiment.task.average(),
            validation=None if experiment.validation is None else experiment.validation.average(),
        )
        if experiment.backs_off:
            loop.snapshot = stability.snapshot(loop.live_state(experiment))
            loop.epoch_start = loop.snapshot
        return loop

    @property
    def level(self) -> float | None:
        return min(self.recent, default=None)

    def live_state(self, experiment: Experiment) -> dict[str, Tensor]:
        """The tensors that a back-off returns to their snapshot (:mod:`bdl.stability`): the
        parameters, the sampler's buffers and the Gibbs-sampled hyperparameters."""
        state = self.sampler
        live = {f"params/{i}": p for i, p in enumerate(state.params)}
        for key, values in state.buffers.items():
            if values is not state.params:
                live.update({f"buffers/{key}/{i}": t for i, t in enumerate(values)})
        live.update({f"potential/{k}": t for k, t in experiment.potential.state_dict().items()})
        return live
