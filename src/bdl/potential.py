r"""The potential energy: the one place where minibatch scaling and temperature live.

Every sampler in bdl moves on the same function,

$$
U_T(\theta) = \frac{1}{T}\Big[-\frac{N}{n}\sum_{i\in\mathcal{B}}\log p(y_i \mid x_i, \theta)
              - \log p(\theta)\Big],
$$

an unbiased estimate of $-\log p(\theta\mid\mathcal{D})/T$ from a minibatch
$\mathcal{B}$ of size $n$ out of $N$ training points (Bühler, eq. 30). The
target of every sampler is $\propto \exp(-U_T)$: ``T = 1`` is the Bayes posterior, ``T < 1``
a cold posterior. Samplers receive ``U_T`` and its gradient through a closure and never rescale
either. This module says what ``U_T`` is: its factors (`Potential.weights`) and ``U_T`` as one
pure function of the parameters (`Potential.at`); every way of evaluating it, eager or compiled,
one chain or stacked chains, a minibatch or the training set in chunks, is an adapter of that
function (`bdl.potential_evaluation`). `Potential.step_size` is the single conversion from the
configs' per-datum learning rates (the convention of Chen et al.'s code and of deep-learning
practice) to the step size on the scale of ``U_T``.

**Temperature and the step** (Wenzel et al. 2020, "How good is the Bayes posterior in deep
neural networks really?", Algorithm 1: tempered SG-MCMC keeps the step on ``U`` and scales the
injected noise's variance by ``T``). A per-datum learning rate $\eta$ is a step of $h =
\eta/N$ on the *untempered* ``U`` at every temperature, so `step_size` gives $hT$ on
``U_T``, and an update on ``U_T`` at that step is the tempered dynamics on ``U``:

$$
\begin{aligned}
\text{SGLD:}\quad &\theta \leftarrow \theta - \tfrac{hT}{2}\nabla U_T + \mathcal N(0, hT)
  = \theta - \tfrac h2 \nabla U + \mathcal N(0, hT), \\
\text{SGHMC:}\quad &v \leftarrow (1-\alpha) v - hT\,\nabla U_T + \mathcal N(0, 2\alpha hT)
  = (1-\alpha) v - h\nabla U + \mathcal N(0, 2\alpha h T).
\end{aligned}
$$

So ``temperature=T`` alone gives a sane run at any ``T``: the drift, and with it the step's
stability limit, is the same as at ``T = 1``, and only the injected noise cools. The minibatch
gradients' noise does not cool with it: at ``T`` far below 1 it, not the injected noise, sets a
chain's fluctuations (the runner's yardstick allows for it, `bdl.runner.stability.rise_limit`),
and as ``T → 0`` the dynamics become SGD with momentum on ``U`` at that step. The same
conversion keeps what the other kernels need: an optimiser's step on ``U`` (SGD's, MC dropout's,
SWAG's, constant SGD's burn-in) does not depend on ``T``, as the mode it seeks does not; a
Metropolis kernel (HMC, MALA, random-walk Metropolis) targets $\exp(-U_T)$ exactly, and its
$\epsilon^2 = hT$ on ``U_T`` keeps $\epsilon^2$ times ``U_T``'s curvature, and so its
acceptance rate on a Gaussian posterior, the same at every ``T`` before its step adapts.
Kernels whose ``lr`` is on the scale of ``U`` itself (pSGLD, scale-adapted SGHMC) precondition
by the gradients' root mean square, which carries a factor $1/T$: their drift on ``U`` is
already kept and their injected noise's variance already scales by ``T``, so their ``lr`` is
taken as it is.

**Prior weight.** A minibatch closure may carry a weight $\kappa$ on the prior term,
$U = [-\frac{N}{n}\sum\log p(y_i\mid x_i,\theta) - \kappa\log p(\theta)]/T$, which leaves
the above untouched at its default of 1. Any weights with $\frac{n}{N}\sum_{\text{epoch}}
\kappa_i = 1$ keep the epoch's sum of estimates unbiased; Blundell et al.'s $\kappa_i =
M\pi_i$, $\pi_i = 2^{M-i}/(2^M - 1)$ over the $M$ minibatches of an epoch (Bühler
§2.2; ``sampler=bbb``) is one.

**Variational expectations.** Called with a variational distribution ``q`` (`Variational`;
the mean-field Gaussian of `bdl.variational`), a minibatch closure returns instead ``q``'s
Monte Carlo estimate of the negative evidence lower bound, which ``q`` computes from this
module's scaling (`Potential.energy`, `Potential.prior_scale`) and model
(`Potential.log_joint`).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from bdl.closures import Closure, Evaluation, Program
from bdl.likelihoods import Likelihood
from bdl.potential_evaluation import Batches, Evaluations
from bdl.priors import Prior


class Variational(Protocol):
    """A variational distribution over a potential's ``params`` (`bdl.variational`), which
    `Potential.closure` hands the potential and its minibatch to:
    ``q.negative_elbo(potential, x, y, prior_weight)`` returns ``q``'s estimate of the negative
    evidence lower bound on the minibatch ``(x, y)``, the expectation of `Potential.energy`
    under ``q`` less ``prior_weight`` times its entropy, and the gradient in ``q``'s parameters."""

    def negative_elbo(
        self, potential: Potential, x: Tensor, y: Tensor, prior_weight: float
    ) -> Evaluation: ...


class _Joint(nn.Module):
    """Model and likelihood as one module, so that one ``functional_call`` substitutes both."""

    def __init__(self, model: nn.Module, likelihood: Likelihood) -> None:
        super().__init__()
        self.model = model
        self.likelihood = likelihood

    def forward(self, x: Tensor | None, y: Tensor | None) -> tuple[Tensor, Tensor]:
        """``log p(y | f(x))`` summed over the batch (0 without one) and ``log p(φ)``."""
        log_prior = self.likelihood.log_prior()
        if x is None:
            return torch.zeros_like(log_prior), log_prior
        return self.likelihood(self.model(x), y), log_prior


class Potential:
    """``U_T`` for a network, its likelihood and its prior on ``num_data`` training points.

    Args:
        model: the network ``f(x; θ)``.
        likelihood: ``log p(y | f(x), φ)`` summed over a batch; may own parameters φ (a
            regression noise precision) that are sampled along with θ.
        prior: ``log p(θ)`` over the model's named parameters.
        num_data: ``N``, the number of training points.
        temperature: ``T > 0``.
        reduce: for a training set split across processes (`bdl.runner.distributed`), sums a list
            of tensors in place over the processes; the full-data closure and the Gibbs step
            pass it their per-process data terms, before the prior is added once.
        compile: differentiate `at` compiled (`bdl.compiled`): the forward and backward passes
            as one fused function per input shape, and HMC's trajectory on a training set of one
            chunk as one compiled loop (`Program`); the variational closure stays eager. Without
            a working compiler (Inductor needs g++ on the CPU) the run warns and goes on eagerly.
        compile_mode: ``torch.compile``'s ``mode`` for them (``"reduce-overhead"``: each
            function's kernels replayed as one CUDA graph on a GPU).
    """

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: Prior,
        num_data: int,
        temperature: float = 1.0,
        reduce: Callable[[list[Tensor]], None] | None = None,
        compile: bool = False,
        compile_mode: str = "default",
    ) -> None:
        if num_data < 1:
            raise ValueError(f"num_data must be positive, got {num_data}")
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.model = model
        self.likelihood = likelihood
        self.prior = prior
        self.num_data = num_data
        self.temperature = temperature
        self.reduce = reduce
        self.params: list[Tensor] = list(model.parameters()) + list(likelihood.parameters())
        #: whether the likelihood has parameters φ, and with them a prior term ``log p(φ)``
        self.samples_likelihood = any(True for _ in likelihood.parameters())
        # Built once: the prior is evaluated at every step, and the parameters keep their identity.
        self.model_params: dict[str, Tensor] = dict(model.named_parameters())
        prior.bind(self.model_params)
        self._joint = _Joint(model, likelihood)
        #: the names of ``params`` in `log_joint`'s ``values``: ``model.…``, ``likelihood.…``
        self.param_names = [name for name, _ in self._joint.named_parameters()]
        self._paths = Evaluations(self, compile, compile_mode)

    def step_size(self, lr_per_datum: float) -> float:
        """The step size on the scale of ``U_T`` for a per-datum learning rate: ``lr T / N``.

        A learning rate of 0.1 "per datum" is a step of 0.1 on the mean loss, which is a step of
        ``0.1 / N`` on ``U`` (Chen et al. 2014's MNIST code: eta = 0.1 is 2e-6 on U at N = 50 000)
        and, at every temperature, of ``0.1 T / N`` on ``U_T`` (the module's docstring:
        Wenzel et al. 2020's tempered dynamics).
        """
        return lr_per_datum * self.temperature / self.num_data

    def weights(
        self, batch_size: int | None, prior_weight: Tensor | float
    ) -> tuple[float, Tensor | float]:
        """``U_T``'s factors of a batch's summed ``log p(y | x, θ)`` and of the prior's log
        density: ``-N / (n T)`` for a minibatch of ``n = batch_size`` (``-1 / T`` for a chunk of
        the training set, ``batch_size=None``) and ``-κ / T``. The one place where the scaling,
        the temperature and the prior's weight meet the densities: every evaluation takes them
        from here."""
        data_weight = 1.0 if batch_size is None else self.num_data / batch_size
        return -data_weight / self.temperature, -prior_weight / self.temperature

    def energy(
        self, log_likelihood: Tensor, log_priors: list[Tensor], batch_size: int, prior_weight: float
    ) -> Tensor:
        """``U_T`` from a minibatch's summed ``log p(y | x, θ)`` and the prior's log densities
        (``log p(φ)``, ``log p(θ)``) at one draw of the parameters, as a graph: `at`'s scaling
        for the variational closure's stochastic forward pass."""
        data, prior = self.weights(batch_size, prior_weight)
        energy = data * log_likelihood
        if prior_weight:
            for log_prior in log_priors:
                energy = energy + prior * log_prior
        return energy

    def prior_scale(self, prior_weight: float) -> float:
        """The factor ``κ / T`` of the prior's log density in ``U_T``."""
        return -self.weights(None, prior_weight)[1]

    def log_joint(self, values: dict[str, Tensor], x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """``log p(y | f(x))`` summed over the batch and ``log p(φ)``, at the parameters
        ``values`` (by `param_names`) in place of `params`' values."""
        return functional_call(self._joint, values, (x, y))

    def log_likelihood(
        self,
        values: list[Tensor] | None,
        x: Tensor,
        y: Tensor,
        stacked: bool = False,
        data_dim: int | None = None,
    ) -> Tensor:
        """``log p(y | x, θ)`` summed over the batch (a graph) at ``values``, aligned with
        `params` (None: `params` themselves): of one network, or of each of the ``stacked``
        chains, ``values`` stacked along a first dimension, by the model's ``chain_forward``
        where it has one, else by ``torch.func.vmap`` of the one-chain model; ``data_dim``:
        x's and y's chain dimension (None: the same data for every chain)."""
        if values is None:
            return self.likelihood(self.model(x), y)
        if not stacked:
            return self.log_joint(dict(zip(self.param_names, values, strict=True)), x, y)[0]
        if hasattr(self.model, "chain_forward"):
            # the model's parameters come first in `values`, the likelihood's after
            model = dict(zip(self.model_params, values, strict=False))
            output = self.model.chain_forward(model, x, shared=data_dim is None)
            return self.likelihood.chain_forward(output, y, values[len(model) :])
        named = dict(zip(self.param_names, values, strict=True))
        log_lik, _ = vmap(lambda v, x, y: self.log_joint(v, x, y), in_dims=(0, data_dim, data_dim))(
            named, x, y
        )
        return log_lik

    def log_prior(self, values: list[Tensor] | None, stacked: bool = False) -> Tensor:
        """The prior term's ``log p(θ) + log p(φ)`` at ``values`` (as in `log_likelihood`; a
        value per chain where ``stacked``)."""
        values = self.params if values is None else values
        model = dict(zip(self.model_params, values, strict=False))  # the model's come first
        log_prior = (self.prior.chain_log_prob if stacked else self.prior.log_prob)(model)
        if self.samples_likelihood:
            log_prior = log_prior + self.likelihood.log_prior_grad(values[len(model) :])[0]
        return log_prior

    def at(
        self,
        values: list[Tensor] | None,
        x: Tensor | None,
        y: Tensor | None,
        batch_size: int | None = None,
        prior_weight: Tensor | float = 1.0,
        stacked: bool = False,
        data_dim: int | None = None,
        exact: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """``U_T`` at ``values`` (as in `log_likelihood`) as a pure function of them: the batch
        ``(x, y)``'s log-likelihood (none without ``x``) and the prior's log density (none at a
        ``prior_weight`` of 0.0), weighted by `weights`. Returns it as a graph in the parameters'
        dtype (a value per chain where ``stacked``), which every evaluation differentiates, and
        the value to report: the same, detached, or with ``exact`` summed in float64, as the
        Metropolis tests on differences of ``U`` need."""
        data, prior = self.weights(batch_size, prior_weight)
        terms = []
        if x is not None:
            terms.append((data, self.log_likelihood(values, x, y, stacked, data_dim)))
        if isinstance(prior_weight, Tensor) or prior_weight:
            terms.append((prior, self.log_prior(values, stacked)))
        energy = functools.reduce(operator.add, (weight * term for weight, term in terms))
        if not exact:
            return energy, energy.detach()
        value = functools.reduce(operator.add, (w * t.detach().double() for w, t in terms))
        return energy, value

    def closure(self, x: Tensor, y: Tensor, prior_weight: float = 1.0) -> Closure:
        """A closure returning ``(U_T, ∇U_T)`` on ``(x, y)`` at the parameters' current values.
        Called with a variational distribution ``q`` (`Variational`), it returns instead
        ``q``'s Monte Carlo estimate of the negative ELBO and its gradient in ``q``'s parameters
        (for `bdl.variational.MeanField`: the gradients in ``q.mean`` followed by those in
        ``q.std``). Its attribute ``value()`` is ``U_T`` alone, by a forward pass without the
        gradient: what a kernel that steps through other parameters than its own (MC dropout's
        masked weights) reports of the parameters themselves."""

        def evaluate(q: Variational | None = None) -> Evaluation:
            if q is not None:
                return q.negative_elbo(self, x, y, prior_weight)
            return self._paths.minibatch(self.params, x, y, prior_weight)

        @torch.no_grad()
        def value() -> Tensor:
            return self.at(None, x, y, x.shape[0], prior_weight)[1]

        evaluate.value = value
        return evaluate

    def full_closure(self, batches: Batches) -> Closure:
        """A closure for the full-data ``U_T`` and gradient, accumulated chunk by chunk in
        float64 (`bdl.potential_evaluation.Evaluations.chunked`), with a ``program`` attribute
        (`Program`, or None)."""
        return self._paths.chunked(self.params, batches, stacked=False)

    def chain_closure(
        self,
        params: list[Tensor],
        x: Tensor,
        y: Tensor,
        prior_weight: float = 1.0,
        shared: bool = False,
    ) -> Closure:
        """`closure` for ``K`` chains at once (`bdl.chains`): ``params`` aligned with
        `params`, each stacked along a leading chain dimension, and one minibatch per chain,
        ``x`` of shape ``(K, n, ...)``, or one minibatch of shape ``(n, ...)`` ``shared`` by all.
        Returns ``U_T`` of each chain, shape ``(K,)``, and the gradients stacked like
        ``params``."""
        data_dim = None if shared else 0

        def evaluate() -> Evaluation:
            leaves = [p.detach().requires_grad_() for p in params]
            return self._paths.minibatch(leaves, x, y, prior_weight, data_dim, stacked=True)

        return evaluate

    def chain_full_closure(self, params: list[Tensor], batches: Batches) -> Closure:
        """`full_closure` for ``K`` chains stacked as in `chain_closure`, every
        chunk of the training set shared by all chains; sums in float64 as there."""
        return self._paths.chunked(params, batches, stacked=True)

    def indexed_minibatch_program(
        self, x: Tensor, y: Tensor, chains: int | None = None, shared: bool = False
    ) -> Program | None:
        """With ``compile``, the `Program` of minibatch steps on the training set ``(x, y)``,
        each minibatch given by its rows: its ``evaluate(q, index, prior_weight)`` is `closure`'s
        ``U_T`` and gradient on the rows ``index`` at values ``q`` (for ``chains`` stacked
        chains, a row of ``index`` per chain, or one row ``shared`` by all), so that a sampler
        runs an epoch of steps without Python between them
        (`bdl.samplers.base.minibatch_steps_loop`); None where `at` cannot be traced whole."""
        return self._paths.indexed_minibatch_program(x, y, chains, shared)

    @torch.no_grad()
    def gibbs_step(
        self,
        generator: torch.Generator,
        batches: Batches | None = None,
    ) -> None:
        """Resample the prior's and the likelihood's hyperparameters from their conditionals given
        the current parameters (Neal's Gibbs step between dynamics updates; Neal 1996).

        ``batches`` yields the training set in chunks; it is needed (and only then read) when the
        likelihood's conditional depends on the data (the regression noise precision).
        """
        self.prior.gibbs_step(self.model_params, generator, self.temperature)
        if self.likelihood.gibbs:
            if batches is None:
                raise ValueError("the likelihood's Gibbs step needs the training set (batches=)")
            outputs = ((self.model(x), y) for x, y in batches())
            self.likelihood.gibbs_step(outputs, generator, self.temperature, self.reduce)

    def hyperparameters(self) -> dict[str, Tensor]:
        """The hyperparameters by trace name (the prior's, then the likelihood's): the
        Gibbs-sampled ones, and a noise precision the sampler moves."""
        return {**self.prior.hyperparameters(), **self.likelihood.hyperparameters()}

    @property
    def has_gibbs_step(self) -> bool:
        """Whether `gibbs_step` changes anything (else ``U`` never changes under a
        kernel, and the runner need not call it)."""
        return bool(self.prior.state_dict()) or self.likelihood.gibbs

    def state_dict(self) -> dict[str, Tensor]:
        """Everything outside ``params`` that a run changes (Gibbs-sampled precisions of the prior
        and of the likelihood), for checkpoints."""
        state = {f"prior.{name}": t for name, t in self.prior.state_dict().items()}
        state.update({f"likelihood.{name}": t for name, t in self.likelihood.named_buffers()})
        return state

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.prior.load_state_dict(
            {name[len("prior.") :]: t for name, t in state.items() if name.startswith("prior.")}
        )
        for name, buffer in self.likelihood.named_buffers():
            buffer.copy_(state[f"likelihood.{name}"])

    def prior_precision(self) -> dict[str, Tensor] | None:
        r"""The curvature of ``U_T``'s prior term per model parameter, by name and shaped like
        it: $-\partial^2 \log p(\theta) / \partial\theta_j^2 / T = 1/(\sigma_j^2 T)$
        when the prior is Gaussian given its hyperparameters, None otherwise. A Laplace
        approximation adds it to the likelihood term's Hessian (`bdl.samplers.laplace`)."""
        stds = self.prior_stds()
        if stds is None:
            return None
        return {
            name: torch.as_tensor(std, dtype=p.dtype, device=p.device)
            .square()
            .reciprocal()
            .div(self.temperature)
            .expand_as(p)
            for (name, p), std in zip(self.model_params.items(), stds, strict=True)
        }

    def prior_stds(self) -> list[Tensor | float] | None:
        """The prior's standard deviations of the model's parameters if it is Gaussian given its
        hyperparameters, else None."""
        stds = [self.prior.gaussian_std(name, p) for name, p in self.model_params.items()]
        return None if any(s is None for s in stds) else stds
