"""Datasets as in-memory tensors: MNIST, CIFAR-10 and the UCI regression benchmarks.

The loaders live in submodules (``bdl.data.mnist.load`` etc., used as Hydra ``_target_``s) and
are not imported here, so that importing the package does not pull in torchvision.
"""

from .augment import random_crop_flip
from .base import DataError, Dataset, cache_dir, data_root

__all__ = ["DataError", "Dataset", "cache_dir", "data_root", "random_crop_flip"]
