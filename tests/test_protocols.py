"""The UCI protocol's SG-MCMC against a long full-batch HMC run of the same posterior (yacht
split 0, noise std 0.1 in standardised units, N(0, 1) on every weight, T = 1): the posterior of
the network's output f on the test inputs has about HMC's width and mean
(``bdl.metrics.function_agreement``), and the check tells a hotter chain apart.

Thresholds from measured runs (``scripts/uci_posterior_check.py`` against an 8-chain, 2500-draw
HMC run; a second HMC run of 4 chains agreed with it to width 1.005 and offset 0.06, the two
numbers' noise floor). The protocol (``experiment=uci_sghmc``: scale-adapted SGHMC, Springenberg
et al. 2016, on full batches for 10 000 steps; 8 chains) gave widths 0.95-0.96 and offsets 0.108,
0.086, 0.080 and 0.161 over four seeds: the goal is a width within 10% and means within 0.15
posterior standard deviations; the test allows the width goal and offsets to 0.2, since its own
HMC reference is shorter (it agrees with the long one to width 0.990 and offset 0.037). SGHMC on
minibatches of 32 at Chen et al.'s friction 0.01 (``sampler=sghmc_uci`` without its higher friction
after burn-in) gave widths of 1.22 twice. This test's own runs gave width 0.959 and offset 0.121 for
the protocol and width 1.218 for the hotter chain. Monte Carlo error alone would give the protocol's
runs offsets of 0.060-0.071 against the long reference (``mean_offset_noise``, from the spread of
the chains' means); the measured ones are 1.2-2.4 times that, so a bias of about 0.1 posterior
standard deviations remains on a typical point.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module

from bdl.analysis.posterior import load_run
from bdl.metrics import function_agreement
from bdl.runner.run import run

POSTERIOR = [
    "dataset=yacht",
    "dataset.split=0",
    "dataset.download=false",
    "likelihood.noise_std=0.1",
    "protocol.prior_scale=1.0",
    "chains=8",
    "wandb.mode=disabled",
]
WIDTH, OFFSET = (0.9, 1.1), 0.2
HOTTER = 1.15  # the width above which the chain samples a hotter posterior


def config(*overrides: str):
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return compose("config", [*POSTERIOR, *overrides])


@pytest.mark.slow
def test_uci_sghmc_samples_the_posterior_that_hmc_samples(data_dir, isolated_cache, tmp_path):
    root = f"dataset.root={data_dir}"
    hmc = ["sampler=hmc", "epochs=2000", "burn_in=400", "thin=2", "batch_size=100000"]
    run(config(root, *hmc), tmp_path / "hmc")
    hmc_run = load_run(tmp_path / "hmc")
    reference, reference_error = hmc_run.function_moments(), hmc_run.function_standard_error()
    results = {}
    hotter = [
        "sampler=sghmc_uci",
        "sampler.alpha=0.01",
        "sampler.burn_in_alpha=null",
        "batch_size=32",
        "epochs=1000",
        "burn_in=200",
        "thin=2",
    ]
    for name, overrides in {"protocol": [], "friction 0.01, minibatches": hotter}.items():
        run(config(root, "experiment=uci_sghmc", *overrides), tmp_path / name)
        posterior = load_run(tmp_path / name)
        errors = (reference_error, posterior.function_standard_error())
        # the offset's noise floor goes into the failure message, to tell bias from chance
        results[name] = function_agreement(reference, posterior.function_moments(), errors)
    protocol = results["protocol"]
    assert WIDTH[0] <= protocol["width_ratio"] <= WIDTH[1], results
    assert protocol["mean_offset"] <= OFFSET, results
    assert results["friction 0.01, minibatches"]["width_ratio"] > HOTTER, results
