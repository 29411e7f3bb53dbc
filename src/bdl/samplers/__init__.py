"""Samplers: one file per algorithm, all following the contract in :mod:`bdl.samplers.base`."""

from bdl.samplers.base import Sampler, SamplerState
from bdl.samplers.sgd import SGD
from bdl.samplers.sghmc import SGHMC
from bdl.samplers.sgld import SGLD

__all__ = ["SGD", "SGHMC", "SGLD", "Sampler", "SamplerState"]
