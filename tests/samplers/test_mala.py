"""MALA: an accepted step is SGLD's update, the approximate (minibatch) test, foreach = loop."""

import pytest
import torch

from bdl.samplers import MALA, SGLD


def test_an_accepted_step_is_the_sgld_update_with_the_same_noise(quadratic):
    params, twin = [torch.tensor([0.3, -1.2])], [torch.tensor([0.3, -1.2])]
    mala = MALA(lr=1e-3, generator=torch.Generator().manual_seed(4))
    sgld = SGLD(lr=1e-3, generator=torch.Generator().manual_seed(4))
    state = mala.init(params)
    mala.step(state, quadratic(params))
    sgld.step(sgld.init(twin), quadratic(twin))
    assert state.info["accepted"]  # ΔH ≈ 1e-7 at this step size
    torch.testing.assert_close(params[0], twin[0])


def test_is_full_batch_unless_approximate():
    assert MALA(0.01).declaration.full_batch
    assert not MALA(0.01, approximate=True).declaration.full_batch


def test_approximate_test_evaluates_each_minibatch_at_both_ends(quadratic, counting):
    params = [torch.randn(5)]
    sampler = MALA(0.01, approximate=True, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    for calls in (2, 4, 6):  # no cache: the next step brings another minibatch
        closure = counting(quadratic(params))
        sampler.step(state, closure)
        assert closure.calls == 2 and state.grad_evals == calls


def test_foreach_equals_loop(assert_foreach_matches_loop, quadratic):
    assert_foreach_matches_loop(
        lambda foreach: MALA(0.05, foreach=foreach, generator=torch.Generator().manual_seed(9)),
        quadratic,
        steps=8,
        step_options=lambda t: {"tune": t < 4},
    )


def test_samples_a_gaussian_at_a_step_where_sgld_is_biased():
    """At lr = 1 on U = ½θ², SGLD's stationary variance is 1/(1 − lr/4) = 4/3; MALA's is 1."""
    params = [torch.zeros(4000, dtype=torch.float64)]

    def closure():
        return 0.5 * params[0].square(), [params[0].clone()]

    sampler = MALA(1.0, adapt=False, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    for _ in range(200):
        sampler.step(state, closure)
    assert params[0].var().item() == pytest.approx(1.0, rel=0.08)


@pytest.mark.parametrize("target", [0.65, 0.8])
def test_the_adapted_step_reaches_the_configured_acceptance(assert_adapts_to, target):
    assert_adapts_to(lambda a, generator: MALA(0.1, target_accept=a, generator=generator), target)


@pytest.mark.parametrize(
    "kwargs, key", [({"lr": -1.0}, "sampler.lr"), ({"target_accept": 0.0}, "target_accept")]
)
def test_bad_hyperparameters_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        MALA(**{"lr": 0.01, **kwargs})
