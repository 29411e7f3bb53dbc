r"""The sampler contract shared by every algorithm in bdl.

A sampler is a Markov kernel (or, for the MAP baselines, an optimiser) on a list of parameter
tensors. It follows ``torch.optim``'s closure protocol so that minibatch and full-batch methods
share one interface:

```python
state = sampler.init(params)                  # params: list of tensors, updated in place
state = sampler.step(state, closure, lr_scale, noise)
```

``closure()`` returns ``(U, ∇U)`` at the parameters' current values — a minibatch estimate for
stochastic-gradient methods, the full-data potential for Metropolis-corrected ones (those set a
`Declaration` with ``full_batch=True``; they may call it many times per step and restore
rejected positions). ``lr_scale`` is the schedule's multiplier on the base step size at this step;
``noise=False`` switches off injected noise (the exploration phase of cyclical schedules);
``tune=True`` during burn-in lets a kernel adapt its own hyperparameters (HMC's step size, a noise
estimate), and only then, so that the chain that is sampled afterwards is a fixed Markov kernel.

After the last step the runner collects `Sampler.final_samples`: nothing for Markov chains
(their samples are the states kept during the run), the final point for optimisers, draws from
the fitted distribution for variational methods and the Laplace approximation. The last needs
more than closures (the model, the likelihood, the prior's curvature and the training set): the
runner hands them over once, before the first step, through `Sampler.attach`.

Everything a kernel carries between steps (momenta, preconditioners, variational parameters)
lives in ``state.buffers`` as lists of tensors shaped like ``params``, or in fields of its own
state class (the Metropolis kernels' ``(U, ∇U)`` at the current position,
`bdl.samplers.metropolis.MetropolisState`); whatever changes ``U`` other than through the
parameters (a Gibbs update of prior hyperparameters) calls `Sampler.potential_changed`, so that
a kernel drops what it cached. ``state.info`` holds diagnostics only (``potential``, ``U`` at
the step, is every kernel's), as tensors, so that no step forces a device synchronisation.
Updates have a ``torch._foreach_*`` implementation and a plain per-tensor loop twin
(``foreach=False``) that the tests hold equal (a `RuleSampler` writes its update once and gets
both, and a compiled one, from it); noise comes from the sampler's own ``torch.Generator``, so a
run is reproducible from its seed.

**Chains stacked as one** (`bdl.runner.steppers`). A sampler that declares ``vectorisable`` also
moves ``K`` independent chains at once: every tensor of the state stacks them along its first
dimension, the closure returns one ``U`` per chain (shape ``(K,)``), and ``generator`` is a list
of the chains' generators (`bdl.noise`). Its update must then treat the chains apart:
elementwise arithmetic with scalar hyperparameters, noise through `Sampler.gaussian_like`,
Metropolis tests per chain. A step-size adaptation sees the chains' mean acceptance probability
(pooled). Kernels whose update reduces over all parameters (cSGD's fitted scalar step) or that
draw through other paths (variational draws, the Laplace approximation) leave it False.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from bdl.closures import Closure, Evaluation
from bdl.noise import Generator, StandardNormal, split_like
from bdl.potential import Potential
from bdl.samplers.arithmetic import IN_PLACE, LOOP, PURE, Arithmetic

#: The training set in order, in chunks: ``batches()`` yields ``(x, y)`` pairs covering all N.
Batches = Callable[[], Iterator[tuple[Tensor, Tensor]]]


def _hyperparameters_only(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` refusing torch.optim's habit, ``SGHMC(model.parameters(), lr=...)``, with the
    contract instead of Python's "multiple values for argument 'lr'"; its signature (read by the
    config's validation) is ``init``'s."""

    @functools.wraps(init)
    def checked(self: Sampler, *args: Any, **kwargs: Any) -> None:
        if args and not isinstance(args[0], int | float):
            name = type(self).__name__
            raise TypeError(
                f"{name} takes its hyperparameters only, not the parameters (torch.optim's "
                f"style): sampler = {name}(lr=...); state = sampler.init(list(model.parameters()))"
                "; state = sampler.step(state, closure) with closure() returning (U, grads of U)"
            )
        init(self, *args, **kwargs)

    return checked


#: The units a sampler's ``lr`` may be set in (docs/samplers.md has the table).
STEP_UNITS = (
    # a learning rate on the mean loss, as deep-learning practice and Chen et al. (2014)'s code
    # set it: the runner converts it to the step on U, lr / N (Potential.step_size)
    "per datum",
    # the step on the potential U itself, which transfers between data sets (pSGLD, scale-adapted
    # SGHMC)
    "potential",
    # an optimiser's own step size (Adam's), taken as it is
    "optimiser",
)


@dataclass(frozen=True)
class Declaration:
    """What a sampler is, read by the runner and the tests (never inferred from its behaviour).

    Args:
        step_unit: the unit of ``lr``, one of `STEP_UNITS`.
        full_batch: each step evaluates the full-data potential (a Metropolis test); the runner
            passes the full-data closure and takes one step per epoch.
        injects_noise: its states are posterior samples. False for optimisers and variational
            or Laplace fits, whose samples are drawn after the run (`Sampler.final_samples`).
        vectorisable: it also steps ``K`` chains stacked along the first dimension (above).
        minibatch_noise: its only noise is the minibatch gradient's (constant SGD): full batches
            are refused.
        backs_off: its step does not transfer between data sets, so the runner halves it during
            burn-in when the potential climbs (`bdl.runner.stability`).
        needs_trained_start: it expands the posterior around a trained network, given by
            ``init_from`` (Laplace).
        epoch_program: its minibatch update is one rule written for any arithmetic
            (`RuleSampler`), so that with ``compile=true`` the runner takes an epoch of its steps
            as one compiled program (`minibatch_steps_loop`). Such a sampler gathers nothing after
            its steps (`Sampler.after_step`).
    """

    step_unit: str
    full_batch: bool = False
    injects_noise: bool = True
    vectorisable: bool = False
    minibatch_noise: bool = False
    backs_off: bool = False
    needs_trained_start: bool = False
    epoch_program: bool = False

    def __post_init__(self) -> None:
        if self.step_unit not in STEP_UNITS:
            raise ValueError(f"step_unit must be one of {STEP_UNITS}, got {self.step_unit!r}")
        if self.full_batch and self.minibatch_noise:
            raise ValueError("a full-batch kernel has no minibatch noise to sample with")
        if self.full_batch and self.epoch_program:
            raise ValueError("a full-batch kernel takes one step an epoch: no minibatch program")


@dataclass
class SamplerState:
    params: list[Tensor]
    buffers: dict[str, list[Tensor]] = field(default_factory=dict)
    step: int = 0
    info: dict[str, Tensor] = field(default_factory=dict)
    grad_evals: int = 0  # closure calls: one per step for SG methods, L + 1 or so for HMC


#: What a kernel's own state class may cache between steps beside its buffers: a tuple of tensors
#: and lists of tensors, as an evaluation ``(U, [∇U])``.
Cached = tuple[Tensor | list[Tensor], ...]
_BASE_FIELDS = frozenset(f.name for f in fields(SamplerState))


def cached(state: SamplerState) -> dict[str, Cached | None]:
    """The fields of ``state``'s own class that hold a `Cached` value, or None where nothing is
    cached now, by name; its others are dataclasses of plain values (an adaptation's
    statistics)."""
    own = {f.name: getattr(state, f.name) for f in fields(state) if f.name not in _BASE_FIELDS}
    return {name: value for name, value in own.items() if not is_dataclass(value)}


class Sampler(ABC):
    """Base class: holds the base step size, the update implementation and the noise source.

    Args:
        lr: the base step size on the scale of ``U`` (the runner converts the configs' per-datum
            rates with `bdl.potential.Potential.step_size`).
        foreach: use the ``torch._foreach_*`` update (default) or the per-tensor loop.
        generator: source of injected noise (a list: one per stacked chain); the default
            generator when ``None``.
    """

    #: what the sampler is and what it can do; every concrete sampler sets its own
    declaration: Declaration

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _hyperparameters_only(cls.__init__)
        if not inspect.isabstract(cls) and not isinstance(
            getattr(cls, "declaration", None), Declaration
        ):
            raise TypeError(
                f"{cls.__name__} must declare what it is: declaration = Declaration(step_unit=...)"
            )
        declaration = getattr(cls, "declaration", None)
        if declaration and declaration.epoch_program and not issubclass(cls, RuleSampler):
            raise TypeError(f"{cls.__name__} declares epoch_program: it must be a RuleSampler")

    @_hyperparameters_only
    def __init__(self, lr: float, *, foreach: bool = True, generator: Generator = None) -> None:
        if not 0 < lr < math.inf:
            raise ValueError(f"sampler.lr must be positive and finite, got {lr}")
        self.lr = lr
        self.foreach = foreach
        self.generator = generator
        self._normal = StandardNormal()
        # this step's ``tune`` (set by step): read by updates that differ during burn-in
        self.tuning = False

    def for_chains(self, generators: list[torch.Generator]) -> Sampler:
        """This sampler, stepping chains stacked as one (a sampler that declares
        ``vectorisable``): chain ``k`` draws from ``generators[k]``."""
        if not self.declaration.vectorisable:
            raise ValueError(f"{type(self).__name__} does not declare vectorisable")
        stacked = copy.copy(self)
        stacked.generator = generators
        stacked._normal = StandardNormal()
        return stacked

    def attach(self, potential: Potential, batches: Batches) -> None:  # noqa: B027 (optional)
        """Meet the run's potential and training set, once, before `init`. Samplers that
        need only the closures ignore them (the default)."""

    def plan_burn_in(self, steps: int) -> None:  # noqa: B027 (optional)
        """Learn, once before `init`, that the first ``steps`` steps are burn-in
        (``tune=True``): a kernel that adapts in stages (HMC's mass matrix) places them in it.
        Samplers that adapt step by step, or not at all, ignore it (the default)."""

    def init(self, params: list[Tensor]) -> SamplerState:
        return SamplerState(params=list(params))

    @torch.no_grad()
    def step(
        self,
        state: SamplerState,
        closure: Closure,
        lr_scale: float = 1.0,
        noise: bool = True,
        tune: bool = False,
    ) -> SamplerState:
        self.tuning = tune
        potential, grads = self.closure_for(state, closure)()
        state.grad_evals += 1
        update = self._update_foreach if self.foreach else self._update_loop
        update(state, grads, self.step_size(lr_scale), noise and self.declaration.injects_noise)
        state.step += 1
        state.info["potential"] = potential
        self.after_step(state)
        return state

    def step_size(self, lr_scale: float) -> float:
        """The step of a step at the schedule's multiplier ``lr_scale``: ``lr · lr_scale``."""
        return self.lr * lr_scale

    def closure_for(self, state: SamplerState, closure: Closure) -> Closure:
        """The closure that `step` evaluates: ``closure`` itself (the default). A kernel that
        watches the gradients while tuning (an online noise estimate) or takes them elsewhere
        than at ``state.params`` (a dropout mask) wraps it, so that its update stays the
        paper's."""
        return closure

    def after_step(self, state: SamplerState) -> None:  # noqa: B027 (optional)
        """Called at the end of `step`, the update made: a method that gathers the iterates
        (SWAG's moments) reads them here. Kernels that gather nothing ignore it (the default)."""

    def final_samples(self, state: SamplerState) -> Iterator[None]:
        """Write each end-of-run sample into ``state.params`` in place and yield after each."""
        if not self.declaration.injects_noise:
            yield

    def prior_weight(self, batch: int, num_batches: int) -> float:
        """The weight of the prior term in the closure of minibatch ``batch`` (0-based) of the
        ``num_batches`` of an epoch (`bdl.potential.Potential`): 1, which makes every step's
        potential an unbiased estimate; variational methods may spread the KL term unevenly."""
        return 1.0

    @torch.no_grad()
    def restart(self, state: SamplerState) -> None:
        """Called once the runner has returned ``state`` to an earlier point and halved the step
        (`bdl.runner.stability`): a momentum built at the old step would carry the chain where the
        old step did, so a kernel's ``"momentum"`` buffer starts again at rest."""
        for v in state.buffers.get("momentum", []):
            v.zero_()

    def potential_changed(self, state: SamplerState) -> None:  # noqa: B027 (optional)
        """Called after ``U`` changed other than through the parameters (a Gibbs step of the
        hyperparameters): a kernel that caches ``U`` or ``∇U`` at its position drops them."""

    def divergence_fix(self, state: SamplerState) -> str:
        """What to change when the chain in ``state`` has diverged: the runner's message ends
        with it."""
        return "Lower sampler.lr"

    def posterior_moments(self, state: SamplerState) -> tuple[list[Tensor], list[Tensor]] | None:
        """Mean and standard deviation of the fitted distribution (variational methods), aligned
        with ``state.params``; ``None`` for chains, whose moments come from their samples."""
        return None

    @abstractmethod
    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None: ...

    @abstractmethod
    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None: ...

    def gaussian_like(self, tensors: list[Tensor]) -> list[Tensor]:
        """Standard normal draws shaped like ``tensors`` from the sampler's generator
        (`bdl.noise.StandardNormal`: one draw, overwritten by the next call)."""
        return self._normal.like(tensors, self.generator)


#: A rule's result: the new parameters and buffers, by name
Update = tuple[list[Tensor], dict[str, list[Tensor]]]


class RuleInputs(NamedTuple):
    """What `RuleSampler.rule` reads at a step: the parameters, the buffers by name, the
    gradients of ``U``, the step's `RuleSampler.coefficients` and its standard normal ``draws``
    shaped like ``params`` (None where the step injects no noise; zeros in a program)."""

    params: list[Tensor]
    buffers: dict[str, list[Tensor]]
    grads: list[Tensor]
    coefficients: Sequence[float | Tensor]
    draws: list[Tensor] | None


class RuleSampler(Sampler):
    """A sampler whose update is one rule (`rule`), written for any `Arithmetic`: `step` runs
    it in place with ``torch._foreach_*`` operations (`IN_PLACE`) or tensor by tensor
    (``foreach=False``, `LOOP`), and ``compile=true`` traces it returning new tensors (`PURE`,
    `update_values`) into an epoch's program. Every sampler that declares ``epoch_program`` is
    one."""

    @abstractmethod
    def coefficients(self, step_size: float) -> list[float]:
        """The scalars that `rule` reads, as numbers, for a step of ``step_size``."""

    @abstractmethod
    def rule(self, arithmetic: Arithmetic, step: RuleInputs) -> Update:
        """The new parameters and buffers after ``step``. The in-place forms overwrite the first
        list of each operation: a rule passes there only the state it updates, never
        ``step.grads`` or ``step.draws``."""

    def watches_gradients(self) -> bool:
        """Whether this step watches its gradients (an online noise estimate while tuning), so
        that it must be taken by `step`, not in a program. Never, by default."""
        return False

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        self._run(IN_PLACE, state, grads, step_size, noise)

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        self._run(LOOP, state, grads, step_size, noise)

    def _run(
        self,
        arithmetic: Arithmetic,
        state: SamplerState,
        grads: list[Tensor],
        step_size: float,
        noise: bool,
    ) -> None:
        draws = self.gaussian_like(state.params) if noise else None
        coefficients = self.coefficients(step_size)
        self.rule(arithmetic, RuleInputs(state.params, state.buffers, grads, coefficients, draws))

    def update_values(
        self,
        params: list[Tensor],
        buffers: dict[str, list[Tensor]],
        grads: list[Tensor],
        coefficients: Tensor,
        draws: list[Tensor],
    ) -> Update:
        """`rule` as a pure function that ``torch.compile`` traces into an epoch's program
        (`minibatch_steps_loop`), its `coefficients` a 1-d tensor: new tensors, or a buffer it
        leaves as it was."""
        return self.rule(PURE, RuleInputs(params, buffers, grads, coefficients.unbind(), draws))


#: `RuleSampler.update_values`:
#: ``(params, buffers, grads, coefficients, draws) -> (params, buffers)``
PureUpdate = Callable[
    [list[Tensor], dict[str, list[Tensor]], list[Tensor], Tensor, list[Tensor]], Update
]


def minibatch_steps_loop(
    evaluate: Callable[[list[Tensor], Tensor, Tensor], Evaluation],
    params: list[Tensor],
    buffers: dict[str, list[Tensor]],
    start: Tensor,
    stop: Tensor,
    indices: Tensor,
    prior_weights: Tensor,
    coefficients: Tensor,
    draws: Tensor,
    potentials: Tensor,
    *,
    update: PureUpdate,
    chains: int | None,
) -> tuple[list[Tensor], dict[str, list[Tensor]], Tensor]:
    """The minibatch steps of the rows ``start`` to ``stop`` of the inputs, each
    ``evaluate(θ, indices[s], prior_weights[s])`` (the potential and its gradient on the
    minibatch of rows ``indices[s]``, `bdl.potential.Potential.indexed_minibatch_program`) and then
    ``update`` with ``coefficients[s]`` and ``draws[s]`` (laid out as `bdl.noise.fill_normal`
    draws for ``chains`` stacked chains, None: one), as one program for ``torch.compile``, its
    loop a ``torch.while_loop``: an epoch of SGLD, SGHMC or SGD without Python between its steps.
    The inputs have a fixed number of rows, of which ``start`` to ``stop`` (0-dim tensors) are
    used, so that an epoch's last, shorter span reuses the compiled program. Returns the
    parameters and buffers after the last step, as new tensors, and ``potentials`` with row
    ``s`` the ``U`` of step ``s``."""
    size, names = len(params), list(buffers)

    def unflattened(carried: list[Tensor]) -> tuple[list[Tensor], dict[str, list[Tensor]]]:
        """The parameters and the buffers, by name, of the loop's flat carried tensors."""
        named = {name: carried[size * (j + 1) : size * (j + 2)] for j, name in enumerate(names)}
        return carried[:size], named

    def proceed(step: Tensor, *carried: Tensor) -> Tensor:
        return step < stop

    def minibatch_step(step: Tensor, potentials: Tensor, *carried: Tensor) -> tuple[Tensor, ...]:
        row = step.reshape(1)  # rows are taken by index_select: an index by item() breaks the trace
        params, buffers = unflattened(list(carried))
        index, prior_weight = indices.index_select(0, row)[0], prior_weights.index_select(0, row)
        value, grads = evaluate(params, index, prior_weight[0])
        shaped = split_like(draws.index_select(0, row).reshape(-1), params, chains)
        new_params, new_buffers = update(
            params, buffers, grads, coefficients.index_select(0, row)[0], shaped
        )
        # a loop's body may not hand back its input: a buffer the update left is copied
        kept = [
            b.clone() if any(b is old for old in buffers[name]) else b
            for name in names
            for b in new_buffers[name]
        ]
        potentials = potentials.index_copy(0, row, value.to(potentials.dtype).unsqueeze(0))
        return (step + 1, potentials, *new_params, *kept)

    # the counter starts from ``start``, an input: one made inside the program would be one more
    # kernel for Inductor to compile (`bdl.samplers.metropolis.leapfrog_program`)
    carried = (start, potentials, *params, *(b for name in names for b in buffers[name]))
    _, potentials, *carried = torch.while_loop(proceed, minibatch_step, carried)
    params, buffers = unflattened(carried)
    return params, buffers, potentials
