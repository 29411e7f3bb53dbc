"""ResNet-20 with Filter Response Normalisation, the CIFAR network of Izmailov et al. (2021).

Izmailov, Vikram, Hoffman & Wilson, "What are Bayesian neural network posteriors really like?"
(ICML 2021) replace BatchNorm by FRN and ReLU by Swish: BatchNorm makes an example's output depend
on the rest of its mini-batch, so the network no longer defines a likelihood per data point and
full-batch HMC / SG-MCMC target an ill-defined posterior. This follows ``make_resnet20_frn_fn``
in google-research/bnn_hmc (``bnn_hmc/utils/models.py``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from bdl.models.mlp import make_activation

# Haiku's VarianceScaling(..., "truncated_normal") rescales the standard deviation by this
# constant, the std of a unit normal truncated at ±2, so the truncated draw has the intended scale.
_TRUNCATED_STD = 0.87962566103423978


def _he_normal_(module: nn.Conv2d | nn.Linear) -> None:
    """He et al. (2015) fan-in truncated-normal init, as bnn_hmc's ``he_normal``.

    Matching the reference initialisation matters because SG-MCMC chains start from it.
    """
    fan_in = module.weight[0].numel()
    std = math.sqrt(2.0 / fan_in) / _TRUNCATED_STD
    nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
    if module.bias is not None:
        nn.init.zeros_(module.bias)


class FilterResponseNorm(nn.Module):
    r"""Filter Response Normalisation followed by a Thresholded Linear Unit.

    Singh & Krishnan, "Filter Response Normalization Layer" (CVPR 2020):
    $\hat x = x / \sqrt{\nu^2 + \epsilon}$ with $\nu^2$ the mean of $x^2$ over
    the spatial positions of one example and channel, then $\max(\gamma \hat x + \beta,
    \tau)$. Unlike BatchNorm it uses no batch statistics and has no train/eval mode, so every
    posterior sample is a fixed function of its own input.
    """

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.beta = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.tau = nn.Parameter(torch.zeros(1, channels, 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        nu2 = x.square().mean(dim=(2, 3), keepdim=True)
        x = x * torch.rsqrt(nu2 + self.eps)
        return torch.maximum(self.gamma * x + self.beta, self.tau)


class _ConvFRN(nn.Module):
    """bnn_hmc's ``resnet_layer``: conv, FRN+TLU, then optionally the activation."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        stride: int,
        activation: str | None,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)
        self.norm = FilterResponseNorm(out_channels)
        self.act = make_activation(activation) if activation is not None else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.norm(self.conv(x)))


class _BasicBlock(nn.Module):
    """Residual block; a strided 1x1 projection (no normalisation) matches shapes at stage starts.

    The activation is applied after the sum, as in He et al. (2016) "Deep residual learning" and
    bnn_hmc's ``make_resnet_fn``.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, activation: str) -> None:
        super().__init__()
        self.conv1 = _ConvFRN(in_channels, out_channels, stride, activation)
        self.conv2 = _ConvFRN(out_channels, out_channels, 1, None)
        self.shortcut: nn.Module = (
            nn.Conv2d(in_channels, out_channels, 1, stride=stride)
            if stride != 1 or in_channels != out_channels
            else nn.Identity()
        )
        self.act = make_activation(activation)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.shortcut(x) + self.conv2(self.conv1(x)))


class ResNet20FRN(nn.Module):
    """ResNet-20 (3 stages x 3 basic blocks, widths w/2w/4w) with FRN+TLU and Swish.

    About 0.27M parameters at ``width=16`` for CIFAR-10. Inputs are ``(C, H, W)`` images (a
    ``(H, W)`` shape is read as one channel); the head pools globally, so any size at least 4x4
    that survives the two stride-2 stages works.
    """

    blocks_per_stage = 3

    def __init__(
        self,
        input_shape: tuple[int, ...],
        out_features: int,
        width: int = 16,
        activation: str = "swish",
    ) -> None:
        super().__init__()
        input_shape = tuple(int(d) for d in input_shape)
        if len(input_shape) not in (2, 3):
            raise ValueError(
                f"ResNet20FRN needs image inputs (C, H, W) or (H, W), got shape {input_shape}"
            )
        if width < 1:
            raise ValueError(f"model.width must be a positive integer, got {width}")
        make_activation(activation)
        self.input_shape = input_shape
        in_channels = input_shape[0] if len(input_shape) == 3 else 1
        self.stem = _ConvFRN(in_channels, width, 1, activation)
        blocks: list[nn.Module] = []
        channels = width
        for stage in range(3):
            out_channels = width * 2**stage
            for block in range(self.blocks_per_stage):
                stride = 2 if stage > 0 and block == 0 else 1
                blocks.append(_BasicBlock(channels, out_channels, stride, activation))
                channels = out_channels
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(channels, out_features)
        for module in self.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                _he_normal_(module)

    def forward(self, x: Tensor) -> Tensor:
        if len(self.input_shape) == 2:
            x = x.unsqueeze(1)
        x = self.blocks(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))
