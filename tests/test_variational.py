"""The variational closure: the negative ELBO of a mean-field Gaussian and its gradient."""

import pytest
import torch
from test_potential import mlp_potential, regression_potential

from bdl.numerics import Buffer
from bdl.priors import Gaussian as GaussianPrior
from bdl.priors import ScaleMixture
from bdl.variational import MeanField, _LocalNoise


def mean_field(potential, seed, **kwargs):
    generator = torch.Generator().manual_seed(seed)
    mean = [p.detach().clone() for p in potential.params]
    std = [0.05 + 0.3 * torch.rand(p.shape, generator=generator, dtype=p.dtype) for p in mean]
    return MeanField(mean, std, **kwargs)


def estimates(closure, q, draws, seed):
    """Monte Carlo draws of the closure's value and flattened gradient at ``q``."""
    q.generator = torch.Generator().manual_seed(seed)
    values, grads = [], []
    for _ in range(draws):
        value, grad = closure(q)
        values.append(value)
        grads.append(torch.cat([g.flatten() for g in grad]))
    return torch.stack(values), torch.stack(grads)


def assert_same_expectation(a, b, sigmas=4.5):
    """Means of two independent Monte Carlo samples agree within ``sigmas`` standard errors."""
    error = (a.var(0) / a.shape[0] + b.var(0) / b.shape[0]).sqrt() + 1e-12
    z = (a.mean(0) - b.mean(0)).abs() / error
    assert z.max().item() < sigmas, z.max().item()


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_closed_form_kl_matches_torch_and_its_gradient(temperature):
    """Value at prior weight 1 minus prior weight 0 (same draws) is CE/T − H; at T = 1 the KL."""
    potential = mlp_potential(GaussianPrior(0.8), temperature)
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
    q = mean_field(potential, seed=1, local_reparam=False)
    mean = [m.clone().requires_grad_() for m in q.mean]
    std = [s.clone().requires_grad_() for s in q.std]
    prior = torch.distributions.Normal(0.0, torch.tensor(0.8, dtype=torch.float64))
    cross_entropy = sum(
        (
            torch.distributions.Normal(m, s).entropy()
            + torch.distributions.kl_divergence(torch.distributions.Normal(m, s), prior)
        ).sum()
        for m, s in zip(mean, std)
    )
    entropy = sum(torch.distributions.Normal(m, s).entropy().sum() for m, s in zip(mean, std))
    expected = cross_entropy / temperature - entropy
    expected_grads = torch.autograd.grad(expected, mean + std)
    generator = torch.Generator()
    (with_kl, grads), (without, grads_0) = (
        potential.closure(x, y, weight)(MeanField(q.mean, q.std, generator.manual_seed(5), False))
        for weight in (1.0, 0.0)
    )
    assert (with_kl - without).item() == pytest.approx(expected.item(), rel=1e-9)
    for g, g0, e in zip(grads, grads_0, expected_grads):
        torch.testing.assert_close(g - g0, e)


@pytest.mark.parametrize("local_reparam", [False, True])
def test_variational_data_term_is_divided_by_the_temperature(local_reparam):
    """Without the prior term (weight 0) the negative ELBO is −(N/n) Σ log p(y|x, θ) / T: the
    same draws at T = 0.25 give 4 times the value and gradient of T = 1."""
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
    results = []
    for temperature in (1.0, 0.25):
        potential = mlp_potential(GaussianPrior(0.8), temperature)
        q = mean_field(potential, seed=1)
        generator = torch.Generator().manual_seed(5)
        draw = MeanField(q.mean, q.std, generator, local_reparam)
        results.append(potential.closure(x, y, 0.0)(draw))
    (cold_value, cold_grads), (value, grads) = results
    assert value.item() == pytest.approx(4 * cold_value.item(), rel=1e-12)
    for g, cold in zip(grads, cold_grads):
        torch.testing.assert_close(g, 4 * cold)


def test_local_reparameterisation_noise_comes_from_q_generator():
    """Same q generator seed, different global seeds: the same estimate (a run's seed fixes it)."""
    potential = mlp_potential(GaussianPrior(0.8))
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
    q = mean_field(potential, seed=1)
    values = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        draw = MeanField(q.mean, q.std, torch.Generator().manual_seed(5), True)
        values.append(potential.closure(x, y)(draw)[0].item())
    assert values[0] == values[1]


def test_closed_form_kl_agrees_with_monte_carlo_kl_in_expectation():
    potential = mlp_potential(GaussianPrior(0.8))
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
    closure = potential.closure(x, y)
    analytic = estimates(closure, mean_field(potential, 1, local_reparam=False), 600, seed=2)
    monte_carlo = estimates(
        closure, mean_field(potential, 1, local_reparam=False, analytic_kl=False), 600, seed=3
    )
    for a, b in zip(analytic, monte_carlo):
        assert_same_expectation(a, b)


@pytest.mark.parametrize("prior", [GaussianPrior(0.8), ScaleMixture()], ids=["closed", "mc"])
def test_local_reparameterisation_agrees_with_weight_draws_in_expectation(prior):
    potential = mlp_potential(prior)
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
    closure = potential.closure(x, y)
    local = estimates(closure, mean_field(potential, 1, local_reparam=True), 600, seed=2)
    weights = estimates(closure, mean_field(potential, 1, local_reparam=False), 600, seed=3)
    for a, b in zip(local, weights):
        assert_same_expectation(a, b)
    # the point of the trick: a smaller variance of the likelihood's gradient
    assert local[1].var(0).sum() < weights[1].var(0).sum()


def test_variational_closure_at_zero_variance_is_the_plain_potential():
    potential = mlp_potential(GaussianPrior(0.8))
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
    plain, plain_grads = potential.closure(x, y, prior_weight=0.0)()
    q = MeanField(
        [p.detach() for p in potential.params],
        [torch.full_like(p, 1e-12) for p in potential.params],
        torch.Generator().manual_seed(0),
    )
    value, grads = potential.closure(x, y, prior_weight=0.0)(q)
    assert value.item() == pytest.approx(plain.item(), rel=1e-9)
    for g, p in zip(grads, plain_grads):
        torch.testing.assert_close(g, p)


@pytest.mark.parametrize("bias", [True, False])
def test_local_reparameterisation_backward_is_the_derivative(bias):
    generator = torch.Generator().manual_seed(0)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    x = draw(5, 4).requires_grad_()
    std_weight = (0.1 + draw(3, 4).abs()).requires_grad_()
    std_bias = (0.1 + draw(3).abs()).requires_grad_() if bias else None
    noise = draw(5, 3)
    inputs = (x, std_weight, std_bias, noise)
    assert torch.autograd.gradcheck(lambda *a: _LocalNoise.apply(*a), inputs)


def test_variational_closure_keeps_the_noise_precisions_prior():
    """Under ``functional_call`` the sampled noise precision is a plain tensor; its prior term
    must count all the same (at zero variance the variational gradient in the means is the
    plain potential's, prior terms included)."""
    potential = regression_potential(GaussianPrior(0.8), temperature=1.0)
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    with torch.no_grad():
        potential.likelihood.log_precision.fill_(0.7)
    _, plain_grads = potential.closure(x, y)()
    q = MeanField(
        [p.detach() for p in potential.params],
        [torch.full_like(p, 1e-12) for p in potential.params],
        torch.Generator().manual_seed(0),
    )
    _, grads = potential.closure(x, y)(q)
    for g, p in zip(grads[: len(plain_grads)], plain_grads):
        torch.testing.assert_close(g, p)


@pytest.mark.parametrize("local_reparam", [False, True])
def test_monte_carlo_prior_term_is_the_density_at_the_draw_with_its_gradient(local_reparam):
    """Prior weight 1 minus prior weight 0 (same draws θ = μ + σ ε, and the same local noise) is
    −log p(θ) − H[q], with its gradient in (μ, σ) through θ; p the scale mixture as
    torch.distributions has it."""
    potential = mlp_potential(ScaleMixture(pi=0.25, neg_log_sigma1=1.0, neg_log_sigma2=3.0))
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
    q = mean_field(potential, seed=1)
    size = sum(m.numel() for m in q.mean)
    flat = torch.empty(size, dtype=torch.float64)
    generators = [torch.Generator().manual_seed(5) for _ in range(3)]
    flat.normal_(generator=generators[2])  # q's draw of θ: one flat buffer
    if local_reparam:  # without the prior term no weight is drawn: the local noise comes first
        torch.empty(size, dtype=torch.float64).normal_(generator=generators[1])
    (with_prior, grads), (without, grads_0) = (
        potential.closure(x, y, weight)(MeanField(q.mean, q.std, generator, local_reparam))
        for weight, generator in zip((1.0, 0.0), generators)
    )
    mean = [m.clone().requires_grad_() for m in q.mean]
    std = [s.clone().requires_grad_() for s in q.std]
    noise = flat.split([m.numel() for m in mean])
    mixture = torch.distributions.MixtureSameFamily(
        torch.distributions.Categorical(torch.tensor([0.25, 0.75], dtype=torch.float64)),
        torch.distributions.Normal(
            torch.zeros(2, dtype=torch.float64),
            torch.tensor([torch.e**-1.0, torch.e**-3.0], dtype=torch.float64),
        ),
    )
    expected = sum(
        -mixture.log_prob(m + s * eps.view_as(m)).sum()
        - torch.distributions.Normal(m, s).entropy().sum()
        for m, s, eps in zip(mean, std, noise)
    )
    assert (with_prior - without).item() == pytest.approx(expected.item(), rel=1e-9)
    for g, g0, e in zip(grads, grads_0, torch.autograd.grad(expected, mean + std)):
        torch.testing.assert_close(g - g0, e)


def test_gradients_kept_in_a_buffer_are_those_in_fresh_memory():
    potential = mlp_potential(GaussianPrior(0.8))
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
    q = mean_field(potential, seed=1)
    buffer = Buffer()
    results = [
        potential.closure(x, y)(
            MeanField(q.mean, q.std, torch.Generator().manual_seed(5), gradients=gradients)
        )
        for gradients in (None, buffer, buffer)
    ]
    (value, fresh), *kept = results
    for kept_value, kept_grads in kept:
        assert kept_value.item() == value.item()
        for a, b in zip(fresh, kept_grads):
            assert torch.equal(a, b)
    # the buffer's memory, reused: each evaluation overwrites the last one's gradients in σ
    assert any(a.data_ptr() == b.data_ptr() for a, b in zip(kept[0][1], kept[1][1]))
