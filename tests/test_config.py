"""Every option of every config group composes with the root schema and instantiates."""

from __future__ import annotations

import functools
from importlib.resources import files

import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.utils import instantiate

import bdl.config  # noqa: F401  (registers the root schema)
from bdl.config import ConfigError, validate


def options(group: str) -> list[str]:
    folder = files("bdl.conf") / group
    return sorted(
        p.name.removesuffix(".yaml")
        for p in folder.iterdir()
        if p.name.endswith(".yaml") and not p.name.startswith("_")
    )


def composed(*overrides: str):
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return compose("config", overrides=list(overrides))


def build(node, **runtime):
    built = instantiate(node)
    return built(**runtime) if isinstance(built, functools.partial) else built


def test_every_group_has_its_required_options():
    assert {"mlp", "linear", "resnet20_frn"} <= set(options("model"))
    assert {"gaussian"} <= set(options("prior"))
    assert {"sgd", "sgd_momentum", "sgld", "sghmc"} <= set(options("sampler"))
    assert {"constant", "polynomial", "cyclical"} <= set(options("schedule"))
    uci = {"boston", "concrete", "energy", "kin8nm", "naval", "power", "protein", "wine", "yacht"}
    assert {"mnist", "cifar10"} | uci <= set(options("dataset"))


@pytest.mark.parametrize("option", options("sampler"))
def test_sampler_options(option):
    cfg = composed(f"sampler={option}")
    sampler = build(cfg.sampler, lr=1e-4, generator=torch.Generator().manual_seed(0))
    params = [torch.zeros(3, requires_grad=True)]
    state = sampler.init(params)
    assert state.params[0] is params[0]


@pytest.mark.parametrize("option", options("schedule"))
def test_schedule_options(option):
    schedule = build(composed(f"schedule={option}").schedule, total_steps=100, steps_per_epoch=10)
    assert schedule(0) == 1.0  # every schedule starts at the sampler's own step size


@pytest.mark.parametrize("option", options("prior"))
def test_prior_options(option):
    prior = build(composed(f"prior={option}").prior)
    params = {"layers.0.weight": torch.randn(4, 3), "layers.0.bias": torch.randn(4)}
    assert torch.isfinite(prior.log_prob(params))


INPUTS = [("mnist", (1, 28, 28), 10), ("cifar10", (3, 32, 32), 10), ("boston", (13,), 1)]


# a convolutional network needs image inputs: no resnet20_frn on a flat dataset
@pytest.mark.parametrize(
    "option, dataset, shape, out",
    [
        (option, *inputs)
        for option in options("model")
        for inputs in INPUTS
        if not (option == "resnet20_frn" and len(inputs[1]) == 1)
    ],
)
def test_model_options(option, dataset, shape, out):
    model = build(
        composed(f"dataset={dataset}", f"model={option}").model, input_shape=shape, out_features=out
    )
    assert model(torch.zeros(2, *shape)).shape == (2, out)


@pytest.mark.parametrize("option", options("experiment"))
def test_experiment_presets_compose(option):
    validate(composed(f"experiment={option}"))


@pytest.mark.parametrize("option", options("dataset"))
def test_dataset_options(option, fake_data_root, isolated_cache, no_cifar_md5):
    cfg = composed(f"dataset={option}", f"dataset.root={fake_data_root}")
    validate(cfg)
    data = instantiate(cfg.dataset)
    assert data.num_train > 0 and data.x_test.shape[1:] == data.x_train.shape[1:]


@pytest.mark.parametrize(
    "override, key",
    [
        ("epochs=0", "epochs"),
        ("batch_size=0", "batch_size"),
        ("thin=0", "thin"),
        ("temperature=0", "temperature"),
        ("burn_in=900", "burn_in"),
        ("wandb.mode=on", "wandb.mode"),
    ],
)
def test_out_of_range_values_name_their_key(override, key):
    with pytest.raises(ConfigError, match=key):
        validate(composed(override))
