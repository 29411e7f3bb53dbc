"""Several chains of a run stepped as one batched computation (``chains=K``, ``vectorise=true``).

Small networks leave the hardware idle: a UCI network's step is a few kernel launches, each
on a few thousand numbers. Stacking the ``K`` chains' parameters along a new first dimension
turns ``K`` such steps into one step on ``K`` times the numbers:

- **the potential** of every chain is evaluated by ``torch.func.vmap`` of the one-chain network
  over the chain dimension (or by the model's batched ``chain_forward``), each chain on its own
  minibatch (:meth:`bdl.potential.Potential.chain_closure`; the full-data closure of the
  Metropolis kernels shares the chunks);
- **the sampler** updates the stacked tensors with the same elementwise ``torch._foreach_*``
  arithmetic as one chain's (samplers that declare ``vectorisable``, :mod:`bdl.samplers.base`),
  drawing chain ``k``'s noise and Metropolis uniforms from chain ``k``'s own generator
  (:mod:`bdl.noise`).

Chain ``k`` therefore follows the run ``seed=<seed+k>`` of one chain: the same initial network,
minibatch order (each chain draws its own) and noise, up to the rounding of the batched matrix
products (``tests/test_chains.py`` states the tolerance). One difference: a Metropolis kernel's
step-size adaptation during burn-in sees the chains' mean acceptance probability, so the chains
share one adapted step size (Stan adapts per chain; pooling gives each chain's adaptation K times
the data, and a fixed kernel after burn-in either way).

**Minibatch order.** Each chain draws its own by default, so that the chains are independent. With
``shared_minibatches=true`` every chain takes the first chain's order (its data stream is seeded
``seed``): chain ``k`` is then the run of one chain with chain 0's minibatches and ``seed + k``'s
initial network and noise. The chains' minibatch noise is then one sequence, evaluated at each
chain's own position; what that buys, a stacked step that gathers one minibatch and reads it
once for all chains' products, is measured by ``scripts/bench_chains.py``.

Each chain's network keeps its own parameter objects, which become views of the stacked tensors
(``param.data = stacked[k]``), and each chain's loop state is pointed at its slice of the stacked
sampler state (:meth:`ChainStack.sync`): evaluation, sample stores, checkpoints and resume read
and write every chain exactly as in a run whose chains are stepped in turn.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from bdl.closures import Closure
from bdl.samplers.base import Sampler, SamplerState

if TYPE_CHECKING:
    from bdl.run import Experiment, Loop


def unsupported(experiment: Experiment) -> str | None:
    """Why the chains of ``experiment``'s config cannot be stacked; None if they can."""
    sampler, potential = experiment.sampler, experiment.potential
    if not sampler.vectorisable:
        return f"{type(sampler).__name__}'s update is not written for stacked chains"
    if not potential.prior.vectorisable:
        return f"the {type(potential.prior).__name__} prior has no per-chain log density"
    if potential.has_gibbs_step:
        return "Gibbs-sampled hyperparameters are resampled one chain at a time"
    if experiment.augment:
        return "data augmentation draws per chain"
    return None


class ChainStack:
    """The chains of ``loops`` (with their ``experiments``) stacked; ``sampler`` is a fresh
    sampler of the run's config whose generator is the list of the chains' noise generators."""

    def __init__(self, experiments: list[Experiment], loops: list[Loop], sampler: Sampler) -> None:
        self.experiments = experiments
        self.loops = loops
        self.sampler = sampler
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
        # fields beyond the tensors (a step-size adaptation) are the first chain's: they are
        # shared by the stacked chains, so every chain's checkpoint holds the same
        self.state: SamplerState = dataclasses.replace(
            states[0], params=self.params, buffers=buffers, info=info
        )
        self.orders: Tensor | None = None  # the epoch's minibatch orders, one row per chain
        # read once: a config node's attribute costs tens of microseconds; closure() runs each step
        self.shared_minibatches = bool(experiments[0].cfg.shared_minibatches)
        self._reset_tallies()
        self.sync()

    def begin_epoch(self) -> None:
        """Take the chains' minibatch orders of the epoch (drawn by the runner), as one tensor."""
        if not self.sampler.full_batch:
            self.orders = torch.stack([loop.order for loop in self.loops])

    def closure(self, step: int) -> Closure:
        """The stacked closure of step ``step`` of the epoch, each chain on its own minibatch
        (with ``shared_minibatches``, on the one they share)."""
        first = self.experiments[0]
        potential = first.potential
        if self.sampler.full_batch:
            return potential.chain_full_closure(self.params, first.train_chunks)
        batch = slice(step * first.batch_size, (step + 1) * first.batch_size)
        prior_weight = self.sampler.prior_weight(step, first.steps_per_epoch)
        if self.shared_minibatches:  # every row of orders is the same: gather it once
            index = self.orders[0, batch]
            x, y = first.x_train.index_select(0, index), first.y_train.index_select(0, index)
            return potential.chain_closure(self.params, x, y, prior_weight, shared=True)
        index = self.orders[:, batch]
        x = first.x_train.index_select(0, index.flatten()).unflatten(0, index.shape)
        y = first.y_train.index_select(0, index.flatten()).unflatten(0, index.shape)
        return potential.chain_closure(self.params, x, y, prior_weight)

    def step(self, closure: Closure, lr_scale: float, noise: bool, tune: bool) -> None:
        """One step of every chain; its potentials and Metropolis decisions are tallied here,
        stacked, and handed to the chains' loops by :meth:`sync`."""
        self.state = self.sampler.step(self.state, closure, lr_scale, noise, tune)
        info = self.state.info
        self._potentials.append(info["potential"])
        if "accepted" in info:  # this step made a Metropolis test in every chain
            self._accepted = self._accepted + info["accepted"].double()
            self._tests += 1
        self._steps += 1
        if self.loops[0].initial_potential is None:  # once a run: the divergence yardstick
            for loop, value in zip(self.loops, info["potential"].tolist(), strict=True):
                loop.initial_potential = value

    def sync(self) -> None:
        """Point each chain's loop state at its slice of the stacked state (buffers a step
        created or dropped included), and add the steps since the last sync to each loop's
        position and tallies, for the checkpoint and the per-chain bookkeeping."""
        columns = torch.stack(self._potentials).unbind(1) if self._potentials else None
        for k, loop in enumerate(self.loops):
            loop.sampler = dataclasses.replace(
                self.state,
                params=loop.sampler.params,
                buffers={key: [b[k] for b in bs] for key, bs in self.state.buffers.items()},
                info={key: t[k] if t.dim() else t for key, t in self.state.info.items()},
            )
            if columns is not None:
                loop.potentials.extend(columns[k].unbind())
            if self._tests:
                loop.accepted = loop.accepted + self._accepted[k]
                loop.tests += self._tests
            loop.step += self._steps
        self._reset_tallies()

    def _reset_tallies(self) -> None:
        self._potentials: list[Tensor] = []
        self._accepted: Tensor | float = 0.0
        self._tests = self._steps = 0
