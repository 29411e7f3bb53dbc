"""Minibatch data augmentation as whole-batch tensor ops.

The data live on the accelerator as one tensor, so augmenting per image in Python (the
torchvision ``transforms`` way) would dominate the step time; one gather over the batch does
the standard CIFAR-10 crop-and-flip at the cost of a single indexing kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["random_crop_flip"]


def random_crop_flip(
    x: Tensor, generator: torch.Generator | None = None, padding: int = 4
) -> Tensor:
    """Random ``padding``-pixel translation plus horizontal flip (p=0.5), independently per image.

    This is the usual "pad 4, random 32x32 crop, random flip" of CIFAR ResNet training. Padding
    is with zeros in whatever space ``x`` is in: for normalised images that is the channel mean
    rather than black, a harmless difference that avoids un-normalising. Randomness is drawn from
    ``generator`` (on the generator's own device, then moved) so runs are reproducible.

    ``x`` is ``N x C x H x W``; the result has the same shape, dtype and device.
    """
    if x.dim() != 4:
        raise ValueError(f"random_crop_flip expects an N x C x H x W batch, got shape {x.shape}")
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    n, c, h, w = x.shape
    rand_device = generator.device if generator is not None else x.device

    offsets = torch.randint(0, 2 * padding + 1, (2, n), generator=generator, device=rand_device)
    flips = torch.rand(n, generator=generator, device=rand_device) < 0.5
    offsets, flips = offsets.to(x.device), flips.to(x.device)

    padded = F.pad(x, (padding, padding, padding, padding)) if padding else x
    rows = offsets[0, :, None] + torch.arange(h, device=x.device)  # N x H
    cols = torch.arange(w, device=x.device).expand(n, w)
    cols = torch.where(flips[:, None], cols.flip(1), cols) + offsets[1, :, None]  # N x W

    batch = torch.arange(n, device=x.device)[:, None, None, None]
    chan = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[batch, chan, rows[:, None, :, None], cols[:, None, None, :]]
