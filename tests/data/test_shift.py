"""The corruptions of bdl.data.shift (Hendrycks & Dietterich 2019) grow with their severity, each
measured on generated images by what it damages."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import mnist_images

from bdl.data.shift import CORRUPTIONS, corrupt, rotate


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 200)
    return torch.from_numpy(mnist_images(labels, rng)).float().div(255).unsqueeze(1)


def _centroid(x: torch.Tensor) -> torch.Tensor:
    """Each image's centre of pixel mass (row, column)."""
    grid = torch.arange(x.shape[-1], dtype=x.dtype)
    mass = x.sum(dim=(1, 2, 3))
    rows = (x.sum(dim=(1, 3)) * grid).sum(-1) / mass
    cols = (x.sum(dim=(1, 2)) * grid).sum(-1) / mass
    return torch.stack([rows, cols], -1)


def _roughness(x: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference of neighbouring pixels: what a blur smooths away."""
    return (x.diff(dim=-1).abs().mean() + x.diff(dim=-2).abs().mean()) / 2


MEASURES = {
    # the noise added: mean squared change
    "gaussian_noise": lambda x, clean: (x - clean).square().mean(),
    # smoothness: minus the roughness, so that larger is further from the clean images
    "blur": lambda x, clean: -_roughness(x),
    # the content's displacement: distance the images' centres of mass moved
    "translate": lambda x, clean: (_centroid(x) - _centroid(clean)).norm(dim=-1).mean(),
    # lost contrast: minus the mean spread of each image's pixels
    "contrast": lambda x, clean: -x.flatten(1).std(-1).mean(),
}


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_severity_is_monotone_in_the_damage_measured(images, name):
    measure = MEASURES[name]
    values = [measure(images, images).item()]
    values += [measure(corrupt(images, name, s), images).item() for s in range(1, 6)]
    assert all(a < b for a, b in zip(values, values[1:], strict=False)), values
    for s in range(1, 6):
        shifted = corrupt(images, name, s)
        assert shifted.shape == images.shape and shifted.min() >= 0 and shifted.max() <= 1


def test_translation_moves_every_pixel_by_the_stated_pixels(images):
    """Severity 1 moves each pixel 2 right and 2 down, the uncovered border filled with 0."""
    moved = corrupt(images, "translate", 1)
    assert torch.equal(moved[..., 2:, 2:], images[..., :-2, :-2])
    assert moved[..., :2, :].abs().sum() == 0 and moved[..., :, :2].abs().sum() == 0


@pytest.mark.parametrize(
    ("name", "severity", "match"),
    [
        ("gaussian", 3, "did you mean gaussian_noise.*the choices: gaussian_noise, blur"),
        ("blur", 0, "choose 1, 2, 3, 4 or 5"),
        ("blur", 6, "choose 1, 2, 3, 4 or 5"),
    ],
)
def test_a_bad_corruption_is_one_line_naming_the_choices(images, name, severity, match):
    with pytest.raises(ValueError, match=match) as error:
        corrupt(images, name, severity)
    assert "\n" not in str(error.value)


def test_a_shift_the_inputs_cannot_take_is_one_line_naming_the_choices():
    images, vectors = torch.zeros(2, 1, 4, 4), torch.zeros(2, 13)
    for call, message in [
        (
            lambda: corrupt(images, "blurr", 3),
            "shift.corrupt=blurr is not a corruption: did you mean blur? (the choices: "
            "gaussian_noise, blur, translate, contrast)",
        ),
        (
            lambda: corrupt(images, "fog", 3),
            "shift.corrupt=fog is not a corruption (the choices: gaussian_noise, blur, "
            "translate, contrast)",
        ),
        (
            lambda: corrupt(images, "blur", 6),
            "shift.severity=6 is not a severity: choose 1, 2, 3, 4 or 5",
        ),
        (
            lambda: corrupt(images, "blur", True),
            "shift.severity=True is not a severity: choose 1, 2, 3, 4 or 5",
        ),
        (
            lambda: corrupt(vectors, "blur", 3),
            "shift.corrupt applies to images (N x C x H x W), but these inputs have shape "
            "(2, 13): drop shift.corrupt for this dataset",
        ),
        (
            lambda: rotate(vectors, 30),
            "shift.rotate applies to images (N x C x H x W), but these inputs have shape "
            "(2, 13): drop shift.rotate for this dataset",
        ),
    ]:
        with pytest.raises(ValueError) as error:
            call()
        assert str(error.value) == message
