"""``bdl-run``'s command line checked before Hydra starts (`bdl.composition.overrides`): each
mistake is one line naming the fix (the option or key meant, or where the keys are listed), and
what is not a mistake (a sweep, a printing flag, another config) passes."""

from __future__ import annotations

import pytest
from hydra.errors import HydraException
from omegaconf import OmegaConf

from bdl.composition.config import ConfigError
from bdl.composition.overrides import (
    _first_lines,
    _run_directory,
    check,
    check_composition,
    check_group,
    group_options,
    key_error,
)

#: The sampler group's options: conf/sampler/*.yaml
SAMPLERS = (
    "bbb, bbb_sgd, csgd, hmc, laplace, mala, mc_dropout, mfvi, naive_sghmc, psgld, rwmh, sgd, "
    "sgd_momentum, sghmc, sghmc_adaptive, sghmc_cyclical, sghmc_uci, sgld, sgld_cyclical, sgnht, "
    "swag"
)


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["sampler=SGHMC"],
            "sampler=SGHMC is not an option of the sampler group: did you mean sampler=sghmc?",
        ),
        (
            ["-m", "sampler=sgld,SGHMC"],
            "sampler=SGHMC is not an option of the sampler group: did you mean sampler=sghmc?",
        ),
        (
            ["sampler=zzzz"],
            f"sampler=zzzz is not an option of the sampler group (options: {SAMPLERS})",
        ),
        (["epoch=20"], "epoch is not a key of the config: did you mean epochs=20?"),
        (["zzzz=1"], "zzzz is not a key of the config (bdl-run --help lists the keys)"),
        (["sampler.lrr=0.1"], "sampler.lrr is not a key of sampler: did you mean sampler.lr=0.1?"),
        (
            ["-m", "sampler=sgld,sghmc", "sampler.lrr=1"],
            "sampler.lrr is not a key of sampler: did you mean sampler.lr=1?",
        ),
        (
            ["--epochs", "20"],
            "--epochs is not a flag of bdl-run (overrides are key=value): did you mean epochs=20?",
        ),
        (
            ["--epochs=3"],
            "--epochs is not a flag of bdl-run (overrides are key=value): did you mean epochs=3?",
        ),
        (
            ["--zzzz"],
            "--zzzz is not a flag of bdl-run (overrides are key=value): bdl-run --help lists the "
            "keys",
        ),
        (
            ["burn_in=900"],
            "burn_in=900 leaves no epoch to sample in (epochs=800): raise epochs, or keep "
            "epochs=800 with burn_in=400 thin=1",
        ),
    ],
)
def test_a_command_line_mistake_is_one_line_naming_the_fix(argv, line):
    with pytest.raises(ConfigError) as error:
        check(argv)
    assert str(error.value) == line


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "epochs=2,3"],  # a sweep's jobs are validated as they run
        ["--cfg", "job", "burn_in=900"],  # printing: the overrides checked, not the config
        ["-cp", "elsewhere", "zzzz=1"],  # another config: Hydra's to compose
        ["sampler=sgld", "hydra.job.chdir=false", "epochs=5", "burn_in=2"],
    ],
)
def test_what_is_not_a_mistake_passes(argv):
    check(argv)


def test_a_key_the_constructor_takes_but_its_config_does_not_set_is_added_with_a_plus():
    sampler = {"_target_": "bdl.samplers.sghmc.SGHMC", "lr": 0.1}
    cfg = OmegaConf.create({"seed": 0, "epochs": 5, "sampler": sampler})
    assert str(key_error("sampler.alpha", "0.2", cfg)) == (
        "sampler.alpha is an argument of SGHMC that the sampler's config does not set: add it "
        "with +sampler.alpha=0.2"
    )
    assert str(key_error("zzzz", "1", cfg, program="bdl-eval")) == (
        "zzzz is not a key of the config (bdl-eval --help lists the keys)"
    )


def test_group_options_are_the_groups_yaml_files():
    assert ", ".join(group_options("sampler")) == SAMPLERS
    check_group("sampler", "sgld")
    check_group("sampler", None)  # a deletion chooses nothing


def test_hydras_error_is_its_first_line_and_its_causes():
    try:
        try:
            raise ValueError("the cause\nand its detail")
        except ValueError as cause:
            raise HydraException("Error composing\nmore") from cause
    except HydraException as error:
        assert _first_lines(error) == "Error composing: the cause"
    assert _first_lines(HydraException("")) == "HydraException"


def test_a_run_directory_is_found_from_any_folder_inside_it(tmp_path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    assert _run_directory(run / ".hydra") == run
    assert _run_directory(run) is None  # no config.yaml nor metrics.json yet
    (run / "metrics.json").write_text("{}")
    assert _run_directory(run / "samples" / "chain_0") == run
    assert _run_directory(tmp_path) is None


def test_a_rerun_of_a_pickle_or_a_run_directory_as_config_folder_is_refused(tmp_path):
    with pytest.raises(ConfigError) as error:
        check_composition(["--experimental-rerun", "x.pickle"], "bdl.cli")
    assert str(error.value) == (
        "--experimental-rerun x.pickle: Hydra unpickles that file, and a pickle runs code; "
        "continue a run with bdl-run hydra.run.dir=RUN resume=true"
    )
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(ConfigError) as error:
        check_composition(["-cd", str(run / ".hydra")], "bdl.cli")
    assert str(error.value) == (
        f"{run / '.hydra'} is in the run directory {run}: a run's files are data, never a "
        f"config to compose; rerun it with bdl-run hydra.run.dir={run} resume=true, or copy what "
        "you need into a preset of your own (--config-dir)"
    )
