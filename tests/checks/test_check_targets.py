"""What ``bdl-check`` measures and counts, against values from outside the code: the runs'
bookkeeping against what the target saw (`run_chains`), the effective sample size per gradient
against arviz (`make_row`), and the error measures against quadrature and hand derivations."""

import math
from pathlib import Path

import arviz
import numpy as np
import pytest
import torch
from scipy import integrate

from bdl.checks import check_targets
from bdl.checks.check_targets import (
    TV_EDGES,
    Chains,
    Spec,
    _cov_abs_error,
    ess,
    gaussian_errors,
    make_row,
    run_chains,
    total_variation,
)
from bdl.checks.targets import CorrelatedGaussian, DoubleWell, ToyRegression
from bdl.samplers import HMC, MALA, RWMH, SGLD, NaiveSGHMC


def test_ess_blank_exactly_where_arviz_returns_its_cap():
    generator = torch.Generator().manual_seed(0)
    # 9 draws per chain: halves of 4, Geyer's sequence never runs and arviz returns M log10 M.
    few = torch.randn(50, 9, 2, generator=generator, dtype=torch.float64)
    assert np.isnan(ess(few)).all()
    # Independent draws, 200 per chain: an ESS near the 10,000 draws, not the cap 40,000.
    many = torch.randn(50, 200, 2, generator=generator, dtype=torch.float64)
    values = ess(many)
    assert not np.isnan(values).any() and (np.abs(values / 10_000 - 1) < 0.2).all()


class Recorded:
    """``target`` as the samplers meet it, recording for each sampler step the position it
    starts from and how many times it evaluated the closure."""

    def __init__(self, target) -> None:
        self.target = target
        self.starts: list[torch.Tensor] = []  # (chains, dim) per step
        self.calls: list[int] = []

    def init(self, chains: int) -> list[torch.Tensor]:
        return self.target.init(chains)

    def closures(self, params, noisy, generator):
        factory = self.target.closures(params, noisy, generator)

        def step():
            self.starts.append(torch.column_stack([p.clone() for p in params]))
            self.calls.append(0)
            closure = factory()

            def counted():
                self.calls[-1] += 1
                return closure()

            return counted

        return step


@pytest.mark.parametrize(
    "make",
    [
        lambda g: SGLD(1e-3, generator=g),
        lambda g: HMC(1e-3, 3, adapt=False, generator=g),
        lambda g: NaiveSGHMC(1e-3, 4, mh=True, generator=g),
    ],
    ids=["sgld", "hmc, 3 leapfrog steps", "naive_sghmc, MH"],
)
def test_run_chains_counts_what_the_target_evaluated_and_keeps_every_thin_th_state(make):
    """On the tutorial's regression (three parameters, one tensor each): the gradient evaluations
    are the closure calls after burn-in; draw ``k`` is the state after step ``burn_in + (k+1)
    thin``, where the next step starts."""
    target = Recorded(ToyRegression())
    burn_in, steps, thin = 4, 7, 3
    result = run_chains(target, Spec("x", make, False, steps, burn_in, thin), 3, seed=0)
    assert len(target.calls) == burn_in + steps
    assert result.grad_evals == sum(target.calls[burn_in:]) > 0
    assert result.draws.shape == (3, 2, 3)  # 7 steps thinned by 3: 2 draws of (β₀, β, σ)
    for k in range(2):
        assert torch.equal(result.draws[:, k], target.starts[burn_in + (k + 1) * thin])
    assert not torch.equal(result.draws[:, 0], result.draws[:, 1])  # the chains moved


@pytest.mark.parametrize(
    "make",
    [
        lambda g: RWMH(1.0, adapt=False, generator=g),
        lambda g: MALA(0.8, generator=g),
        lambda g: HMC(0.3, 2, adapt=False, generator=g),
    ],
    ids=["rwmh", "mala", "hmc"],
)
def test_run_chains_accept_rate_is_the_fraction_of_moves_after_burn_in(make):
    """A Metropolis-tested chain with a continuous proposal moves exactly when it accepts: the
    rate is the fraction of steps after burn-in whose end differs from their start (the
    step sizes put it well inside (0, 1), where counting a wrong step shows)."""
    target = Recorded(CorrelatedGaussian())
    burn_in, steps = 5, 40
    result = run_chains(target, Spec("x", make, False, steps, burn_in), 20, seed=1)
    starts = torch.stack(target.starts[burn_in:], 1)
    moved = (result.draws != starts).any(-1).double().mean().item()
    assert 0.2 < moved < 0.9
    assert result.accept_rate == pytest.approx(moved, rel=1e-12)
    # Without a Metropolis test there is no rate.
    sgld = run_chains(target, Spec("sgld", lambda g: SGLD(0.1, generator=g), True, 3, 1), 2, 0)
    assert sgld.accept_rate is None


def test_make_row_counts_per_chain_cost_and_the_smallest_measured_ess_by_arviz():
    """ESS per gradient is arviz's bulk ESS of the worst coordinate over all chains' gradient
    evaluations, each full-data gradient counting ``cost`` minibatch gradients; a coordinate
    that arviz could not measure (its cap) is passed over."""
    generator = torch.Generator().manual_seed(0)
    chains, draws = 4, 200
    independent = torch.randn(chains, draws, generator=generator, dtype=torch.float64)
    # AR(1)s: coefficient 0.9 gives an ESS about 0.1/1.9 of the draws', the smallest; -0.9 one
    # above the draws, which arviz caps (`bdl.checks.check_targets.ess`: not measured).
    slow, antithetic = torch.zeros(2, chains, draws, dtype=torch.float64)
    for t in range(1, draws):
        slow[:, t] = 0.9 * slow[:, t - 1] + independent[:, t - 1]
        antithetic[:, t] = -0.9 * antithetic[:, t - 1] + independent[:, t - 1]
    stacked = torch.stack([independent, slow, antithetic], -1)
    result = Chains(stacked, grad_evals=7, accept_rate=0.25, seconds=1.5)
    row = make_row("t", Spec("s", None, True, draws, 0), result, {"tv": 0.5}, cost=10.0)
    expected = min(arviz.ess(stacked[..., i].numpy(), method="bulk") for i in (0, 1))
    assert expected < 0.2 * chains * draws  # the AR(1) coordinate's, not the independent one's
    assert row.ess_per_grad == pytest.approx(expected / (chains * 7 * 10), rel=1e-9)
    assert (row.target, row.sampler, row.errors) == ("t", "s", {"tv": 0.5})
    assert (row.accept_rate, row.samples, row.grad_evals, row.seconds) == (0.25, 800, 280, 1.5)
    only_capped = Chains(stacked[..., 2:], grad_evals=7, accept_rate=None, seconds=0.0)
    unmeasured = make_row("t", Spec("s", None, True, draws, 0), only_capped, {}, cost=1.0)
    assert math.isnan(unmeasured.ess_per_grad) and unmeasured.grad_evals == 28


@pytest.fixture(scope="module")
def double_well() -> DoubleWell:
    return DoubleWell()


def _exact_mass(lower: float, upper: float) -> float:
    """The double well's probability of ``[lower, upper]`` by adaptive quadrature of
    ``exp(2θ² - θ⁴)``."""

    def density(theta):
        return math.exp(2 * theta**2 - theta**4)

    normaliser = integrate.quad(density, -math.inf, math.inf, epsabs=0, epsrel=1e-12)[0]
    return integrate.quad(density, lower, upper, epsabs=0, epsrel=1e-12)[0] / normaliser


def test_double_well_bin_masses_and_density_are_quadratures(double_well):
    masses = double_well.bin_masses(TV_EDGES)
    assert masses.shape == (27,) and masses.sum().item() == pytest.approx(1, abs=1e-12)
    edges = TV_EDGES.tolist()
    for i in (0, 5, 12, 13, 26):  # the lower tail, the wells' sides, the centre, the upper tail
        assert masses[i].item() == pytest.approx(_exact_mass(edges[i], edges[i + 1]), rel=1e-6)
    # the density integrates to one, and its peaks at ±1 are e times its value at 0
    grid = torch.linspace(-3, 3, 60_001, dtype=torch.float64)
    assert torch.trapezoid(double_well.density(grid), grid).item() == pytest.approx(1, rel=1e-9)
    ratio = double_well.density(torch.tensor([1.0, -1.0], dtype=torch.float64))
    ratio = ratio / double_well.density(torch.tensor(0.0, dtype=torch.float64))
    torch.testing.assert_close(ratio, torch.full((2,), math.e, dtype=torch.float64))


def test_total_variation_of_point_masses_is_one_minus_the_mass_of_their_bins(double_well):
    """Half the draws at 0 (the bin [-0.1, 0.1)), half in the upper tail at 3: the histogram is
    (½, ½) on those two bins, its distance to the masses ``p`` is ``1 - p₀ - p_tail``."""
    draws = torch.cat([torch.zeros(3, 5), torch.full((3, 5), 3.0)], 1).unsqueeze(-1)
    expected = 1 - _exact_mass(-0.1, 0.1) - _exact_mass(2.5, math.inf)
    assert total_variation(draws, double_well) == pytest.approx(expected, rel=1e-6)
    # A draw on a bin's edge belongs to the bin above it ([a, b)): the bin of the centre, not
    # its left neighbour, whose mass differs by a tenth.
    edge = TV_EDGES[13].item()
    assert edge == pytest.approx(-0.1, abs=1e-12)
    expected = 1 - _exact_mass(-0.1, 0.1)
    assert total_variation(
        torch.full((2, 4, 1), edge, dtype=torch.float64), double_well
    ) == pytest.approx(expected, rel=1e-6)


def test_total_variation_of_exact_draws_is_the_histograms_noise(double_well):
    """Exact draws of the double well (rejection from a uniform on [-3, 3], whose outside mass is
    below e^-45) give a TV of the order of the bins' sampling noise,
    ``½ Σ sqrt(2 p (1-p) / (π n))``, about 0.0055 at 80,000 draws and 0.025 at 4,000."""
    generator = torch.Generator().manual_seed(0)
    proposals = 6 * torch.rand(40_000, generator=generator, dtype=torch.float64) - 3
    keep = torch.rand(40_000, generator=generator, dtype=torch.float64) < torch.exp(
        2 * proposals**2 - proposals**4 - 1
    )
    draws = proposals[keep][:4_000]
    assert draws.numel() == 4_000
    masses = double_well.bin_masses(TV_EDGES)
    noise = 0.5 * (2 * masses * (1 - masses) / (math.pi * 4_000)).sqrt().sum().item()
    # TV / noise over seeds 0-9 of this generator: 0.99 ± 0.25 (0.60 to 1.34); unnormalised
    # counts, a factor off or misaligned bins give many times more
    tv = total_variation(draws.reshape(8, 500, 1), double_well)
    assert 0 < tv < 2 * noise


def test_gaussian_errors_of_draws_whose_moments_are_known_by_hand():
    """Four draws (m ± e₁, m ± e₂) have mean m and unbiased covariance (2/3) I: against a
    target N(μ, Σ) the errors are ‖m - μ‖/‖μ‖ and ‖(2/3) I - Σ‖_F/‖Σ‖_F."""
    m = torch.tensor([1.0, 2.0], dtype=torch.float64)
    plus_minus = torch.tensor([[1.0, 0], [-1, 0], [0, 1], [0, -1]], dtype=torch.float64)
    draws = (m + plus_minus).reshape(4, 1, 2)  # four chains of one draw
    mean = torch.tensor([1.0, 1.0], dtype=torch.float64)
    covariance = torch.tensor([[1.0, 0.5], [0.5, 2.0]], dtype=torch.float64)
    errors = gaussian_errors(draws, mean, covariance)
    # |m - μ| = 1 over √2; (2/3) I - Σ = [[-1/3, -1/2], [-1/2, -4/3]], Σ's norm √(1 + ½ + 4)
    frobenius = math.sqrt(1 / 9 + 2 / 4 + 16 / 9) / math.sqrt(5.5)
    assert errors == pytest.approx({"mean_error": 1 / math.sqrt(2), "cov_error": frobenius})


def test_cov_abs_error_is_chen_et_als_mean_absolute_error_about_the_known_mean():
    """The same four draws about 0 have second moment (1/2) I (divided by n: the mean is
    known): against ρ = 0.9 the entries are off by 0.5, 0.9, 0.9, 0.5, on average 0.7."""
    plus_minus = torch.tensor([[1.0, 0], [-1, 0], [0, 1], [0, -1]], dtype=torch.float64)
    assert _cov_abs_error(plus_minus.reshape(4, 1, 2), CorrelatedGaussian()) == pytest.approx(0.7)
    # Shifted draws are not centred by the measure: their second moment grows by the shift's.
    shifted = (plus_minus + 1).reshape(1, 4, 2)
    assert _cov_abs_error(shifted, CorrelatedGaussian()) == pytest.approx(
        (0.5 + 0.1 + 0.1 + 0.5) / 4
    )


@pytest.fixture(scope="module")
def specs() -> dict[str, list[tuple[Spec, object, torch.Generator]]]:
    """Each target's runs as `bdl.checks.check_targets` hands them to `run_chains` (full
    sizes), with the sampler each builds from a generator of its own; the chains are not run."""
    recorded: dict[str, list] = {}

    def record(target, spec, chains, seed):
        generator = torch.Generator().manual_seed(seed)
        recorded.setdefault(target.name, []).append((spec, spec.make(generator), generator))
        dim = sum(p[0].numel() for p in target.init(1))
        draws = torch.randn(chains, 12, dim, generator=generator, dtype=torch.float64)
        return Chains(draws, grad_evals=1, accept_rate=None, seconds=0.0)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(check_targets, "run_chains", record)
        patch.setattr(check_targets, "_plot_double_well", lambda *args: None)
        patch.setattr(check_targets, "_plot_gaussian_sweep", lambda *args: None)
        for run in check_targets.TARGETS.values():
            run(False, 0, Path("unused"))
    return recorded


METROPOLIS = {"hmc", "hmc (reference)", "mala", "rwmh", "rwmh (post: std 0.02)", "hmc, no MH"}


def test_every_check_sampler_draws_from_the_seeded_generator(specs):
    """A check is reproducible: each sampler's noise comes from the generator `run_chains`
    seeds, never from torch's global one."""
    for target, runs in specs.items():
        for spec, sampler, generator in runs:
            assert sampler.generator is generator, (target, spec.label)


def test_check_gradients_are_noisy_exactly_where_the_sampler_is_a_stochastic_gradient_one(specs):
    """Targets 1-3 hand minibatch (or noise-added) gradients to the stochastic-gradient samplers
    and exact ones to the Metropolis-tested samplers and to standard HMC without its test
    (Chen et al. 2014, Sec. 4.1; naive SGHMC with MH is theirs on noisy gradients); the
    tutorial's regression (target 4) is on its 30 points whole."""
    for target, runs in specs.items():
        for spec, _, _ in runs:
            noisy = target != "toy_regression" and spec.label not in METROPOLIS
            assert spec.noisy == noisy, (target, spec.label)


def test_double_well_runs_at_chen_et_als_step_size(specs):
    """Chen et al. (2014)'s Fig. 1: every sampler at ε = 0.1 (``lr = ε²``), HMC's trajectories
    of L = 50 leapfrog steps, each sampler thinned to one draw per 50 steps; SGHMC's friction
    corrected for their gradient noise of variance 4."""
    runs = {spec.label: (spec, sampler) for spec, sampler, _ in specs["double_well"]}
    assert {sampler.lr for _, sampler in runs.values()} == {0.01}
    hmc_spec, hmc = runs["hmc"]
    assert (hmc.num_steps, hmc_spec.thin) == (50, 1)
    assert {spec.thin for label, (spec, _) in runs.items() if label != "hmc"} == {50}
    assert runs["sghmc"][1].grad_var == 4.0
