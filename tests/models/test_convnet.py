"""The small convolutional network: its size counted by hand, its layers as LeNet's shape says,
and a short run on generated MNIST that learns it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_module

from bdl.models import ConvNet
from bdl.runner.run import run


def test_size_and_forward_by_hand():
    torch.manual_seed(0)
    model = ConvNet(input_shape=(1, 28, 28), out_features=10)
    # conv 1 -> 8 (5x5): 200 + 8; conv 8 -> 16: 3200 + 16; 28 -> 24 -> 12 -> 8 -> 4, so 16 * 4 * 4
    # = 256 features into 64 units: 16384 + 64; 64 -> 10: 650
    assert sum(p.numel() for p in model.parameters()) == 208 + 3216 + 16448 + 650
    x = torch.randn(3, 1, 28, 28)
    p = dict(model.named_parameters())
    h = F.max_pool2d(F.relu(F.conv2d(x, p["features.0.weight"], p["features.0.bias"])), 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, p["features.3.weight"], p["features.3.bias"])), 2)
    h = F.relu(F.linear(h.flatten(1), p["head.0.weight"], p["head.0.bias"]))
    want = F.linear(h, p["head.2.weight"], p["head.2.bias"])
    torch.testing.assert_close(model(x), want)


def test_flat_inputs_are_refused_in_one_line():
    with pytest.raises(ValueError, match="model=convnet takes images .* use model=mlp"):
        ConvNet(input_shape=(13,), out_features=1)


@pytest.mark.slow  # 30 s: each sample scores 59 000 held-out and 20 000 test images
def test_a_short_run_on_generated_mnist_learns(fake_data_root, isolated_cache, tmp_path):
    overrides = ["dataset=mnist", "model=convnet", "dataset.validation=59000", "epochs=3"]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose(
            "config",
            [f"dataset.root={fake_data_root}", *overrides, "burn_in=1", "batch_size=100"],
        )
    metrics = run(cfg, tmp_path / "run")
    assert metrics["status"] == "completed" and metrics["test_accuracy"] > 0.5
