"""Samplers: one file per algorithm, all following the contract in `bdl.samplers.base`."""

from bdl.samplers.adaptive_sghmc import AdaptiveSGHMC
from bdl.samplers.base import Sampler, SamplerState
from bdl.samplers.bbb import BBB, BBBSGD
from bdl.samplers.csgd import ConstantSGD
from bdl.samplers.hmc import HMC
from bdl.samplers.laplace import Laplace
from bdl.samplers.mala import MALA
from bdl.samplers.mc_dropout import MCDropout
from bdl.samplers.naive_sghmc import NaiveSGHMC
from bdl.samplers.psgld import PSGLD
from bdl.samplers.rwmh import RWMH
from bdl.samplers.sgd import SGD
from bdl.samplers.sghmc import SGHMC
from bdl.samplers.sgld import SGLD
from bdl.samplers.sgnht import SGNHT
from bdl.samplers.swag import SWAG

__all__ = [
    "AdaptiveSGHMC",
    "BBB",
    "BBBSGD",
    "HMC",
    "Laplace",
    "MALA",
    "MCDropout",
    "PSGLD",
    "RWMH",
    "SGD",
    "SGHMC",
    "SGLD",
    "SGNHT",
    "SWAG",
    "ConstantSGD",
    "NaiveSGHMC",
    "Sampler",
    "SamplerState",
]
