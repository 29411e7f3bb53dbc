"""Network architectures.

Every model is built as ``factory(input_shape=..., out_features=..., **hyperparameters)`` so that
Hydra configs can fix the hyperparameters (``_partial_: true``) while the runner supplies the
shapes, which only the dataset knows. Outputs are logits (classification) or regression means,
shape ``(batch, out_features)``. No model uses batch statistics: a network whose output for one
example depends on the rest of the mini-batch does not define a likelihood, which SG-MCMC needs.
"""

from bdl.models.convnet import ConvNet
from bdl.models.linear import Linear
from bdl.models.mlp import MLP
from bdl.models.resnet20_frn import FilterResponseNorm, ResNet20FRN

__all__ = ["MLP", "ConvNet", "FilterResponseNorm", "Linear", "ResNet20FRN"]
