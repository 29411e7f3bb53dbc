import pytest
import torch

from bdl.priors import Gaussian


def test_gaussian_prior_matches_torch_distributions():
    params = {"a": torch.randn(3, 4), "b": torch.randn(5)}
    expected = sum(torch.distributions.Normal(0.0, 0.3).log_prob(p).sum() for p in params.values())
    assert Gaussian(0.3).log_prob(params).item() == pytest.approx(expected.item(), rel=1e-5)


def test_gaussian_prior_rejects_non_positive_scale():
    with pytest.raises(ValueError, match="scale"):
        Gaussian(0.0)
