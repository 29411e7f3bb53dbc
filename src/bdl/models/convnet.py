"""A small convolutional network for MNIST-sized images that CPU runs afford."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from bdl.models.mlp import make_activation


class ConvNet(nn.Module):
    r"""LeNet-5's shape (LeCun, Bottou, Bengio & Haffner 1998), narrower: two 5 x 5 convolutions
    (``channels``, no padding), each followed by the activation and 2 x 2 max-pooling, then a
    fully connected layer of ``hidden`` units and the output layer. On 28 x 28 images the
    default ``channels=(8, 16)``, ``hidden=64`` has 20 522 parameters, four times the
    784-100-10 MLP's multiply-adds per image. No batch statistics: each image's output depends
    on it alone, as a likelihood needs."""

    def __init__(
        self,
        input_shape: tuple[int, ...],
        out_features: int,
        channels: Iterable[int] = (8, 16),
        hidden: int = 64,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        if len(input_shape) != 3:
            raise ValueError(
                f"model=convnet takes images (channels x height x width), but the inputs have "
                f"shape {tuple(input_shape)}: use model=mlp"
            )
        widths = [int(c) for c in list(channels)]
        if len(widths) != 2 or min(widths) < 1 or hidden < 1:
            raise ValueError(
                f"model.channels must be two positive widths and model.hidden positive, got "
                f"{widths} and {hidden}"
            )
        layers: list[nn.Module] = []
        in_channels = input_shape[0]
        for width in widths:
            layers += [
                nn.Conv2d(in_channels, width, 5),
                make_activation(activation),
                nn.MaxPool2d(2),
            ]
            in_channels = width
        self.features = nn.Sequential(*layers)
        with torch.no_grad():
            flat = self.features(torch.zeros(1, *input_shape)).numel()
        self.head = nn.Sequential(
            nn.Linear(flat, hidden), make_activation(activation), nn.Linear(hidden, out_features)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x).flatten(1))
