import copy
import csv
import functools
import math

import pytest
import torch
from hydra import compose, initialize_config_module

import bdl.composition.config  # noqa: F401  (registers the root schema)
from bdl.likelihoods import Categorical, Gaussian
from bdl.models.mlp import MLP
from bdl.potential import Potential
from bdl.priors import ARD, GammaHierarchical, Laplace, ScaleMixture, StudentT
from bdl.priors import Gaussian as GaussianPrior
from bdl.runner.run import run
from bdl.samplers.sghmc import SGHMC
from bdl.samplers.sgld import SGLD


def make_potential(temperature=1.0, num_data=1000):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    return Potential(model, Categorical(), GaussianPrior(2.0), num_data, temperature)


def test_minibatch_estimate_scales_likelihood_by_n_over_batch_and_divides_by_t():
    potential = make_potential(temperature=0.5)
    x, y = torch.randn(10, 3), torch.randint(0, 2, (10,))
    nll = torch.nn.functional.cross_entropy(potential.model(x), y, reduction="sum")
    params = torch.cat([p.flatten() for p in potential.model.parameters()])
    neg_log_prior = 0.5 * params.square().sum() / 4 + 0.5 * params.numel() * math.log(
        2 * math.pi * 4
    )
    expected = (1000 / 10 * nll + neg_log_prior) / 0.5
    value, grads = potential.closure(x, y)()
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)
    auto = torch.autograd.grad(expected, list(potential.model.parameters()))
    for g, a in zip(grads, auto):
        torch.testing.assert_close(g, a)


@pytest.mark.parametrize("chunk", [7, 30], ids=["five chunks", "one chunk"])
def test_full_closure_equals_one_big_batch_in_float64(chunk):
    potential = make_potential(num_data=30)
    x, y = torch.randn(30, 3), torch.randint(0, 2, (30,))
    whole, whole_grads = potential.closure(x, y)()
    chunked, chunked_grads = potential.full_closure(lambda: zip(x.split(chunk), y.split(chunk)))()
    assert chunked.dtype == torch.float64
    assert chunked.item() == pytest.approx(whole.item(), rel=1e-6)
    for a, b in zip(whole_grads, chunked_grads):
        torch.testing.assert_close(a, b)


def test_step_size_converts_per_datum_rates():
    """Chen et al.'s eta = 0.1 per datum is 2e-6 on U at N = 50 000, and on U_T = U / T, whose
    gradient is 1/T times U's, T times that: the same step on U at every temperature."""
    assert make_potential(num_data=50_000).step_size(0.1) == pytest.approx(2e-6)
    assert make_potential(0.01, num_data=50_000).step_size(0.1) == pytest.approx(2e-8)


@pytest.mark.parametrize("temperature", [1e-3, 0.5, 1.0])
@pytest.mark.parametrize("sampler", ["sgld", "sghmc"])
def test_a_tempered_step_is_wenzel_et_als(sampler, temperature):
    """Wenzel et al. (2020)'s tempered dynamics, by hand from the gradient of the untempered
    potential (T = 1) with h = lr / N: SGLD θ - h/2 ∇U + √(hT) z, SGHMC from rest θ - h ∇U +
    √(2αhT) z, the draws z from the sampler's generator. bdl's kernels, stepping on U_T at
    `step_size`, must take that step."""
    lr, alpha, num_data = 0.1, 0.1, 1000
    x, y = torch.randn(10, 3), torch.randint(0, 2, (10,))
    untempered = make_potential(num_data=num_data)
    start = [p.detach().clone() for p in untempered.params]
    _, grads = untempered.closure(x, y)()
    generator = torch.Generator().manual_seed(3)
    z = torch.randn(sum(p.numel() for p in start), generator=generator).split(
        [p.numel() for p in start]
    )
    h = lr / num_data
    drift, noise = (
        (h / 2, math.sqrt(h * temperature))
        if sampler == "sgld"
        else (h, math.sqrt(2 * alpha * h * temperature))
    )
    expected = [-drift * g + noise * d.view_as(g) for g, d in zip(grads, z)]
    tempered = make_potential(temperature, num_data)
    step = tempered.step_size(lr)
    generator.manual_seed(3)
    kernel = (
        SGLD(step, generator=generator)
        if sampler == "sgld"
        else SGHMC(step, alpha, generator=generator)
    )
    kernel.step(kernel.init(tempered.params), tempered.closure(x, y))
    for p, p0, e in zip(tempered.params, start, expected, strict=True):
        torch.testing.assert_close(p.detach() - p0, e, rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("kwargs", [{"num_data": 0}, {"temperature": 0.0}])
def test_invalid_potential_arguments(kwargs):
    with pytest.raises(ValueError):
        make_potential(**kwargs)


def test_gaussian_likelihood_and_its_precision_prior():
    likelihood = Gaussian()
    mean, y = torch.tensor([[0.5], [1.0]]), torch.tensor([0.0, 2.0])
    expected = torch.distributions.Normal(mean.squeeze(-1), 1.0).log_prob(y).sum()
    assert likelihood(mean, y).item() == pytest.approx(expected.item())
    # Gamma(1, 1) on τ = e^s with the Jacobian: log p(s) = s − e^s (+ const) at s = 0
    assert likelihood.log_prior().item() == pytest.approx(-1.0)
    assert len(list(likelihood.parameters())) == 1
    fixed = Gaussian(noise_std=0.5)
    assert list(fixed.parameters()) == []
    assert fixed.predict(mean)[:, 1].tolist() == pytest.approx([0.25, 0.25])
    with pytest.raises(ValueError, match="noise_std"):
        Gaussian(noise_std=-1.0)


# --- prior weight, Gibbs hooks and the variational (mean-field) closure -----------------------


def test_prior_weight_scales_only_the_prior_term():
    potential = make_potential(temperature=0.5)
    x, y = torch.randn(10, 3), torch.randint(0, 2, (10,))
    full, _ = potential.closure(x, y)()
    none, _ = potential.closure(x, y, prior_weight=0.0)()
    double, _ = potential.closure(x, y, prior_weight=2.0)()
    prior_term = full - none
    log_prior = potential.prior.log_prob(dict(potential.model.named_parameters()))
    assert prior_term.item() == pytest.approx(-log_prior.item() / 0.5, rel=1e-5)
    assert (double - none).item() == pytest.approx(2 * prior_term.item(), rel=1e-5)


def test_gibbs_step_resamples_prior_and_noise_precisions_and_traces_them():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    likelihood = Gaussian(gibbs=True)
    potential = Potential(model, likelihood, GammaHierarchical(), num_data=20)
    assert set(potential.hyperparameters()) == {
        "precision/weight",
        "precision/bias",
        "noise_precision",
    }
    x, y = torch.randn(20, 3), torch.randn(20)
    before = {k: v.clone() for k, v in potential.hyperparameters().items()}
    potential.gibbs_step(torch.Generator().manual_seed(0), lambda: zip(x.split(8), y.split(8)))
    after = potential.hyperparameters()
    assert all(not torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(ValueError, match="training set"):
        potential.gibbs_step(torch.Generator())


def mlp_potential(prior, temperature=1.0, num_data=50, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    ).double()
    return Potential(model, Categorical(), prior, num_data, temperature)


@pytest.mark.parametrize(
    "prior",
    [
        GaussianPrior(0.8, layers={"2.*": 0.3}, fan_in=True),
        GammaHierarchical(precision=2.0),
        ARD(precision=0.5),
        Laplace(0.5),  # not Gaussian: differentiated by autograd
    ],
    ids=["gaussian", "gamma_hierarchical", "ard", "laplace"],
)
@pytest.mark.parametrize("prior_weight", [1.0, 0.25])
def test_prior_term_and_gradient_match_autograd_of_the_log_density(prior, prior_weight):
    """Conditionally Gaussian priors are differentiated in closed form; the result must be
    autograd's, in the minibatch closure and the full-data one alike."""
    potential = mlp_potential(prior, temperature=0.5, num_data=12)
    x, y = torch.randn(12, 4, dtype=torch.float64), torch.randint(0, 3, (12,))
    data_term = torch.nn.functional.cross_entropy(potential.model(x), y, reduction="sum")
    log_prior = prior.log_prob(dict(potential.model.named_parameters()))
    for closure, weight in (
        (potential.closure(x, y, prior_weight), prior_weight),
        (potential.full_closure(lambda: zip(x.split(5), y.split(5))), 1.0),
    ):
        expected = (data_term - weight * log_prior) / 0.5
        value, grads = closure()
        assert value.item() == pytest.approx(expected.item(), rel=1e-12)
        for g, e in zip(grads, torch.autograd.grad(expected, potential.params, retain_graph=True)):
            torch.testing.assert_close(g, e)
    # the minibatch closure's value alone, by a forward pass
    value = potential.closure(x, y, prior_weight).value()
    assert value.item() == pytest.approx(((data_term - prior_weight * log_prior) / 0.5).item())


class _TwoParameters(torch.nn.Module):
    """logits = combine(x, a, b), for gradients that autograd hands back sharing memory."""

    def __init__(self, combine):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor([0.3, -0.2], dtype=torch.float64))
        self.b = torch.nn.Parameter(torch.tensor([0.1, 0.5], dtype=torch.float64))
        self.combine = combine

    def forward(self, x):
        return self.combine(x, self.a, self.b)


@pytest.mark.parametrize(
    "combine",
    [
        pytest.param(lambda x, a, b: x * (a + b), id="one-tensor-for-both"),
        pytest.param(lambda x, a, b: x * a + b.sum(), id="broadcast-view"),
    ],
)
def test_prior_gradient_is_added_to_each_parameter_alone_when_autograd_shares_memory(combine):
    potential = Potential(_TwoParameters(combine), Categorical(), GaussianPrior(0.5), num_data=4)
    x, y = torch.randn(4, 2, dtype=torch.float64), torch.tensor([0, 1, 1, 0])
    a, b = potential.params
    data_term = torch.nn.functional.cross_entropy(combine(x, a, b), y, reduction="sum")
    objective = data_term + 0.5 * (a.square().sum() + b.square().sum()) / 0.25
    expected = torch.autograd.grad(objective, [a, b])
    for closure in (potential.closure(x, y), potential.full_closure(lambda: [(x, y)])):
        _, grads = closure()
        for g, e in zip(grads, expected):
            torch.testing.assert_close(g, e)


def test_runner_gibbs_steps_in_any_sampler_are_traced(fake_data_root, isolated_cache, tmp_path):
    overrides = [
        f"dataset.root={fake_data_root}",
        "dataset=boston",
        "sampler=sgld",
        "sampler.lr=3e-4",  # the UCI step size (sampler=sghmc_uci's)
        "prior=ard",
        "likelihood.gibbs=true",
        "gibbs_every=3",
        "batch_size=32",
        "epochs=3",
        "burn_in=1",
        "thin=2",
    ]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", overrides=overrides)
    run(cfg, tmp_path)
    with (tmp_path / "curve.csv").open() as file:
        rows = list(csv.DictReader(file))
    columns = ["precision/layers.0.weight", "precision/layers.2.bias", "noise_precision"]
    for column in columns:
        values = [float(row[column]) for row in rows]
        assert len(set(values)) == len(values) and all(v > 0 for v in values)


def test_gibbs_sampled_noise_precision_is_not_a_parameter():
    likelihood = Gaussian(gibbs=True)
    assert list(likelihood.parameters()) == []
    assert likelihood.log_prior().item() == 0.0
    assert set(likelihood.hyperparameters()) == {"noise_precision"}
    assert Gaussian(noise_std=0.5).hyperparameters() == {}
    with pytest.raises(ValueError, match="noise_std"):
        Gaussian(noise_std=0.5, gibbs=True)


def test_prior_precision_is_the_prior_terms_curvature_over_t():
    """1/(σ² T) per parameter: σ = 2 for weights, 10 for biases, T = 0.5 (the Hessian of
    |θ|²/(2σ²T), by hand); None for a prior that is not Gaussian."""
    model = torch.nn.Linear(3, 2)
    prior = GaussianPrior(scale=2.0, layers={"bias": 10.0})
    precision = Potential(model, Categorical(), prior, 10, temperature=0.5).prior_precision()
    assert precision["weight"].shape == (2, 3) and precision["bias"].shape == (2,)
    assert torch.all(precision["weight"] == 0.5)
    assert torch.allclose(precision["bias"], torch.tensor(0.02))
    assert Potential(model, Categorical(), Laplace(), 10).prior_precision() is None


# --- chains stacked as one (bdl.runner.steppers)
# -----------------------------------------------------


def regression_potential(prior, temperature=0.7):
    """An MLP with a sampled noise precision (a likelihood parameter with a prior of its own)."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return Potential(model.double(), Gaussian().double(), prior, 40, temperature)


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("prior", [GaussianPrior(0.8), Laplace(0.5)], ids=["gaussian", "laplace"])
def test_regression_potential_matches_autograd_of_torch_distributions(prior, compile, request):
    """U of a regression network with a sampled noise precision, written with torch.distributions
    (the precision's Gamma(a, b) prior on s = log τ, Jacobian e^s included, up to its constant
    a log b - log Γ(a)) and differentiated by autograd: the closures' value and gradient, whose
    log p(s) is differentiated in closed form, must be the same, eager or compiled."""
    if compile:
        request.getfixturevalue("compiler")
    potential = regression_potential(prior, temperature=0.7)
    likelihood = Gaussian(prior_shape=2.0, prior_rate=3.0).double()
    potential = Potential(potential.model, likelihood, prior, 40, temperature=0.7, compile=compile)
    with torch.no_grad():
        likelihood.log_precision.fill_(0.4)
    x, y = torch.randn(40, 4, dtype=torch.float64), torch.randn(40, dtype=torch.float64)
    s = likelihood.log_precision
    noise = torch.distributions.Normal(potential.model(x).squeeze(-1), (-s / 2).exp())
    gamma = torch.distributions.Gamma(torch.tensor(2.0).double(), torch.tensor(3.0).double())
    log_p_s = gamma.log_prob(s.exp()) + s - (2.0 * math.log(3.0) - math.lgamma(2.0))
    log_prior = prior.log_prob(dict(potential.model.named_parameters()))
    for closure, n in (
        (potential.closure(x[:10], y[:10], prior_weight=0.5), 10),
        (potential.full_closure(lambda: zip(x.split(16), y.split(16))), 40),
    ):
        weight = 0.5 if n == 10 else 1.0
        data_term = -40 / n * noise.log_prob(y)[:n].sum()
        expected = (data_term - weight * (log_prior + log_p_s)) / 0.7
        value, grads = closure()
        assert value.item() == pytest.approx(expected.item(), rel=1e-12)
        if n == 10:  # the minibatch closure's value alone, by a forward pass
            assert closure.value().item() == pytest.approx(expected.item(), rel=1e-12)
        for g, e in zip(grads, torch.autograd.grad(expected, potential.params, retain_graph=True)):
            torch.testing.assert_close(g, e)


@pytest.mark.parametrize("prior", [GaussianPrior(0.8), Laplace(0.5), ScaleMixture(), StudentT()])
def test_stacked_closures_are_each_chains_own(prior):
    """``chain_closure`` and ``chain_full_closure`` on K stacked parameter sets give, per chain,
    the value and gradient of the one-chain closures at that chain's parameters."""
    potential = regression_potential(prior)
    chains = 3
    stacked = [
        torch.randn(chains, *p.shape, dtype=p.dtype, generator=torch.Generator().manual_seed(i))
        for i, p in enumerate(potential.params)
    ]
    x, y = (
        torch.randn(chains, 5, 4, dtype=torch.float64),
        torch.randn(chains, 5, dtype=torch.float64),
    )
    x_all, y_all = torch.randn(40, 4, dtype=torch.float64), torch.randn(40, dtype=torch.float64)

    def chunks():
        return zip(x_all.split(16), y_all.split(16))

    values, grads = potential.chain_closure(stacked, x, y, prior_weight=0.5)()
    full_values, full_grads = potential.chain_full_closure(stacked, chunks)()
    assert values.shape == full_values.shape == (chains,)
    for k in range(chains):
        with torch.no_grad():
            for p, s in zip(potential.params, stacked):
                p.copy_(s[k])
        value, grad = potential.closure(x[k], y[k], prior_weight=0.5)()
        assert values[k].item() == pytest.approx(value.item(), rel=1e-12)
        full_value, full_grad = potential.full_closure(chunks)()
        assert full_values[k].item() == pytest.approx(full_value.item(), rel=1e-12)
        for mine, theirs in [*zip(grads, grad), *zip(full_grads, full_grad)]:
            torch.testing.assert_close(mine[k], theirs)


@pytest.mark.parametrize(
    "model, prior",
    [("mlp", Laplace(0.5)), ("sequential", Laplace(0.5)), ("mlp", GaussianPrior(0.8))],
    ids=["mlp", "sequential", "mlp, prior in closed form"],
)
def test_compiled_stacked_closures_equal_eager_ones(model, prior, compiler):
    """With ``compile=True`` the stacked closures, by the MLP's ``chain_forward`` or by ``vmap``
    of a module without one, each per-chain minibatch and shared, give the eager closures' values
    and gradients (themselves checked chain by chain above) to float64 rounding; with a prior in
    closed form, the minibatch closures compile the prior's term with the data's."""
    torch.manual_seed(2)
    if model == "mlp":
        network = MLP(input_shape=(4,), out_features=1, hidden=[8], activation="relu")
    else:
        network = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    likelihood = Gaussian(prior_shape=2.0, prior_rate=3.0).double()
    compiled = Potential(network.double(), likelihood, prior, 40, 0.7, compile=True)
    eager = Potential(network, likelihood, copy.deepcopy(prior), 40, temperature=0.7)
    chains, generator = 3, torch.Generator().manual_seed(0)
    stacked = [
        torch.randn(chains, *p.shape, dtype=p.dtype, generator=generator) for p in eager.params
    ]
    x = torch.randn(chains, 5, 4, dtype=torch.float64, generator=generator)
    y = torch.randn(chains, 5, dtype=torch.float64, generator=generator)
    x_all = torch.randn(40, 4, dtype=torch.float64, generator=generator)
    y_all = torch.randn(40, dtype=torch.float64, generator=generator)

    def closures(potential):
        yield potential.chain_closure(stacked, x, y, prior_weight=0.5)
        yield potential.chain_closure(stacked, x_all[:5], y_all[:5], shared=True)
        yield potential.chain_full_closure(stacked, lambda: zip(x_all.split(16), y_all.split(16)))

    for mine, theirs in zip(closures(compiled), closures(eager), strict=True):
        (value, grads), (expected, expected_grads) = mine(), theirs()
        torch.testing.assert_close(value, expected, rtol=1e-12, atol=0)
        for grad, expected_grad in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("prior", [GaussianPrior(0.8), GammaHierarchical(2.0, 3.0)])
def test_compiled_prior_term_follows_the_hyperparameters(prior, compiler):
    """The compiled closed-form prior term reads the prior's current precisions: after a Gibbs
    step has changed them, closures of one chain and of stacked chains still equal the eager
    ones, which themselves changed."""
    eager = regression_potential(prior)
    compiled = Potential(eager.model, eager.likelihood, prior, 40, 0.7, compile=True)
    generator = torch.Generator().manual_seed(3)
    stacked = [torch.randn(2, *p.shape, dtype=p.dtype, generator=generator) for p in eager.params]
    x = torch.randn(40, 4, dtype=torch.float64, generator=generator)
    y = torch.randn(40, dtype=torch.float64, generator=generator)

    def closures(potential):
        yield potential.closure(x[:10], y[:10])
        yield potential.full_closure(lambda: zip(x.split(16), y.split(16)))
        if prior.vectorisable:
            yield potential.chain_full_closure(stacked, lambda: zip(x.split(16), y.split(16)))

    before = [closure()[0].clone() for closure in closures(eager)]
    for gibbs in (False, True):
        if gibbs:
            with torch.no_grad():
                for p in eager.model.parameters():
                    p.mul_(3.0)  # far from the initial precision's typical weights
            prior.gibbs_step(eager.model_params, torch.Generator().manual_seed(0))
        for mine, theirs in zip(closures(compiled), closures(eager), strict=True):
            (value, grads), (expected, expected_grads) = mine(), theirs()
            torch.testing.assert_close(value, expected, rtol=1e-12, atol=0)
            for grad, expected_grad in zip(grads, expected_grads, strict=True):
                torch.testing.assert_close(grad, expected_grad)
    if prior.hyperparameters():  # the Gibbs step changed the term the closures compare
        with torch.no_grad():
            for p in eager.model.parameters():
                p.div_(3.0)
        after = [closure()[0] for closure in closures(eager)]
        assert all(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_compile_without_a_compiler_warns_and_runs_eagerly(caplog):
    """A machine where Inductor finds no C++ compiler gets the eager gradient and one warning
    naming the fix, not a failed run."""
    eager = regression_potential(GaussianPrior(0.8))
    compiled = Potential(eager.model, eager.likelihood, GaussianPrior(0.8), 40, 0.7, compile=True)
    x, y = torch.randn(10, 4, dtype=torch.float64), torch.randn(10, dtype=torch.float64)
    torch._dynamo.reset()  # nothing compiled earlier may stand in, nor Inductor's caches below
    no_compiler = {"cpp.cxx": ("no-such-compiler",), "fx_graph_cache": False}
    with (
        torch._inductor.config.patch(no_compiler),
        torch._functorch.config.patch(enable_autograd_cache=False),
        caplog.at_level("WARNING", logger="bdl"),
    ):
        value, grads = compiled.closure(x, y)()
        compiled.closure(x, y)()
    expected, expected_grads = eager.closure(x, y)()
    assert value.item() == pytest.approx(expected.item(), rel=1e-12)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "compile=false" in warnings[0], warnings


def test_a_potential_without_data_or_temperature_is_refused_by_name():
    for kwargs, line in [
        ({"num_data": 0}, "num_data must be positive, got 0"),
        ({"temperature": 0.0}, "temperature must be positive, got 0.0"),
        ({"temperature": math.nan}, "temperature must be positive, got nan"),
    ]:
        with pytest.raises(ValueError) as error:
            make_potential(**kwargs)
        assert str(error.value) == line
    model = torch.nn.Linear(3, 1)
    potential = Potential(model, Gaussian(gibbs=True), GaussianPrior(1.0), 10)
    with pytest.raises(ValueError) as error:
        potential.gibbs_step(torch.Generator().manual_seed(0))
    assert str(error.value) == "the likelihood's Gibbs step needs the training set (batches=)"


def test_energy_is_the_minibatch_potential_over_t_with_the_prior_weighted_by_kappa():
    """``U_T = (-N/n Σ log p(y|x,θ) - κ Σ log p) / T`` by hand: N = 1000, n = 10, T = 2,
    κ = 0.5, a summed log-likelihood of -3 and prior log densities -2 and -1."""
    potential = make_potential(temperature=2.0, num_data=1000)
    log_lik, log_priors = torch.tensor(-3.0), [torch.tensor(-2.0), torch.tensor(-1.0)]
    energy = potential.energy(log_lik, log_priors, batch_size=10, prior_weight=0.5)
    assert energy.item() == pytest.approx((300 + 0.5 * 2 + 0.5 * 1) / 2)
    without_prior = potential.energy(log_lik, log_priors, batch_size=10, prior_weight=0.0)
    assert without_prior.item() == pytest.approx(300 / 2)
    assert potential.prior_scale(0.5) == pytest.approx(0.25)


def tempered_regression_potential(values, x, y, batch_size, prior_weight):
    """``U_T`` at T = 0.5 of a Linear(4, 8)-tanh-Linear(8, 1) network at ``values`` (its
    weights and biases, then the noise's log precision s) on N = 40 points, written with
    torch.distributions: ``-(N/n Σ log N(y | f(x), e^{-s/2}) + κ [Σ log N(θ | 0, 0.8²) + log
    Gamma(e^s | 2, 3) + s - (2 log 3 - log Γ(2))]) / T``, the Gamma density's constant left out
    as bdl leaves it out."""
    w1, b1, w2, b2, s = values
    f = (torch.tanh(x @ w1.T + b1) @ w2.T + b2).squeeze(-1)
    log_lik = torch.distributions.Normal(f, (-s / 2).exp()).log_prob(y).sum()
    double = functools.partial(torch.tensor, dtype=torch.float64)  # 0.8 not rounded to float32
    normal = torch.distributions.Normal(double(0.0), double(0.8))
    gamma = torch.distributions.Gamma(double(2.0), double(3.0))
    log_p_s = gamma.log_prob(s.exp()) + s - (2.0 * math.log(3.0) - math.lgamma(2.0))
    log_prior = sum(normal.log_prob(v).sum() for v in (w1, b1, w2, b2)) + log_p_s
    return -(40 / batch_size * log_lik + prior_weight * log_prior) / 0.5


def evaluated_once(evaluate, params, *at):
    """A sampler's program that evaluates the potential once, at ``params``."""
    value, grads = evaluate(params, *at)
    return value, list(grads)


def test_compiled_programs_are_the_tempered_potential_of_torch_distributions(compiler):
    """At T = 0.5 with a Gaussian prior (std 0.8) and a sampled noise precision under its Gamma
    prior: HMC's full-data program and the minibatch samplers' program, of one chain and of two
    stacked, give the value and the autograd gradient of `tempered_regression_potential`
    (κ = 0.5 on the minibatches), so that neither the temperature nor the prior term can be
    left out of the compiled paths alone."""
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    likelihood = Gaussian(prior_shape=2.0, prior_rate=3.0).double()
    potential = Potential(model.double(), likelihood, GaussianPrior(0.8), 40, 0.5, compile=True)
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(40, 4, dtype=torch.float64, generator=generator)
    y = torch.randn(40, dtype=torch.float64, generator=generator)
    stacked = [
        torch.randn(2, *p.shape, dtype=p.dtype, generator=generator) for p in potential.params
    ]
    index = torch.tensor([[3, 7, 11, 20, 31], [0, 5, 6, 22, 39]])
    kappa = torch.tensor(0.5, dtype=torch.float64)
    full_data = potential.full_closure(lambda: iter([(x, y)])).program
    one_chain = potential.indexed_minibatch_program(x, y)
    two_chains = potential.indexed_minibatch_program(x, y, chains=2)

    def chain(k):
        return [s[k] for s in stacked]

    def minibatch(k):  # chain k's minibatch, its size and κ
        return x[index[k]], y[index[k]], 5, 0.5

    cases = [  # a program's U_T and gradients, and each chain's arguments of the closed form
        (full_data(evaluated_once, chain(0)), [(chain(0), x, y, 40, 1.0)]),
        (one_chain(evaluated_once, chain(1), index[1], kappa), [(chain(1), *minibatch(1))]),
        (
            two_chains(evaluated_once, stacked, index, kappa),
            [(chain(0), *minibatch(0)), (chain(1), *minibatch(1))],
        ),
    ]
    for (values, grads), expected in cases:
        assert values.dtype == torch.float64 and values.numel() == len(expected)
        for k, (at, *arguments) in enumerate(expected):
            at = [v.clone().requires_grad_() for v in at]
            expected_value = tempered_regression_potential(at, *arguments)
            expected_grads = torch.autograd.grad(expected_value, at)
            assert values.reshape(-1)[k].item() == pytest.approx(expected_value.item(), rel=1e-12)
            for grad, expected_grad in zip(grads, expected_grads, strict=True):
                torch.testing.assert_close(grad[k] if len(expected) > 1 else grad, expected_grad)
