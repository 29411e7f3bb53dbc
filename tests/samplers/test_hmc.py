"""HMC: the leapfrog and the test by hand, the cache, partial refresh, adaptation, foreach = loop,
errors, a Gaussian's variance with one test per chain, and the trajectory compiled as one program
against the steps through the closure."""

import math

import pytest
import torch

from bdl.likelihoods import Gaussian
from bdl.models.mlp import MLP
from bdl.potential import Potential
from bdl.priors import Gaussian as GaussianPrior
from bdl.samplers import HMC


def leapfrog(theta, p, eps, steps, grad):
    p = p - eps / 2 * grad(theta)
    for i in range(steps):
        theta = theta + eps * p
        p = p - (eps if i < steps - 1 else eps / 2) * grad(theta)
    return theta, p


def test_one_iteration_by_hand(quadratic):
    params = [torch.tensor([1.0], dtype=torch.float64)]
    sampler = HMC(lr=0.04, num_steps=3, adapt=False, generator=torch.Generator().manual_seed(5))
    state = sampler.init(params)
    replay = torch.Generator().manual_seed(5)
    p0 = torch.randn(1, generator=replay, dtype=torch.float64).item()
    u = torch.rand((), generator=replay, dtype=torch.float64).item()
    theta, p = leapfrog(1.0, p0, 0.2, 3, lambda q: q)
    energy_error = (0.5 * theta**2 + 0.5 * p**2) - (0.5 + 0.5 * p0**2)
    sampler.step(state, quadratic(params))
    accepted = math.log(u) < -energy_error
    assert params[0].item() == pytest.approx(theta if accepted else 1.0, rel=1e-12)
    assert bool(state.info["accepted"]) == accepted
    assert state.info["energy_error"].item() == pytest.approx(energy_error, rel=1e-9)
    assert state.info["accept_prob"].item() == pytest.approx(min(1, math.exp(-energy_error)))


def test_a_divergent_trajectory_is_rejected_and_the_position_restored(quadratic):
    params = [torch.tensor([1.0, -0.5])]
    sampler = HMC(lr=100.0, num_steps=5, adapt=False, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    sampler.step(state, quadratic(params, limit=50.0))
    assert not state.info["accepted"] and state.info["accept_prob"] == 0
    torch.testing.assert_close(params[0], torch.tensor([1.0, -0.5]))
    assert math.isfinite(state.info["potential"].item())


def test_divergent_transitions_are_counted_per_chain_at_the_transitions_whose_step_is_too_large():
    """Two stacked chains on Gaussians of standard deviations 1 and 0.01, U = ½q²/σ². The
    leapfrog is stable only for ε < 2σ (Neal 2011, §5.4.1); at ε = 0.5, 10 steps, the narrow
    chain's energy error grows as the amplification factor to the 20th power, far past Stan's
    1000, while at ε = 0.005 (a tenth of the step, the schedule's scale 1e-4 on lr) both chains
    are stable. The transitions at scale 1 must be divergent in the narrow chain and only there;
    every energy error is the hand leapfrog's, so the flag is its threshold, not a guess."""
    sigma = torch.tensor([1.0, 0.01], dtype=torch.float64)
    params = [torch.tensor([0.3, 0.003], dtype=torch.float64)]

    def closure():
        q = params[0]
        return 0.5 * q.square() / sigma.square(), [q / sigma.square()]

    generators = [torch.Generator().manual_seed(k) for k in range(2)]
    sampler = HMC(0.25, 10, adapt=False).for_chains(generators)
    state = sampler.init(params)
    large = {1, 4, 5}
    for t in range(7):
        start = params[0].clone()
        replay = [torch.Generator().set_state(g.get_state()) for g in generators]
        scale = 1.0 if t in large else 1e-4
        sampler.step(state, closure, lr_scale=scale)
        p0 = torch.stack([torch.randn((), generator=g, dtype=torch.float64) for g in replay])
        eps = math.sqrt(0.25 * scale)
        q, p = leapfrog(start, p0, eps, 10, lambda q: q / sigma.square())
        error = 0.5 * (q.square() - start.square()) / sigma.square() + 0.5 * (p.square() - p0**2)
        torch.testing.assert_close(state.info["energy_error"], error, rtol=1e-9, atol=1e-12)
        assert state.info["divergent"].tolist() == [False, t in large], t
        if t in large:
            assert error[1] > 1e6 and error[0].abs() < 10


def test_the_divergence_threshold_is_a_validated_hyperparameter(quadratic):
    with pytest.raises(ValueError, match="sampler.divergence_threshold"):
        HMC(0.01, divergence_threshold=0.0)
    params = [torch.tensor([1.0], dtype=torch.float64)]
    sampler = HMC(0.04, 3, adapt=False, divergence_threshold=1e-300)
    state = sampler.init(params)
    sampler.step(state, quadratic(params))
    error = state.info["energy_error"].item()
    assert bool(state.info["divergent"]) == (error > 1e-300)


def test_closure_is_called_once_per_leapfrog_step_after_the_first_iteration(quadratic, counting):
    params = [torch.randn(4)]
    sampler = HMC(lr=0.01, num_steps=7, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    closure = counting(quadratic(params))
    sampler.step(state, closure)
    assert closure.calls == 8  # the start's gradient, then one per step
    sampler.step(state, closure)
    assert closure.calls == 15 and state.grad_evals == 15
    sampler.potential_changed(state)  # what the runner does after a Gibbs step changes U
    sampler.step(state, closure)
    assert closure.calls == 23


def test_trajectory_length_sets_the_number_of_steps(quadratic, counting):
    params = [torch.randn(3)]
    sampler = HMC(lr=0.01, num_steps=None, trajectory_length=0.35, adapt=False)
    state = sampler.init(params)
    closure = counting(quadratic(params))
    sampler.step(state, closure)
    assert closure.calls == 1 + math.ceil(0.35 / 0.1)


def test_partial_refresh_on_a_flat_potential_by_hand():
    """U = 0: every proposal is accepted and the momentum is carried over, eq. (41)."""
    params = [torch.zeros(3, dtype=torch.float64)]

    def flat():
        return torch.zeros((), dtype=torch.float64), [torch.zeros_like(params[0])]

    alpha, eps, steps = 0.6, 0.1, 4
    sampler = HMC(
        eps**2, steps, refresh=alpha, adapt=False, generator=torch.Generator().manual_seed(1)
    )
    state = sampler.init(params)
    replay = torch.Generator().manual_seed(1)
    p = torch.zeros(3, dtype=torch.float64)
    theta = torch.zeros(3, dtype=torch.float64)
    for _ in range(3):
        r = torch.randn(3, generator=replay, dtype=torch.float64)
        torch.rand((), generator=replay, dtype=torch.float64)
        p = alpha * p + math.sqrt(1 - alpha**2) * r
        theta = theta + eps * steps * p
        sampler.step(state, flat)
        assert state.info["accepted"]
    torch.testing.assert_close(params[0], theta)
    torch.testing.assert_close(state.buffers["momentum"][0], p)


def test_partial_refresh_negates_the_momentum_on_rejection(quadratic):
    params = [torch.tensor([0.5, 0.5], dtype=torch.float64)]
    sampler = HMC(100.0, 3, refresh=0.5, adapt=False, generator=torch.Generator().manual_seed(2))
    state = sampler.init(params)
    replay = torch.Generator().manual_seed(2)
    refreshed = math.sqrt(1 - 0.25) * torch.randn(2, generator=replay, dtype=torch.float64)
    sampler.step(state, quadratic(params, limit=10.0))
    assert not state.info["accepted"]
    torch.testing.assert_close(state.buffers["momentum"][0], -refreshed)


def test_dual_averaging_reaches_the_target_and_only_while_tuning(quadratic):
    params = [torch.zeros(500, 20, dtype=torch.float64)]

    def per_chain():
        theta = params[0]
        return 0.5 * theta.square().sum(-1), [theta.clone()]

    sampler = HMC(
        lr=1.0, num_steps=5, target_accept=0.8, generator=torch.Generator().manual_seed(0)
    )
    state = sampler.init(params)
    for _ in range(150):
        sampler.step(state, per_chain, tune=True)
    rates, step_sizes = [], set()
    for _ in range(50):
        sampler.step(state, per_chain)
        rates.append(state.info["accept_prob"].mean().item())
        step_sizes.add(state.info["step_size"].item())
    assert len(step_sizes) == 1  # the averaged iterate, fixed once burn-in is over
    assert sum(rates) / len(rates) == pytest.approx(0.8, abs=0.08)
    assert state.adaptation.count == 150


@pytest.mark.parametrize("target", [0.65, 0.8])
def test_the_adapted_step_reaches_the_configured_acceptance(assert_adapts_to, target):
    """Hoffman & Gelman's (2014, Alg. 5) setting: a fixed trajectory length, L = ⌈τ/ε⌉. At a
    fixed L = 5 the acceptance is not monotone in ε on this target (0.88 at ε = 0.5, 0.87 at
    0.6, 0.74 at 0.7, 0.75 at 0.8; seed 0), and dual averaging at 0.65 lands at 0.71."""

    def make(target_accept, generator):
        return HMC(
            0.1, None, trajectory_length=2.0, target_accept=target_accept, generator=generator
        )

    assert_adapts_to(make, target)


@pytest.mark.parametrize(("refresh", "mass"), [(0.0, "unit"), (0.7, "unit"), (0.7, "diagonal")])
def test_foreach_equals_loop(assert_foreach_matches_loop, quadratic, refresh, mass):
    def make(foreach):
        sampler = HMC(
            0.01,
            4,
            refresh=refresh,
            mass=mass,
            foreach=foreach,
            generator=torch.Generator().manual_seed(3),
        )
        sampler.plan_burn_in(20)  # a slow window over iterations 3 to 17
        return sampler

    assert_foreach_matches_loop(make, quadratic, steps=24, step_options=lambda t: {"tune": t < 20})


def test_samples_a_gaussian_per_chain():
    """2,000 independent chains on U = ½θ²/σ² recover σ² (independent tests per chain)."""
    sigma2 = 4.0
    params = [torch.zeros(2000, dtype=torch.float64)]

    def closure():
        theta = params[0]
        return 0.5 * theta.square() / sigma2, [theta / sigma2]

    sampler = HMC(0.5, 5, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    for t in range(120):
        sampler.step(state, closure, tune=t < 40)
    assert state.info["accepted"].shape == (2000,)
    assert params[0].var().item() == pytest.approx(sigma2, rel=0.1)
    assert params[0].mean().item() == pytest.approx(0.0, abs=0.15)


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"num_steps": 0}, "sampler.num_steps"),
        ({"num_steps": 10, "trajectory_length": 1.0}, "sampler.trajectory_length"),
        ({"num_steps": None}, "sampler.num_steps"),
        ({"num_steps": None, "trajectory_length": -1.0}, "sampler.trajectory_length"),
        ({"refresh": 1.0}, "sampler.refresh"),
        ({"target_accept": 1.0}, "sampler.target_accept"),
        ({"lr": 0.0}, "sampler.lr"),
    ],
)
def test_bad_hyperparameters_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        HMC(**{"lr": 0.01, **kwargs})


def small_potential(compile: bool) -> Potential:
    """A float64 regression network with a sampled noise precision on 40 points: a full-data
    closure of one chunk, which compile=true runs a trajectory of as one program."""
    torch.manual_seed(4)
    model = MLP(input_shape=(4,), out_features=1, hidden=[8], activation="tanh").double()
    return Potential(model, Gaussian().double(), GaussianPrior(0.8), 40, compile=compile)


@pytest.mark.parametrize(
    ("chains", "mass", "adapt_length"),
    [(None, "unit", False), (3, "unit", False), (3, "diagonal", True)],
    ids=["one chain", "stacked", "stacked, mass and ChEES"],
)
def test_compiled_trajectory_follows_the_closures(chains, mass, adapt_length, compiler):
    """The leapfrog's interior as one compiled program (``compile=true``, a full-data closure's
    ``program``) moves the chains as the steps through the closure do: the same positions and
    Metropolis decisions, iteration after iteration, to float64 rounding."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 4, dtype=torch.float64, generator=generator)
    y = torch.randn(40, dtype=torch.float64, generator=generator)
    runs = []
    for compile in (False, True):
        potential = small_potential(compile)
        # a low threshold, so that some transitions are divergent and others not
        sampler = HMC(0.004, 6, adapt=False, mass=mass, adapt_length=adapt_length)
        sampler.divergence_threshold = 0.01
        if chains is None:
            params = potential.params
            sampler.generator = torch.Generator().manual_seed(1)
        else:
            spread = torch.Generator().manual_seed(2)
            params = [
                p.detach() + 0.1 * torch.randn(chains, *p.shape, dtype=p.dtype, generator=spread)
                for p in potential.params
            ]
            sampler = sampler.for_chains([torch.Generator().manual_seed(k) for k in range(chains)])
        state = sampler.init(params)
        for k, v in enumerate(state.buffers.get("inverse_mass", [])):
            v.copy_(torch.rand(v.shape, dtype=v.dtype, generator=generator.manual_seed(k)) + 0.5)

        def closure(potential=potential, params=params):
            chunks = lambda: iter([(x, y)])  # noqa: E731
            if chains is None:
                return potential.full_closure(chunks)
            return potential.chain_full_closure(params, chunks)

        assert (closure().program is not None) == compile
        trace = []
        for _ in range(4):
            sampler.step(state, closure())
            decisions = torch.stack([state.info["accepted"], state.info["divergent"]])
            trace.append(([p.clone() for p in params], decisions))
        runs.append(trace)
    for (eager, accepted), (compiled, compiled_accepted) in zip(*runs, strict=True):
        assert torch.equal(accepted, compiled_accepted)
        for mine, theirs in zip(compiled, eager, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-9, atol=1e-12)
    assert any(bool(decisions[0].any()) for _, decisions in runs[0])
    diverging = torch.stack([decisions[1] for _, decisions in runs[0]])
    assert diverging.any() and not diverging.all()


def test_a_trajectory_that_does_not_compile_is_stepped_through_the_closure(compiler, caplog):
    """A sampler's program that torch.compile cannot trace whole (here a Python number read
    inside the loop) is refused with one warning, and the closures offer none from then on: the
    kernel steps through the closure instead."""

    def untraceable(evaluate, params):
        def body(step, *point):
            float(point[0].sum())  # a value Python must see: no program
            return (step + 1, *point)

        return torch.while_loop(lambda step, *point: step < 2, body, (torch.tensor(0), *params))

    potential = small_potential(compile=True)
    x, y = torch.randn(40, 4, dtype=torch.float64), torch.randn(40, dtype=torch.float64)
    closure = potential.full_closure(lambda: iter([(x, y)]))
    params = [p.detach().clone() for p in potential.params]
    with caplog.at_level("WARNING", logger="bdl"):
        assert closure.program(untraceable, params) is None
    assert potential.full_closure(lambda: iter([(x, y)])).program is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "bdl"]
    assert len(warnings) == 1 and "one by one" in warnings[0], warnings
    caplog.clear()  # the warning was this test's point, not a fallback of the compiler fixture's


def test_without_a_compiler_the_trajectory_is_stepped_eagerly_after_one_warning(caplog):
    """On a machine where Inductor finds no C++ compiler, an HMC iteration under
    ``compile=true`` warns once, naming the fix, and moves the chain as the eager one does."""
    x, y = torch.randn(40, 4, dtype=torch.float64), torch.randn(40, dtype=torch.float64)
    ends = []
    torch._dynamo.reset()  # nothing compiled earlier may stand in, nor Inductor's caches below
    no_compiler = {"cpp.cxx": ("no-such-compiler",), "fx_graph_cache": False}
    for compile in (False, True):
        potential = small_potential(compile)
        sampler = HMC(0.004, 4, adapt=False, generator=torch.Generator().manual_seed(1))
        state = sampler.init(potential.params)
        with (
            torch._inductor.config.patch(no_compiler),
            torch._functorch.config.patch(enable_autograd_cache=False),
            caplog.at_level("WARNING", logger="bdl"),
        ):
            for _ in range(2):
                sampler.step(state, potential.full_closure(lambda: iter([(x, y)])))
        ends.append([p.detach().clone() for p in potential.params])
    for eager, compiled in zip(*ends, strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-12, atol=1e-14)
    warnings = [r.getMessage() for r in caplog.records if r.name == "bdl"]
    assert len(warnings) == 1 and "compile=false" in warnings[0], warnings
