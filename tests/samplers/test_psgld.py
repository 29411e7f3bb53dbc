"""pSGLD: the first two updates by hand, foreach = loop, errors, and its units (lr on U)."""

import math

import pytest
import torch

from bdl.samplers import PSGLD


def test_two_updates_by_hand(quadratic):
    eps, beta, lam = 0.04, 0.9, 1e-3
    params = [torch.tensor([2.0, -0.5], dtype=torch.float64)]
    sampler = PSGLD(eps, beta=beta, damping=lam, generator=torch.Generator().manual_seed(6))
    state = sampler.init(params)
    replay = torch.Generator().manual_seed(6)
    theta = torch.tensor([2.0, -0.5], dtype=torch.float64)
    v = theta.square()  # V starts at the first g ⊙ g
    for t in range(2):
        g = theta.clone()
        if t:
            v = beta * v + (1 - beta) * g.square()
        G = 1 / (lam + v.sqrt())
        z = torch.randn(2, generator=replay, dtype=torch.float64)
        theta = theta - eps / 2 * G * g + (eps * G).sqrt() * z
        sampler.step(state, quadratic(params))
        torch.testing.assert_close(params[0], theta)


def test_foreach_equals_loop(assert_foreach_matches_loop, quadratic):
    assert_foreach_matches_loop(
        lambda foreach: PSGLD(0.01, foreach=foreach, generator=torch.Generator().manual_seed(2)),
        lambda params: quadratic(params, scale=3.0),
        steps=5,
        step_options=lambda t: {"lr_scale": 1 / (t + 1), "noise": t != 2},
    )


def test_lr_is_on_the_scale_of_u():
    assert PSGLD.declaration.step_unit == "potential"


@pytest.mark.parametrize(
    "kwargs, key", [({"beta": 1.0}, "sampler.beta"), ({"damping": 0.0}, "sampler.damping")]
)
def test_bad_hyperparameters_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        PSGLD(0.01, **kwargs)


def test_samples_a_gaussian_with_a_slowly_adapting_preconditioner():
    # Not from θ = 0: a zero first gradient makes G = 1/λ (RMSprop's own hazard)
    params = [
        2 * torch.randn(2000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ]

    def closure():
        return 0.5 * params[0].square() / 4, [params[0] / 4]

    sampler = PSGLD(0.05, beta=0.999, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    for _ in range(1500):
        sampler.step(state, closure)
    assert params[0].var().item() == pytest.approx(4.0, rel=0.12)
    assert math.isfinite(params[0].abs().max().item())
