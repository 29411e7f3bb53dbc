import pytest
import torch

from bdl.models import FilterResponseNorm, ResNet20FRN


def test_resnet20_frn_cifar_forward_and_size():
    torch.manual_seed(0)
    model = ResNet20FRN(input_shape=(3, 32, 32), out_features=10)
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()
    # Izmailov et al. (2021) report ~0.27M parameters for ResNet-20-FRN on CIFAR-10.
    n_params = sum(p.numel() for p in model.parameters())
    assert 0.26e6 < n_params < 0.28e6


def test_resnet20_frn_has_no_batch_statistics():
    model = ResNet20FRN(input_shape=(1, 28, 28), out_features=10)
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert list(model.buffers()) == []
    # An example's output must not depend on the rest of its batch.
    x = torch.randn(3, 1, 28, 28)
    torch.testing.assert_close(model(x)[:1], model(x[:1]))
    assert model(x).shape == (3, 10)


def test_resnet20_frn_rejects_flat_inputs():
    with pytest.raises(ValueError, match="image"):
        ResNet20FRN(input_shape=(13,), out_features=1)


def test_frn_normalises_to_unit_mean_square_per_channel():
    frn = FilterResponseNorm(4)
    with torch.no_grad():
        frn.tau.fill_(-float("inf"))
    x = torch.randn(2, 4, 5, 5) * torch.tensor([0.1, 1.0, 10.0, 100.0]).view(1, 4, 1, 1) + 3.0
    mean_square = frn(x).square().mean(dim=(2, 3))
    torch.testing.assert_close(mean_square, torch.ones(2, 4), rtol=1e-4, atol=1e-4)


def test_frn_tlu_thresholds_at_tau():
    frn = FilterResponseNorm(2)
    with torch.no_grad():
        frn.tau.fill_(0.5)
    assert (frn(torch.randn(3, 2, 4, 4)) >= 0.5).all()
