"""Likelihoods against torch.distributions, at parameter values where the plausible mistakes (a
log-precision read as a log-variance, a prior without its Jacobian) give different numbers."""

import math

import pytest
import torch
from torch.distributions import Categorical as CategoricalDist
from torch.distributions import Gamma, Normal

from bdl.likelihoods import Categorical, Gaussian, Likelihood

MEAN = torch.tensor([[0.3], [-1.2], [2.0], [0.0]])
Y = torch.tensor([0.5, -0.4, 1.1, -2.0])


@pytest.mark.parametrize("s", [-1.3, 0.7, 2.0])
def test_gaussian_log_likelihood_at_precision_exp_s_is_normal_with_std_exp_minus_s_over_2(s):
    likelihood = Gaussian()
    with torch.no_grad():
        likelihood.log_precision.fill_(s)
    expected = Normal(MEAN.squeeze(-1), math.exp(-s / 2)).log_prob(Y).sum()
    torch.testing.assert_close(likelihood(MEAN, Y).detach(), expected)
    predictive = likelihood.predict(MEAN)
    torch.testing.assert_close(predictive[:, 0], MEAN.squeeze(-1))
    torch.testing.assert_close(predictive[:, 1], torch.full((4,), math.exp(-s)))


def test_fixed_noise_std_is_the_normal_scale():
    likelihood = Gaussian(noise_std=0.4)
    expected = Normal(MEAN.squeeze(-1), 0.4).log_prob(Y).sum()
    torch.testing.assert_close(likelihood(MEAN, Y), expected)
    assert list(likelihood.parameters()) == [] and likelihood.log_prior().item() == 0.0
    torch.testing.assert_close(likelihood.predict(MEAN)[:, 1], torch.full((4,), 0.16))


@pytest.mark.parametrize("shape, rate", [(1.0, 1.0), (2.5, 0.7)])
def test_log_precision_prior_is_the_gamma_density_with_its_jacobian(shape, rate):
    """τ = e^s ~ Gamma(a, b) gives s the density Gamma(a, b).pdf(e^s) · e^s (change of
    variables), so log p(s) = Gamma.log_prob(e^s) + s, up to a constant that differences cancel."""
    likelihood = Gaussian(prior_shape=shape, prior_rate=rate)
    values = []
    for s in (-0.8, 0.0, 1.5):
        with torch.no_grad():
            likelihood.log_precision.fill_(s)
        values.append(likelihood.log_prior().item())
    expected = [
        Gamma(shape, rate).log_prob(torch.tensor(math.exp(s))).item() + s for s in (-0.8, 0, 1.5)
    ]
    for i in (1, 2):  # float32 arithmetic: a dropped Jacobian would be off by 0.8 and 2.3
        assert values[i] - values[0] == pytest.approx(expected[i] - expected[0], abs=1e-5)


def test_gibbs_noise_precision_follows_its_conjugate_gamma():
    """τ | r ~ Gamma(a + N/2, b + Σr²/2): the mean and variance of 4000 draws against the closed
    form, within 4 Monte Carlo standard errors."""
    likelihood = Gaussian(prior_shape=2.0, prior_rate=3.0, gibbs=True)
    generator = torch.Generator().manual_seed(0)
    chunks = [(MEAN[:2], Y[:2]), (MEAN[2:], Y[2:])]
    draws = []
    for _ in range(4000):
        likelihood.gibbs_step(chunks, generator)
        draws.append(likelihood.hyperparameters()["noise_precision"].item())
    draws = torch.tensor(draws, dtype=torch.float64)
    posterior = Gamma(2.0 + 4 / 2, 3.0 + (Y - MEAN.squeeze(-1)).square().sum().double() / 2)
    standard_error = (posterior.variance / len(draws)).sqrt()
    assert abs(draws.mean() - posterior.mean) < 4 * standard_error
    # the variance's own standard error, from the Gamma's fourth central moment
    k, theta = posterior.concentration, 1 / posterior.rate
    fourth = 3 * k * (k + 2) * theta**4
    variance_error = ((fourth - posterior.variance**2) / len(draws)).sqrt()
    assert abs(draws.var() - posterior.variance) < 4 * variance_error


def test_categorical_is_the_sum_of_log_softmax_at_the_labels():
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 0.0, 3.0], [-2.0, 1.0, 1.0]])
    labels = torch.tensor([0, 1, 2])
    expected = CategoricalDist(logits=logits).log_prob(labels).sum()
    torch.testing.assert_close(Categorical()(logits, labels), expected)
    torch.testing.assert_close(Categorical().predict(logits), CategoricalDist(logits=logits).probs)


@pytest.mark.parametrize("noise_std", [None, 0.4])
def test_gaussian_chain_forward_is_each_chains_normal_log_density(noise_std):
    """Chains stacked in front: each chain's mean at its own log precision (sampled), or at the
    one fixed noise scale."""
    s = torch.tensor([-1.3, 0.7, 2.0])
    means = MEAN.squeeze(-1) + torch.tensor([[0.0], [0.5], [-1.0]])
    stds = s.mul(-0.5).exp() if noise_std is None else torch.full((3,), noise_std)
    expected = Normal(means, stds.unsqueeze(1)).log_prob(Y).sum(-1)
    likelihood = Gaussian(noise_std=noise_std)
    phi = [s] if noise_std is None else []
    torch.testing.assert_close(likelihood.chain_forward(means.unsqueeze(-1), Y, phi), expected)
    # the base class's way, for likelihoods without a closed form of their own
    generic = Likelihood.chain_forward(likelihood, means.unsqueeze(-1), Y, phi)
    torch.testing.assert_close(generic, expected)


@pytest.mark.parametrize("own_labels", [False, True])
def test_categorical_chain_forward_is_each_chains_log_softmax_sum(own_labels):
    logits = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([0, 2, 1, 1])
    targets = torch.stack([labels, labels.flip(0)]) if own_labels else labels
    expected = torch.stack(
        [
            CategoricalDist(logits=logits[k]).log_prob(targets[k] if own_labels else labels).sum()
            for k in range(2)
        ]
    )
    torch.testing.assert_close(Categorical().chain_forward(logits, targets, []), expected)


@pytest.mark.parametrize(
    "kwargs, line",
    [
        ({"noise_std": 0}, "likelihood.noise_std must be positive and finite (or null), got 0"),
        (
            {"prior_shape": 0},
            "likelihood.prior_shape and likelihood.prior_rate must be positive and finite, got 0 "
            "and 1.0",
        ),
        (
            {"noise_std": 0.5, "gibbs": True},
            "likelihood.gibbs=true resamples the noise precision, so it needs "
            "likelihood.noise_std=null (got 0.5)",
        ),
    ],
)
def test_a_likelihood_out_of_range_is_one_line_naming_its_key(kwargs, line):
    with pytest.raises(ValueError) as error:
        Gaussian(**kwargs)
    assert str(error.value) == line
