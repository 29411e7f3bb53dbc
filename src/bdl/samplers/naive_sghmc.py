r"""Naive stochastic-gradient HMC: the leapfrog with minibatch gradients and no friction.

Bühler, §4.2.3, eq. (45): replacing $\nabla U$ by $\nabla\tilde U \approx \nabla U +
\mathcal N(0, V)$ in Hamilton's equations gives dynamics that no longer leave the posterior
invariant — the injected energy makes the chain spread ever wider until the momentum is
resampled (Chen, Fox & Guestrin 2014, §3.1 and Fig. 1; Bühler, Fig. 2). Kept to reproduce
that figure; ``sghmc`` is the fix (friction).

One step is one leapfrog step with one gradient evaluation,

$$
p \leftarrow p - \epsilon\nabla\tilde U(\theta), \qquad \theta \leftarrow \theta + \epsilon p,
$$

with half kicks at both ends of each trajectory of ``resample_every`` $= L$ steps, after
which the momentum is drawn afresh from $\mathcal N(0, I)$ (Chen et al.'s code resamples
every 50 steps). ``lr`` is $\epsilon^2$ as for ``hmc``; with exact gradients and no test
this is "HMC without MH".

``mh=True`` adds the Metropolis test of eq. (29) at the end of each trajectory, on the value of
``U`` that the closure returns. With an exact value and noisy gradients (Chen et al.'s
"naive stochastic gradient HMC with MH": their toy closures do this) the test makes the chain
exact again, because for a fixed sequence of gradient noises the noisy leapfrog is still a
volume-preserving involution up to the momentum flip, and the reversed sequence is as likely —
provided every gradient of a trajectory is a fresh draw, so none is carried over from the previous
trajectory, whose test it took part in. On minibatch closures (``bdl-run``) the value is itself a
minibatch estimate, the test compares two different minibatches and is only a heuristic. The
closing half kick needs the gradient at the trajectory's end, so with ``mh=True`` the last step of
a trajectory calls the closure twice. Only the trajectories' ends are states of the tested chain:
keep samples every $L$ steps (with ``bdl-run``, make ``resample_every`` divide the steps
per epoch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from bdl.closures import Closure
from bdl.noise import Generator
from bdl.samplers.base import Declaration, Sampler, SamplerState
from bdl.samplers.metropolis import (
    LeapfrogUpdate,
    drift,
    kick,
    kinetic_energy,
    metropolis_test,
    select_,
)

TEST_KEYS = ("accepted", "accept_prob", "energy_error", "divergent")


@dataclass
class NaiveSGHMCState(SamplerState):
    #: with ``mh``, from a trajectory's start to its test: ``U`` there (float64) and the
    #: Hamiltonian ``U + ½‖p‖²`` after the momentum's draw; the positions are
    #: ``buffers["start"]``
    start: tuple[Tensor, Tensor] | None = None


class NaiveSGHMC(LeapfrogUpdate, Sampler):
    """Frictionless SG-HMC with $\\epsilon^2 =$ ``lr``, momentum resampled every
    ``resample_every`` steps, optionally Metropolis-corrected (``mh``)."""

    declaration = Declaration(step_unit="per datum", vectorisable=True, backs_off=True)

    def __init__(
        self,
        lr: float,
        resample_every: int = 50,
        mh: bool = False,
        *,
        foreach: bool = True,
        generator: Generator = None,
    ) -> None:
        super().__init__(lr, foreach=foreach, generator=generator)
        if resample_every < 1:
            raise ValueError(f"sampler.resample_every must be ≥ 1, got {resample_every}")
        self.resample_every = resample_every
        self.mh = mh

    def init(self, params: list[Tensor]) -> NaiveSGHMCState:
        state = NaiveSGHMCState(params=list(params))
        state.buffers["momentum"] = [torch.zeros_like(p) for p in params]
        return state

    @torch.no_grad()
    def step(
        self,
        state: SamplerState,
        closure: Closure,
        lr_scale: float = 1.0,
        noise: bool = True,
        tune: bool = False,
    ) -> SamplerState:
        epsilon = math.sqrt(self.step_size(lr_scale))
        position = state.step % self.resample_every
        momenta = state.buffers["momentum"]
        for key in TEST_KEYS:  # diagnostics of a test belong to the step that made it
            state.info.pop(key, None)
        if position == 0:
            potential, grads = self._trajectory_start(state, closure, noise)
            kick(momenta, grads, epsilon / 2, self.foreach)
            drift(state.params, momenta, epsilon, self.foreach)
        else:
            potential, grads = closure()
            state.grad_evals += 1
            update = self._update_foreach if self.foreach else self._update_loop
            update(state, grads, epsilon, noise)
        if self.mh and position == self.resample_every - 1:
            potential = self._metropolis(state, closure, epsilon)
        state.info["potential"] = potential
        state.step += 1
        return state

    def _trajectory_start(
        self, state: NaiveSGHMCState, closure: Closure, noise: bool
    ) -> tuple[Tensor, list[Tensor]]:
        momenta = state.buffers["momentum"]
        potential, grads = closure()
        state.grad_evals += 1
        if noise:
            torch._foreach_copy_(momenta, self.gaussian_like(momenta))
        if self.mh:
            state.buffers["start"] = [q.clone() for q in state.params]
            energy = potential.double() + kinetic_energy(momenta, potential.shape)
            state.start = (potential.double(), energy)
        return potential, grads

    def _metropolis(self, state: NaiveSGHMCState, closure: Closure, epsilon: float) -> Tensor:
        """Close the trajectory with a half kick and test it; returns ``U`` where the chain is."""
        momenta = state.buffers["momentum"]
        potential, grads = closure()
        state.grad_evals += 1
        kick(momenta, grads, epsilon / 2, self.foreach)
        end_energy = potential.double() + kinetic_energy(momenta, potential.shape)
        start_potential, start_energy = state.start
        accept = metropolis_test(state, start_energy - end_energy, self.generator)
        select_(accept, state.params, state.buffers["start"])
        return torch.where(accept, potential.double(), start_potential)
