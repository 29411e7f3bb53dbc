"""Scale-adapted SGHMC: the burn-in estimates and the update by hand, foreach = loop, errors,
its units (lr on U, not per datum); its stationary distribution is in test_stationary.py."""

import pytest
import torch

from bdl.samplers import AdaptiveSGHMC


def test_four_steps_by_hand(quadratic):
    """Springenberg et al. (2016), eqs. 8-10, written out per coordinate: three burn-in steps
    (the estimates start at 1 and move with r = 1/(τ + 1)), then one sampling step with the mass
    frozen."""
    lr, alpha, lam = 0.02, 0.1, 1e-5
    start = torch.tensor([2.0, -0.5, 0.25], dtype=torch.float64)
    params = [start.clone()]
    sampler = AdaptiveSGHMC(
        lr, alpha=alpha, damping=lam, generator=torch.Generator().manual_seed(4)
    )
    state = sampler.init(params)
    replay = torch.Generator().manual_seed(4)
    theta, v = start.clone(), torch.zeros(3, dtype=torch.float64)
    tau, mean, square = (torch.ones(3, dtype=torch.float64) for _ in range(3))
    for tune in [True, True, True, False]:
        g = 3.0 * theta  # the quadratic of scale 3
        if tune:
            r = 1 / (tau + 1)
            tau = tau * (1 - mean**2 / (square + lam)) + 1
            mean = (1 - r) * mean + r * g
            square = (1 - r) * square + r * g * g
        inverse_mass = 1 / (square.sqrt() + lam)
        std = (2 * lr * alpha * inverse_mass - lr**2).clamp(min=0).sqrt()
        z = torch.randn(3, generator=replay, dtype=torch.float64)
        v = (1 - alpha) * v - lr * inverse_mass * g + std * z
        theta = theta + v
        sampler.step(state, quadratic(params, scale=3.0), tune=tune)
        torch.testing.assert_close(params[0], theta)
        torch.testing.assert_close(state.buffers["grad_sq"][0], square)
        torch.testing.assert_close(state.buffers["window"][0], tau)


def test_foreach_equals_loop(assert_foreach_matches_loop, quadratic):
    assert_foreach_matches_loop(
        lambda foreach: AdaptiveSGHMC(
            0.01, alpha=0.2, foreach=foreach, generator=torch.Generator().manual_seed(2)
        ),
        lambda params: quadratic(params, scale=3.0),
        steps=6,
        step_options=lambda t: {"lr_scale": 1 / (t + 1), "noise": t != 2, "tune": t < 4},
    )


def test_the_kept_mass_is_that_of_the_buffers_in_use(quadratic):
    """The foreach update keeps M̂⁻¹ and the noise's scale between steps after burn-in; the loop
    twin recomputes them every step. They agree over plain steps at one step size, and after
    ``grad_sq`` is replaced by other tensors (as a restored checkpoint does)."""
    twins = []
    for foreach in (True, False):
        params = [torch.linspace(-2.0, 2.0, 7)]
        sampler = AdaptiveSGHMC(0.01, foreach=foreach, generator=torch.Generator().manual_seed(3))
        twins.append((params, sampler, sampler.init(params)))
    for t in range(9):
        for params, sampler, state in twins:
            if t == 6:
                state.buffers["grad_sq"] = [4 * b for b in state.buffers["grad_sq"]]
            sampler.step(state, quadratic(params, scale=2.0), tune=t < 3)
        torch.testing.assert_close(twins[0][0][0], twins[1][0][0], rtol=0, atol=0)


def test_lr_is_on_the_scale_of_u():
    assert AdaptiveSGHMC.declaration.step_unit == "potential"


def test_the_mass_does_not_move_after_burn_in(quadratic):
    params = [torch.randn(50, generator=torch.Generator().manual_seed(0))]
    sampler = AdaptiveSGHMC(1e-3, generator=torch.Generator().manual_seed(1))
    state = sampler.init(params)
    keys = ["window", "grad_mean", "grad_sq"]
    for t in range(10):
        sampler.step(state, quadratic(params), tune=t < 5)
        if t == 4:
            fitted = {key: state.buffers[key][0].clone() for key in keys}
            position = params[0].clone()
    assert all(torch.equal(fitted[key], state.buffers[key][0]) for key in keys)
    assert not torch.equal(params[0], position)  # while the chain itself moved on


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"alpha": 0.0}, "sampler.alpha"),
        ({"alpha": 1.5}, "sampler.alpha"),
        ({"damping": 0.0}, "sampler.damping"),
    ],
)
def test_bad_hyperparameters_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        AdaptiveSGHMC(1e-4, **kwargs)
