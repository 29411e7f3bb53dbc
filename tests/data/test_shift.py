"""The corruptions of bdl.data.shift (Hendrycks & Dietterich 2019) grow with their severity, each
measured on generated images by what it damages, and each does what its table says, checked
against a computation outside bdl: the noise's spread, the contrast factor, a hand shift and
scipy's Gaussian filter."""

from __future__ import annotations

import math

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


def test_gaussian_noise_has_the_stated_standard_deviation_in_units_of_the_range():
    """At each severity the added noise's spread is the table's sigma times the images' range
    (2 here): estimated from the median absolute change, which the clamping to the range leaves
    alone (the median |change| is 0.68 sigma <= 0.52, inside the distance 1 to either bound),
    over 157k pixels, whose relative Monte Carlo error is 0.3%; held to 2%."""
    x = torch.ones(200, 1, 28, 28)
    x[0, 0, 0, 0], x[0, 0, 0, 1] = 0.0, 2.0
    inside = torch.ones_like(x, dtype=torch.bool)
    inside[0, 0, 0, :2] = False  # the two pixels at the bounds, clamped on one side only
    quartile = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.75)).item()
    for severity, sigma in enumerate(CORRUPTIONS["gaussian_noise"], start=1):
        change = (corrupt(x, "gaussian_noise", severity) - x)[inside]
        assert change.abs().median().item() / quartile == pytest.approx(2 * sigma, rel=0.02)
        assert abs(change.median().item()) < 0.02 * sigma


@pytest.mark.parametrize("severity", range(1, 6))
def test_contrast_scales_each_images_deviations_from_its_mean_by_the_stated_factor(
    images, severity
):
    factor = CORRUPTIONS["contrast"][severity - 1]
    mean = images.flatten(1).mean(-1)[:, None, None, None]
    torch.testing.assert_close(
        corrupt(images, "contrast", severity), mean + factor * (images - mean)
    )


@pytest.mark.parametrize("severity", range(1, 6))
def test_translation_is_the_image_shifted_by_hand(images, severity):
    """Each pixel moved the table's count right and down, the uncovered border 0."""
    k = CORRUPTIONS["translate"][severity - 1]
    want = torch.zeros_like(images)
    want[..., k:, k:] = images[..., :-k, :-k]
    assert torch.equal(corrupt(images, "translate", severity), want)


@pytest.mark.parametrize("severity", range(1, 6))
def test_blur_is_scipys_gaussian_filter_at_the_stated_standard_deviation(images, severity):
    """scipy's Gaussian filter of the table's sigma, truncated at the same radius (3 sigma,
    rounded up) and mirrored at the border as torchvision pads ("reflect")."""
    from scipy.ndimage import gaussian_filter

    sigma = CORRUPTIONS["blur"][severity - 1]
    want = gaussian_filter(
        images.double().numpy(),
        sigma=(0, 0, sigma, sigma),
        radius=(0, 0, math.ceil(3 * sigma), math.ceil(3 * sigma)),
        mode="mirror",
    )
    got = corrupt(images, "blur", severity)
    torch.testing.assert_close(got, torch.from_numpy(want).float(), atol=1e-5, rtol=0)


# not translation: once a digit has moved past itself, moving it further pushes its strokes out
# of the frame and the pixel distance falls (its exact shift is checked above)
@pytest.mark.parametrize("name", ["gaussian_noise", "blur", "contrast"])
def test_each_severity_is_further_from_the_clean_images(images, name):
    """The root mean squared change grows strictly from 0 (clean) through severities 1..5."""
    distances = [0.0] + [
        (corrupt(images, name, s) - images).square().mean().sqrt().item() for s in range(1, 6)
    ]
    assert all(a < b for a, b in zip(distances, distances[1:], strict=False)), distances
