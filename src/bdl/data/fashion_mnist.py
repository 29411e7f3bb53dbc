"""Fashion-MNIST (Xiao, Rasul & Vollgraf 2017) through ``torchvision.datasets.FashionMNIST``.

Ten classes of clothing in MNIST's IDX format and sizes (60 000 training and 10 000 test images of
28 x 28 pixels): a harder MNIST-sized benchmark, and the standard out-of-distribution set of an
MNIST-trained network (and MNIST of a Fashion-MNIST-trained one). It is staged and extracted as
`bdl.data.mnist` stages MNIST. Archives recompressed by a packager (Debian's
``dataset-fashion-mnist``) fail torchvision's md5 of the archive, so an archive also passes when
its decompressed contents have the originals' md5 sums.
"""

from __future__ import annotations

import os

from torchvision.datasets import FashionMNIST

from .base import Dataset
from .mnist import Source, load_idx

__all__ = ["load"]

MD5 = dict(FashionMNIST.resources)
# md5 sums of the decompressed original IDX files (zalandoresearch/fashion-mnist's data/fashion)
EXTRACTED_MD5 = {
    "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
    "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
}

SOURCE = Source("Fashion-MNIST", "FashionMNIST", FashionMNIST, MD5, EXTRACTED_MD5)


def load(
    root: str | os.PathLike | None = None,
    validation: int = 10000,
    download: bool = True,
    pixel_divisor: float = 255.0,
) -> Dataset:
    """Load Fashion-MNIST with the last ``validation`` training images held out (the
    validation split), as `bdl.data.mnist.load` splits MNIST, pixels divided by
    ``pixel_divisor`` (255: [0, 1])."""
    return load_idx(SOURCE, "fashion_mnist", root, validation, download, pixel_divisor)
