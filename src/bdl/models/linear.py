"""Generalised linear model: Bayesian linear regression or (multinomial) logistic regression."""

from __future__ import annotations

import math

from torch import Tensor, nn


class Linear(nn.Module):
    """One affine map of the flattened input.

    With a Gaussian prior and likelihood its posterior is known in closed form (Bishop 2006,
    sec. 3.3), and for logistic regression it is log-concave, so samplers can be checked against
    ground truth before they are trusted on deep networks.
    """

    def __init__(self, input_shape: tuple[int, ...], out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(math.prod(input_shape), out_features)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x.flatten(1))
