"""Dataset shift for evaluating a posterior away from its training distribution.

Rotated MNIST is the standard image shift of Ovadia et al. (2019), "Can you trust your model's
uncertainty? Evaluating predictive uncertainty under dataset shift": the test digits rotated by a
growing angle, on which a good posterior's accuracy falls while its uncertainty rises. Beside it,
`corrupt` applies the corruptions of Hendrycks & Dietterich (2019), "Benchmarking neural
network robustness to common corruptions and perturbations", which Ovadia et al. also use, at a
severity from 1 to 5: Gaussian noise, Gaussian blur, translation and contrast, generated at
evaluation time (their parameters scaled to 28 x 28 images). These are 4 of their 15, at bdl's
own parameters (`CORRUPTIONS`): not MNIST-C (Mu & Gilmer 2019), whose corrupted images are a
fixed dataset of its own.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torchvision.transforms.functional import InterpolationMode, affine, gaussian_blur
from torchvision.transforms.functional import rotate as _rotate

__all__ = ["CORRUPTIONS", "SEVERITIES", "corrupt", "rotate"]

SEVERITIES = range(1, 6)
NOISE_SEED = 0  # the same noise in every evaluation, so that runs compare on the same images

# The parameter of each corruption at severities 1..5. Noise: standard deviation in units of
# the images' range (Hendrycks & Dietterich's ImageNet values); blur: the Gaussian kernel's
# standard deviation in pixels (theirs, 1-6 pixels on 224, scaled down to 28); translation:
# pixels right and down; contrast: the factor on each image's deviation from its mean (their
# CIFAR-10 values).
CORRUPTIONS: dict[str, tuple[float, ...]] = {
    "gaussian_noise": (0.08, 0.12, 0.18, 0.26, 0.38),
    "blur": (0.5, 0.75, 1.0, 1.5, 2.0),
    "translate": (2, 4, 6, 8, 10),
    "contrast": (0.4, 0.3, 0.2, 0.1, 0.05),
}


def _check_images(x: Tensor, option: str) -> None:
    if x.dim() != 4:
        raise ValueError(
            f"{option} applies to images (N x C x H x W), but these inputs have shape "
            f"{tuple(x.shape)}: drop {option} for this dataset"
        )


def rotate(x: Tensor, degrees: float) -> Tensor:
    """Images ``N x C x H x W`` rotated counter-clockwise by ``degrees`` about their centre,
    bilinearly interpolated, corners filled with 0 (MNIST's background; the channel mean of
    standardised images)."""
    _check_images(x, "shift.rotate")
    return _rotate(x, float(degrees), interpolation=InterpolationMode.BILINEAR)


def check_corruption(name: str, severity: int) -> None:
    """Refuse an unknown corruption or severity in one line naming the choices."""
    if name not in CORRUPTIONS:
        from bdl.errors import did_you_mean

        hint = did_you_mean(name, CORRUPTIONS) or ""
        raise ValueError(
            f"shift.corrupt={name} is not a corruption{hint} (the choices: "
            f"{', '.join(CORRUPTIONS)})"
        )
    if isinstance(severity, bool) or severity not in SEVERITIES:
        raise ValueError(f"shift.severity={severity} is not a severity: choose 1, 2, 3, 4 or 5")


def corrupt(x: Tensor, name: str, severity: int) -> Tensor:
    """Images ``N x C x H x W`` with corruption ``name`` (`CORRUPTIONS`) at ``severity``
    1-5, kept within the range of pixel values that ``x`` spans."""
    check_corruption(name, severity)
    _check_images(x, "shift.corrupt")
    level = CORRUPTIONS[name][severity - 1]
    low, high = x.min(), x.max()
    if name == "gaussian_noise":
        generator = torch.Generator(x.device).manual_seed(NOISE_SEED)
        noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        shifted = x + level * (high - low) * noise
    elif name == "blur":
        size = 2 * math.ceil(3 * level) + 1
        shifted = gaussian_blur(x, [size, size], [level, level])
    elif name == "translate":
        shifted = affine(
            x, angle=0.0, translate=[int(level), int(level)], scale=1.0, shear=[0.0], fill=0.0
        )
    else:
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        shifted = (x - mean) * level + mean
    return shifted.clamp(low, high)
