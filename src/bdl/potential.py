r"""The potential energy: the one place where minibatch scaling and temperature live.

Every sampler in bdl moves on the same function,

.. math::

    U_T(\theta) = \frac{1}{T}\Big[-\frac{N}{n}\sum_{i\in\mathcal{B}}\log p(y_i \mid x_i, \theta)
                  - \log p(\theta)\Big],

an unbiased estimate of :math:`-\log p(\theta\mid\mathcal{D})/T` from a minibatch
:math:`\mathcal{B}` of size :math:`n` out of :math:`N` training points (seed 000, eq. 30). The
target of every sampler is :math:`\propto \exp(-U_T)`: ``T = 1`` is the Bayes posterior, ``T < 1``
a cold posterior. Samplers receive ``U_T`` and its gradient through a closure and never rescale
either. :meth:`Potential.step_size` is the single conversion from the per-datum learning rates of
the configs (the convention of Chen et al.'s code and of deep-learning practice) to the step size
on the scale of ``U``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from bdl.priors import Prior

Closure = Callable[[], tuple[Tensor, list[Tensor]]]


class Potential:
    """``U_T`` for a network, its likelihood and its prior on ``num_data`` training points.

    Args:
        model: the network ``f(x; θ)``.
        likelihood: ``log p(y | f(x), φ)`` summed over a batch; may own parameters φ (a
            regression noise precision) that are sampled along with θ.
        prior: ``log p(θ)`` over the model's named parameters.
        num_data: ``N``, the number of training points.
        temperature: ``T > 0``.
    """

    def __init__(
        self,
        model: nn.Module,
        likelihood: nn.Module,
        prior: Prior,
        num_data: int,
        temperature: float = 1.0,
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
        self.params: list[Tensor] = list(model.parameters()) + list(likelihood.parameters())

    def step_size(self, lr_per_datum: float) -> float:
        """The step size on the scale of ``U`` for a per-datum learning rate: ``lr / N``.

        A learning rate of 0.1 "per datum" is a step of 0.1 on the mean loss, which is a step of
        ``0.1 / N`` on ``U`` (Chen et al. 2014's MNIST code: eta = 0.1 is 2e-6 on U at N = 50 000).
        """
        return lr_per_datum / self.num_data

    def log_prior(self) -> Tensor:
        return (
            self.prior.log_prob(dict(self.model.named_parameters())) + self.likelihood.log_prior()
        )

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        """``U_T`` at the current parameters from the minibatch ``(x, y)``."""
        log_lik = self.likelihood(self.model(x), y)
        return -(self.num_data / x.shape[0] * log_lik + self.log_prior()) / self.temperature

    def closure(self, x: Tensor, y: Tensor) -> Closure:
        """A closure returning ``(U_T, ∇U_T)`` on ``(x, y)`` at the parameters' current values."""

        def evaluate() -> tuple[Tensor, list[Tensor]]:
            with torch.enable_grad():
                value = self(x, y)
                grads = torch.autograd.grad(value, self.params, materialize_grads=True)
            return value.detach(), list(grads)

        return evaluate

    def full_closure(self, batches: Callable[[], Iterator[tuple[Tensor, Tensor]]]) -> Closure:
        """A closure for the full-data ``U_T`` and gradient, accumulated chunk by chunk.

        Memory stays that of one chunk whatever ``N``; the value is accumulated in float64 so that
        Metropolis tests on differences of ``U`` are not swamped by rounding.
        """

        def evaluate() -> tuple[Tensor, list[Tensor]]:
            total = torch.zeros((), dtype=torch.float64, device=self.params[0].device)
            grads = [torch.zeros_like(p) for p in self.params]
            with torch.enable_grad():
                for x, y in batches():
                    nll = -self.likelihood(self.model(x), y) / self.temperature
                    torch._foreach_add_(
                        grads, torch.autograd.grad(nll, self.params, materialize_grads=True)
                    )
                    total += nll.detach().double()
                prior_term = -self.log_prior() / self.temperature
                torch._foreach_add_(
                    grads, torch.autograd.grad(prior_term, self.params, materialize_grads=True)
                )
            return total + prior_term.detach().double(), grads

        return evaluate
