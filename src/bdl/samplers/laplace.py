r"""The Laplace approximation around a MAP solution (MacKay 1992), fitted by laplace-torch
(Daxberger, Kristiadi, Immer, Eschenhagen, Bauer & Hennig, NeurIPS 2021).

At a mode $\theta^*$ of the tempered posterior $\exp(-U_T)$ — the last sample of an
SGD run, given by ``init_from=`` — a second-order expansion of $U_T$ gives the Gaussian

$$
q(\theta) = \mathcal{N}\big(\theta^*, \Lambda^{-1}\big), \qquad
\Lambda = \frac{1}{T}\Big[\sum_{i=1}^{N} J_i^\top H_i J_i + P\Big]
        \approx \nabla^2 U_T(\theta^*),
$$

the likelihood's Hessian replaced by its generalised Gauss-Newton approximation: $J_i$ the
network's Jacobian at $x_i$, $H_i$ the Hessian of $-\log p(y_i\mid f)$ in the
output (the noise precision $\tau$ for the Gaussian likelihood, $\mathrm{diag}(p) -
pp^\top$ for the softmax), summed over all $N$ training points; $P/T$ is the prior
term's curvature, $1/(\sigma_j^2 T)$ for a Gaussian prior, from
`bdl.potential.Potential.prior_precision` (laplace-torch's ``temperature`` divides the
likelihood's part by the same $T$). ``hessian_structure`` chooses the approximation of the
sum: ``diag`` its diagonal, ``kron`` one Kronecker product per layer (K-FAC; Martens & Grosse 2015,
Ritter, Botev & Barber 2018), ``full`` all of it (small models only: $D^2$ entries).
``subset_of_weights=last_layer`` fits the last layer alone and keeps the others at
$\theta^*$ (Kristiadi, Hein & Hennig 2020); the last layer is the last module holding
parameters, since every bdl model registers its output layer last. With ``marglik: true`` one
scalar prior precision replaces bdl's prior after the fit, chosen by maximising the Laplace
approximation of the marginal likelihood (MacKay 1992; Immer et al. 2021) with Adam, step
``lr``, for ``marglik_steps`` steps, starting from the mean of the prior's precisions.

For Bayesian linear regression with a Gaussian prior and known noise $U_T$ is quadratic and
the Gauss-Newton matrix its exact Hessian: ``full`` is then the posterior itself.

**In the runner.** The approximation optimises nothing: the epochs of SGD happen in the
``init_from`` run. The class is a ``full_batch`` kernel whose steps move nothing — the first
evaluates $U_T(\theta^*)$ on the full data (the curve's value), the others return it without
calling their closure, so an epoch costs nothing and ``epochs=1`` is all a run needs. After the
last step, `Laplace.final_samples` fits $q$ in one pass over the training set (the
batches `Laplace.attach` received) and writes ``num_samples`` draws $\theta \sim q$
into the parameters, which the runner stores, averages and scores like any posterior's samples,
then restores $\theta^*$.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from bdl.closures import Closure
from bdl.potential import Potential
from bdl.samplers.base import Batches, Declaration, Sampler, SamplerState

HESSIAN_STRUCTURES = ("diag", "kron", "full")
SUBSETS = ("all", "last_layer")
#: ``full`` holds a D x D precision and its Cholesky factor: 20,000 parameters are 3.2 GB.
FULL_MAX_PARAMS = 20_000


class _TrainingSet:
    """The training set as laplace-torch reads a ``DataLoader``: ``(x, y)`` batches and
    ``len(dataset)`` = N. Regression targets get the model's output shape ``(n, 1)``, which
    laplace-torch's squared error needs."""

    def __init__(self, batches: Batches, num_data: int, regression: bool) -> None:
        self.dataset = range(num_data)  # laplace-torch reads only its length
        self._batches = batches
        self._regression = regression

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for x, y in self._batches():
            yield x, y.unsqueeze(-1) if self._regression else y


class Laplace(Sampler):
    """The Laplace approximation at the current parameters, sampled after the run.

    Args:
        lr: Adam's step on the log prior precision when ``marglik`` (not per datum).
        hessian_structure: ``diag``, ``kron`` or ``full``.
        subset_of_weights: ``all`` or ``last_layer``.
        marglik: tune one scalar prior precision by the marginal likelihood after the fit.
        marglik_steps: Adam steps of that tuning.
        num_samples: draws from the approximation kept after the run.
    """

    declaration = Declaration(
        step_unit="optimiser", full_batch=True, injects_noise=False, needs_trained_start=True
    )

    def __init__(
        self,
        lr: float = 0.1,
        hessian_structure: str = "kron",
        subset_of_weights: str = "last_layer",
        marglik: bool = False,
        marglik_steps: int = 100,
        num_samples: int = 20,
        *,
        foreach: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(lr, foreach=foreach, generator=generator)
        if hessian_structure not in HESSIAN_STRUCTURES:
            raise ValueError(
                f"sampler.hessian_structure must be one of {', '.join(HESSIAN_STRUCTURES)}, got "
                f"{hessian_structure!r}"
            )
        if subset_of_weights not in SUBSETS:
            raise ValueError(
                f"sampler.subset_of_weights must be one of {', '.join(SUBSETS)}, got "
                f"{subset_of_weights!r}"
            )
        if marglik_steps < 1:
            raise ValueError(f"sampler.marglik_steps must be at least 1, got {marglik_steps}")
        if num_samples < 1:
            raise ValueError(f"sampler.num_samples must be at least 1, got {num_samples}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # its dependencies' deprecation warnings
                import laplace
        except ImportError:
            raise ValueError(
                "sampler=laplace needs laplace-torch: pip install 'bdl[laplace]' "
                "(or pip install laplace-torch)"
            ) from None
        self._library = laplace
        self.hessian_structure = hessian_structure
        self.subset_of_weights = subset_of_weights
        self.marglik = marglik
        self.marglik_steps = marglik_steps
        self.num_samples = num_samples
        self._potential: Potential | None = None
        self._batches: Batches | None = None

    def attach(self, potential: Potential, batches: Batches) -> None:
        if potential.hyperparameters() or len(potential.params) != len(potential.model_params):
            raise ValueError(
                "sampler=laplace approximates the weights' posterior under fixed "
                "hyperparameters: use a prior without hyperprior (prior=gaussian) and, for "
                "regression, a fixed noise (likelihood.noise_std=<value>)"
            )
        if potential.prior_precision() is None:
            raise ValueError(
                "sampler=laplace needs a Gaussian prior (prior=gaussian), got "
                f"{type(potential.prior).__name__}"
            )
        self._potential, self._batches = potential, batches
        if self.hessian_structure == "full":
            covered = self._potential.model
            if self.subset_of_weights == "last_layer":
                covered = covered.get_submodule(self._last_layer())
            size = sum(p.numel() for p in covered.parameters())
            if size > FULL_MAX_PARAMS:
                raise ValueError(
                    f"sampler.hessian_structure=full on {size:,} parameters needs a "
                    f"{size:,}² matrix: use kron or diag, or sampler.subset_of_weights=last_layer"
                )

    @torch.no_grad()
    def step(
        self,
        state: SamplerState,
        closure: Closure,
        lr_scale: float = 1.0,
        noise: bool = True,
        tune: bool = False,
    ) -> SamplerState:
        if "potential" not in state.info:  # θ* never moves, nor does U_T(θ*)
            state.info["potential"], _ = closure()
            state.grad_evals += 1
        state.step += 1
        return state

    def _keep(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        """The kernel's update is the identity: θ stays at the mode it was given."""

    _update_foreach = _update_loop = _keep

    def fit(self) -> tuple[Any, list[Tensor]]:
        """laplace-torch's approximation at the current parameters, with bdl's prior precision
        (or the marginal likelihood's), and the parameters it covers, in its order."""
        if self._potential is None or self._batches is None:
            raise RuntimeError("Laplace.attach(potential, batches) must come before the fit")
        potential = self._potential
        likelihood = potential.likelihood
        regression = likelihood.task == "regression"
        noise_std = float(torch.exp(-0.5 * likelihood.log_precision)) if regression else 1.0
        layer = self._last_layer() if self.subset_of_weights == "last_layer" else None
        approximation = self._library.Laplace(
            potential.model,
            likelihood.task,
            subset_of_weights=self.subset_of_weights,
            hessian_structure=self.hessian_structure,
            sigma_noise=noise_std,
            temperature=potential.temperature,
            **({} if layer is None else {"last_layer_name": layer}),
        )
        data = _TrainingSet(self._batches, potential.num_data, regression)
        with torch.enable_grad():
            approximation.fit(data)
        model = potential.model
        names = (
            [name for name, p in model.named_parameters() if p.requires_grad]
            if layer is None
            else [f"{layer}.{n}" for n, _ in model.get_submodule(layer).named_parameters()]
        )
        precision = potential.prior_precision()
        # K-FAC adds the prior layer by layer, one precision per tensor (bdl's priors are
        # constant per tensor); the other structures take it elementwise.
        if self.hessian_structure == "kron":
            approximation.prior_precision = torch.stack([precision[n].flatten()[0] for n in names])
        else:
            approximation.prior_precision = torch.cat([precision[n].flatten() for n in names])
        if self.marglik:
            with torch.enable_grad():
                approximation.optimize_prior_precision(
                    method="marglik",
                    n_steps=self.marglik_steps,
                    lr=self.lr,
                    init_prior_prec=approximation.prior_precision.mean().item(),
                    prior_structure="scalar",
                )
        return approximation, [potential.model_params[n] for n in names]

    def _last_layer(self) -> str:
        """The name of the last module holding parameters of its own: the output layer."""
        return [
            name
            for name, module in self._potential.model.named_modules()
            if next(module.parameters(recurse=False), None) is not None
        ][-1]

    @torch.no_grad()
    def final_samples(self, state: SamplerState) -> Iterator[None]:
        approximation, params = self.fit()
        state.grad_evals += sum(1 for _ in self._batches())  # the fit's pass over the data
        mode = [p.detach().clone() for p in params]
        sizes = [p.numel() for p in params]
        # All at once: K-FAC's draws are batched matrix products (the tests' 20,000 draws took
        # 33 s one at a time, 4 s together).
        draws = approximation.sample(self.num_samples, generator=self.generator)
        try:
            for draw in draws:
                shaped = [d.view_as(p) for d, p in zip(draw.split(sizes), params, strict=True)]
                torch._foreach_copy_(params, shaped)
                yield
        finally:
            torch._foreach_copy_(params, mode)
