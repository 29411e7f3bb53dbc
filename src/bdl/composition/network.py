"""The building blocks a run and its readers share: the dataset and network a config describes,
their device, the predictive of the current parameters, and what a posterior sample holds.

The runner (`bdl.runner.experiment`) and the read side (`bdl.analysis.posterior`, ``bdl-eval``) both
build from here, so a sample means the same thing to both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from bdl.composition.instantiation import instantiate
from bdl.data import Dataset
from bdl.errors import ConfigError
from bdl.task import Task


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but CUDA is not available here: use device=auto or cpu")
    return torch.device(name)


def load_data(cfg: DictConfig) -> Dataset:
    """The dataset of ``cfg``: ``cfg.dataset`` holds its loader's arguments."""
    return instantiate(cfg.dataset)


def build_network(cfg: DictConfig, data: Dataset) -> tuple[nn.Module, nn.Module]:
    """The network of ``cfg`` for ``data``'s shapes, and the likelihood of ``data``'s task."""
    model = instantiate(cfg.model)(input_shape=data.input_shape, out_features=data.out_features)
    return model, Task(data, data.y_test).likelihood(cfg.likelihood)


#: Points through the network at once.
PREDICT_CHUNK = 2048


@torch.no_grad()
def predict(
    model: nn.Module, likelihood: nn.Module, x: Tensor, chunk: int = PREDICT_CHUNK
) -> Tensor:
    """The predictive of the current parameters on ``x`` (probabilities, or mean and variance)."""
    return torch.cat([likelihood.predict(model(part)) for part in x.split(chunk)])


def named_parameters(model: nn.Module, likelihood: nn.Module) -> dict[str, Tensor]:
    named = dict(model.named_parameters())
    named.update({f"likelihood.{k}": v for k, v in likelihood.named_parameters()})
    return named


def sample_tensors(model: nn.Module, likelihood: nn.Module) -> dict[str, Tensor]:
    """What a posterior sample holds: the parameters, and the likelihood's Gibbs-sampled
    buffers (a noise precision), without which its predictive could not be rebuilt."""
    named = named_parameters(model, likelihood)
    named.update({f"likelihood.{k}": v for k, v in likelihood.named_buffers()})
    return named


def predict_samples(
    model: nn.Module,
    likelihood: nn.Module,
    samples: Iterable[Mapping[str, Tensor]],
    inputs: Sequence[Tensor],
    logits: bool = False,
) -> Iterator[list[Tensor]]:
    """Each of ``samples`` (what `sample_tensors` names, by name) put into the network in turn,
    with its predictive (`predict`; with ``logits``, the network's outputs) on each of
    ``inputs``, on the CPU. The network holds its own values again after, however the iteration
    ends: the one way a stored sample meets the network, for the saved posterior, the run's end
    and pruning alike."""
    live = sample_tensors(model, likelihood)
    kept = {name: p.detach().clone() for name, p in live.items()}
    try:
        for params in samples:
            with torch.no_grad():
                for name, p in live.items():
                    p.copy_(params[name])
                if logits:
                    outputs = [
                        torch.cat([model(part) for part in x.split(PREDICT_CHUNK)]) for x in inputs
                    ]
                else:
                    outputs = [predict(model, likelihood, x) for x in inputs]
            yield [output.cpu() for output in outputs]
    finally:
        with torch.no_grad():
            for name, p in live.items():
                p.copy_(kept[name])
