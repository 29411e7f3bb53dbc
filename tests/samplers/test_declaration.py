"""What samplers declare (``bdl.samplers.base.Declaration``), as the runner reads it and as the
documentation states it: the step unit converts ``lr`` (per datum: ``lr / N`` on ``U``), every
option has its row in docs/samplers.md with the unit it declares, and the worked example of
docs/adding-a-sampler.md is the sampler that ships."""

import re
from pathlib import Path

import pytest
import torch
from conftest import OWN_SAMPLER_OPTIONS, SAMPLER_OPTIONS, declaration
from hydra import compose, initialize_config_module

from bdl.likelihoods import Gaussian
from bdl.potential import Potential
from bdl.priors import Gaussian as GaussianPrior
from bdl.runner.experiment import make_sampler
from bdl.samplers.base import Declaration, Sampler

ROOT = Path(__file__).resolve().parents[2]
#: How docs/samplers.md's "unit" column words each declared step unit.
UNIT_WORDING = {"per datum": "per datum", "potential": "on `U`", "optimiser": "Adam's"}


@pytest.mark.parametrize("option", SAMPLER_OPTIONS)
def test_the_runner_converts_lr_from_the_declared_unit(option):
    n = 250
    potential = Potential(torch.nn.Linear(3, 1), Gaussian(noise_std=1.0), GaussianPrior(), n)
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", [f"sampler={option}"])
    sampler = make_sampler(cfg, potential, torch.Generator())
    per_datum = declaration(option).step_unit == "per datum"
    assert sampler.lr == pytest.approx(cfg.sampler.lr / n if per_datum else cfg.sampler.lr)


def test_the_samplers_table_gives_every_option_its_declared_unit():
    rows = {}
    for line in (ROOT / "docs" / "samplers.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 6:
            for option in re.findall(r"`([a-z_]+)`", cells[0]):
                rows[option] = cells[2]
    assert sorted(rows) == OWN_SAMPLER_OPTIONS
    for option, unit in rows.items():
        assert unit.startswith(UNIT_WORDING[declaration(option).step_unit]), option


def fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def test_the_worked_example_is_the_sampler_that_ships():
    page = (ROOT / "docs" / "adding-a-sampler.md").read_text()
    assert fenced(page, "python") == [(ROOT / "src/bdl/samplers/sgnht.py").read_text()]
    assert fenced(page, "yaml") == [(ROOT / "conf/sampler/sgnht.yaml").read_text()]


def test_a_sampler_that_declares_nothing_is_refused_when_defined():
    with pytest.raises(TypeError) as error:

        class Undeclared(Sampler):
            def _update_foreach(self, state, grads, step_size, noise): ...

            def _update_loop(self, state, grads, step_size, noise): ...

    assert str(error.value) == (
        "Undeclared must declare what it is: declaration = Declaration(step_unit=...)"
    )


def test_an_epoch_program_without_a_rule_is_refused_when_defined():
    """An epoch program runs the sampler's one update rule: a sampler that declares one writes
    its update as a `RuleSampler`."""
    with pytest.raises(TypeError, match="declares epoch_program: it must be a RuleSampler"):

        class Unruled(Sampler):
            declaration = Declaration(step_unit="per datum", epoch_program=True)

            def _update_foreach(self, state, grads, step_size, noise): ...

            def _update_loop(self, state, grads, step_size, noise): ...


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"step_unit": "per step"},
            "step_unit must be one of ('per datum', 'potential', 'optimiser'), got 'per step'",
        ),
        (
            {"step_unit": "per datum", "full_batch": True, "minibatch_noise": True},
            "a full-batch kernel has no minibatch noise to sample with",
        ),
    ],
)
def test_an_impossible_declaration_is_refused(fields, message):
    with pytest.raises(ValueError) as error:
        Declaration(**fields)
    assert str(error.value) == message
