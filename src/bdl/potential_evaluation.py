"""The ways ``U_T`` is evaluated, each an adapter of the one pure function `Potential.at`.

`bdl.potential.Potential` says what ``U_T`` is (its scaling, temperature and prior term, in
`Potential.weights` and `Potential.at`); this module says how its value and gradient are
computed for a sampler: on a minibatch, of one chain or of ``K`` stacked chains; on the training
set in chunks, summed in float64; eagerly by autograd, or compiled (`bdl.compiled`): the
gradient of `Potential.at` by ``torch.compile`` of ``torch.func.grad_and_value``, or a sampler's
whole program (HMC's trajectory on the full-data potential, an epoch of minibatch steps). Every
path differentiates `Potential.at`, or takes its factors from `Potential.weights` where it
differentiates a prior Gaussian given its hyperparameters in closed form, so that the
temperature and the prior term cannot be applied in one path and not in another.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Protocol

import torch
from torch import Tensor

from bdl.closures import Closure, Evaluation, Program, writable_gradients
from bdl.compiled import Compiler
from bdl.likelihoods import Likelihood

#: a chunked training set: ``batches()`` yields its chunks ``(x, y)``, never none
Batches = Callable[[], Iterator[tuple[Tensor, Tensor]]]


class UT(Protocol):
    """What the evaluations read of a potential (`bdl.potential.Potential`)."""

    params: list[Tensor]
    model_params: dict[str, Tensor]
    likelihood: Likelihood
    samples_likelihood: bool
    reduce: Callable[[list[Tensor]], None] | None
    #: `Potential.at`: ``at(values, x, y, batch_size, prior_weight, stacked, data_dim, exact)``
    at: Callable[..., tuple[Tensor, Tensor]]

    def prior_scale(self, prior_weight: float) -> float: ...

    def prior_stds(self) -> list[Tensor | float] | None: ...


class Evaluations:
    """The evaluations of ``potential``'s ``U_T``, compiled where ``compile`` (in
    ``torch.compile``'s ``mode``)."""

    def __init__(self, potential: UT, compile: bool, mode: str = "default") -> None:
        self.potential = potential
        self.compiler = Compiler(mode) if compile else None
        self.closed_form_prior = potential.prior_stds() is not None
        #: `prior_term`, compiled where it is in closed form (a prior Gaussian given its
        #: hyperparameters): its dozen small eager operations were a third of a small network's
        #: compiled step (yacht's MLP, one chain or eight stacked). Other priors' terms
        #: differentiate by autograd, which the compiled function would leave by a graph break,
        #: and there gave wrong gradients (torch 2.14).
        self.add_prior = self.prior_term
        if self.compiler is not None and self.closed_form_prior:
            self.add_prior = self.compiler.or_eager("prior", self.prior_term)

    def minibatch(
        self,
        params: list[Tensor],
        x: Tensor,
        y: Tensor,
        prior_weight: float,
        data_dim: int | None = None,
        stacked: bool = False,
    ) -> Evaluation:
        """``U_T`` on the minibatch ``(x, y)`` and its gradient in ``params`` (the potential's
        ``params``, or the leaves of ``stacked`` chains; ``data_dim`` as in
        `Potential.log_likelihood`). With ``compile`` and a prior in closed form, `Potential.at`
        whole by one compiled function: as two (the data term's, the prior's), each call's
        overhead (Dynamo's check of its guards, its wrapper's Python) came twice a step, and
        MNIST's compiled SGHMC epoch cost 0.94 of a bare PyTorch loop's against 0.87-0.88 as one
        (``scripts/bench_peers.py --part mnist``, one thread). Otherwise the data term
        (`data_term`), then the prior's (`prior_term`)."""
        batch_size = x.shape[0] if data_dim is None else x.shape[1]
        if self.compiler is not None and self.closed_form_prior:
            function = functools.partial(self.potential.at, stacked=stacked, data_dim=data_dim)
            leaves = [p.detach() for p in params]
            key = ("minibatch", stacked, data_dim)
            args = (batch_size, prior_weight)
            compiled = self.compiler.grad_and_value(key, function, leaves, x, y, args)
            if compiled is not None:
                grads, value = compiled
                return value, grads
        value, grads = self.data_term(params, x, y, batch_size, data_dim, stacked)
        return self.add_prior(value, grads, prior_weight, params if stacked else None)

    def chunked(self, params: list[Tensor], batches: Batches, stacked: bool) -> Closure:
        """The full-data closure (`Potential.full_closure`; ``stacked``: ``params`` stacked
        chains, a value each, `Potential.chain_full_closure`), with its ``program``.

        Memory stays that of one chunk whatever ``N``. The chunks' values and gradients are
        accumulated in float64: Metropolis tests on differences of ``U`` are then not swamped by
        rounding, and a sum of a few float32 numbers in float64 is exact whatever its order, so
        the same chunks summed in another order or on other processes (``reduce``: ``batches``
        is this process's shard, and the data term is summed over the processes before the
        prior term is added) give the same ``U`` and, rounded back, the same gradient.

        With ``compile``, a training set of one chunk (a UCI set at ``batch_size`` beyond its
        size) on one process and a prior in closed form, the closure has a ``program``
        (`Program`, `full_data_program`); otherwise that attribute is None."""

        def evaluate() -> Evaluation:
            leaves = [p.detach().requires_grad_() for p in params] if stacked else params
            prior_leaves = leaves if stacked else None
            chunks = iter(batches())  # never empty: a dataset or shard holds a point or more
            total, grads = self.data_term(leaves, *next(chunks), None, stacked=stacked)
            total = total.double()
            chunk = next(chunks, None)
            if chunk is None and self.potential.reduce is None:
                # one chunk: its float64 sum would round back to the same gradient; a small
                # network's full-data step (UCI) spent a sixth of its time on those sums
                return self.add_prior(total, grads, 1.0, prior_leaves)
            sums = [grad.double() for grad in grads]
            while chunk is not None:
                value, grads = self.data_term(leaves, *chunk, None, stacked=stacked)
                torch._foreach_add_(sums, grads)
                total += value.double()
                chunk = next(chunks, None)
            if self.potential.reduce is not None:
                self.potential.reduce([total, *sums])
            grads = [s.to(p.dtype) for s, p in zip(sums, params, strict=True)]
            return self.add_prior(total, grads, 1.0, prior_leaves)

        evaluate.program = self.full_data_program(batches, stacked)
        return evaluate

    def traceable(self) -> bool:
        """Whether a sampler's program may be compiled: with ``compile``, none failed to, on one
        process, with a prior in closed form (`Potential.at` is then traced whole)."""
        if self.compiler is None or not self.compiler.programs:
            return False
        return self.potential.reduce is None and self.closed_form_prior

    def full_data_program(self, batches: Batches, stacked: bool) -> Program | None:
        """The full-data closures' `Program`: `Potential.at` on the training set, where it is
        one chunk and `traceable`; None otherwise."""
        if not self.traceable():
            return None
        chunks = iter(batches())
        x, y = next(chunks)
        if next(chunks, None) is not None:
            return None
        potential = functools.partial(self.potential.at, stacked=stacked, exact=True)
        # kept for later runs: a trajectory draws nothing at random, unlike an epoch's program
        return self.compiler.program(("program", stacked), potential, x, y, keep=True)

    def indexed_minibatch_program(
        self, x: Tensor, y: Tensor, chains: int | None, shared: bool
    ) -> Program | None:
        """`Potential.indexed_minibatch_program`: `Potential.at` on the rows ``index`` of the
        training set ``(x, y)``, where `traceable`."""
        if not self.traceable():
            return None
        stacked = chains is not None
        data_dim = 0 if stacked and not shared else None

        def potential(
            values: list[Tensor], x: Tensor, y: Tensor, index: Tensor, prior_weight: Tensor
        ) -> tuple[Tensor, Tensor]:
            rows = index.reshape(-1)
            x = x.index_select(0, rows).unflatten(0, index.shape)
            y = y.index_select(0, rows).unflatten(0, index.shape)
            at = self.potential.at
            return at(values, x, y, index.shape[-1], prior_weight, stacked, data_dim, exact=True)

        rows = (chains, 1) if stacked and not shared else (1,)
        example = (torch.zeros(rows, dtype=torch.long, device=x.device), 1.0)
        return self.compiler.program(("minibatches", stacked, shared), potential, x, y, *example)

    def data_term(
        self,
        params: list[Tensor],
        x: Tensor,
        y: Tensor,
        batch_size: int | None,
        data_dim: int | None = None,
        stacked: bool = False,
    ) -> Evaluation:
        """`Potential.at` without its prior term, detached, and its gradient in ``params``
        (aligned with the potential's ``params``; leaves for ``stacked`` chains, a value per
        chain), ``batch_size`` as there. By eager autograd, or, with ``compile``, by the
        compiled ``torch.func.grad_and_value``. Both come in the parameters' dtype, as the
        full-data closures' float64 sums need; the gradients can be added to in place."""
        at = functools.partial(self.potential.at, prior_weight=0.0, stacked=stacked)
        if self.compiler is not None:
            leaves = [p.detach() for p in params]
            function = functools.partial(at, data_dim=data_dim)
            key = ("data", stacked, data_dim)
            compiled = self.compiler.grad_and_value(key, function, leaves, x, y, (batch_size,))
            if compiled is not None:
                grads, value = compiled
                return value, grads
        with torch.enable_grad():
            # one network by its own forward pass: functional_call's swap of its parameters costs
            energy, value = at(params if stacked else None, x, y, batch_size, data_dim=data_dim)
            grads = torch.autograd.grad(energy.sum(), params, materialize_grads=True)
        return value, writable_gradients(grads)

    def prior_term(
        self,
        value: Tensor,
        grads: list[Tensor],
        prior_weight: float,
        stacked: list[Tensor] | None = None,
    ) -> Evaluation:
        r"""``value`` and ``grads`` (`data_term`'s) plus the prior term of `Potential.at` and
        its gradient in the parameters, added in place: ``U_T``. For chains stacked as one,
        ``stacked`` holds the leaves standing for the parameters; the value is then one per
        chain.

        A prior that is Gaussian given its hyperparameters is differentiated in closed form (its
        value is still `Potential.at`'s),
        $\kappa\theta/\sigma^2 T$ added to the gradient, and so is the likelihood's
        $\log p(\phi)$ (`bdl.likelihoods.Likelihood.log_prior_grad`), at the factor
        `Potential.weights` gives, instead of through autograd: a backward pass through the
        prior's graph was a tenth of a small MLP's step, and one through the noise precision's
        prior a quarter of a UCI network's. Other priors' terms are `Potential.at`'s by autograd.
        """
        if not prior_weight:
            return value, grads
        potential = self.potential
        params, chains = (potential.params, False) if stacked is None else (stacked, True)
        stds = potential.prior_stds()
        if stds is None:
            with torch.enable_grad():
                energy, prior_value = potential.at(stacked, None, None, None, prior_weight, chains)
                prior_grads = torch.autograd.grad(energy.sum(), params, materialize_grads=True)
            torch._foreach_add_(grads, prior_grads)
            return value + prior_value, grads
        weight = potential.prior_scale(prior_weight)
        with torch.no_grad():
            value = value + potential.at(stacked, None, None, None, prior_weight, chains)[1]
            model = len(potential.model_params)  # the model's parameters come first
            if potential.samples_likelihood:
                _, phi_grads = potential.likelihood.log_prior_grad(params[model:])
                torch._foreach_add_(grads[model:], phi_grads, alpha=-weight)
            for grad, theta, std in zip(grads, params[:model], stds, strict=False):
                if isinstance(std, Tensor):
                    grad.addcmul_(theta, std.square().reciprocal(), value=weight)
                else:
                    grad.add_(theta, alpha=weight / std**2)
        return value, grads
