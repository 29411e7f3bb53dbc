"""A saved posterior, loaded from a run directory and used later.

``load_run(directory)`` reads what ``bdl-run`` wrote: the composed config (``.hydra/config.yaml``,
checked against the root schema), ``metrics.json`` and the sample store. Samples come per chain:
a run of one chain keeps them in ``samples/`` (chain 0), a run of several chains in
``samples/chain_<k>/``, each a sample store of :mod:`bdl.store`. Everything is read with
safetensors, JSON and OmegaConf's YAML loader, and the network and data are built only from
bdl's own targets (:mod:`bdl.instantiation`), so loading a run never executes code from it.

The network is rebuilt from the config by the runner's own builders (:func:`bdl.run.load_data`,
:func:`bdl.run.build_network`), so a sample means here exactly what it meant during the run;
the run's dataset is read (lazily) because only it knows the input shape, the number of classes
and, for regression, the target standardisation that predictions are reported in.

Predictions stream over the samples, one on the device at a time, into the running averages of
:mod:`bdl.metrics`: on the run's own test set and device they reproduce its ``metrics.json``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from fnmatch import fnmatch
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch import Tensor, nn

from bdl.config import RunConfig
from bdl.data import Dataset
from bdl.instantiation import inert
from bdl.metrics import ClassificationAverage, RegressionAverage
from bdl.run import build_network, load_data, predict, sample_tensors
from bdl.store import MANIFEST, load_samples, read_manifest
from bdl.task import Task

__all__ = ["Posterior", "RunError", "Sample", "load_run"]

CONFIG_FILE = Path(".hydra") / "config.yaml"
METRICS_FILE = "metrics.json"
SAMPLES_DIR = "samples"
_CHAIN = re.compile(r"chain_(\d+)")


class RunError(ValueError):
    """A directory that is not a usable run; the message names the directory and the fix."""


class Sample(NamedTuple):
    """One posterior sample: its chain, its position (draw) in the chain, the tensors by
    parameter name, and its manifest entry (``epoch`` and the store's bookkeeping)."""

    chain: int
    draw: int
    params: dict[str, Tensor]
    info: dict[str, Any]


def chain_stores(samples: Path) -> list[Path]:
    """The sample store of each chain, in chain order: ``samples/`` itself for a run of one chain,
    else ``samples/chain_0/``, ``samples/chain_1/``, … (numbered from 0 without gaps)."""
    if (samples / MANIFEST).is_file():
        return [samples]
    numbered = {}
    if samples.is_dir():
        for path in samples.iterdir():
            match = _CHAIN.fullmatch(path.name)
            if match and (path / MANIFEST).is_file():
                numbered[int(match.group(1))] = path
    if sorted(numbered) != list(range(len(numbered))):
        raise RunError(
            f"{samples} holds the chains {sorted(numbered)}, not 0, 1, …: a chain's directory is "
            "missing; restore it or re-run"
        )
    return [numbered[k] for k in range(len(numbered))]


def load_config(directory: Path) -> DictConfig:
    """The run's composed config, merged into the root schema so that it has the types (the
    device enum) the runner's builders expect, and calling no resolver (:func:`inert`): a run
    directory never reads the environment of whoever loads it."""
    path = directory / CONFIG_FILE
    try:
        saved = inert(OmegaConf.to_container(OmegaConf.load(path), resolve=False))
        return OmegaConf.merge(OmegaConf.structured(RunConfig), saved)
    except (OSError, OmegaConfBaseException, ValueError) as e:
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RunError(
            f"{path} is not a bdl-run config ({message}); restore the file bdl-run wrote"
        ) from None


class Posterior:
    """The posterior samples of one run, with the run's config and metrics.

    Attributes:
        directory: the run directory.
        config: the composed config the run was made with.
        metrics: the run's ``metrics.json`` (empty when the run stopped before writing it).
        num_chains: the number of chains.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        config_path, samples = self.directory / CONFIG_FILE, self.directory / SAMPLES_DIR
        if not self.directory.is_dir() or not config_path.is_file():
            raise RunError(
                f"{self.directory} is not a bdl run directory (it has no {CONFIG_FILE.as_posix()}):"
                " pass the directory bdl-run wrote, e.g. outputs/<dataset>/<sampler>/<date>"
            )
        self._stores = chain_stores(samples)
        if not self._stores:
            raise RunError(
                f"{self.directory} holds no posterior samples ({samples}/{MANIFEST} is missing): "
                "the run was an optimiser's or stopped before burn-in ended; re-run it"
            )
        self.config = load_config(self.directory)
        metrics_path = self.directory / METRICS_FILE
        self.metrics: dict[str, Any] = {}
        if metrics_path.is_file():
            try:
                self.metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise RunError(f"{metrics_path} is not readable JSON ({e}); re-run") from None

    @property
    def num_chains(self) -> int:
        return len(self._stores)

    def __len__(self) -> int:
        """The number of samples over all chains."""
        return sum(len(read_manifest(store)) for store in self._stores)

    def __repr__(self) -> str:
        return f"Posterior({str(self.directory)!r}, chains={self.num_chains}, samples={len(self)})"

    def samples(self, chain: int | None = None) -> Iterator[Sample]:
        """The samples of ``chain`` (all chains, one after the other, when ``None``), read one
        file at a time and checked against the manifest's SHA-256; each sample's ``params`` in
        the order of their names, the same for every sample."""
        chains = range(self.num_chains) if chain is None else [self._chain(chain)]
        for k in chains:
            for draw, (params, info) in enumerate(load_samples(self._stores[k])):
                yield Sample(k, draw, params, info)

    def _chain(self, chain: int) -> int:
        if not 0 <= chain < self.num_chains:
            raise ValueError(f"chain={chain}: this run has chains 0..{self.num_chains - 1}")
        return chain

    @cached_property
    def data(self) -> Dataset:
        """The run's dataset, loaded as the runner loads it (read on first use)."""
        return load_data(self.config)

    def network(self, device: str | torch.device = "cpu") -> tuple[nn.Module, nn.Module]:
        """The run's network and likelihood, as the runner builds them, on ``device``."""
        model, likelihood = build_network(self.config, self.data)
        return model.to(device), likelihood.to(device)

    def average(
        self,
        x: Tensor,
        y: Tensor | None = None,
        device: str | torch.device | None = None,
        chain: int | None = None,
    ) -> ClassificationAverage | RegressionAverage:
        """The running model average over the samples of ``chain`` (all when ``None``) on ``x``.

        ``x`` is preprocessed as the run's dataset is (e.g. UCI inputs standardised); regression
        targets ``y`` are in the standardised units of the run's dataset. The network runs on
        ``device`` (``x``'s by default), one sample at a time.
        """
        device = torch.device(device) if device is not None else x.device
        expected = self.data.input_shape
        if tuple(x.shape[1:]) != expected:
            raise RunError(
                f"{self.directory} holds a network for inputs of shape {expected}, got inputs of "
                f"shape {tuple(x.shape[1:])}"
            )
        # Without targets (predict), a regression average's log-likelihood against zeros is unused.
        average = Task(self.data, torch.zeros(x.shape[0]) if y is None else y.cpu()).average()
        model, likelihood = self.network(device)
        live = sample_tensors(_Network(model, likelihood))
        x = x.to(device)
        for sample in self.samples(chain):
            wrong = [
                n
                for n, p in live.items()
                if n not in sample.params or sample.params[n].shape != p.shape
            ]
            if wrong:
                raise RunError(
                    f"sample {sample.draw} of chain {sample.chain} in {self.directory} does not "
                    f"fit the network of its config (parameters {', '.join(wrong)}); "
                    "the samples and .hydra/config.yaml are not of the same run"
                )
            with torch.no_grad():
                for name, p in live.items():
                    p.copy_(sample.params[name])
            average.update(predict(model, likelihood, x).cpu())
        return average

    def predict(
        self, x: Tensor, device: str | torch.device | None = None, chain: int | None = None
    ) -> Tensor:
        """The Bayesian model average on ``x``: class probabilities ``(n, classes)``, or the
        mixture's mean and variance ``(n, 2)`` in the original units of the targets."""
        return self.average(x, device=device, chain=chain).predictive()

    def function_moments(
        self, x: Tensor | None = None, device: str | torch.device | None = None
    ) -> tuple[Tensor, Tensor]:
        """A regression run's posterior of the function: the mean and standard deviation over
        the samples of the network's output on ``x`` (the test inputs by default), in the
        original units of the targets, without the noise the predictive adds."""
        if self.data.task != "regression":
            raise RunError(f"{self.directory} is a {self.data.task} run: no regression function")
        x = self.data.x_test if x is None else x
        return self.average(x, device=device).function_moments()

    def function_standard_error(
        self, x: Tensor | None = None, device: str | torch.device | None = None
    ) -> Tensor:
        """The Monte Carlo standard error of :meth:`function_moments`' mean on each point, from
        the spread of the chains' own means: their standard deviation over ``sqrt(K)``, the
        chains taken as independent batches (as in R-hat, no autocorrelation to estimate; a
        slow direction of the posterior that every chain is still crossing shows as spread)."""
        if self.num_chains < 2:
            raise RunError(
                f"{self.directory} has one chain: a standard error from the chains' spread "
                "needs two or more (run with chains=K)"
            )
        x = self.data.x_test if x is None else x
        means = [
            self.average(x, device=device, chain=k).function_moments()[0]
            for k in range(self.num_chains)
        ]
        return torch.stack(means).std(0) / math.sqrt(self.num_chains)

    def evaluate(
        self, x: Tensor, y: Tensor, device: str | torch.device | None = None
    ) -> dict[str, float]:
        """Test metrics of the model average on ``(x, y)``, as ``metrics.json`` names them."""
        average = self.average(x, y, device=device)
        return {**average.metrics(y.cpu()), "num_samples": average.count}

    def to_inferencedata(self, var_names: Sequence[str] | None = None):
        """The samples as an ``arviz.InferenceData``: each parameter tensor a variable of the
        ``posterior`` group with dimensions ``(chain, draw, *shape)``, and the manifests'
        numeric entries (``epoch``) in ``sample_stats``.

        Args:
            var_names: fnmatch patterns on parameter names to keep (all by default; a large
                network's full posterior may not fit in memory, e.g. ``["layers.2.*"]``).
        """
        import arviz as az  # imported only when asked for: it is slow to import

        counts = [len(read_manifest(store)) for store in self._stores]
        if len(set(counts)) > 1:
            raise RunError(
                f"{self.directory}: the chains hold {counts} samples; InferenceData needs the "
                "same number of draws in every chain"
            )
        posterior: dict[str, list[list[Any]]] = {}
        stats: dict[str, list[list[Any]]] = {}
        for sample in self.samples():
            for name, value in sample.params.items():
                if var_names is None or any(fnmatch(name, pat) for pat in var_names):
                    _append(posterior, name, sample.chain, value.double().numpy())
            for key, value in sample.info.items():
                if key not in ("index", "file", "sha256") and isinstance(value, (int, float)):
                    _append(stats, key, sample.chain, value)
        if not posterior:
            raise ValueError(f"var_names={list(var_names or [])} matches no parameter")
        return az.from_dict(
            posterior={k: np.stack([np.stack(c) for c in v]) for k, v in posterior.items()},
            sample_stats={k: np.asarray(v) for k, v in stats.items()},
        )


class _Network:
    """Model and likelihood under the names :func:`bdl.run.named_parameters` reads."""

    def __init__(self, model: nn.Module, likelihood: nn.Module) -> None:
        self.model, self.likelihood = model, likelihood


def _append(table: dict[str, list[list[Any]]], key: str, chain: int, value: Any) -> None:
    rows = table.setdefault(key, [])
    while len(rows) <= chain:
        rows.append([])
    rows[chain].append(value)


def load_run(directory: str | Path) -> Posterior:
    """The posterior of the run in ``directory`` (see :class:`Posterior`)."""
    return Posterior(directory)
