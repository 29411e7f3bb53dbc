"""Steppers: what moves a run's chains through an epoch, one chain or several stacked as one.

The runner's one epoch loop (`bdl.runner.sampling.Sampling`) drives a list of steppers with the
same few methods (`Stepper`): a `ChainStepper` moves one chain; a
`StackedStepper` moves ``K`` chains as one batched computation (``chains=K``,
``vectorise=true``). Both tally each step's potential and Metropolis decision the same way and
hand them to the chains' loops when the epoch ends or stops (`Stepper.sync`).

**Stacking.**

Small networks leave the hardware idle: a UCI network's step is a few kernel launches, each
on a few thousand numbers. Stacking the ``K`` chains' parameters along a new first dimension
turns ``K`` such steps into one step on ``K`` times the numbers:

- **the potential** of every chain is evaluated by ``torch.func.vmap`` of the one-chain network
  over the chain dimension (or by the model's batched ``chain_forward``), each chain on its own
  minibatch (`bdl.potential.Potential.chain_closure`; the full-data closure of the
  Metropolis kernels shares the chunks);
- **the sampler** updates the stacked tensors with the same elementwise ``torch._foreach_*``
  arithmetic as one chain's (samplers that declare ``vectorisable``,
  `bdl.samplers.base.Declaration`), drawing chain ``k``'s noise and Metropolis uniforms from
  chain ``k``'s own generator (`bdl.noise`).

Chain ``k`` therefore follows the run ``seed=<seed+k>`` of one chain: the same initial network,
minibatch order (each chain draws its own) and noise, up to the rounding of the batched matrix
products (``tests/runner/test_steppers.py`` states the tolerance). One difference: a Metropolis
kernel's step-size adaptation during burn-in sees the chains' mean acceptance probability, so the
chains share one adapted step size (Stan adapts per chain; pooling gives each chain's adaptation K
times the data, and a fixed kernel after burn-in either way).

**Minibatch order.** Each chain draws its own by default, so that the chains are independent. With
``shared_minibatches=true`` every chain takes the first chain's order (its data stream is seeded
``seed``): chain ``k`` is then the run of one chain with chain 0's minibatches and ``seed + k``'s
initial network and noise. The chains' minibatch noise is then one sequence, evaluated at each
chain's own position; what that buys, a stacked step that gathers one minibatch and reads it
once for all chains' products, is measured by ``scripts/bench_chains.py``.

Each chain's network keeps its own parameter objects, which become views of the stacked tensors
(``param.data = stacked[k]``), and each chain's loop state is pointed at its slice of the stacked
sampler state (`Stepper.sync`): evaluation, sample stores, checkpoints and resume read
and write every chain exactly as in a run whose chains are stepped in turn.
"""

from __future__ import annotations

import dataclasses
import logging
from abc import ABC, abstractmethod

import torch
from torch import Tensor

from bdl.closures import Closure
from bdl.data.augment import random_crop_flip
from bdl.runner.experiment import Experiment
from bdl.runner.loop import Loop
from bdl.samplers.base import Cached, Sampler, SamplerState, cached

log = logging.getLogger("bdl")


def steppers(experiments: list[Experiment], loops: list[Loop]) -> list[Stepper]:
    """The steppers of a run's chains: one for all of them where they can be stacked (the reason
    they cannot is logged), else one per chain, stepped in turn."""
    if len(loops) > 1:
        reason = unsupported(experiments[0])
        if reason is None:
            return [StackedStepper(experiments, loops)]
        log.info("the %d chains are stepped in turn: %s", len(loops), reason)
    return [ChainStepper(experiments[k], loops[k], k) for k in range(len(loops))]


def unsupported(experiment: Experiment) -> str | None:
    """Why the chains of ``experiment``'s run cannot be stacked; None if they can."""
    sampler, potential = experiment.sampler, experiment.potential
    if not experiment.run.vectorise:
        return "vectorise=false"
    if not sampler.declaration.vectorisable:
        return f"{type(sampler).__name__}'s update is not written for stacked chains"
    if not potential.prior.vectorisable:
        return f"the {type(potential.prior).__name__} prior has no per-chain log density"
    if potential.has_gibbs_step:
        return "Gibbs-sampled hyperparameters are resampled one chain at a time"
    if experiment.run.augment:
        return "data augmentation draws per chain"
    return None


class Stepper(ABC):
    """Moves the chains ``chains`` (their ``experiments`` and ``loops``, always at the same
    position) by ``sampler`` from ``state``. Subclasses say how a step's closure is made."""

    def __init__(
        self,
        experiments: list[Experiment],
        loops: list[Loop],
        chains: list[int],
        sampler: Sampler,
        state: SamplerState,
    ) -> None:
        self.experiments, self.loops, self.chains = experiments, loops, chains
        self.experiment = experiments[0]  # the first chain, whose run settings all share
        self.sampler, self.state = sampler, state
        self._reset_tallies()

    def begin_epoch(self) -> None:
        """Draw each chain's minibatch order for its epoch, unless it has one: a stop caught
        between epochs checkpoints the order already drawn, which must never be drawn twice."""
        for experiment, loop in zip(self.experiments, self.loops, strict=True):
            if loop.order is None and not self.sampler.declaration.full_batch:
                loop.order = torch.randperm(
                    experiment.run.data.num_train,
                    generator=experiment.generators["data"],
                    device=experiment.run.device,
                )

    @abstractmethod
    def closure(self, step: int) -> Closure:
        """The closure of step ``step`` of the epoch, for every chain the stepper moves."""

    def step(self, step: int, lr_scale: float, noise: bool, tune: bool) -> None:
        """Step ``step`` of the epoch in every chain; its potentials and Metropolis decisions
        are tallied, and handed to the chains' loops by `sync`."""
        self.state = self.sampler.step(self.state, self.closure(step), lr_scale, noise, tune)
        info = self.state.info
        potentials = info["potential"].reshape(-1)  # one per chain
        self._potentials.append(potentials)
        if "accepted" in info:  # this step made a Metropolis test in every chain
            self._accepted = self._accepted + info["accepted"].double().reshape(-1)
            self._divergent = self._divergent + info["diverging"].double().reshape(-1)
            self._tests += 1
        self._steps += 1
        if self.loops[0].initial_potential is None:  # once a run: the divergence yardstick
            for loop, value in zip(self.loops, potentials.tolist(), strict=True):
                loop.initial_potential = value

    def gibbs_step(self) -> None:
        """Resample each chain's hyperparameters given its parameters; the kernel learns that
        the potential changed."""
        for experiment in self.experiments:
            experiment.potential.gibbs_step(
                experiment.generators["gibbs"], experiment.run.train_chunks
            )
        self.sampler.potential_changed(self.state)

    def sync(self) -> None:
        """Add the steps since the last sync to each chain's position and tallies (for the end
        of the epoch and the checkpoint)."""
        columns = torch.stack(self._potentials).unbind(1) if self._potentials else None
        for k, loop in enumerate(self.loops):
            if columns is not None:
                loop.potentials.extend(columns[k].unbind())
            if self._tests:
                loop.accepted = loop.accepted + self._accepted[k]
                loop.divergent = loop.divergent + self._divergent[k]
                loop.tests += self._tests
            loop.step += self._steps
        self._reset_tallies()

    def _reset_tallies(self) -> None:
        self._potentials: list[Tensor] = []
        self._accepted: Tensor | float = 0.0
        self._divergent: Tensor | float = 0.0
        self._tests = self._steps = 0


class ChainStepper(Stepper):
    """One chain, chain ``chain`` of the run, stepped by its own sampler."""

    def __init__(self, experiment: Experiment, loop: Loop, chain: int) -> None:
        super().__init__([experiment], [loop], [chain], experiment.sampler, loop.sampler)

    def closure(self, step: int) -> Closure:
        exp, loop = self.experiment, self.loops[0]
        if self.sampler.declaration.full_batch:
            return exp.potential.full_closure(exp.run.train_chunks)
        index = loop.order[step * exp.run.batch_size : (step + 1) * exp.run.batch_size]
        x, y = exp.run.x_train.index_select(0, index), exp.run.y_train.index_select(0, index)
        if exp.run.augment:
            x = random_crop_flip(x, exp.generators["data"])
        return exp.potential.closure(x, y, self.sampler.prior_weight(step, exp.run.steps_per_epoch))

    def sync(self) -> None:
        self.loops[0].sampler = self.state
        super().sync()


class StackedStepper(Stepper):
    """The chains of ``loops`` (with their ``experiments``) stacked, stepped by the first
    chain's sampler drawing chain ``k``'s noise from chain ``k``'s generator."""

    def __init__(self, experiments: list[Experiment], loops: list[Loop]) -> None:
        generators = [experiment.generators["noise"] for experiment in experiments]
        sampler = experiments[0].sampler.for_chains(generators)
        chain_params = [experiment.potential.params for experiment in experiments]
        groups = zip(*chain_params, strict=True)
        self.params = [torch.stack([p.detach() for p in group]) for group in groups]
        with torch.no_grad():
            for k, params in enumerate(chain_params):
                for p, stacked in zip(params, self.params, strict=True):
                    p.data = stacked[k]
        states = [loop.sampler for loop in loops]
        buffers = {
            key: [torch.stack(g) for g in zip(*(s.buffers[key] for s in states), strict=True)]
            for key in states[0].buffers
        }
        info = {key: torch.stack([s.info[key] for s in states]) for key in states[0].info}
        stacked = {
            name: None if value is None else _stack([cached(s)[name] for s in states])
            for name, value in cached(states[0]).items()
        }
        # the other fields (a step-size adaptation) are the first chain's: they are shared by
        # the stacked chains, so every chain's checkpoint holds the same
        state = dataclasses.replace(
            states[0], params=self.params, buffers=buffers, info=info, **stacked
        )
        super().__init__(experiments, loops, list(range(len(loops))), sampler, state)
        self.orders: Tensor | None = None  # the epoch's minibatch orders, one row per chain
        self.sync()

    def begin_epoch(self) -> None:
        """The chains' minibatch orders of the epoch, as one tensor."""
        super().begin_epoch()
        if not self.sampler.declaration.full_batch:
            self.orders = torch.stack([loop.order for loop in self.loops])

    def closure(self, step: int) -> Closure:
        """The stacked closure of step ``step`` of the epoch, each chain on its own minibatch
        (with ``shared_minibatches``, on the one they share)."""
        first = self.experiment
        potential = first.potential
        if self.sampler.declaration.full_batch:
            return potential.chain_full_closure(self.params, first.run.train_chunks)
        batch = slice(step * first.run.batch_size, (step + 1) * first.run.batch_size)
        prior_weight = self.sampler.prior_weight(step, first.run.steps_per_epoch)
        if first.run.shared_minibatches:  # every row of orders is the same: gather it once
            index = self.orders[0, batch]
            x, y = (
                first.run.x_train.index_select(0, index),
                first.run.y_train.index_select(0, index),
            )
            return potential.chain_closure(self.params, x, y, prior_weight, shared=True)
        index = self.orders[:, batch]
        x = first.run.x_train.index_select(0, index.flatten()).unflatten(0, index.shape)
        y = first.run.y_train.index_select(0, index.flatten()).unflatten(0, index.shape)
        return potential.chain_closure(self.params, x, y, prior_weight)

    def sync(self) -> None:
        """Also point each chain's loop state at its slice of the stacked state (buffers a step
        created or dropped included, and what the kernel cached)."""
        for k, loop in enumerate(self.loops):
            own = {
                name: None if value is None else _chain(value, k)
                for name, value in cached(self.state).items()
            }
            loop.sampler = dataclasses.replace(
                self.state,
                params=loop.sampler.params,
                buffers={key: [b[k] for b in bs] for key, bs in self.state.buffers.items()},
                info={key: t[k] if t.dim() else t for key, t in self.state.info.items()},
                **own,
            )
        super().sync()


def _stack(chains: list[Cached]) -> Cached:
    """The chains' cached values (`bdl.samplers.base.Cached`), each tensor stacked along a new
    first dimension."""
    return tuple(
        torch.stack(items)
        if isinstance(items[0], Tensor)
        else [torch.stack(group) for group in zip(*items, strict=True)]
        for items in zip(*chains, strict=True)
    )


def _chain(stacked: Cached, k: int) -> Cached:
    """Chain ``k``'s slice of a `_stack`ed cached value."""
    return tuple(item[k] if isinstance(item, Tensor) else [t[k] for t in item] for item in stacked)
