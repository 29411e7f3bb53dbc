import torch

from bdl.models import Linear


def test_linear_is_one_affine_map():
    model = Linear(input_shape=(1, 28, 28), out_features=10)
    assert [n for n, _ in model.named_parameters()] == ["linear.weight", "linear.bias"]
    x = torch.randn(3, 1, 28, 28)
    expected = x.flatten(1) @ model.linear.weight.T + model.linear.bias
    torch.testing.assert_close(model(x), expected)
    assert Linear(input_shape=(13,), out_features=1)(torch.randn(6, 13)).shape == (6, 1)
