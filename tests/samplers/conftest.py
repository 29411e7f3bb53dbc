"""Toy closures shared by the sampler tests, potentials whose gradients are known by hand, and the
check that a sampler's foreach update equals its plain-loop twin."""

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


SHAPES = [(3, 4), (4,), (2, 2, 2)]


def _assert_foreach_matches_loop(make, closure, steps, step_options=lambda t: {}):
    """``make(foreach)`` twins (same seeds, same start) take ``steps`` steps on
    ``closure(params)`` and must end at the same parameters."""
    torch.manual_seed(0)
    start = [torch.randn(s) for s in SHAPES]
    twins = []
    for foreach in (True, False):
        params = [p.clone() for p in start]
        sampler = make(foreach)
        twins.append((params, sampler, sampler.init(params)))
    for t in range(steps):
        for params, sampler, state in twins:
            sampler.step(state, closure(params), **step_options(t))
    for fast, slow in zip(twins[0][0], twins[1][0], strict=True):
        torch.testing.assert_close(fast, slow)


@pytest.fixture
def assert_foreach_matches_loop():
    return _assert_foreach_matches_loop


@pytest.fixture
def quadratic():
    return _quadratic


@pytest.fixture
def counting():
    return _counting


@pytest.fixture
def shapes():
    return SHAPES
