"""Constant SGD: SGD during burn-in, Mandt et al.'s steps after it (by hand), foreach = loop,
errors, and the OU stationary variance on a quadratic with known gradient noise."""

import pytest
import torch

from bdl.samplers import ConstantSGD
from bdl.samplers.gradient_noise import DECAY


def noisy_quadratic(params, generator, noise_std):
    def closure():
        grads = [
            p + noise_std * torch.randn(p.shape, generator=generator, dtype=p.dtype) for p in params
        ]
        return sum(0.5 * p.square().sum() for p in params), grads

    return closure


@pytest.mark.parametrize("preconditioner", ["scalar", "diagonal"])
def test_burn_in_is_sgd_and_then_the_optimal_step_by_hand(quadratic, preconditioner):
    params = [torch.tensor([1.0, -2.0], dtype=torch.float64)]
    sampler = ConstantSGD(0.1, preconditioner=preconditioner)
    state = sampler.init(params)
    theta = torch.tensor([1.0, -2.0], dtype=torch.float64)
    mean, var = theta.clone(), torch.zeros(2, dtype=torch.float64)
    for t in range(3):  # burn-in: the gradient θ is observed, then θ ← θ − 0.1 θ
        if t:
            delta = theta - mean
            mean = mean + (1 - DECAY) * delta
            var = DECAY * (var + (1 - DECAY) * delta**2)
        theta = 0.9 * theta
        sampler.step(state, quadratic(params), tune=True)
    torch.testing.assert_close(params[0], theta)
    torch.testing.assert_close(state.buffers["grad_var"][0], var)
    step = 2 * 2 / var.sum() if preconditioner == "scalar" else 2 / var
    sampler.step(state, quadratic(params), lr_scale=0.5)
    torch.testing.assert_close(params[0], theta - 0.5 * step * theta)


def test_diagonal_floor_keeps_noise_free_coordinates_finite():
    params = [torch.zeros(3, dtype=torch.float64)]
    generator = torch.Generator().manual_seed(0)

    def closure():  # the last coordinate has no gradient noise at all
        noise = torch.randn(3, generator=generator, dtype=torch.float64) * torch.tensor(
            [1.0, 1.0, 0.0]
        )
        return params[0].square().sum() / 2, [params[0] + noise]

    sampler = ConstantSGD(0.01, preconditioner="diagonal", variance_floor=0.01)
    state = sampler.init(params)
    for _ in range(300):
        sampler.step(state, closure, tune=True)
    sampler.step(state, closure)
    scale = state.buffers["preconditioner"][0] * 0.01
    mean_var = state.buffers["grad_var"][0].mean()
    assert scale[2].item() == pytest.approx(2 / (0.01 * mean_var.item()))


def test_recovers_the_target_variance_with_known_gradient_noise():
    """U = ½θ², ∇Ũ = θ + N(0, V = 400): h = 2/V = 0.005 and the iterates' variance is
    (1/a)/(1 − ha/2) = 1.0025, Mandt et al.'s small-step limit."""
    params = [torch.zeros(4000, dtype=torch.float64)]
    generator = torch.Generator().manual_seed(0)
    sampler = ConstantSGD(0.001)
    state = sampler.init(params)
    closure = noisy_quadratic(params, generator, 20.0)
    for t in range(2500):
        sampler.step(state, closure, tune=t < 500)
    assert state.info["step_size"].item() == pytest.approx(0.005, rel=0.05)
    assert params[0].var().item() == pytest.approx(1.0, rel=0.1)


def test_foreach_equals_loop(shapes):
    torch.manual_seed(6)
    a = [torch.randn(s) for s in shapes]
    b = [p.clone() for p in a]
    for preconditioner in ("scalar", "diagonal"):
        fast = ConstantSGD(0.01, preconditioner=preconditioner)
        slow = ConstantSGD(0.01, preconditioner=preconditioner, foreach=False)
        state_a, state_b = fast.init(a), slow.init(b)
        ga, gb = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
        for t in range(8):
            fast.step(state_a, noisy_quadratic(a, ga, 1.0), tune=t < 5)
            slow.step(state_b, noisy_quadratic(b, gb, 1.0), tune=t < 5)
        for pa, pb in zip(a, b):
            torch.testing.assert_close(pa, pb)


def test_needs_burn_in_and_noisy_gradients(quadratic):
    params = [torch.ones(2)]
    sampler = ConstantSGD(0.1)
    with pytest.raises(ValueError) as error:
        sampler.step(sampler.init(params), quadratic(params))
    assert str(error.value) == (
        "csgd estimates the gradient noise during burn-in: set burn_in ≥ 1 epoch"
    )
    state = sampler.init(params)
    sampler.step(state, quadratic(params), tune=True)  # one observation: no spread yet
    with pytest.raises(ValueError) as error:
        sampler.step(state, quadratic(params))
    assert str(error.value) == (
        "csgd found no gradient noise during burn-in: it needs minibatch gradients (batch_size < "
        "number of training points)"
    )


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"preconditioner": "full"}, "sampler.preconditioner"),
        ({"variance_floor": 0}, "variance_floor"),
    ],
)
def test_bad_hyperparameters_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        ConstantSGD(0.1, **kwargs)


def test_still_a_sampler():
    assert ConstantSGD.declaration.injects_noise
