"""SGHMC's gradient-noise term β̂ = ½ηV̂ (Chen et al.): fixed by hand, online during burn-in
only, foreach = loop, errors; and Chen et al.'s Fig. 1 setting, where it matters."""

import math

import pytest
import torch

from bdl.samplers import SGHMC


@pytest.mark.parametrize("form", ["foreach", "loop", "program"])
def test_fixed_grad_var_lowers_the_injected_noise_by_hand(quadratic, step_in, form):
    eta, alpha, v_hat = 0.01, 0.3, 4.0
    params = [torch.tensor([1.0])]
    sampler = SGHMC(eta, alpha=alpha, grad_var=v_hat, generator=torch.Generator().manual_seed(1))
    replay = torch.Generator().manual_seed(1)
    sigma = math.sqrt(2 * (alpha - 0.5 * eta * v_hat) * eta)
    v = -eta * 1.0 + sigma * torch.randn(1, generator=replay).item()
    step_in(form, sampler, sampler.init(params), quadratic(params))
    assert params[0].item() == pytest.approx(1.0 + v, rel=1e-6)


def test_noise_is_switched_off_where_beta_exceeds_alpha(quadratic):
    params = [torch.tensor([1.0])]
    sampler = SGHMC(0.1, alpha=0.01, grad_var=100.0, generator=torch.Generator().manual_seed(1))
    sampler.step(sampler.init(params), quadratic(params))
    assert params[0].item() == pytest.approx(1.0 - 0.1)


def test_online_estimate_is_taken_during_burn_in_only(quadratic):
    params = [torch.randn(3)]
    sampler = SGHMC(0.01, alpha=0.1, grad_var="online", generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    for _ in range(5):
        sampler.step(state, quadratic(params), tune=True)
    frozen = [v.clone() for v in state.buffers["grad_var"]]
    for _ in range(5):
        sampler.step(state, quadratic(params))
    torch.testing.assert_close(state.buffers["grad_var"], frozen)


@pytest.mark.parametrize("form", ["foreach", "loop", "program"])
def test_online_noise_is_elementwise_by_hand(step_in, form):
    eta, alpha = 0.02, 0.5
    params = [torch.zeros(2, dtype=torch.float64)]
    sampler = SGHMC(eta, alpha=alpha, grad_var="online", generator=torch.Generator().manual_seed(3))
    state = sampler.init(params)
    state.buffers["grad_var"] = [torch.tensor([10.0, 60.0], dtype=torch.float64)]
    replay = torch.Generator().manual_seed(3)
    z = torch.randn(2, generator=replay, dtype=torch.float64)
    beta = 0.5 * eta * torch.tensor([10.0, 60.0], dtype=torch.float64)
    step_in(form, sampler, state, lambda: (torch.zeros(()), [torch.zeros(2, dtype=torch.float64)]))
    expected = (2 * eta * (alpha - beta).clamp(min=0)).sqrt() * z
    torch.testing.assert_close(params[0], expected)


@pytest.mark.parametrize("grad_var", [0.0, 4.0, "online"])
def test_foreach_equals_loop(assert_foreach_matches_loop, quadratic, grad_var):
    assert_foreach_matches_loop(
        lambda foreach: SGHMC(
            0.01,
            0.2,
            grad_var=grad_var,
            foreach=foreach,
            generator=torch.Generator().manual_seed(7),
        ),
        quadratic,
        steps=6,
        step_options=lambda t: {"tune": t < 3},
    )


@pytest.mark.parametrize("grad_var", [-1.0, "offline"])
def test_bad_grad_var_names_the_key(grad_var):
    with pytest.raises(ValueError, match="sampler.grad_var"):
        SGHMC(0.01, grad_var=grad_var)


def test_foreach_equals_loop_with_noisy_gradients(assert_foreach_matches_loop):
    """With gradients that vary between steps the online variance estimate is not zero, so the
    twins' β̂ = ½ηV̂ is exercised (a deterministic gradient leaves V̂ = 0)."""
    steps = {}

    def noisy(params):
        t = steps[id(params)] = steps.get(id(params), -1) + 1
        return lambda: (None, [p + 0.5 * (-1) ** t * (1 + p.abs()) for p in params])

    assert_foreach_matches_loop(
        lambda foreach: SGHMC(
            0.1, 0.5, grad_var="online", foreach=foreach, generator=torch.Generator().manual_seed(7)
        ),
        noisy,
        steps=8,
        step_options=lambda t: {"tune": t < 5},
    )


@pytest.mark.parametrize("foreach", [True, False])
def test_burn_in_friction_applies_while_tuning_only(quadratic, foreach):
    """With ``burn_in_alpha``, a burn-in step (tune=True) is SGHMC's step at that friction, by
    hand, and a sampling step the step at ``alpha``."""
    eta, alpha, burn_in_alpha = 0.01, 0.3, 0.05
    params = [torch.tensor([1.0])]
    sampler = SGHMC(
        eta,
        alpha,
        burn_in_alpha=burn_in_alpha,
        foreach=foreach,
        generator=torch.Generator().manual_seed(1),
    )
    replay = torch.Generator().manual_seed(1)
    state = sampler.init(params)
    v = -eta * 1.0 + math.sqrt(2 * burn_in_alpha * eta) * torch.randn(1, generator=replay).item()
    sampler.step(state, quadratic(params), tune=True)
    theta = 1.0 + v
    assert params[0].item() == pytest.approx(theta, rel=1e-6)
    v = (
        (1 - alpha) * v
        - eta * theta
        + math.sqrt(2 * alpha * eta) * torch.randn(1, generator=replay).item()
    )
    sampler.step(state, quadratic(params), tune=False)
    assert params[0].item() == pytest.approx(theta + v, rel=1e-6)
    with pytest.raises(ValueError, match="burn_in_alpha"):
        SGHMC(eta, alpha, burn_in_alpha=0.0)
