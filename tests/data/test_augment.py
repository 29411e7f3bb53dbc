"""Batched crop/flip: shapes, reproducibility, and that it really crops and flips."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bdl.data.augment import random_crop_flip


def _batch(n: int = 16, c: int = 3, h: int = 8, w: int = 8) -> torch.Tensor:
    # Distinct values everywhere so every shift/flip gives a different image.
    return torch.randn(n, c, h, w, generator=torch.Generator().manual_seed(0))


def test_shape_dtype_device():
    x = _batch()
    out = random_crop_flip(x, torch.Generator().manual_seed(1))
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    assert random_crop_flip(x).shape == x.shape  # global RNG path
    assert random_crop_flip(x.double(), padding=2).dtype == torch.float64


def test_deterministic_with_seeded_generator():
    x = _batch()
    a = random_crop_flip(x, torch.Generator().manual_seed(123))
    b = random_crop_flip(x, torch.Generator().manual_seed(123))
    c = random_crop_flip(x, torch.Generator().manual_seed(124))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_padding_zero_only_flips():
    x = _batch(n=64)
    out = random_crop_flip(x, torch.Generator().manual_seed(0), padding=0)
    same = (out == x).flatten(1).all(1)
    mirrored = (out == x.flip(-1)).flatten(1).all(1)
    assert bool((same | mirrored).all())
    # With 64 images, both outcomes occur except with probability 2**-63.
    assert bool(same.any()) and bool(mirrored.any())


def test_each_output_is_a_padded_crop_possibly_flipped():
    padding = 2
    x = _batch(n=24, h=6, w=7)
    out = random_crop_flip(x, torch.Generator().manual_seed(5), padding=padding)
    padded = F.pad(x, (padding,) * 4)
    h, w = x.shape[-2:]
    shifts, flips = set(), set()
    for i in range(x.shape[0]):
        matches = [
            (dy, dx, flip)
            for dy in range(2 * padding + 1)
            for dx in range(2 * padding + 1)
            for flip in (False, True)
            if torch.equal(
                out[i],
                padded[i, :, dy : dy + h, dx : dx + w].flip(-1)
                if flip
                else padded[i, :, dy : dy + h, dx : dx + w],
            )
        ]
        assert len(matches) == 1, f"image {i} is not a unique crop/flip of its input"
        dy, dx, flip = matches[0]
        shifts.add((dy, dx))
        flips.add(flip)
    assert len(shifts) > 1  # offsets really vary (24 images, 25 possible offsets)
    assert flips == {False, True}


def test_every_shift_and_flip_equally_likely_and_independent():
    """Each image's pixels numbered ``1 + row * w + col`` (the padding stays 0), so the output's
    centre pixel and its right neighbour name the shift and the flip. Over ``n = 20 000`` images
    the 25 shifts times 2 flips each occur ``n / 50 = 400`` times in expectation, with binomial
    standard error ``sqrt(n p (1 - p)) = 19.8``; every cell within 4.5 of them (a cell outside
    with probability 7e-6, 3e-4 for any of 50). A crop along the diagonal alone (``dy = dx``)
    leaves 40 cells empty; a crop that omits the last offset leaves 20 empty."""
    padding, n, h, w = 2, 20_000, 7, 7
    numbered = 1 + torch.arange(h * w, dtype=torch.float64).view(1, 1, h, w).expand(n, 1, h, w)
    out = random_crop_flip(numbered, torch.Generator().manual_seed(0), padding=padding)
    centre = out[:, 0, h // 2, w // 2].long() - 1
    flipped = out[:, 0, h // 2, w // 2 + 1] < out[:, 0, h // 2, w // 2]
    # the centre (of an odd width: the flip keeps its column) reads the padded input at
    # (dy + h // 2, dx + w // 2)
    dy, dx = centre // w - h // 2 + padding, centre % w - w // 2 + padding
    padded = F.pad(numbered[:100], (padding,) * 4)
    for i in range(100):  # the decoding is right: each output is the crop it names
        crop = padded[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w]
        assert torch.equal(out[i], crop.flip(-1) if flipped[i] else crop)
    cells = (dy * (2 * padding + 1) + dx) * 2 + flipped.long()
    counts = torch.bincount(cells, minlength=2 * (2 * padding + 1) ** 2).double()
    assert counts.numel() == 50  # every code names a shift in range
    p = 1 / 50
    assert (counts - n * p).abs().max() < 4.5 * (n * p * (1 - p)) ** 0.5
    assert bool((dy != dx).any())


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        random_crop_flip(torch.zeros(3, 8, 8))
    with pytest.raises(ValueError):
        random_crop_flip(torch.zeros(2, 3, 8, 8), padding=-1)


def test_what_is_no_batch_of_images_is_refused_by_its_shape():
    with pytest.raises(ValueError) as error:
        random_crop_flip(torch.zeros(3, 8, 8))
    assert str(error.value) == (
        "random_crop_flip expects an N x C x H x W batch, got shape torch.Size([3, 8, 8])"
    )
    with pytest.raises(ValueError) as error:
        random_crop_flip(torch.zeros(2, 3, 8, 8), padding=-1)
    assert str(error.value) == "padding must be >= 0, got -1"
