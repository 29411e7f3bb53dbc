r"""Likelihoods $\log p(y \mid f(x), \phi)$, summed over a batch.

Each is an ``nn.Module`` whose parameters $\phi$ (if any) are sampled with the network's,
and whose ``log_prior`` is $\log p(\phi)$. ``predict`` turns network outputs into the
predictive distribution of one posterior sample. A likelihood whose hyperparameters have a
conjugate conditional (the Gaussian's noise precision) may instead resample them by Gibbs steps
(`Likelihood.gibbs_step`), which `bdl.potential.Potential.gibbs_step` drives with the
network's outputs on the whole training set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from bdl.priors import conjugate_precision


class Likelihood(nn.Module):
    """Base class: no hyperparameters of its own unless a subclass says so."""

    task: str
    gibbs = False  # True: gibbs_step needs a pass over the training set

    def log_prior(self) -> Tensor:
        return torch.zeros(())

    def chain_forward(self, output: Tensor, y: Tensor, phi: list[Tensor]) -> Tensor:
        """``forward`` for chains stacked along a first dimension of ``output``
        (`bdl.runner.steppers`), one sum per chain, at ``phi``: the chains' stacked values of this
        module's parameters."""
        if not phi:  # nothing to substitute: functional_call's swap would be a fifth of the call
            return self(output, y)
        names = [name for name, _ in self.named_parameters()]
        return functional_call(self, dict(zip(names, phi, strict=True)), (output, y))

    def log_prior_grad(self, phi: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """``log p(φ)`` and its gradient in closed form, at ``phi``: values of this
        module's parameters, or those of chains stacked along a first dimension (one value per
        chain). A likelihood with parameters gives its own."""
        return torch.zeros(()), []

    def gibbs_step(
        self,
        outputs: Iterable[tuple[Tensor, Tensor]],
        generator: torch.Generator,
        temperature: float = 1.0,
        reduce: Callable[[list[Tensor]], None] | None = None,
    ) -> None:
        """Resample the hyperparameters given ``(f(x), y)`` chunks of the whole training set (or
        of this process's shard of it, whose statistics ``reduce`` sums over the processes)."""

    def hyperparameters(self) -> dict[str, Tensor]:
        """Current hyperparameter values by trace name (extra columns of ``curve.csv``)."""
        return {}


class Categorical(Likelihood):
    r"""Softmax classification: $\log p(y\mid x,\theta) = \log\mathrm{softmax}(f(x))_y$."""

    task = "classification"

    def forward(self, logits: Tensor, y: Tensor) -> Tensor:
        if logits.dim() == 2:
            return -F.cross_entropy(logits, y, reduction="sum")
        # chains stacked in front (bdl.runner.steppers): one sum per chain
        targets = y.expand(logits.shape[:-1])
        return -F.cross_entropy(logits.transpose(1, -1), targets, reduction="none").sum(-1)

    def predict(self, logits: Tensor) -> Tensor:
        """Class probabilities, shape ``(n, classes)``."""
        return logits.softmax(-1)


class Gaussian(Likelihood):
    r"""Regression $y \sim \mathcal{N}(f(x), \tau^{-1})$ with noise precision $\tau$.

    With ``noise_std`` set, $\tau = 1/\sigma^2$ is fixed. Otherwise $\tau$ has the prior
    $\mathrm{Gamma}(a, b)$ (shape, rate; Nalisnick: "σ₀ ~ Gamma") and is sampled in one of two
    ways:

    - by default $s = \log\tau$ is a parameter moved by the sampler with the network, with
      $\log p(s) = a s - b e^{s} + \mathrm{const}$ including the Jacobian;
    - with ``gibbs=True`` it is resampled from its conjugate conditional given the residuals
      $r_i = y_i - f(x_i)$ of all $N$ training points (as the weight precisions of
      `bdl.priors.GammaHierarchical`; at temperature $T$, shape and rate as there),
      $\tau \mid \theta, \mathcal{D} \sim
      \mathrm{Gamma}\big(a + N/2,\ b + \textstyle\sum_i r_i^2/2\big)$.

    Targets are in standardised units, so the default Gamma(1, 1) puts the noise near the targets'
    own scale.
    """

    task = "regression"

    def __init__(
        self,
        noise_std: float | None = None,
        prior_shape: float = 1.0,
        prior_rate: float = 1.0,
        gibbs: bool = False,
    ) -> None:
        super().__init__()
        if noise_std is not None and not 0 < noise_std < math.inf:
            raise ValueError(
                f"likelihood.noise_std must be positive and finite (or null), got {noise_std}"
            )
        if not (0 < prior_shape < math.inf and 0 < prior_rate < math.inf):
            raise ValueError(
                "likelihood.prior_shape and likelihood.prior_rate must be positive and finite, "
                f"got {prior_shape} and {prior_rate}"
            )
        if gibbs and noise_std is not None:
            raise ValueError(
                "likelihood.gibbs=true resamples the noise precision, so it needs "
                f"likelihood.noise_std=null (got {noise_std})"
            )
        self.prior_shape = prior_shape
        self.prior_rate = prior_rate
        self.gibbs = gibbs
        self.sampled = noise_std is None
        initial = -2 * math.log(noise_std) if noise_std is not None else 0.0
        log_precision = torch.tensor(initial)
        if self.sampled and not gibbs:
            self.log_precision = nn.Parameter(log_precision)
        else:
            self.register_buffer("log_precision", log_precision)

    def forward(self, mean: Tensor, y: Tensor) -> Tensor:
        return self._log_density(mean, y, self.log_precision)

    def chain_forward(self, mean: Tensor, y: Tensor, phi: list[Tensor]) -> Tensor:
        # in closed form: functional_call's swap of the one parameter cost a fifth of a stacked
        # UCI network's forward pass
        return self._log_density(mean, y, phi[0] if phi else self.log_precision)

    @staticmethod
    def _log_density(mean: Tensor, y: Tensor, s: Tensor) -> Tensor:
        # sums over the last dimension: chains stacked in front (bdl.runner.steppers) get one sum
        # each
        residual = (y - mean.squeeze(-1)).square().sum(-1)
        return 0.5 * y.shape[-1] * (s - math.log(2 * math.pi)) - 0.5 * s.exp() * residual

    def log_prior(self) -> Tensor:
        # by the flag, not the attribute's type: under torch.func.functional_call (variational
        # draws, vectorised chains) the parameter is replaced by a plain tensor
        if not self.sampled or self.gibbs:
            return torch.zeros(())
        return self.log_prior_grad([self.log_precision])[0]

    def log_prior_grad(self, phi: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        # d/ds (a s - b e^s) = a - b e^s
        (s,) = phi
        precision = s.exp()
        log_prior = self.prior_shape * s - self.prior_rate * precision
        return log_prior, [self.prior_shape - self.prior_rate * precision]

    @torch.no_grad()
    def gibbs_step(
        self,
        outputs: Iterable[tuple[Tensor, Tensor]],
        generator: torch.Generator,
        temperature: float = 1.0,
        reduce: Callable[[list[Tensor]], None] | None = None,
    ) -> None:
        if not self.gibbs:
            return
        count, squares = 0, torch.zeros((), dtype=torch.float64, device=self.log_precision.device)
        for mean, y in outputs:
            count += y.shape[0]
            squares += (y - mean.squeeze(-1)).double().square().sum()
        if reduce is not None:
            total = torch.tensor(float(count), dtype=torch.float64, device=squares.device)
            reduce([total, squares])
            count = int(total.item())
        tau = conjugate_precision(
            self.prior_shape,
            self.prior_rate,
            count,
            squares,
            temperature,
            generator,
            like=self.log_precision,
        )
        self.log_precision.copy_(tau.log())

    def hyperparameters(self) -> dict[str, Tensor]:
        return {"noise_precision": self.log_precision.detach().exp()} if self.sampled else {}

    def predict(self, mean: Tensor) -> Tensor:
        """Predictive mean and variance of one sample, shape ``(n, 2)``."""
        variance = (-self.log_precision).exp().expand(mean.shape[0])
        return torch.stack([mean.squeeze(-1), variance], dim=-1)
