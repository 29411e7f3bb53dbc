"""Each prior against torch.distributions (log-density and gradient), per-layer and fan-in
scales, and the Gibbs steps' conditionals (a prior group's precision, the regression noise
precision) against a long Metropolis run on their density."""

import math

import pytest
import torch
from torch import distributions as D

from bdl import priors
from bdl.likelihoods import Gaussian as GaussianLikelihood
from bdl.priors import (
    ARD,
    ELEMENTWISE_CHUNK,
    GammaHierarchical,
    Gaussian,
    Laplace,
    ScaleMixture,
    StudentT,
)


def test_gaussian_prior_matches_torch_distributions():
    params = {"a": torch.randn(3, 4), "b": torch.randn(5)}
    expected = sum(torch.distributions.Normal(0.0, 0.3).log_prob(p).sum() for p in params.values())
    assert Gaussian(0.3).log_prob(params).item() == pytest.approx(expected.item(), rel=1e-5)


def test_gaussian_prior_rejects_non_positive_scale():
    with pytest.raises(ValueError, match="scale"):
        Gaussian(0.0)


# --- per-layer, fan-in and the other elementwise families ------------------------------------

NAMED = {"layers.0.weight": (5, 3), "layers.0.bias": (5,), "layers.2.weight": (2, 5)}


def named_params(seed=0):
    generator = torch.Generator().manual_seed(seed)
    return {
        name: torch.randn(shape, generator=generator, dtype=torch.float64).requires_grad_()
        for name, shape in NAMED.items()
    }


def mixture(pi, s1, s2):
    return D.MixtureSameFamily(
        D.Categorical(torch.tensor([pi, 1 - pi], dtype=torch.float64)),
        D.Normal(torch.zeros(2, dtype=torch.float64), torch.stack([s1, s2])),
    )


# (prior, the torch.distributions density it must equal, for a tensor at scale s)
FAMILIES = {
    "gaussian": (Gaussian(0.7), lambda s: D.Normal(0.0, s)),
    "laplace": (Laplace(0.7), lambda s: D.Laplace(0.0, s)),
    "student_t": (
        StudentT(df=3.0, scale=0.7),
        lambda s: D.StudentT(torch.tensor(3.0, dtype=torch.float64), 0.0, s),
    ),
    "scale_mixture": (
        ScaleMixture(pi=0.25, neg_log_sigma1=1.0, neg_log_sigma2=6.0, scale=0.7),
        lambda s: mixture(0.25, s * math.exp(-1.0), s * math.exp(-6.0)),
    ),
}


def float64(value):
    return torch.as_tensor(value, dtype=torch.float64)


def normal(std):
    return D.Normal(0.0, float64(std))


def check_against(prior, densities):
    """``prior`` equals the torch.distributions ``densities`` (by parameter name), gradient too."""
    params = named_params()
    prior.bind(params)
    ours = prior.log_prob(params)
    theirs = sum(densities[n].log_prob(p).sum() for n, p in params.items())
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-9)
    ours_grad = torch.autograd.grad(ours, list(params.values()))
    theirs_grad = torch.autograd.grad(theirs, list(params.values()))
    for a, b in zip(ours_grad, theirs_grad):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("family", FAMILIES)
def test_elementwise_priors_match_torch_distributions_with_gradients(family):
    prior, density = FAMILIES[family]
    check_against(prior, {n: density(float64(0.7)) for n in NAMED})


@pytest.mark.parametrize("family", FAMILIES)
def test_per_layer_scales_and_fan_in_scaling(family):
    prior, density = FAMILIES[family]
    prior = type(prior)(**{**vars_of(prior), "layers": {"*.bias": 3.0}, "fan_in": True})
    # the bias keeps its layer's scale; weights have variance s^2 / fan-in
    scales = {"layers.0.weight": 0.7 / math.sqrt(3), "layers.0.bias": 3.0}
    scales["layers.2.weight"] = 0.7 / math.sqrt(5)
    check_against(prior, {n: density(float64(s)) for n, s in scales.items()})


@pytest.mark.parametrize("num_chains", [1, 3])
@pytest.mark.parametrize("family", FAMILIES)
def test_chain_log_prob_is_each_stacked_chains_density(family, num_chains):
    """Chains stacked along a first dimension (bdl.runner.steppers): one log-density per chain, with
    its
    gradient, at the per-layer and fan-in scales that bind() resolved on one chain's shapes (a
    stack of one chain included)."""
    prior, density = FAMILIES[family]
    prior = type(prior)(**{**vars_of(prior), "layers": {"*.bias": 3.0}, "fan_in": True})
    chains = [named_params(seed) for seed in range(num_chains)]
    prior.bind(chains[0])
    stacked = {
        name: torch.stack([chain[name] for chain in chains]).detach().requires_grad_()
        for name in NAMED
    }
    scales = {"layers.0.weight": 0.7 / math.sqrt(3), "layers.0.bias": 3.0}
    scales["layers.2.weight"] = 0.7 / math.sqrt(5)
    ours = prior.chain_log_prob(stacked)
    theirs = torch.stack(
        [
            sum(density(float64(scales[n])).log_prob(p[k]).sum() for n, p in stacked.items())
            for k in range(len(chains))
        ]
    )
    torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=0)
    for a, b in zip(
        torch.autograd.grad(ours.sum(), list(stacked.values())),
        torch.autograd.grad(theirs.sum(), list(stacked.values())),
        strict=True,
    ):
        torch.testing.assert_close(a, b)


def vars_of(prior):
    """The constructor arguments a FAMILIES prior was built with."""
    keys = {"scale": prior.scale}
    if isinstance(prior, StudentT):
        keys["df"] = prior.df
    if isinstance(prior, ScaleMixture):
        keys |= {
            "pi": prior.pi,
            "neg_log_sigma1": -math.log(prior.sigma1),
            "neg_log_sigma2": -math.log(prior.sigma2),
        }
    return keys


def test_first_matching_layer_pattern_wins_and_a_typo_is_reported():
    prior = Gaussian(1.0, layers={"layers.0.*": 2.0, "*.weight": 3.0})
    prior.bind(named_params())
    assert prior.scale_of("layers.0.weight", torch.zeros(5, 3)) == 2.0
    assert prior.scale_of("layers.2.weight", torch.zeros(2, 5)) == 3.0
    with pytest.raises(ValueError, match="layers.9"):
        Gaussian(1.0, layers={"layers.9.*": 2.0}).bind(named_params())


@pytest.mark.parametrize(
    "build, key",
    [
        (lambda: Laplace(-1.0), "scale"),
        (lambda: StudentT(df=0.0), "df"),
        (lambda: ScaleMixture(pi=1.0), "pi"),
        (lambda: Gaussian(1.0, layers={"*": 0.0}), "layers"),
        (lambda: GammaHierarchical(alpha=0.0), "alpha"),
        (lambda: ARD(beta=-1.0), "beta"),
    ],
)
def test_bad_prior_hyperparameters_name_the_key(build, key):
    with pytest.raises(ValueError, match=key):
        build()


# --- hierarchical priors and their Gibbs step -------------------------------------------------


def test_gamma_hierarchical_is_gaussian_given_each_tensor_precision():
    params = named_params()
    prior = GammaHierarchical(precision=4.0)
    prior.bind(params)
    prior.precisions["layers.0.bias"].fill_(9.0)
    stds = {n: 0.5 for n in NAMED} | {"layers.0.bias": 1 / 3}
    check_against(prior, {n: normal(s) for n, s in stds.items()})
    assert prior.gaussian_std("layers.0.bias", params["layers.0.bias"]).item() == pytest.approx(
        1 / 3
    )
    assert set(prior.hyperparameters()) == {f"precision/{n}" for n in NAMED}


def test_ard_has_one_precision_per_input_unit():
    params = named_params()
    prior = ARD()
    prior.bind(params)
    assert prior.precisions["layers.0.weight"].shape == (1, 3)
    assert prior.precisions["layers.0.bias"].shape == (1,)
    prior.precisions["layers.0.weight"].copy_(torch.tensor([[1.0, 4.0, 16.0]]))
    densities = {n: normal(1.0) for n in NAMED} | {"layers.0.weight": normal([1.0, 0.5, 0.25])}
    check_against(prior, densities)


def metropolis_precision(rate_of_data, size, alpha, beta, temperature, steps, seed):
    """Random-walk Metropolis on log λ for the tempered density
    [Gamma(λ; α, β) Π_i N(w_i; 0, 1/λ)]^(1/T), written from the densities, not the conjugacy."""
    generator = torch.Generator().manual_seed(seed)

    def log_target(log_lam):
        lam = math.exp(log_lam)
        log_joint = (alpha - 1) * log_lam - beta * lam + 0.5 * size * log_lam - lam * rate_of_data
        return log_joint / temperature + log_lam  # + Jacobian of λ = e^s

    chain, current = [], 0.0
    current_log = log_target(current)
    steps_normal = torch.randn(steps, generator=generator, dtype=torch.float64).tolist()
    uniforms = torch.rand(steps, generator=generator, dtype=torch.float64).tolist()
    for z, u in zip(steps_normal, uniforms):
        proposal = current + 0.3 * z
        proposal_log = log_target(proposal)
        if math.log(u) < proposal_log - current_log:
            current, current_log = proposal, proposal_log
        chain.append(math.exp(current))
    return torch.tensor(chain[steps // 10 :], dtype=torch.float64)


def gibbs_draws(which, values, alpha, beta, temperature, count):
    """``count`` Gibbs draws of the precision of ``values``: a prior group's, or the regression
    noise's with ``values`` the residuals (zero predictions against targets ``values``)."""
    generator = torch.Generator().manual_seed(0)
    draws = []
    if which == "prior":
        prior = GammaHierarchical(alpha=alpha, beta=beta)
        for _ in range(count):
            prior.gibbs_step({"w": values}, generator, temperature)
            draws.append(prior.precisions["w"].item())
    else:
        likelihood = GaussianLikelihood(prior_shape=alpha, prior_rate=beta, gibbs=True).double()
        chunks = [
            (torch.zeros(len(part), 1, dtype=torch.float64), part) for part in values.split(7)
        ]
        for _ in range(count):
            likelihood.gibbs_step(chunks, generator, temperature)
            draws.append(likelihood.hyperparameters()["noise_precision"].item())
    return torch.tensor(draws, dtype=torch.float64)


@pytest.mark.parametrize("which", ["prior", "noise"])
@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_gibbs_conditional_matches_a_long_metropolis_run(which, temperature):
    """The conjugate draw against Metropolis on the density: same mean, spread and quantiles."""
    values = torch.randn(40, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 0.5
    alpha, beta = 2.0, 1.5
    gibbs = gibbs_draws(which, values, alpha, beta, temperature, 10000)
    chain = metropolis_precision(
        0.5 * values.square().sum().item(), values.numel(), alpha, beta, temperature, 200_000, 1
    )
    assert gibbs.mean().item() == pytest.approx(chain.mean().item(), rel=0.02)
    assert gibbs.std().item() == pytest.approx(chain.std().item(), rel=0.05)
    for q in (0.1, 0.5, 0.9):
        assert torch.quantile(gibbs, q).item() == pytest.approx(
            torch.quantile(chain, q).item(), rel=0.03
        )


def test_gibbs_step_is_reproducible_from_its_generator():
    def run(seed):
        prior = ARD()
        params = named_params()
        prior.gibbs_step(params, torch.Generator().manual_seed(seed))
        return torch.cat([lam.flatten() for lam in prior.precisions.values()])

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


def test_gaussian_elementwise_log_density_is_the_normal_log_pdf():
    """The elementwise form (used where a prior is evaluated per weight) against torch, at a
    scale where σ² ≠ 2σ."""
    theta = torch.linspace(-2, 2, 9, dtype=torch.float64)
    expected = torch.distributions.Normal(0.0, 0.7).log_prob(theta)
    torch.testing.assert_close(Gaussian(0.7).log_density(theta, 0.7), expected)


def test_gamma_hierarchical_std_before_any_log_prob():
    """A variational run asks for the prior's σ = λ^(-1/2) before the prior has seen the weights
    (the closed-form KL comes first): λ starts at its initial value, here 4, so σ = 1/2."""
    prior = GammaHierarchical(precision=4.0)
    std = prior.gaussian_std("layers.0.weight", torch.zeros(3, 2))
    torch.testing.assert_close(std.expand(3, 2), torch.full((3, 2), 0.5))


def test_gaussian_terms_live_on_the_parameters_device():
    """The cached per-tensor precisions are built on the parameters' device: parameters on the
    ``meta`` device stand in for a GPU's here (an operation mixing them with CPU tensors fails
    as it would on CUDA)."""
    params = {"a": torch.zeros(3, 2, device="meta"), "b": torch.zeros(4, device="meta")}
    prior = Gaussian(0.5, layers={"b": 2.0})
    assert prior.log_prob(params).device.type == "meta"
    chains = {name: torch.zeros(2, *p.shape, device="meta") for name, p in params.items()}
    assert prior.chain_log_prob(chains).shape == (2,)


@pytest.mark.parametrize("family", FAMILIES)
def test_log_prob_grad_matches_torch_distributions(family):
    """The value and gradient outside autograd (the scale mixture's in closed form) equal
    torch.distributions' density and its autograd gradient, from weights well inside the narrow
    component to far outside the wide one."""
    prior, density = FAMILIES[family]
    params = {
        name: p.detach() * torch.logspace(-4, 1, p.numel(), dtype=torch.float64).view_as(p)
        for name, p in named_params().items()
    }
    prior.bind(params)
    value, grads = prior.log_prob_grad(params)
    leaves = [p.clone().requires_grad_() for p in params.values()]
    theirs = sum(density(float64(0.7)).log_prob(p).sum() for p in leaves)
    assert value.item() == pytest.approx(theirs.item(), rel=1e-9)
    for ours, expected in zip(grads, torch.autograd.grad(theirs, leaves)):
        torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize("shape", ["longer than a part", "transposed"])
def test_log_prob_grad_of_an_awkward_tensor(shape):
    """A tensor split into several parts (ELEMENTWISE_CHUNK), or not contiguous, has the whole
    tensor's value and gradient, as torch.distributions has them."""
    prior, density = FAMILIES["scale_mixture"]
    if shape == "transposed":
        theta = 0.05 * named_params()["layers.0.weight"].detach().t()
    else:
        generator = torch.Generator().manual_seed(0)
        numel = 2 * ELEMENTWISE_CHUNK + 3
        theta = 0.05 * torch.randn(numel, generator=generator, dtype=torch.float64)
    prior.bind({"w": theta})
    value, (grad,) = prior.log_prob_grad({"w": theta})
    leaf = theta.clone().requires_grad_()
    expected = density(float64(0.7)).log_prob(leaf).sum()
    assert value.item() == pytest.approx(expected.item(), rel=1e-9)
    torch.testing.assert_close(grad, torch.autograd.grad(expected, leaf)[0])


@pytest.mark.parametrize("family", [*FAMILIES, "gamma_hierarchical"])
def test_log_prob_grad_into_the_parameters_own_memory(family):
    """``out`` may be the parameters' memory: the same value and gradient as in fresh memory
    (by autograd for a prior that is not elementwise)."""
    prior = GammaHierarchical() if family == "gamma_hierarchical" else FAMILIES[family][0]
    params = {name: 0.3 * p.detach() for name, p in named_params().items()}
    prior.bind(params)
    value, grads = prior.log_prob_grad(params)
    copies = [p.clone() for p in params.values()]
    value_in_place, in_place = prior.log_prob_grad(dict(zip(params, copies)), out=copies)
    assert value_in_place.item() == value.item()
    for ours, expected, memory in zip(in_place, grads, copies):
        assert ours.data_ptr() == memory.data_ptr()
        torch.testing.assert_close(ours, expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "make, line",
    [
        (lambda: priors.Gaussian(scale=0), "prior.scale must be positive and finite, got 0"),
        (
            lambda: priors.Gaussian(scale=1e30),
            "prior.scale=1e+30 is outside [1e-12, 1e+12]: its precision 1/scale² (1e-60) leaves "
            "float32 arithmetic (potentials of inf or 0); choose a scale in that range",
        ),
        (
            lambda: priors.Gaussian(layers=3),
            "prior.layers=3 is not a mapping of parameter-name patterns to scales: write e.g. "
            "prior.layers='{\"*.bias\": 10.0}', or null for none",
        ),
        (
            lambda: priors.Gaussian(layers={"fc*": -1.0}),
            "prior.layers['fc*'] must be a positive, finite scale, got -1.0",
        ),
        (
            lambda: priors.StudentT(df=0),
            "prior.df (degrees of freedom) must be positive and finite, got 0",
        ),
        (
            lambda: priors.ScaleMixture(pi=1),
            "prior.pi (the wide component's weight) must be in (0, 1), got 1",
        ),
        (
            lambda: priors.ScaleMixture(neg_log_sigma1=1000),
            "prior.neg_log_sigma1=1000 is out of range: σ = e^-neg_log_sigma1 must be a positive "
            "double; use a value between -100 and 100 (Blundell et al. 2015 searched 0 to 8)",
        ),
    ],
)
def test_a_prior_out_of_range_is_one_line_naming_its_key_and_range(make, line):
    with pytest.raises(ValueError) as error:
        make()
    assert str(error.value) == line
