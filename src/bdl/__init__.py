"""bdl: Bayesian deep learning through stochastic dynamics.

The command-line tools (``bdl-run``, ``bdl-eval``, ``bdl-report``, ``bdl-check``) are built from
the pieces exported here, which can also be used directly from Python (docs/guide/python.md): the
potential ``U`` (`Potential`), priors and likelihoods (`bdl.priors`,
`bdl.likelihoods`), the samplers, a run directory of one's own network and data
(`run_model`), and a saved run's posterior (`load_run`).
"""

from importlib.metadata import version
from typing import Any

from bdl import likelihoods, priors
from bdl.analysis.posterior import Posterior, Sample, load_run
from bdl.potential import Potential
from bdl.samplers import *  # noqa: F403  (every sampler class, listed in bdl.samplers)
from bdl.samplers import __all__ as _samplers
from bdl.variational import MeanField

__version__ = version("bdl")

__all__ = [
    *_samplers,
    "MeanField",
    "Posterior",
    "Potential",
    "Sample",
    "__version__",
    "likelihoods",
    "load_run",
    "priors",
    "run_model",  # noqa: F405  (imported on first use, by __getattr__ below)
]


def __getattr__(name: str) -> Any:
    """``run_model``, imported on first use (PEP 562): it brings the runner and Hydra, which
    reading a saved run or building a potential does not need."""
    if name == "run_model":
        from bdl.runner.python_api import run_model

        return run_model
    raise AttributeError(f"module 'bdl' has no attribute {name!r}")
