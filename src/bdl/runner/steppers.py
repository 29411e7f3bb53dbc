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

**An epoch as one program.** With ``compile=true``, a sampler that declares ``epoch_program``
(SGLD, SGHMC, SGD) takes its minibatch steps as one compiled program (`Stepper.advance`,
`bdl.samplers.base.minibatch_steps_loop`): the gathers, the forward and backward passes and the
updates of a span of steps run in one ``torch.while_loop``, without Python between them. The span's
noise is drawn before it, step by step and chain by chain from the same generators as the steps
taken one by one draw it, and its minibatch orders are the epoch's; a signal is heard between spans
(an epoch of MNIST's MLP is one span, `PROGRAM_DRAWS`), and a stop between spans resumes bitwise.
Where the program cannot be compiled, the steps are taken one by one.

Each chain's network keeps its own parameter objects, which become views of the stacked tensors
(``param.data = stacked[k]``), and each chain's loop state is pointed at its slice of the stacked
sampler state (`Stepper.sync`): evaluation, sample stores, checkpoints and resume read
and write every chain exactly as in a run whose chains are stepped in turn.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
from torch import Tensor

from bdl.closures import Closure, Program
from bdl.data.augment import random_crop_flip
from bdl.noise import fill_normal
from bdl.runner.experiment import Experiment
from bdl.runner.loop import Loop
from bdl.samplers.base import Cached, Sampler, SamplerState, cached, minibatch_steps_loop

log = logging.getLogger("bdl")

#: Standard normal numbers drawn ahead of one program of minibatch steps (32 MiB in float32):
#: an epoch of MNIST's 784-100-10 network (79 510 weights, 100 steps) is one program, a larger
#: network's epoch several, between which a signal is heard.
PROGRAM_DRAWS = 2**23

#: ``setting(s) -> (lr_scale, noise)``: the schedule's step-size multiplier of step ``s`` of the
#: epoch and whether it injects noise
Setting = Callable[[int], tuple[float, bool]]


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
        run, potential = self.experiment.run, self.experiment.potential
        self.program: Program | None = None
        generator = sampler.generator
        self._chains = len(generator) if isinstance(generator, list) else None
        if sampler.declaration.epoch_program and not run.augment and not potential.has_gibbs_step:
            self.program = self.potential_program()
            # built once: the function is the compiled program's key
            self._program_fn = functools.partial(
                minibatch_steps_loop, update=sampler.update_values, chains=self._chains
            )
        self._numel = sum(p.numel() for p in state.params)
        #: the steps of one program: the epoch's, or as many as `PROGRAM_DRAWS` numbers draw for
        self._span = max(1, min(run.steps_per_epoch, PROGRAM_DRAWS // max(self._numel, 1)))
        self._draws: Tensor | None = None

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

    @abstractmethod
    def potential_program(self) -> Program | None:
        """The potential's `Program` of minibatch steps for the chains the stepper moves
        (`bdl.potential.Potential.indexed_minibatch_program`), or None without ``compile``."""

    @abstractmethod
    def indices(self, step: int, count: int) -> Tensor:
        """The minibatches' rows of steps ``step`` to ``step + count`` of the epoch, one row of
        the result a step's (for stacked chains, the chains' rows of it)."""

    def advance(self, step: int, end: int, setting: Setting, tune: bool) -> int:
        """Step ``step`` of the epoch in every chain, or, where the run's steps compile as one
        program, steps ``step`` onwards up to ``end`` (the module's docstring); returns how many
        steps it took."""
        if self.program is not None:
            count = min(end - step, self._span)
            if self._run_program(step, count, setting, tune):
                return count
        self.step(step, *setting(step), tune)
        return 1

    def step(self, step: int, lr_scale: float, noise: bool, tune: bool) -> None:
        """Step ``step`` of the epoch in every chain; its potentials and Metropolis decisions
        are tallied, and handed to the chains' loops by `sync`."""
        self.state = self.sampler.step(self.state, self.closure(step), lr_scale, noise, tune)
        info = self.state.info
        self._tally(info["potential"].reshape(1, -1))  # one per chain
        if "accepted" in info:  # this step made a Metropolis test in every chain
            self._accepted = self._accepted + info["accepted"].double().reshape(-1)
            self._divergences = self._divergences + info["divergent"].double().reshape(-1)
            self._tests += 1

    @torch.no_grad()
    def _run_program(self, step: int, count: int, setting: Setting, tune: bool) -> bool:
        """Steps ``step`` to ``step + count`` as one program; False, with nothing drawn or
        moved, where this span must be stepped one by one (its sampler watches its gradients
        while tuning, or the program failed to compile)."""
        sampler, state = self.sampler, self.state
        sampler.tuning = tune
        settings = [setting(s) for s in range(step, step + count)]
        if sampler.watches_gradients():  # the same for every step of the span: it hangs on tuning
            return False
        rows = [sampler.coefficients(sampler.step_size(lr_scale)) for lr_scale, _ in settings]
        generators = [g for g in self._generators() if g is not None]
        before = [g.get_state() for g in generators]
        inputs = self._program_inputs(step, settings, rows)
        result = self.program(self._program_fn, state.params, state.buffers, *inputs)
        if result is None:  # not compiled: the steps are taken one by one, with the same draws
            for generator, saved in zip(generators, before, strict=True):
                generator.set_state(saved)
            self.program = None
            return False
        params, buffers, potentials = result
        torch._foreach_copy_(state.params, params)
        for name, values in buffers.items():
            torch._foreach_copy_(state.buffers[name], values)
        state.step += count
        state.grad_evals += count
        state.info["potential"] = potentials[count - 1]
        self._tally(potentials[:count].reshape(count, -1))
        return True

    def _program_inputs(
        self, step: int, settings: list[tuple[float, bool]], rows: list[list[float]]
    ) -> tuple[Tensor, ...]:
        """`minibatch_steps_loop`'s inputs after the state for the steps from ``step`` with the
        ``settings`` and the sampler's coefficients ``rows``, each of the span's rows (the last
        ones unused where fewer steps remain); the steps' noise drawn into the kept buffer."""
        sampler, span, count = self.sampler, self._span, len(settings)
        like = self.state.params[0]
        if self._draws is None:
            self._draws = torch.empty(span, self._numel, dtype=like.dtype, device=like.device)
        injects_noise = sampler.declaration.injects_noise  # else it draws nothing (SGD)
        for draws, (_, noise) in zip(self._draws, settings, strict=False):
            if noise and injects_noise:
                fill_normal(draws, sampler.generator)
            else:
                draws.zero_()
        pad = span - count
        table = torch.tensor(rows + rows[-1:] * pad, dtype=like.dtype, device=like.device)
        steps_per_epoch = self.experiment.run.steps_per_epoch
        weights = [sampler.prior_weight(s, steps_per_epoch) for s in range(step, step + count)]
        weights = torch.tensor(weights + [0.0] * pad, dtype=like.dtype, device=like.device)
        indices = self.indices(step, count)
        indices = torch.cat([indices, indices[:1].expand(pad, *indices.shape[1:])])
        shape = (span,) if self._chains is None else (span, self._chains)
        potentials = torch.zeros(shape, dtype=like.dtype, device=like.device)
        # two tensors: inputs that share memory would alias the loop's carried counter
        start, stop = (torch.tensor(s, device=like.device) for s in (0, count))
        return start, stop, indices, weights, table, self._draws, potentials

    def _generators(self) -> list[torch.Generator | None]:
        generator = self.sampler.generator
        return generator if isinstance(generator, list) else [generator]

    def _tally(self, potentials: Tensor) -> None:
        """Tally the potentials of steps just taken: one row per step, one value per chain."""
        self._potentials.extend(potentials.unbind(0))
        self._steps += len(potentials)
        if self.loops[0].initial_potential is None:  # once a run: the yardstick of a diverged chain
            for loop, value in zip(self.loops, potentials[0].tolist(), strict=True):
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
                loop.divergences = loop.divergences + self._divergences[k]
                loop.tests += self._tests
            loop.step += self._steps
        self._reset_tallies()

    def _reset_tallies(self) -> None:
        self._potentials: list[Tensor] = []
        self._accepted: Tensor | float = 0.0
        self._divergences: Tensor | float = 0.0
        self._tests = self._steps = 0


class ChainStepper(Stepper):
    """One chain, chain ``chain`` of the run, stepped by its own sampler."""

    def __init__(self, experiment: Experiment, loop: Loop, chain: int) -> None:
        super().__init__([experiment], [loop], [chain], experiment.sampler, loop.sampler)

    def closure(self, step: int) -> Closure:
        exp = self.experiment
        if self.sampler.declaration.full_batch:
            return exp.potential.full_closure(exp.run.train_chunks)
        index = self.indices(step, 1)[0]
        x, y = exp.run.x_train.index_select(0, index), exp.run.y_train.index_select(0, index)
        if exp.run.augment:
            x = random_crop_flip(x, exp.generators["data"])
        return exp.potential.closure(x, y, self.sampler.prior_weight(step, exp.run.steps_per_epoch))

    def potential_program(self) -> Program | None:
        run = self.experiment.run
        return self.experiment.potential.indexed_minibatch_program(run.x_train, run.y_train)

    def indices(self, step: int, count: int) -> Tensor:
        n = self.experiment.run.batch_size
        return self.loops[0].order[step * n : (step + count) * n].view(count, n)

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
        prior_weight = self.sampler.prior_weight(step, first.run.steps_per_epoch)
        index = self.indices(step, 1)[0]
        if first.run.shared_minibatches:  # every row of orders is the same: gather it once
            x, y = (
                first.run.x_train.index_select(0, index),
                first.run.y_train.index_select(0, index),
            )
            return potential.chain_closure(self.params, x, y, prior_weight, shared=True)
        x = first.run.x_train.index_select(0, index.flatten()).unflatten(0, index.shape)
        y = first.run.y_train.index_select(0, index.flatten()).unflatten(0, index.shape)
        return potential.chain_closure(self.params, x, y, prior_weight)

    def potential_program(self) -> Program | None:
        run = self.experiment.run
        return self.experiment.potential.indexed_minibatch_program(
            run.x_train, run.y_train, len(self.loops), shared=run.shared_minibatches
        )

    def indices(self, step: int, count: int) -> Tensor:
        """With ``shared_minibatches``, the first chain's rows, which every chain takes."""
        n = self.experiment.run.batch_size
        span = self.orders[:, step * n : (step + count) * n]
        if self.experiment.run.shared_minibatches:
            return span[0].view(count, n)
        return span.unflatten(1, (count, n)).transpose(0, 1)

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
