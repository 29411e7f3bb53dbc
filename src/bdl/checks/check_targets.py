r"""The four toy targets of ``bdl-check`` (`bdl.checks.check`): which samplers, with which settings
and for how long, each runs on each target (`bdl.checks.targets`); how its chains are stepped
(`run_chains`, the samplers' public API, many chains stacked in one tensor) and how their
draws are measured against the known posterior; and Chen et al. (2014)'s figures, redrawn.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from bdl import diagnostics
from bdl.checks.targets import CorrelatedGaussian, DoubleWell, LinearRegression, ToyRegression
from bdl.samplers import (
    HMC,
    MALA,
    PSGLD,
    RWMH,
    SGHMC,
    SGLD,
    AdaptiveSGHMC,
    ConstantSGD,
    NaiveSGHMC,
    Sampler,
)

Make = Callable[[torch.Generator], Sampler]

#: Histogram of target 1: 25 bins of width 0.2 over [-2.5, 2.5] and the two tails.
TV_EDGES = torch.tensor([-math.inf, *torch.linspace(-2.5, 2.5, 26, dtype=torch.float64), math.inf])


@dataclass
class Spec:
    """One sampler on one target: ``steps`` sampler steps per chain after ``burn_in`` (during
    which ``tune=True``), keeping one draw every ``thin`` steps."""

    label: str
    make: Make
    noisy: bool
    steps: int
    burn_in: int
    thin: int = 1


@dataclass
class Chains:
    draws: Tensor  # (chains, draws, dim)
    grad_evals: int  # closure calls per chain while sampling
    accept_rate: float | None
    seconds: float


@dataclass
class Row:
    target: str
    sampler: str
    errors: dict[str, float]
    ess_per_grad: float
    accept_rate: float | None
    samples: int
    grad_evals: int
    seconds: float


def run_chains(target, spec: Spec, chains: int, seed: int) -> Chains:
    """Run ``spec`` on ``chains`` chains of ``target`` through the sampler's public API."""
    generator = torch.Generator().manual_seed(seed)
    data_generator = torch.Generator().manual_seed(seed + 1)
    params = target.init(chains)
    sampler = spec.make(generator)
    sampler.plan_burn_in(spec.burn_in)
    closures = target.closures(params, spec.noisy, data_generator)
    state = sampler.init(params)
    kept: list[Tensor] = []
    accepted, tests = 0.0, 0
    start = time.perf_counter()
    for t in range(spec.burn_in + spec.steps):
        if t == spec.burn_in:
            evals_at_start = state.grad_evals
        state = sampler.step(state, closures(), tune=t < spec.burn_in)
        if t < spec.burn_in:
            continue
        if "accepted" in state.info:
            accepted += state.info["accepted"].double().mean().item()
            tests += 1
        if (t - spec.burn_in + 1) % spec.thin == 0:
            kept.append(torch.cat([p.reshape(chains, -1) for p in params], 1).clone())
    return Chains(
        draws=torch.stack(kept, 1),
        grad_evals=state.grad_evals - evals_at_start,
        accept_rate=accepted / tests if tests else None,
        seconds=time.perf_counter() - start,
    )


def ess(draws: Tensor) -> np.ndarray:
    """Bulk effective sample size of each coordinate of ``(chains, draws, dim)``, by arviz.

    NaN where arviz measured nothing: its estimator (Vehtari et al. 2021) sums autocorrelations
    by Geyer's initial sequence over split chains and caps the result
    (`bdl.diagnostics.cap`); a value at the cap depends on the number of draws alone, not
    on the sampler.
    """
    values = diagnostics.ess(draws.numpy())
    limit = diagnostics.cap(draws.shape[0], draws.shape[1])
    return np.where(values >= limit * (1 - 1e-9), np.nan, values)


def make_row(target_name: str, spec: Spec, result: Chains, errors: dict, cost: float) -> Row:
    chains, num_draws, _ = result.draws.shape
    grad_evals = result.grad_evals * cost
    return Row(
        target=target_name,
        sampler=spec.label,
        errors=errors,
        ess_per_grad=_min_measured(ess(result.draws)) / (chains * grad_evals),
        accept_rate=result.accept_rate,
        samples=chains * num_draws,
        grad_evals=round(chains * grad_evals),
        seconds=result.seconds,
    )


def _min_measured(values: np.ndarray) -> float:
    """The smallest measured ESS; an unmeasured coordinate has at least the cap, above it."""
    measured = values[~np.isnan(values)]
    return float(measured.min()) if measured.size else math.nan


def total_variation(samples: Tensor, target: DoubleWell) -> float:
    inner = TV_EDGES[1:-1]
    bins = torch.bucketize(samples.flatten().double(), inner, right=True)
    counts = torch.bincount(bins, minlength=inner.numel() + 1).double()
    return 0.5 * (counts / counts.sum() - target.bin_masses(TV_EDGES)).abs().sum().item()


def gaussian_errors(draws: Tensor, mean: Tensor, covariance: Tensor) -> dict[str, float]:
    flat = draws.reshape(-1, draws.shape[-1])
    return {
        "mean_error": ((flat.mean(0) - mean).norm() / mean.norm()).item(),
        "cov_error": ((torch.cov(flat.T) - covariance).norm() / covariance.norm()).item(),
    }


# ---------------------------------------------------------------------------------------------
# Target 1: the double well


def double_well(quick: bool, seed: int, out: Path, only: Sequence[str] | None = None) -> list[Row]:
    target = DoubleWell()
    chains, draws = (50, 8) if quick else (200, 400)  # 80,000 samples in full
    burn = 2 if quick else 20  # samples' worth of steps (50 gradients each) discarded per chain
    leapfrog = 50
    lr = 0.01  # epsilon = 0.1

    def per_step(label: str, make: Make, noisy: bool) -> Spec:
        return Spec(label, make, noisy, draws * leapfrog, burn * leapfrog, thin=leapfrog)

    specs = [
        Spec("hmc", lambda g: HMC(lr, leapfrog, adapt=False, generator=g), False, draws, burn),
        per_step("hmc, no MH", lambda g: NaiveSGHMC(lr, leapfrog, mh=False, generator=g), False),
        per_step("naive_sghmc, MH", lambda g: NaiveSGHMC(lr, leapfrog, mh=True, generator=g), True),
        per_step("naive_sghmc", lambda g: NaiveSGHMC(lr, leapfrog, generator=g), True),
        per_step("sghmc", lambda g: SGHMC(lr, alpha=0.3, grad_var=4.0, generator=g), True),
        per_step("sghmc_adaptive", lambda g: AdaptiveSGHMC(lr, alpha=0.3, generator=g), True),
        per_step("sgld", lambda g: SGLD(lr, generator=g), True),
        per_step("psgld", lambda g: PSGLD(lr, generator=g), True),
        # A nearly constant preconditioner: the bias above is the dropped Γ term's.
        per_step("psgld, beta 0.9999", lambda g: PSGLD(lr, beta=0.9999, generator=g), True),
        per_step("mala", lambda g: MALA(lr, generator=g), False),
        per_step("rwmh", lambda g: RWMH(lr, target_accept=0.44, generator=g), False),
    ]
    rows, histograms = [], {}
    for spec in _select(specs, only):
        result = run_chains(target, spec, chains, seed)
        tv = total_variation(result.draws, target)
        rows.append(make_row(target.name, spec, result, {"tv": tv}, 1.0))
        histograms[spec.label] = result.draws.flatten()
    title = (
        f"double well (Chen et al. 2014, Fig. 1): {chains} chains × {draws} samples\n"
        f"after {burn} samples' worth of burn-in each, seed {seed} ({_mode(quick)})"
    )
    _plot_double_well(target, histograms, out / "double_well.png", title)
    return rows


def _mode(quick: bool) -> str:
    return "--quick" if quick else "full"


def _plot_double_well(
    target: DoubleWell, histograms: dict[str, Tensor], path: Path, title: str
) -> None:
    """Chen et al.'s Fig. 1 (Bühler, Fig. 2)."""
    from matplotlib.figure import Figure  # imported only to draw

    styles = {
        "hmc": ("Standard HMC (with MH)", "c", "v"),
        "hmc, no MH": ("Standard HMC (no MH)", "r", None),
        "naive_sghmc, MH": ("Naive stochastic gradient HMC (with MH)", "m", "x"),
        "naive_sghmc": ("Naive stochastic gradient HMC (no MH)", "k", None),
        "sghmc": ("SGHMC", "g", None),
    }
    fig = Figure(figsize=(6.5, 4.8), layout="constrained")
    ax = fig.subplots()
    grid = torch.linspace(-2.2, 2.2, 441, dtype=torch.float64)
    ax.plot(grid, target.density(grid), "b-", lw=2, label="True distribution")
    edges = torch.linspace(-2.2, 2.2, 45, dtype=torch.float64)
    centres = 0.5 * (edges[1:] + edges[:-1])
    for label, (name, colour, marker) in styles.items():
        if label in histograms:
            counts = torch.histogram(histograms[label].double(), edges)[0]
            density = counts / histograms[label].numel() / (edges[1] - edges[0])
            ax.plot(centres, density, color=colour, marker=marker, ls="-.", lw=1, label=name)
    ax.set(xlabel=r"$\theta$", ylabel="density", xlim=(-2.2, 2.2), ylim=(0, 0.9))
    ax.set_title(title, fontsize="medium")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=120)


# ---------------------------------------------------------------------------------------------
# Target 2: the correlated Gaussian


def gaussian_2d(quick: bool, seed: int, out: Path, only: Sequence[str] | None = None) -> list[Row]:
    target = CorrelatedGaussian()
    chains, steps, burn = (50, 500, 100) if quick else (100, 10_000, 1_000)
    thin = 10
    specs = [
        Spec("hmc", lambda g: HMC(0.04, 10, generator=g), False, steps // 10, burn // 10),
        # Only trajectory ends are samples of a Metropolis-tested chain: thin by L = 50.
        Spec("hmc, no MH", lambda g: NaiveSGHMC(0.01, 50, generator=g), False, steps, burn, 50),
        Spec(
            "naive_sghmc, MH",
            lambda g: NaiveSGHMC(0.01, 50, mh=True, generator=g),
            True,
            steps,
            burn,
            50,
        ),
        Spec("naive_sghmc", lambda g: NaiveSGHMC(0.01, 50, generator=g), True, steps, burn, 50),
        Spec(
            "sghmc",
            lambda g: SGHMC(0.05, alpha=0.035, grad_var=1.0, generator=g),
            True,
            steps,
            burn,
            thin,
        ),
        Spec("sgld", lambda g: SGLD(0.1, generator=g), True, steps, burn, thin),
        Spec("psgld", lambda g: PSGLD(0.1, generator=g), True, steps, burn, thin),
        Spec("mala", lambda g: MALA(0.1, generator=g), False, steps, burn, thin),
        Spec("rwmh", lambda g: RWMH(0.5, generator=g), False, steps, burn, thin),
    ]
    rows = []
    for spec in _select(specs, only):
        result = run_chains(target, spec, chains, seed)
        errors = {"cov_abs_error": _cov_abs_error(result.draws, target)}
        rows.append(make_row(target.name, spec, result, errors, 1.0))
    if only is None:
        _plot_gaussian_sweep(target, quick, seed, out / "gaussian_2d.png")
    return rows


def _cov_abs_error(draws: Tensor, target: CorrelatedGaussian) -> float:
    """Chen et al.'s measure: mean absolute error of the covariance's entries (known mean 0)."""
    flat = draws.reshape(-1, 2)
    return (flat.T @ flat / flat.shape[0] - target.covariance).abs().mean().item()


def _plot_gaussian_sweep(target: CorrelatedGaussian, quick: bool, seed: int, path: Path) -> None:
    """Chen et al.'s Fig. 3a: covariance error against autocorrelation time, over step sizes
    (their code: SGLD η = 0.18·0.8^i, SGHMC η = 0.05·0.36^i with α = 0.05·0.6^i; our SGLD's
    ``lr`` is 2η)."""
    chains, steps, settings = (20, 500, 2) if quick else (50, 10_000, 5)
    sweeps: dict[str, list[tuple[float, float]]] = {"SGLD": [], "SGHMC": []}
    for i in range(settings):
        sgld_lr, sghmc_lr, alpha = 2 * 0.18 * 0.8**i, 0.05 * 0.36**i, 0.05 * 0.6**i
        for name, make in [
            ("SGLD", lambda g, lr=sgld_lr: SGLD(lr, generator=g)),
            ("SGHMC", lambda g, lr=sghmc_lr, a=alpha: SGHMC(lr, a, grad_var=1.0, generator=g)),
        ]:
            result = run_chains(target, Spec(name, make, True, steps, steps // 10), chains, seed)
            autocorrelation = result.draws.shape[1] / ess(result.draws).mean() * chains
            sweeps[name].append((autocorrelation, _cov_abs_error(result.draws, target)))
    from matplotlib.figure import Figure  # imported only to draw

    from bdl.analysis.plots import scale_to_spread

    fig = Figure(figsize=(5.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for (name, points), style in zip(sweeps.items(), ["b-x", "r-o"], strict=True):
        ax.plot(*zip(*points, strict=True), style, label=name)
    ax.set(xlabel="autocorrelation time (steps)", ylabel="average absolute error of covariance")
    scale_to_spread(ax, [a for points in sweeps.values() for a, _ in points], axis="x")
    ax.set_title(
        f"correlated 2-D Gaussian over {settings} step sizes\n{chains} chains × {steps} steps "
        f"after {steps // 10} of burn-in, seed {seed} ({_mode(quick)})",
        fontsize="medium",
    )
    ax.legend()
    fig.savefig(path, dpi=120)


# ---------------------------------------------------------------------------------------------
# Target 3: Bayesian linear regression


def linear_regression(
    quick: bool, seed: int, out: Path, only: Sequence[str] | None = None
) -> list[Row]:
    target = LinearRegression()
    chains, steps, burn = (50, 500, 200) if quick else (100, 20_000, 2_000)
    thin = 10
    full_cost = target.num_data / target.batch_size
    specs = [
        Spec("hmc", lambda g: HMC(4e-4, 10, generator=g), False, steps // 40, burn // 10),
        Spec("mala", lambda g: MALA(4e-4, generator=g), False, steps // 4, burn, thin // 2),
        Spec("rwmh", lambda g: RWMH(1e-3, generator=g), False, steps // 4, burn, thin // 2),
        Spec("sgld", lambda g: SGLD(2e-5, generator=g), True, steps, burn, thin),
        Spec(
            "sghmc",
            lambda g: SGHMC(1e-5, alpha=0.2, grad_var="online", generator=g),
            True,
            steps,
            burn,
            thin,
        ),
        Spec("psgld", lambda g: PSGLD(2e-3, generator=g), True, steps, burn, thin),
        Spec("sghmc_adaptive", lambda g: AdaptiveSGHMC(1e-4, generator=g), True, steps, burn, thin),
        Spec("naive_sghmc", lambda g: NaiveSGHMC(1e-5, 50, generator=g), True, steps, burn, thin),
        Spec("csgd", lambda g: ConstantSGD(1e-4, generator=g), True, steps, burn, thin),
        Spec(
            "csgd, diagonal",
            lambda g: ConstantSGD(1e-4, preconditioner="diagonal", generator=g),
            True,
            steps,
            burn,
            thin,
        ),
    ]
    rows = []
    for spec in _select(specs, only):
        result = run_chains(target, spec, chains, seed)
        errors = gaussian_errors(result.draws, target.mean, target.covariance)
        cost = 1.0 if spec.noisy else full_cost
        rows.append(make_row(target.name, spec, result, errors, cost))
    return rows


# ---------------------------------------------------------------------------------------------
# Target 4: the SG-MCMC tutorial (2020)'s regression


def toy_regression(
    quick: bool, seed: int, out: Path, only: Sequence[str] | None = None
) -> list[Row]:
    target = ToyRegression()
    chains, steps, burn = (50, 500, 200) if quick else (100, 5_000, 1_500)
    reference_spec = Spec(
        "hmc (reference)", lambda g: HMC(4e-4, 20, generator=g), False, steps, burn // 5
    )
    reference = run_chains(target, reference_spec, 4 * chains, seed + 100)
    ref_draws = target.observables(reference.draws).reshape(-1, 3)
    mean, covariance = ref_draws.mean(0), torch.cov(ref_draws.T)
    specs = [
        Spec("hmc", lambda g: HMC(4e-4, 20, generator=g), False, steps // 20, burn // 5),
        Spec(
            "rwmh (post: std 0.02)",
            lambda g: RWMH(4e-4, adapt=False, generator=g),
            False,
            steps,
            burn,
            5,
        ),
        Spec("rwmh", lambda g: RWMH(4e-4, generator=g), False, steps, burn, 5),
        Spec("sgld", lambda g: SGLD(1e-3, generator=g), False, steps, burn, 5),
        Spec("mala", lambda g: MALA(1e-3, generator=g), False, steps, burn, 5),
        Spec("sghmc", lambda g: SGHMC(1e-3, alpha=0.1, generator=g), False, steps, burn, 5),
        Spec("psgld", lambda g: PSGLD(1e-2, generator=g), False, steps, burn, 5),
    ]
    rows = []
    for spec in _select(specs, only):
        result = run_chains(target, spec, chains, seed)
        draws = target.observables(result.draws)
        row = make_row(target.name, spec, result, gaussian_errors(draws, mean, covariance), 1.0)
        rows.append(row)
    return rows


TARGETS = {
    "double_well": double_well,
    "gaussian_2d": gaussian_2d,
    "linear_regression": linear_regression,
    "toy_regression": toy_regression,
}


def _select(specs: list[Spec], only: Sequence[str] | None) -> list[Spec]:
    return [spec for spec in specs if only is None or spec.label in only]
