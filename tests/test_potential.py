import math

import pytest
import torch

from bdl.likelihoods import Categorical, Gaussian
from bdl.potential import Potential
from bdl.priors import Gaussian as GaussianPrior


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


def test_full_closure_equals_one_big_batch_in_float64():
    potential = make_potential(num_data=30)
    x, y = torch.randn(30, 3), torch.randint(0, 2, (30,))
    whole, whole_grads = potential.closure(x, y)()
    chunked, chunked_grads = potential.full_closure(lambda: zip(x.split(7), y.split(7)))()
    assert chunked.dtype == torch.float64
    assert chunked.item() == pytest.approx(whole.item(), rel=1e-6)
    for a, b in zip(whole_grads, chunked_grads):
        torch.testing.assert_close(a, b)


def test_step_size_converts_per_datum_rates():
    assert make_potential(num_data=50_000).step_size(0.1) == pytest.approx(2e-6)


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
