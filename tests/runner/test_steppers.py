"""Several chains in one run (``chains=K``): chain ``k`` is the run of one chain seeded
``seed + k`` (bit for bit when the chains are stepped in turn, to float rounding when they are
stacked as one); the pooled model average is the average over every chain's samples; R-hat flags
chains that disagree; an interrupted run of several chains resumes bitwise."""

from __future__ import annotations

import csv
import json
import logging
import math
import signal

import numpy as np
import pytest
import torch
from conftest import SAMPLER_OPTIONS, declaration, gaussian_mixture_of_samples
from safetensors.numpy import load_file

import bdl
from bdl import diagnostics
from bdl.composition.config import ConfigError
from bdl.runner import run as runner
from bdl.runner.experiment import build, build_chains
from bdl.runner.interrupts import Interrupted
from bdl.runner.stability import DivergedError
from bdl.runner.steppers import ChainStepper, StackedStepper
from runner.test_resume import (
    ON_TINY_DATA,
    config,
    option_of,
    sampler_cases,
    tiny_config,
    write_tiny_uci,
)


@pytest.fixture(scope="module")
def uci_root(tmp_path_factory):
    return write_tiny_uci(tmp_path_factory.mktemp("data"))


def rows(path):
    with path.open() as file:
        return list(csv.DictReader(file))


#: Chains stepped in turn: every option whose sampler is not vectorisable, and the variants that
#: a stacked run cannot take.
IN_TURN = sampler_cases(
    {**ON_TINY_DATA, "csgd": ["batch_size=4"]},
    {
        "sghmc gibbs hyperprior": ["sampler=sghmc", "prior=gamma_hierarchical"],
        # per-chain adaptation: stacked chains would pool it
        "hmc adapting": ["sampler=hmc", "sampler.num_steps=3", "vectorise=false"],
    },
)
IN_TURN = {
    name: overrides
    for name, overrides in IN_TURN.items()
    if name not in SAMPLER_OPTIONS or not declaration(name).vectorisable
}
#: The first seed of each sampler's two chains. Constant SGD's fitted step diverges on this tiny
#: network for most seeds (its step is past the curvature's stability limit, as the csgd module
#: says); seeds 4 and 5 stay below the divergence limit of bdl.runner.stability.
FIRST_SEED = {"csgd": 4}


@pytest.mark.parametrize("name", IN_TURN)
def test_chain_k_is_the_single_chain_run_seeded_seed_plus_k(uci_root, tmp_path, name):
    """Chains stepped in turn: bit for bit (every sampler here but HMC cannot be stacked)."""
    seed = FIRST_SEED.get(name, 3)

    def tiny(*more):
        return tiny_config(uci_root, tmp_path / "start", IN_TURN[name], *more)

    runner.run(tiny(f"seed={seed}", "chains=2"), tmp_path / "chains")
    for k in range(2):
        single = tmp_path / f"seed{seed + k}"
        alone = runner.run(tiny(f"seed={seed + k}"), single)
        manifest = json.loads((single / "samples" / "manifest.json").read_text())
        chain_dir = tmp_path / "chains" / "samples" / f"chain_{k}"
        assert json.loads((chain_dir / "manifest.json").read_text()) == manifest
        (row,) = [r for r in rows(tmp_path / "chains" / "chains.csv") if r["chain"] == str(k)]
        for key in ("test_rmse", "test_ll", "num_samples", "grad_evals"):
            assert float(row[key]) == alone[key], key
        mine = [
            {f: v for f, v in r.items() if f not in ("chain", "wall_time_s")}
            for r in rows(tmp_path / "chains" / "curve.csv")
            if r["chain"] == str(k)
        ]
        theirs = [
            {f: v for f, v in r.items() if f != "wall_time_s"} for r in rows(single / "curve.csv")
        ]
        assert mine == theirs


#: Chains stacked as one: every option whose sampler is vectorisable, and variants. The Metropolis
#: kernels at a fixed step (a stacked run pools their adaptation), lr 0.1: HMC and RWMH reject
#: some proposals (accept rates 0.875 and 0.5), so the tests count.
FIXED_STEP = ["sampler.adapt=false", "sampler.lr=0.1"]
STACKED = sampler_cases(
    {
        "hmc": ["sampler.num_steps=3", *FIXED_STEP],
        "mala": FIXED_STEP,
        "rwmh": FIXED_STEP,
        # pSGLD's preconditioner 1/(λ + √V) magnifies the rounding of a gradient near zero (a
        # dead unit's) by up to 1/λ: at the Gaussian prior one weight of chain 1 differs by
        # 9.6e-4 from the run alone (measured). A Laplace prior's gradient keeps every weight's
        # away from zero.
        "psgld": ["prior=laplace"],
    },
    {"sghmc online noise estimate": ["sampler=sghmc", "sampler.grad_var=online"]},
)
STACKED = {
    name: overrides
    for name, overrides in STACKED.items()
    if declaration(option_of(overrides)).vectorisable
}
#: Stacked chains evaluate the network by batched matrix products and the prior's sums per chain,
#: a chain alone by plain products: the same numbers up to float32 rounding, which the dynamics
#: carry along. Measured over these runs: the largest difference of any parameter of any sample
#: 1.2e-7 (relative 4.4e-6 where |θ| > 1e-3); none for RWMH, whose proposals need no gradient.
STACKED_RTOL, STACKED_ATOL = 1e-5, 1e-6


@pytest.mark.parametrize("name", STACKED)
def test_stacked_chains_follow_the_single_chain_runs(uci_root, tmp_path, name):
    """Chains stepped as one: each chain's samples are those of the run of one chain seeded
    ``seed + k`` (same minibatches, noise and Metropolis decisions), to float rounding."""
    runner.run(config(uci_root, *STACKED[name], "seed=3", "chains=2"), tmp_path / "chains")
    stacked = bdl.load_run(tmp_path / "chains")
    assert stacked.num_chains == 2
    for k in range(2):
        runner.run(config(uci_root, *STACKED[name], f"seed={3 + k}"), tmp_path / f"seed{3 + k}")
        alone = list(bdl.load_run(tmp_path / f"seed{3 + k}").samples())
        mine = list(stacked.samples(chain=k))
        assert len(mine) == len(alone) > 0
        for ours, theirs in zip(mine, alone, strict=True):
            assert ours.params.keys() == theirs.params.keys()
            for key, value in ours.params.items():
                np.testing.assert_allclose(
                    value, theirs.params[key], rtol=STACKED_RTOL, atol=STACKED_ATOL, err_msg=key
                )


#: compile=true's cases: minibatch samplers, whose epochs are compiled as one program (with a
#: cyclical schedule's changing step and steps without noise; an online noise estimate, made step
#: by step in burn-in, then read by the program; minibatches shared by the chains; SGD, which
#: draws no noise), HMC on chunks
#: (its gradient compiled), and HMC on the training set in one chunk (its trajectory compiled as
#: one program); SGLD's program and HMC's trajectory at T = 0.5, where a program whose potential
#: is not divided by T would sample another posterior than the eager steps
COMPILED = {
    "sgld": STACKED["sgld"],
    "sgld at T=0.5": [*STACKED["sgld"], "temperature=0.5"],
    "sgld cyclical schedule": [*STACKED["sgld"], "schedule=cyclical"],
    "sghmc online noise estimate, shared minibatches": [
        *STACKED["sghmc online noise estimate"],
        "shared_minibatches=true",
    ],
    "sgd_momentum": STACKED["sgd_momentum"],
    "hmc": STACKED["hmc"],
    "hmc one chunk": [*STACKED["hmc"], "batch_size=100000"],
    "hmc one chunk at T=0.5": [*STACKED["hmc"], "batch_size=100000", "temperature=0.5"],
}


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_runs_follow_the_eager_ones(uci_root, tmp_path, name, compiler, mode="default"):
    """``compile=true`` changes how the potential's gradient is computed, not what: a run of one
    chain and a run of two stacked chains keep the eager runs' samples (same minibatches, noise
    and Metropolis decisions) to the stacking tolerance, in torch.compile's ``mode`` too (the GPU
    suite's CUDA graphs)."""
    for chains in (1, 2):
        runs = {}
        for compiled in ("false", "true"):
            directory = tmp_path / f"{chains}-{compiled}"
            overrides = [*COMPILED[name], f"chains={chains}", f"compile={compiled}"]
            overrides += [f"compile_mode={mode}"] if compiled == "true" else []
            runner.run(config(uci_root, *overrides), directory)
            runs[compiled] = bdl.load_run(directory)
        for k in range(chains):
            eager = list(runs["false"].samples(chain=k))
            compiled = list(runs["true"].samples(chain=k))
            assert len(compiled) == len(eager) > 0
            for ours, theirs in zip(compiled, eager, strict=True):
                for key, value in ours.params.items():
                    np.testing.assert_allclose(
                        value, theirs.params[key], rtol=STACKED_RTOL, atol=STACKED_ATOL
                    )


def test_shared_minibatches_give_every_chain_the_first_chains_orders(uci_root):
    experiments = build_chains(config(uci_root, "chains=3", "shared_minibatches=true"))
    orders = [torch.randperm(60, generator=e.generators["data"]) for e in experiments]
    assert all(torch.equal(order, orders[0]) for order in orders)
    # and nothing else is shared: each chain keeps its own noise and initial network
    noises = [torch.randn(3, generator=e.generators["noise"]) for e in experiments]
    assert not torch.equal(noises[0], noises[1])
    assert not torch.equal(experiments[0].potential.params[0], experiments[1].potential.params[0])
    own = build_chains(config(uci_root, "chains=2"))
    assert not torch.equal(*(torch.randperm(60, generator=e.generators["data"]) for e in own))


@pytest.mark.parametrize("name", ["sghmc", "sgld"])
def test_stacked_chains_on_shared_minibatches_follow_the_chains_in_turn(uci_root, tmp_path, name):
    """The stacked step's one gathered minibatch is each chain's own minibatch: a run stacked
    on shared minibatches gives the samples of the same run stepped in turn, to float rounding,
    and its chain 0 is the run of one chain seeded ``seed``."""
    shared = [f"sampler={name}", "seed=3", "chains=2", "shared_minibatches=true"]
    runner.run(config(uci_root, *shared), tmp_path / "stacked")
    runner.run(config(uci_root, *shared, "vectorise=false"), tmp_path / "in_turn")
    runner.run(config(uci_root, f"sampler={name}", "seed=3"), tmp_path / "alone")
    stacked, in_turn = (bdl.load_run(tmp_path / run) for run in ("stacked", "in_turn"))
    alone = list(bdl.load_run(tmp_path / "alone").samples())
    for k, expected in enumerate([in_turn.samples(chain=0), in_turn.samples(chain=1)]):
        mine, theirs = list(stacked.samples(chain=k)), list(expected)
        assert len(mine) == len(theirs) > 0
        for ours, reference in zip(mine, theirs, strict=True):
            for key, value in ours.params.items():
                np.testing.assert_allclose(
                    value, reference.params[key], rtol=STACKED_RTOL, atol=STACKED_ATOL, err_msg=key
                )
    for ours, reference in zip(in_turn.samples(chain=0), alone, strict=True):
        for key, value in ours.params.items():
            np.testing.assert_array_equal(value, reference.params[key], err_msg=key)


def test_chains_that_cannot_be_stacked_are_stepped_in_turn(uci_root, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="bdl")
    seed = f"seed={FIRST_SEED['csgd']}"
    runner.run(config(uci_root, *IN_TURN["csgd"], seed, "chains=2"), tmp_path)
    assert "stepped in turn: ConstantSGD's update is not written for stacked chains" in caplog.text


def test_the_pooled_average_is_the_mixture_of_every_chains_samples(uci_root, tmp_path):
    metrics = runner.run(config(uci_root, "chains=3", "epochs=5"), tmp_path)
    posterior = bdl.load_run(tmp_path)
    assert posterior.num_chains == 3 and metrics["chains"] == 3
    per_chain = [len(list(posterior.samples(k))) for k in range(3)]
    assert per_chain == [3, 3, 3] and metrics["num_samples"] == 9
    # the equal mixture over all 9 samples, each sample's predictive rebuilt from its tensors
    targets, mixture = gaussian_mixture_of_samples(posterior)
    mean = mixture.mean
    rmse = (mean - targets).square().mean().sqrt().item()
    assert metrics["test_rmse"] == pytest.approx(rmse, rel=1e-9)
    assert metrics["test_ll"] == pytest.approx(mixture.log_prob(targets).mean().item(), rel=1e-9)
    assert posterior.to_inferencedata().posterior.sizes["chain"] == 3


#: Two stacked HMC chains at a fixed step that rejects some proposals (accept rates 0.5 and 0.7),
#: one Metropolis test per epoch (full batch), 10 draws each after burn-in: enough for arviz to
#: measure ESS (it measures none under 10 draws per chain).
SEVERAL_CHAINS = [
    "chains=2",
    "epochs=12",
    "sampler=hmc",
    "sampler.num_steps=10",
    "sampler.adapt=false",
    "sampler.lr=0.1",
]


def test_each_chains_diagnostics_are_those_of_its_own_draws(uci_root, tmp_path):
    """Every per-chain number of a run of two chains, recomputed outside the runner: each
    chain's accept rate from its curve and from its stored samples (a rejected HMC proposal
    leaves the position where it was), its gradient evaluations by hand, its model average from
    its own samples; R-hat and ESS per test point, their extremes, the weight probes' R-hat and
    the scalars' summary by arviz on the draws the run recorded, checked against its samples."""
    az = pytest.importorskip("arviz")
    metrics = runner.run(config(uci_root, *SEVERAL_CHAINS), tmp_path)
    curve = rows(tmp_path / "curve.csv")
    assert [(r["chain"], r["epoch"]) for r in curve] == [
        (str(k), str(e)) for e in range(1, 13) for k in range(2)
    ]
    posterior = bdl.load_run(tmp_path)
    per_chain = rows(tmp_path / "chains.csv")
    assert [r["chain"] for r in per_chain] == ["0", "1"]
    sampled = [[r for r in curve if r["chain"] == str(k) and int(r["epoch"]) > 2] for k in range(2)]
    loglik, probes = [], []
    for k, row in enumerate(per_chain):
        samples = list(posterior.samples(k))
        assert int(row["num_samples"]) == len(samples) == 10
        # one gradient at the start, then num_steps per iteration, one iteration per epoch
        assert int(row["grad_evals"]) == 1 + 12 * 10
        accepted = [float(r["accept_rate"]) for r in sampled[k]]
        assert set(accepted) <= {0.0, 1.0}
        assert float(row["accept_rate"]) == pytest.approx(sum(accepted) / 10, abs=1e-12)
        moved = [
            any(not torch.equal(now.params[n], before.params[n]) for n in now.params)
            for before, now in zip(samples, samples[1:])
        ]
        assert moved == [a == 1.0 for a in accepted[1:]]
        targets, mixture = gaussian_mixture_of_samples(posterior, k)
        rmse = (mixture.mean - targets).square().mean().sqrt().item()
        assert float(row["test_rmse"]) == pytest.approx(rmse, rel=1e-9)
        assert float(row["test_ll"]) == pytest.approx(
            mixture.log_prob(targets).mean().item(), rel=1e-9
        )
        # the chain's recorded log p(y_i | x_i, θ) of each draw (float32) and weight probes are
        # those of its stored samples: each sample's own Gaussian density, its followed weights
        recorded = load_file(tmp_path / "checkpoint.safetensors")
        loglik.append(recorded[f"chain_{k}/loop/log_likelihoods"])
        np.testing.assert_allclose(
            loglik[-1], mixture.component_distribution.log_prob(targets[:, None]).T, rtol=1e-6
        )
        probes.append(recorded[f"chain_{k}/loop/probes"])
        model, likelihood = posterior.network()
        names = [n for n, _ in model.named_parameters()]
        names += [f"likelihood.{n}" for n, _ in likelihood.named_parameters()]
        flat = np.stack([np.concatenate([s.params[n].reshape(-1) for n in names]) for s in samples])
        np.testing.assert_array_equal(
            probes[-1], flat[:, diagnostics.probe_indices(flat.shape[1]).numpy()]
        )
    # (chains, draws, points or probes). arviz on the recorded float32 values, not on the float64
    # ones recomputed above: with 10 draws, repeated by rejections, rank normalisation breaks
    # near-ties differently after rounding (R-hat 1.566 against the recorded values' 1.552 at
    # one point, measured), each value made float64 as bdl.summary computes (folding in float32
    # would round the tail's near-ties otherwise).
    loglik, probes = np.stack(loglik).astype(np.float64), np.stack(probes).astype(np.float64)
    points = loglik.shape[-1]
    expected = {
        "rhat": np.array([az.rhat(loglik[..., i]) for i in range(points)]),
        "ess_bulk": np.array([az.ess(loglik[..., i], method="bulk") for i in range(points)]),
        "ess_tail": np.array([az.ess(loglik[..., i], method="tail") for i in range(points)]),
    }
    table = rows(tmp_path / diagnostics.FILE)
    assert list(table[0]) == ["point", "rhat", "ess_bulk", "ess_tail"] and len(table) == points
    ceiling = 20 * math.log10(20)  # arviz's bulk ESS ceiling, N log10 N of the 20 split draws
    for key, values in expected.items():
        written = np.array([float(r[key]) if r[key] not in ("", "nan") else np.nan for r in table])
        # blank exactly where arviz measured no autocorrelation and returned its ceiling
        assert np.array_equal(np.isnan(written), values >= ceiling * (1 - 1e-9)), key
        measured = ~np.isnan(written)
        np.testing.assert_allclose(written[measured], values[measured], rtol=1e-9, err_msg=key)
        expected[key] = values[measured]
    assert expected["ess_bulk"].size > 0  # some ESS measured: the comparison is not vacuous
    assert metrics["rhat_max"] == pytest.approx(expected["rhat"].max(), rel=1e-9)
    assert metrics["rhat_p95"] == pytest.approx(np.percentile(expected["rhat"], 95), rel=1e-9)
    assert metrics["ess_bulk_min"] == pytest.approx(expected["ess_bulk"].min(), rel=1e-9)
    assert metrics["ess_tail_min"] == pytest.approx(expected["ess_tail"].min(), rel=1e-9)
    weight_rhat = [az.rhat(probes[..., j]) for j in range(probes.shape[-1])]
    assert metrics["weight_rhat_max"] == pytest.approx(np.nanmax(weight_rhat), rel=1e-9)

    # summary.csv's scalars: the curve's per-epoch values of each chain at the kept epochs
    summary = {r["quantity"]: r for r in rows(tmp_path / diagnostics.SUMMARY_FILE)}
    for name in ("potential", "noise_precision"):
        draws = np.array([[float(r[name]) for r in chain] for chain in sampled])
        row = summary[name]
        assert float(row["mean"]) == pytest.approx(draws.mean(), rel=1e-9)
        assert float(row["sd"]) == pytest.approx(draws.std(ddof=1), rel=1e-9)
        assert float(row["rhat"]) == pytest.approx(az.rhat(draws), rel=1e-9)
        for method in ("bulk", "tail"):
            ess = az.ess(draws, method=method)
            if ess < ceiling * (1 - 1e-9):
                assert float(row[f"ess_{method}"]) == pytest.approx(ess, rel=1e-9)
            else:
                assert row[f"ess_{method}"] == ""
    assert metrics["potential_rhat"] == pytest.approx(float(summary["potential"]["rhat"]))


def test_rhat_flags_chains_that_never_left_their_starts(uci_root, tmp_path, caplog):
    """Chains that hardly move (a step far too small) sit on their different initial networks:
    two modes, never mixed. Their predictions differ between chains and hardly within one; the
    verdict says so in one line, logged as it is written."""
    cfg = config(uci_root, "chains=3", "epochs=110", "sampler=sgld", "sampler.lr=1e-10")
    with caplog.at_level(logging.WARNING, logger="bdl"):
        metrics = runner.run(cfg, tmp_path)
    assert metrics["rhat_max"] > 2 and metrics["converged"] is False
    assert metrics["rhat_p90"] > 2 and metrics["frozen_chains"] == []
    assert len(metrics["reasons"]) == 1
    # their ESS asks many times the 110 draws: a run until converged within 4x
    assert metrics["reasons"][0] == (
        f"test predictive not mixed (R-hat {metrics['rhat_p90']:.2f}): "
        "until_converged=true max_epochs=440"
    )
    assert any(r.message == f"NOT CONVERGED: {metrics['reasons'][0]}" for r in caplog.records)


def test_rhat_and_ess_of_known_draws():
    """arviz's split R-hat and ESS through `bdl.diagnostics.summarise`. Independent draws
    from one normal about a mean of each point's own, 4 chains of 500: R-hat is 1.0006 ± 0.0011
    and the bulk ESS 1970 ± 120 over coordinates (measured on 400), so the largest of 20 R-hats
    stays under 1.01 (8 sd) and the smallest ESS above 1400 (4.5 sd). Chains stuck in the two
    modes of a bimodal target (±3, 6 sd apart): rank-normalised R-hat 1.73 on every coordinate,
    far above 1.1."""
    rng = np.random.default_rng(0)
    mixed = rng.normal(size=(4, 500, 20)) + np.linspace(-6, 0, 20)
    metrics, _ = diagnostics.summarise(mixed, mixed[..., :3])
    assert metrics["rhat_max"] < 1.01
    assert 1400 < metrics["ess_bulk_min"] < 2330
    settings = diagnostics.Settings(epochs=600, burn_in=100)
    assert diagnostics.verdict(metrics, {}, chains=4, draws=500, settings=settings) == ([], [])
    stuck = mixed + np.array([-3, 3, -3, 3])[:, None, None]
    metrics, table = diagnostics.summarise(stuck, stuck[..., :3])
    assert table["rhat"].min() > 1.5 and metrics["weight_rhat_max"] > 1.5
    reasons, _ = diagnostics.verdict(metrics, {}, chains=4, draws=500, settings=settings)
    spread = f"{metrics['rhat_p90']:.2f}"
    assert reasons == [
        f"test predictive not mixed (R-hat {spread}): until_converged=true max_epochs=2100"
    ]


def chain_outputs(directory):
    """What must be equal between two runs of several chains: every file they write, less
    wall times (metrics.json, the curve's column) and the checkpoint."""
    metrics = json.loads((directory / "metrics.json").read_text())
    metrics.pop("wall_time_s")
    curve = [
        {k: v for k, v in r.items() if k != "wall_time_s"} for r in rows(directory / "curve.csv")
    ]
    files = sorted(
        (str(p.relative_to(directory)), p.read_bytes())
        for p in directory.rglob("*")
        if p.is_file() and p.suffix in (".json", ".safetensors") and p.parent != directory
    )
    tables = [rows(directory / name) for name in ("chains.csv", diagnostics.FILE)]
    return metrics, curve, files, tables


def test_a_run_of_several_chains_resumes_bitwise(uci_root, tmp_path, monkeypatch):
    """Chains stepped in turn, stopped where chain 0 is an epoch ahead of chain 1."""
    cfg = config(uci_root, "chains=2", "checkpoint_every=100", "vectorise=false")
    runner.run(cfg, tmp_path / "whole")
    steps = build(cfg).run.steps_per_epoch
    assert steps >= 3
    real = ChainStepper.closure
    calls = {"n": 0}

    def signalled(self, step):
        calls["n"] += self.chains == [1]
        if calls["n"] == steps + 2:  # chain 1's second step of epoch 2: chain 0 is past it
            signal.raise_signal(signal.SIGTERM)
        return real(self, step)

    monkeypatch.setattr(ChainStepper, "closure", signalled)
    with pytest.raises(Interrupted, match="chain 1"):
        runner.run(cfg, tmp_path / "stopped")
    monkeypatch.setattr(ChainStepper, "closure", real)
    status = json.loads((tmp_path / "stopped" / "metrics.json").read_text())
    assert (status["epoch"], status["chain"], status["step"]) == (1, 1, 2)
    resumed = config(uci_root, "chains=2", "checkpoint_every=100", "vectorise=false", "resume=true")
    runner.run(resumed, tmp_path / "stopped")
    assert chain_outputs(tmp_path / "stopped") == chain_outputs(tmp_path / "whole")


@pytest.mark.parametrize(
    "sampler",
    [
        ["sampler=sghmc", "sampler.grad_var=online"],
        ["sampler=sgld", "shared_minibatches=true"],
        ["sampler=hmc", "sampler.num_steps=3"],
        # stopped in the mass matrix's window, [3, 20) of 22 burn-in iterations
        [
            "sampler=hmc",
            "sampler.num_steps=3",
            "sampler.mass=diagonal",
            "sampler.adapt_length=true",
            "epochs=28",
            "burn_in=22",
        ],
        # the gradients' window too
        ["sampler=hmc", "sampler.num_steps=3", "sampler.mass=fisher", "epochs=28", "burn_in=22"],
    ],
)
def test_stacked_chains_resume_bitwise(uci_root, tmp_path, monkeypatch, sampler):
    """Chains stepped as one, stopped mid-epoch (HMC: between its one-step epochs, with the
    adaptation and the cached gradient of every chain in the checkpoint)."""
    cfg = config(uci_root, *sampler, "chains=2", "checkpoint_every=100")
    runner.run(cfg, tmp_path / "whole")
    real = StackedStepper.closure
    calls = {"n": 0}

    def signalled(self, step):
        calls["n"] += 1
        if calls["n"] == 5:
            signal.raise_signal(signal.SIGTERM)
        return real(self, step)

    monkeypatch.setattr(StackedStepper, "closure", signalled)
    with pytest.raises(Interrupted):
        runner.run(cfg, tmp_path / "stopped")
    monkeypatch.setattr(StackedStepper, "closure", real)
    status = json.loads((tmp_path / "stopped" / "metrics.json").read_text())
    assert status["status"] == "interrupted" and "chain" not in status  # all stopped together
    resumed = config(uci_root, *sampler, "chains=2", "checkpoint_every=100", "resume=true")
    runner.run(resumed, tmp_path / "stopped")
    assert chain_outputs(tmp_path / "stopped") == chain_outputs(tmp_path / "whole")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["chains=0"], "chains=1 or more"),
        (["chains=1000000000"], "needs about .* GiB"),
        (["chains=2", "pruning=true"], "pruning=true reads one chain"),
    ],
)
def test_bad_chains_are_refused(uci_root, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        runner.run(config(uci_root, *overrides), tmp_path)
    assert not (tmp_path / "samples").exists()


def test_a_chain_that_diverges_is_named(uci_root, tmp_path):
    with pytest.raises(DivergedError, match="chain 0 diverged"):
        runner.run(
            config(uci_root, "chains=2", "sampler=sgld", "sampler.lr=1e3", "burn_in=0"), tmp_path
        )
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "diverged"


def test_one_chain_of_six_draws_is_judged_too_short_and_noted_as_one_chain(uci_root, tmp_path):
    """One chain's R-hat is that of its halves, which need 4 draws each: six draws have none,
    and no ESS (arviz's ceiling); the verdict says the run is too short, by how much, and notes
    (not warns) that it has one chain. No point is called constant that is not."""
    metrics = runner.run(config(uci_root, "epochs=8", "sampler=sgld"), tmp_path)
    assert metrics["rhat_max"] is None and metrics["points_constant"] == 0
    assert metrics["converged"] is False
    assert not any("chain" in warning for warning in metrics["warnings"])
    # 100 draws after the 2 burn-in epochs at thin 1
    assert metrics["reasons"] == ["6 draws a chain, under the 100 needed to judge: epochs=110"]
    assert [n.split(":")[0] for n in metrics["notes"]] == ["one chain"]
    # six draws: arviz's estimator sits at its ceiling, which is no measurement (diagnostics.cap)
    assert metrics["ess_bulk_min"] is None and metrics["ess_tail_min"] is None
    table = rows(tmp_path / diagnostics.FILE)
    assert list(table[0]) == ["point", "rhat", "ess_bulk", "ess_tail"]
    assert {row["rhat"] for row in table} == {"nan"}
