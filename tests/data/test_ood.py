"""``ood=``: the out-of-distribution set a classifier's uncertainty is judged against
(`bdl.data.ood`): noise spanning the run's own test inputs, the same in every run, and each
set the run cannot be judged against refused in one line naming the choices."""

from __future__ import annotations

import pytest
import torch

from bdl.data import DataError, Dataset
from bdl.data.ood import check_name, ood_inputs
from bdl.errors import ConfigError


def _data(name: str, task: str = "classification", shape=(1, 28, 28)) -> Dataset:
    x = torch.linspace(-0.5, 2.0, 4 * torch.Size(shape).numel()).reshape(4, *shape)
    y = torch.zeros(4, dtype=torch.long) if task == "classification" else torch.zeros(4)
    return Dataset(name, task, x, y, x, y, num_classes=2)


def test_noise_spans_the_runs_test_inputs_and_is_the_same_in_every_run():
    data = _data("cifar10", shape=(3, 4, 4))
    noise = ood_inputs("noise", data, {})
    assert noise.shape == data.x_test.shape and noise.dtype == data.x_test.dtype
    assert noise.min() >= -0.5 and noise.max() <= 2.0
    assert noise.max() - noise.min() > 2.0  # 192 uniform draws fill most of the 2.5 span
    assert torch.equal(noise, ood_inputs("noise", data, {}))


@pytest.mark.parametrize(
    "name, data, message",
    [
        (
            "fashion",
            _data("mnist"),
            "ood=fashion is not an out-of-distribution set: did you mean fashion_mnist? (the "
            "choices: fashion_mnist, mnist, noise, or ood=null for none)",
        ),
        (
            "svhn",
            _data("mnist"),
            "ood=svhn is not an out-of-distribution set (the choices: fashion_mnist, mnist, noise, "
            "or ood=null for none)",
        ),
        (
            "noise",
            _data("boston", task="regression", shape=(13,)),
            "ood=noise: out-of-distribution detection needs a classifier",
        ),
        (
            "mnist",
            _data("mnist"),
            "ood=mnist is the run's own dataset: choose another set (fashion_mnist, noise)",
        ),
    ],
)
def test_a_set_the_run_cannot_be_judged_against_is_refused_naming_the_choices(name, data, message):
    with pytest.raises(ConfigError) as error:
        ood_inputs(name, data, {})
    assert str(error.value) == message


def test_a_set_of_another_shape_than_the_runs_is_refused():
    with pytest.raises(DataError) as error:
        ood_inputs("mnist", _data("cifar10", shape=(3, 32, 32)), {})
    assert str(error.value) == (
        "ood=mnist has inputs of shape (1, 28, 28), but cifar10's are (3, 32, 32): choose "
        "ood=noise or a set of the same shape"
    )
    check_name("fashion_mnist")


def test_a_set_that_cannot_be_loaded_says_why_and_how_to_run_without_it(tmp_path):
    with pytest.raises(DataError) as error:
        ood_inputs("fashion_mnist", _data("mnist"), {"root": str(tmp_path), "download": False})
    text = str(error.value)
    assert text.startswith("ood=fashion_mnist: Fashion-MNIST could not be loaded (")
    assert text.endswith(" Or run without it: ood=null.")
