r"""Likelihoods :math:`\log p(y \mid f(x), \phi)`, summed over a batch.

Each is an ``nn.Module`` whose parameters :math:`\phi` (if any) are sampled with the network's,
and whose ``log_prior`` is :math:`\log p(\phi)`. ``predict`` turns network outputs into the
predictive distribution of one posterior sample.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Categorical(nn.Module):
    r"""Softmax classification: :math:`\log p(y\mid x,\theta) = \log\mathrm{softmax}(f(x))_y`."""

    task = "classification"

    def forward(self, logits: Tensor, y: Tensor) -> Tensor:
        return -F.cross_entropy(logits, y, reduction="sum")

    def log_prior(self) -> Tensor:
        return torch.zeros(())

    def predict(self, logits: Tensor) -> Tensor:
        """Class probabilities, shape ``(n, classes)``."""
        return logits.softmax(-1)


class Gaussian(nn.Module):
    r"""Regression :math:`y \sim \mathcal{N}(f(x), \tau^{-1})` with noise precision :math:`\tau`.

    With ``noise_std`` set, :math:`\tau = 1/\sigma^2` is fixed. Otherwise :math:`s = \log\tau` is
    a parameter sampled with the network, with prior :math:`\tau \sim \mathrm{Gamma}(a, b)`
    (shape, rate), i.e. :math:`\log p(s) = a s - b e^{s} + \mathrm{const}` including the Jacobian.
    Targets are in standardised units, so the default Gamma(1, 1) puts the noise near the targets'
    own scale.
    """

    task = "regression"

    def __init__(
        self, noise_std: float | None = None, prior_shape: float = 1.0, prior_rate: float = 1.0
    ) -> None:
        super().__init__()
        if noise_std is not None and not noise_std > 0:
            raise ValueError(f"likelihood.noise_std must be positive, got {noise_std}")
        if not (prior_shape > 0 and prior_rate > 0):
            raise ValueError("likelihood.prior_shape and likelihood.prior_rate must be positive")
        self.prior_shape = prior_shape
        self.prior_rate = prior_rate
        initial = -2 * math.log(noise_std) if noise_std is not None else 0.0
        log_precision = torch.tensor(initial)
        if noise_std is None:
            self.log_precision = nn.Parameter(log_precision)
        else:
            self.register_buffer("log_precision", log_precision)

    def forward(self, mean: Tensor, y: Tensor) -> Tensor:
        s = self.log_precision
        residual = (y - mean.squeeze(-1)).square().sum()
        return 0.5 * y.shape[0] * (s - math.log(2 * math.pi)) - 0.5 * s.exp() * residual

    def log_prior(self) -> Tensor:
        if not isinstance(self.log_precision, nn.Parameter):
            return torch.zeros(())
        s = self.log_precision
        return self.prior_shape * s - self.prior_rate * s.exp()

    def predict(self, mean: Tensor) -> Tensor:
        """Predictive mean and variance of one sample, shape ``(n, 2)``."""
        variance = (-self.log_precision).exp().expand(mean.shape[0])
        return torch.stack([mean.squeeze(-1), variance], dim=-1)
