r"""SGNHT (Ding et al. 2014): its update by hand, its foreach and loop twins, and the claim that
makes it worth having: under gradient noise of unknown size its thermostat finds the friction at
which the chain has the right temperature, and the chain samples the right variance.

The expected values are closed forms solved with numpy (not with the code under test): on
$U = (\theta - \mu)^2 / 2\sigma^2$, at a fixed friction $\zeta$ the update is a
linear recursion whose stationary covariance solves the discrete Lyapunov equation
(``test_stationary.py``); the thermostat's fixed point $\zeta^*$ is the friction at which
the stationary $\mathrm{Var}[v] = \eta$, found by bisection.
"""

import math

import numpy as np
import pytest
import torch

from bdl.samplers import SGHMC, SGNHT
from samplers.test_stationary import CHAINS, MU, SIGMA2, _closure, _stationary


def quadratic(params):
    def closure():
        return sum(0.5 * p.double().square().sum() for p in params), [p.clone() for p in params]

    return closure


def test_two_steps_by_hand():
    eta, a = 0.01, 0.1
    params = [torch.tensor([2.0, -1.0])]
    sampler = SGNHT(lr=eta, a=a, generator=torch.Generator().manual_seed(3))
    gen = torch.Generator().manual_seed(3)
    state = sampler.init(params)
    theta, v, zeta = np.array([2.0, -1.0]), np.zeros(2), a
    for _ in range(2):
        z = torch.randn(2, generator=gen).numpy()
        v = (1 - zeta) * v - eta * theta + math.sqrt(2 * a * eta) * z
        theta = theta + v
        zeta = zeta + v @ v / 2 - eta
        sampler.step(state, quadratic(params))
    np.testing.assert_allclose(params[0].numpy(), theta, rtol=1e-5)
    assert state.buffers["thermostat"][0].item() == pytest.approx(zeta, rel=1e-6)


def test_foreach_equals_loop(assert_foreach_matches_loop):
    assert_foreach_matches_loop(
        lambda foreach: SGNHT(
            0.01, a=0.2, foreach=foreach, generator=torch.Generator().manual_seed(7)
        ),
        quadratic,
        steps=5,
        step_options=lambda t: {"lr_scale": 1 / (t + 1), "noise": t != 2},
    )


def test_without_noise_the_thermostat_holds_and_the_step_is_heavy_ball_sgd():
    params = [torch.tensor([2.0])]
    sampler = SGNHT(lr=0.1, a=0.3)
    state = sampler.init(params)
    sampler.step(state, quadratic(params), noise=False)
    assert params[0].item() == pytest.approx(2.0 - 0.1 * 2.0)
    assert state.buffers["thermostat"][0].item() == 0.3


def test_a_restart_rests_the_momentum_and_the_thermostat():
    params = [torch.tensor([2.0])]
    sampler = SGNHT(lr=0.1, a=0.3, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    for _ in range(3):
        sampler.step(state, quadratic(params))
    sampler.restart(state)
    assert state.buffers["momentum"][0].item() == 0.0
    assert state.buffers["thermostat"][0].item() == 0.3


@pytest.mark.parametrize("a", [0.0, -0.1, 1.5])
def test_a_friction_out_of_range_is_refused(a):
    with pytest.raises(ValueError, match="sampler.a"):
        SGNHT(lr=0.1, a=a)


ETA, A, GRAD_STD = 0.01, 0.1, 3.0


def _covariance(zeta: float) -> np.ndarray:
    """Stationary covariance of (θ − μ, v) at friction ζ, the minibatch noise included."""
    q = 2 * A * ETA + ETA**2 * GRAD_STD**2
    k = ETA / SIGMA2
    transition = np.array([[1 - k, 1 - zeta], [-k, 1 - zeta]])
    return _stationary(transition, q * np.ones((2, 2)))


def _thermostat_fixed_point() -> float:
    low, high = A, 1.0  # Var[v] falls as the friction rises
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if _covariance(middle)[1, 1] > ETA else (low, middle)
    return (low + high) / 2


def test_the_thermostat_cancels_unknown_gradient_noise():
    """Gradient noise of std 3 adds 45% to the injected noise. The thermostat settles at the
    friction ζ* that restores Var[v] = η (within 1%; measured 0.02%: its drift averages over
    100 000 coordinates), and θ has the variance of that fixed point's recursion within 5
    standard errors of the sample variance (measured 1.2); SGHMC at friction a, told nothing of
    the noise, is too hot by 127 standard errors (the test asks for 40)."""
    zeta_star = _thermostat_fixed_point()
    expected = _covariance(zeta_star)[0, 0]
    variance_error = expected * math.sqrt(2 / (CHAINS - 1))
    generator = torch.Generator().manual_seed(0)
    draws, thermostat = {}, None
    for name, sampler in (
        ("sgnht", SGNHT(ETA, a=A, generator=torch.Generator().manual_seed(1))),
        ("sghmc", SGHMC(ETA, alpha=A, generator=torch.Generator().manual_seed(1))),
    ):
        theta = MU + math.sqrt(SIGMA2) * torch.randn(CHAINS, generator=generator)
        state = sampler.init([theta])
        for _ in range(3000):
            sampler.step(state, _closure(theta, GRAD_STD, generator))
        draws[name] = theta.double()
        thermostat = state.buffers.get("thermostat", [thermostat])[0]
    assert thermostat.item() == pytest.approx(zeta_star, rel=0.01)
    assert abs(draws["sgnht"].var().item() - expected) < 5 * variance_error
    assert draws["sghmc"].var().item() - expected > 40 * variance_error
