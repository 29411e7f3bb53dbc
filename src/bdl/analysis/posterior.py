"""A saved posterior, loaded from a run directory and used later.

``load_run(directory)`` reads what ``bdl-run`` wrote: the composed config (``.hydra/config.yaml``,
checked against the root schema), ``metrics.json`` and the sample store. Samples come per chain:
a run of one chain keeps them in ``samples/`` (chain 0), a run of several chains in
``samples/chain_<k>/``, each a sample store of `bdl.storage.store`. Everything is read with
safetensors, JSON and OmegaConf's YAML loader, and the network and data are built only from
bdl's own targets (`bdl.composition.instantiation`), so loading a run never executes code from it.

The network is rebuilt from the config by the runner's own builders
(`bdl.composition.network.load_data`, `bdl.composition.network.build_network`), so a sample means
here exactly what it meant during the run;
the run's dataset is read (lazily) because only it knows the input shape, the number of classes
and, for regression, the target standardisation that predictions are reported in.

Predictions stream over the samples, one on the device at a time, into the running averages of
`bdl.metrics`: on the run's own test set and device they reproduce its ``metrics.json``.
"""

from __future__ import annotations

import csv
import itertools
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

from bdl.composition import plugins
from bdl.composition.config import RunConfig
from bdl.composition.instantiation import inert, load_yaml, refuse_recursion
from bdl.composition.network import build_network, load_data, predict_samples, sample_tensors
from bdl.data import Dataset
from bdl.metrics import ClassificationAverage, RegressionAverage
from bdl.storage.outputs import CURVE
from bdl.storage.store import MANIFEST, count_samples, load_samples
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
    device enum) the runner's builders expect, and calling no resolver (`inert`): a run
    directory never reads the environment of whoever loads it."""
    path = directory / CONFIG_FILE
    try:
        saved = inert(OmegaConf.to_container(load_yaml(path), resolve=False))
        refuse_recursion(saved, path)
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

    def __init__(self, directory: str | Path, trust: Sequence[Any] = ()) -> None:
        self.directory = Path(directory)
        # a network of the caller's own (bdl.run_model), admitted while it is built
        self._trust = tuple(trust)
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
    def verdict(self) -> dict[str, Any]:
        """The run's convergence verdict, as ``metrics.json`` holds it (`bdl.diagnostics`):
        ``converged`` (True, False, or None for a run without one: an optimiser's, a
        variational fit's, or one that did not complete), its ``reasons`` and ``notes``."""
        return {
            "converged": self.metrics.get("converged"),
            "reasons": self.metrics.get("reasons", []),
            "notes": self.metrics.get("notes", []),
        }

    @property
    def num_chains(self) -> int:
        return len(self._stores)

    def __len__(self) -> int:
        """The number of samples over all chains."""
        return sum(count_samples(store) for store in self._stores)

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
        with plugins.trusted(*self._trust):
            return load_data(self.config)

    def network(self, device: str | torch.device = "cpu") -> tuple[nn.Module, nn.Module]:
        """The run's network and likelihood, as the runner builds them, on ``device``."""
        with plugins.trusted(*self._trust):
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
        # Without targets (predict), a regression average's log-likelihood against zeros is unused.
        average = Task(self.data, torch.zeros(x.shape[0]) if y is None else y.cpu()).average()
        for _, prediction in self.predictions(x, device, chain):
            average.update(prediction)
        return average

    def predictions(
        self,
        x: Tensor,
        device: str | torch.device | None = None,
        chain: int | None = None,
        logits: bool = False,
    ) -> Iterator[tuple[Sample, Tensor]]:
        """Each sample of ``chain`` (all when ``None``) with its prediction on ``x`` (on the CPU):
        class probabilities (with ``logits``, the network's outputs, whose log-softmax keeps
        the log-probabilities that round to a probability of 0), or the mean and variance in the
        run's standardised units."""
        for sample, (output,) in self.predictions_on([x], device, chain, logits):
            yield sample, output

    def predictions_on(
        self,
        inputs: Sequence[Tensor],
        device: str | torch.device | None = None,
        chain: int | None = None,
        logits: bool = False,
    ) -> Iterator[tuple[Sample, list[Tensor]]]:
        """`predictions` on each of ``inputs`` at once, each sample read once: the network runs
        on ``device`` (the first input's by default)."""
        device = torch.device(device) if device is not None else inputs[0].device
        expected = self.data.input_shape
        for x in inputs:
            if tuple(x.shape[1:]) != expected:
                raise RunError(
                    f"{self.directory} holds a network for inputs of shape {expected}, got "
                    f"inputs of shape {tuple(x.shape[1:])}"
                )
        model, likelihood = self.network(device)
        shapes = {name: p.shape for name, p in sample_tensors(model, likelihood).items()}
        samples, checked = itertools.tee(self.samples(chain))

        def fitting() -> Iterator[dict[str, Tensor]]:
            for sample in checked:
                wrong = [
                    n
                    for n, shape in shapes.items()
                    if n not in sample.params or sample.params[n].shape != shape
                ]
                if wrong:
                    raise RunError(
                        f"sample {sample.draw} of chain {sample.chain} in {self.directory} does "
                        f"not fit the network of its config (parameters {', '.join(wrong)}); "
                        "the samples and .hydra/config.yaml are not of the same run"
                    )
                yield sample.params

        inputs = [x.to(device) for x in inputs]
        # the predictions first: once they end, the network has its own values back
        for outputs, sample in zip(
            predict_samples(model, likelihood, fitting(), inputs, logits), samples, strict=True
        ):
            yield sample, outputs

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
        """The Monte Carlo standard error of `function_moments`' mean on each point, from
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

    def to_inferencedata(
        self,
        var_names: Sequence[str] | None = None,
        *,
        log_likelihood: bool = True,
        train: bool = False,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ):
        """The run as an ``arviz.InferenceData`` with the groups PyMC and NumPyro users expect, so
        that ``az.loo``, ``az.waic``, ``az.compare``, ``az.plot_ppc`` and ``az.plot_trace`` apply:

        - ``posterior``: each parameter tensor, dimensions ``(chain, draw, *named)``: a layer's
          ``weight`` ``(<layer>.out, <layer>.in[, <layer>.kernel_row, <layer>.kernel_column])``
          and ``bias`` ``(<layer>.out,)``, any other tensor ``<name>.row``, ``<name>.column``;
        - ``sample_stats``: ``epoch`` of each draw and, from ``curve.csv`` for the epoch that
          ended with it, ``potential`` (the mean of U over its steps), ``step_size`` (``sampler.lr``
          times the schedule), ``acceptance_rate`` (kernels with a Metropolis test),
          ``diverging`` (whether a divergent transition, `bdl.samplers.metropolis`, happened
          since the draw before, or after burn-in for the first draw: with ``thin`` above 1 a
          draw stands for several transitions) and ``n_divergent`` (how many): ArviZ's names
          (``az.plot_trace`` reads ``diverging``) for what bdl counts as ``divergences``;
        - with ``log_likelihood``: ``log_likelihood`` (``y``, ``log p(y_i | x_i, θ)`` of each test
          point, in the targets' original units), ``posterior_predictive`` (``y``, one draw of
          the likelihood per sample, seeded ``seed``) and ``observed_data`` (``y``, the test
          targets), over the dimension ``test_point``; with ``train`` too, the same for the
          training set as ``y_train`` over ``train_point`` (then pass ``var_name="y"`` to
          ``az.loo``). Predictions run on ``device``, one sample at a time.

        Args:
            var_names: fnmatch patterns on parameter names to keep (all by default; a large
                network's full posterior may not fit in memory, e.g. ``["layers.2.*"]``).
        """
        import arviz as az  # imported only when asked for: it is slow to import

        counts = [count_samples(store) for store in self._stores]
        if len(set(counts)) > 1:
            raise RunError(
                f"{self.directory}: the chains hold {counts} samples; InferenceData needs the "
                "same number of draws in every chain"
            )
        posterior: dict[str, list[list[Any]]] = {}
        epochs: dict[str, list[list[Any]]] = {}
        for sample in self.samples():
            for name, value in sample.params.items():
                if var_names is None or any(fnmatch(name, pat) for pat in var_names):
                    _append(posterior, name, sample.chain, value.double().numpy())
            _append(epochs, "epoch", sample.chain, sample.info["epoch"])
        if not posterior:
            raise ValueError(f"var_names={list(var_names or [])} matches no parameter")
        groups: dict[str, dict[str, np.ndarray]] = {
            "posterior": {k: np.stack([np.stack(c) for c in v]) for k, v in posterior.items()},
            "sample_stats": self._sample_stats(np.asarray(epochs["epoch"])),
        }
        dims = {name: _dims(name, value.ndim - 2) for name, value in groups["posterior"].items()}
        if log_likelihood:
            generator = torch.Generator().manual_seed(seed)
            sets = [("y", "test_point", self.data.x_test, self.data.y_test)]
            if train:
                sets.append(("y_train", "train_point", self.data.x_train, self.data.y_train))
            for group in ("log_likelihood", "posterior_predictive", "observed_data"):
                groups[group] = {}
            for name, dim, x, y in sets:
                task = Task(self.data, y.cpu())
                pointwise, replicated = self._pointwise(task, x, device, generator, counts[0])
                groups["log_likelihood"][name] = pointwise
                groups["posterior_predictive"][name] = replicated
                observed = task.targets() if self.data.task == "regression" else task.y_test
                groups["observed_data"][name] = observed.numpy()
                dims[name] = [dim]
        return az.from_dict(**groups, dims=dims)

    def _pointwise(
        self,
        task: Task,
        x: Tensor,
        device: str | torch.device,
        generator: torch.Generator,
        draws: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``log p(y_i | x_i, θ)`` of each point under each sample, and one draw of ``y_i`` from
        it, both ``(chain, draw, point)``: targets in original units for regression."""
        shape = (self.num_chains, draws, x.shape[0])
        pointwise = np.empty(shape)
        replicated = np.empty(shape, dtype=np.float64 if task.data.task == "regression" else int)
        regression = task.data.task == "regression"
        for sample, output in self.predictions(x, device, logits=not regression):
            if regression:
                pointwise[sample.chain, sample.draw] = task.log_likelihoods(output).numpy()
                mean = output[:, 0].double() * self.data.target_std + self.data.target_mean
                scale = output[:, 1].double().sqrt() * self.data.target_std
                draw = mean + scale * torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
            else:
                log_p = output.double().log_softmax(-1)
                y = task.y_test.long().unsqueeze(-1)
                pointwise[sample.chain, sample.draw] = log_p.gather(-1, y)[:, 0].numpy()
                draw = torch.multinomial(log_p.exp(), 1, generator=generator)[:, 0]
            replicated[sample.chain, sample.draw] = draw.numpy()
        return pointwise, replicated

    def _sample_stats(self, epochs: np.ndarray) -> dict[str, np.ndarray]:
        """``epoch`` of each draw (``(chain, draw)``) and what ``curve.csv`` says of that epoch."""
        stats: dict[str, np.ndarray] = {"epoch": epochs}
        path = self.directory / CURVE
        if not path.is_file():
            return stats
        with path.open(newline="") as file:
            rows = {(int(r.get("chain") or 0), int(r["epoch"])): r for r in csv.DictReader(file)}
        # the curve numbers epochs from 1, the manifest the epoch a sample ends from 0
        found = [[rows.get((k, e + 1)) for e in chain] for k, chain in enumerate(epochs)]
        if any(row is None for chain in found for row in chain):
            return stats  # a curve cut short (a run resumed elsewhere): the epochs alone

        def column(key: str) -> np.ndarray | None:
            values = [[row.get(key) or "" for row in chain] for chain in found]
            if any(v == "" for chain in values for v in chain):
                return None
            return np.asarray(values, dtype=np.float64)

        potential, scale, accept = column("potential"), column("lr_scale"), column("accept_rate")
        lr = self.config.sampler.get("lr")
        if potential is not None:
            stats["potential"] = potential
        if scale is not None and isinstance(lr, int | float):
            stats["step_size"] = lr * scale
        if accept is not None:
            stats["acceptance_rate"] = accept
        counts = self._divergences(epochs, rows)
        stats["n_divergent"] = counts
        stats["diverging"] = counts > 0
        return stats

    def _divergences(self, epochs: np.ndarray, rows: dict[tuple[int, int], dict]) -> np.ndarray:
        """The divergent transitions of each draw's epochs (``(chain, draw)``): those after the
        draw before (after burn-in, for the first) up to its own, from ``curve.csv``'s
        ``rows``."""
        burn_in = self.config.get("burn_in", 0)
        counts = np.zeros(epochs.shape, dtype=np.int64)
        for k, chain in enumerate(epochs):
            first = burn_in + 1  # the curve numbers epochs from 1, the manifest from 0
            for d, epoch in enumerate(chain):
                for e in range(first, int(epoch) + 2):
                    counts[k, d] += int(rows.get((k, e), {}).get("divergences") or 0)
                first = int(epoch) + 2
        return counts


def _dims(name: str, ndim: int) -> list[str]:
    """Names of a parameter tensor's dimensions: a layer's ``weight`` and ``bias`` by the units
    (channels) they map between, so that a layer's weight and bias share its ``out``."""
    layer, _, kind = name.rpartition(".")
    if kind == "weight" and layer and ndim in (2, 4):
        return [f"{layer}.{d}" for d in ("out", "in", "kernel_row", "kernel_column")[:ndim]]
    if kind == "bias" and layer and ndim == 1:
        return [f"{layer}.out"]
    if ndim <= 2:
        return [f"{name}.{d}" for d in ("row", "column")[:ndim]]
    return [f"{name}.axis_{k}" for k in range(ndim)]


def _append(table: dict[str, list[list[Any]]], key: str, chain: int, value: Any) -> None:
    rows = table.setdefault(key, [])
    while len(rows) <= chain:
        rows.append([])
    rows[chain].append(value)


def load_run(directory: str | Path, trust: Sequence[Any] = ()) -> Posterior:
    """The posterior of the run in ``directory`` (see `Posterior`). ``trust``: the
    classes or functions of the caller's own that the run names (a network given to
    `bdl.run_model`), admitted as the targets they are (`bdl.composition.plugins.trusted`)."""
    return Posterior(directory, trust)
