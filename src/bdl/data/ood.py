"""Out-of-distribution sets: inputs from elsewhere that a posterior should be unsure about.

A classifier's predictive uncertainty is judged by how well it tells its own test inputs from
inputs of another distribution (Hendrycks & Gimpel 2017; Ovadia et al. 2019): Fashion-MNIST's
clothing against MNIST's digits and back, or images of uniform noise. `ood_inputs` returns
the test inputs of the set a run or ``bdl-eval`` names by ``ood=``, preprocessed as the run's own
dataset is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from bdl.errors import ConfigError

from .base import DataError, Dataset

__all__ = ["CHOICES", "check_name", "ood_inputs"]

NOISE_SEED = 0  # the noise images are the same in every run, so their metrics compare


def _loader(name: str) -> Callable[..., Dataset]:
    if name == "mnist":
        from .mnist import load
    else:
        from .fashion_mnist import load
    return load


#: the ``ood=`` names: datasets of MNIST's shape, and uniform noise of the run's input shape
CHOICES = ("fashion_mnist", "mnist", "noise")
IMAGE_SHAPE = (1, 28, 28)  # the datasets' inputs: checked before any is read


def check_name(name: str) -> None:
    """Refuse an ``ood=`` name that is none of `CHOICES`, in one line naming them."""
    if name not in CHOICES:
        from bdl.errors import did_you_mean

        hint = did_you_mean(name, CHOICES) or ""
        raise ConfigError(
            f"ood={name} is not an out-of-distribution set{hint} (the choices: "
            f"{', '.join(CHOICES)}, or ood=null for none)"
        )


def ood_inputs(name: str, data: Dataset, dataset_options: Mapping[str, Any]) -> Tensor:
    """The test inputs of the out-of-distribution set ``name`` for a run on ``data``, loaded
    with the run's dataset options that its loader shares (``root``, ``download``,
    ``pixel_divisor``), so they are scaled as the run's images are; ``noise`` is uniform between
    the smallest and largest test input, one image per test point."""
    check_name(name)
    if data.task != "classification":
        raise ConfigError(f"ood={name}: out-of-distribution detection needs a classifier")
    if name == data.name:
        raise ConfigError(
            f"ood={name} is the run's own dataset: choose another set ("
            f"{', '.join(c for c in CHOICES if c != name)})"
        )
    if name == "noise":
        generator = torch.Generator().manual_seed(NOISE_SEED)
        low, high = data.x_test.min(), data.x_test.max()
        noise = torch.rand(data.x_test.shape, generator=generator, dtype=data.x_test.dtype)
        return low + (high - low) * noise
    if data.input_shape != IMAGE_SHAPE:
        raise DataError(
            f"ood={name} has inputs of shape {IMAGE_SHAPE}, but {data.name}'s are "
            f"{data.input_shape}: choose ood=noise or a set of the same shape"
        )
    load = _loader(name)
    shared = inspect.signature(load).parameters
    options = {k: v for k, v in dataset_options.items() if k in shared and k != "validation"}
    try:
        return load(**options, validation=0).x_test
    except DataError as error:
        raise DataError(f"ood={name}: {error} Or run without it: ood=null.") from error
