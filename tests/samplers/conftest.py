"""Toy closures shared by the sampler tests: potentials whose gradients are known by hand."""

import pytest
import torch


def _quadratic(params, scale=1.0, limit=None):
    """U(θ) = scale · ½‖θ‖² (∇U = scale · θ), or +inf once any |θ| exceeds ``limit``."""

    def closure():
        value = sum(0.5 * scale * p.double().square().sum() for p in params)
        if limit is not None and any(p.abs().max() > limit for p in params):
            value = torch.tensor(float("inf"), dtype=torch.float64)
        return value, [scale * p.clone() for p in params]

    return closure


def _counting(closure):
    """``closure`` with a ``calls`` counter."""

    def counted():
        counted.calls += 1
        return closure()

    counted.calls = 0
    return counted


@pytest.fixture
def quadratic():
    return _quadratic


@pytest.fixture
def counting():
    return _counting


@pytest.fixture
def shapes():
    return [(3, 4), (4,), (2, 2, 2)]
