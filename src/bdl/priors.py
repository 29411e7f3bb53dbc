r"""Priors :math:`p(\theta)` over a network's named parameters.

A prior is a ``torch.nn.Module``-free object with ``log_prob(params) -> Tensor``, where ``params``
maps parameter names (``"layers.0.weight"``) to tensors; autograd supplies its gradient, so a new
prior is one method.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class Prior:
    """Base class: ``log_prob`` of a dict of named parameters, up to an additive constant."""

    def log_prob(self, params: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError


class Gaussian(Prior):
    r"""Isotropic Gaussian :math:`\theta_j \sim \mathcal{N}(0, \sigma^2)` on every parameter.

    :math:`\log p(\theta) = -\lVert\theta\rVert^2 / 2\sigma^2 - \tfrac{D}{2}\log 2\pi\sigma^2`
    (seed 000, §2.1, step 1). Its gradient :math:`-\theta/\sigma^2` is weight decay
    :math:`1/\sigma^2` on the scale of ``U`` (seed 001, "MAP as weight decay").
    """

    def __init__(self, scale: float = 1.0) -> None:
        if not scale > 0:
            raise ValueError(f"prior scale must be positive, got {scale}")
        self.scale = scale

    def log_prob(self, params: dict[str, Tensor]) -> Tensor:
        tensors = list(params.values())
        squared_norm = torch.stack(torch._foreach_norm(tensors)).square().sum()
        dim = sum(t.numel() for t in tensors)
        return -0.5 * squared_norm / self.scale**2 - 0.5 * dim * math.log(
            2 * math.pi * self.scale**2
        )
