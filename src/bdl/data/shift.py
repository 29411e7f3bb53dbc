"""Dataset shift for evaluating a posterior away from its training distribution.

Rotated MNIST is the standard image shift of Ovadia et al. (2019), "Can you trust your model's
uncertainty? Evaluating predictive uncertainty under dataset shift": the test digits rotated by a
growing angle, on which a good posterior's accuracy falls while its uncertainty rises.
"""

from __future__ import annotations

from torch import Tensor
from torchvision.transforms.functional import InterpolationMode
from torchvision.transforms.functional import rotate as _rotate

__all__ = ["rotate"]


def rotate(x: Tensor, degrees: float) -> Tensor:
    """Images ``N x C x H x W`` rotated counter-clockwise by ``degrees`` about their centre,
    bilinearly interpolated, corners filled with 0 (MNIST's background; the channel mean of
    standardised images)."""
    if x.dim() != 4:
        raise ValueError(
            f"shift.rotate applies to images (N x C x H x W), but these inputs have shape "
            f"{tuple(x.shape)}: drop shift.rotate for this dataset"
        )
    return _rotate(x, float(degrees), interpolation=InterpolationMode.BILINEAR)
