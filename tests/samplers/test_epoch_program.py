"""An epoch as one program (`bdl.samplers.base.minibatch_steps_loop`): for every sampler that
declares ``epoch_program``, the program's steps, run here without Inductor (outside
``torch.compile`` a ``while_loop`` is traced by Dynamo and run eagerly), are the sampler's own
steps by `Sampler.step` on the same minibatches and noise, for one chain and for stacked
chains, with noise switched off and on and with its burn-in settings."""

import functools

import pytest
import torch
from conftest import SAMPLER_OPTIONS, declaration
from hydra import compose, initialize_config_module

from bdl.likelihoods import Gaussian
from bdl.noise import fill_normal
from bdl.potential import Potential
from bdl.priors import Gaussian as GaussianPrior
from bdl.runner.experiment import make_sampler
from bdl.samplers.base import Declaration, minibatch_steps_loop
from bdl.samplers.sghmc import SGHMC

PROGRAMS = [option for option in SAMPLER_OPTIONS if declaration(option).epoch_program]
N, D, BATCH, STEPS = 40, 3, 8, 5


_data = torch.Generator().manual_seed(0)
X = torch.randn(N, D, generator=_data)
Y = X @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(N, generator=_data)


def potential_at(values, x, y, index, prior_weight):
    """Linear regression's ``U`` on the minibatch ``index`` of ``(x, y)`` (N/n times its squared
    error, plus ``prior_weight`` times a unit Gaussian prior's), per chain where ``values``
    stack chains: summed over them, and each chain's."""
    w, b = values
    xb, yb = x[index], y[index]
    residual = yb - (xb @ w.unsqueeze(-1)).squeeze(-1) - b
    value = N / index.shape[-1] * 0.5 * residual.square().sum(-1)
    value = value + prior_weight * 0.5 * (w.square().sum(-1) + b.square().sum(-1))
    return value.sum(), value


def evaluate(values, index, prior_weight):
    grads, value = torch.func.grad(potential_at, has_aux=True)(
        list(values), X, Y, index, prior_weight
    )
    return value, list(grads)


def sampler_of(option: str, chains: int | None, **overrides):
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose("config", [f"sampler={option}"])
    tiny = Potential(torch.nn.Linear(D, 1), Gaussian(noise_std=1.0), GaussianPrior(), N)
    sampler = make_sampler(cfg, tiny, torch.Generator().manual_seed(5))
    for key, value in overrides.items():
        setattr(sampler, key, value)
    if chains is None:
        return sampler
    return sampler.for_chains([torch.Generator().manual_seed(5 + k) for k in range(chains)])


def start(chains: int | None) -> list[torch.Tensor]:
    lead = () if chains is None else (chains,)
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(*lead, D, generator=generator), torch.randn(*lead, 1, generator=generator)]


#: the steps' (lr_scale, noise): a schedule's changing step and an exploration step without noise
SETTINGS = [(1.0, True), (0.5, True), (0.8, False), (1.0, True), (0.3, True)]


def program_steps(sampler, params, state, indices, tune, chains):
    """`minibatch_steps_loop` over `SETTINGS` as the runner's stepper feeds it."""
    sampler.tuning = tune
    rows = [sampler.coefficients(sampler.step_size(scale)) for scale, _ in SETTINGS]
    numel = sum(p.numel() for p in params)
    draws = torch.zeros(STEPS + 2, numel)  # two rows more than used: a padded span, and zeros
    # where a step injects no noise
    for row, (_, noise) in zip(draws, SETTINGS, strict=False):
        if noise and sampler.declaration.injects_noise:
            fill_normal(row, sampler.generator)
    padded = torch.cat([indices, indices[:2]])
    table = torch.tensor(rows + rows[:2])
    weights = torch.ones(STEPS + 2)
    lead = () if chains is None else (chains,)
    potentials = torch.zeros(STEPS + 2, *lead)
    program = functools.partial(minibatch_steps_loop, update=sampler.update_values, chains=chains)
    return program(
        evaluate,
        params,
        state.buffers,
        torch.tensor(0),
        torch.tensor(STEPS),
        padded,
        weights,
        table,
        draws,
        potentials,
    )


@pytest.mark.parametrize("tune", [False, True])
@pytest.mark.parametrize("chains", [None, 3])
@pytest.mark.parametrize("option", PROGRAMS)
def test_the_program_takes_the_samplers_own_steps(option, chains, tune):
    if tune and sampler_of(option, None, tuning=True).watches_gradients():
        pytest.skip("steps one by one while tuning")
    lead = () if chains is None else (chains,)
    order = torch.randperm(N, generator=torch.Generator().manual_seed(2))[: STEPS * BATCH]
    indices = order.view(STEPS, BATCH)
    if chains is not None:  # each chain its own minibatches
        indices = torch.stack([indices.roll(k, dims=1) for k in range(chains)], dim=1)

    stepped = sampler_of(option, chains)
    params = start(chains)
    state = stepped.init(params)
    expected_potentials = []
    for step, (scale, noise) in enumerate(SETTINGS):
        closure = functools.partial(evaluate, params, indices[step], 1.0)
        stepped.step(state, closure, lr_scale=scale, noise=noise, tune=tune)
        expected_potentials.append(state.info["potential"])

    programmed = sampler_of(option, chains)
    params = start(chains)
    new_params, buffers, potentials = program_steps(
        programmed, params, programmed.init(params), indices, tune, chains
    )
    for ours, theirs in zip(new_params, state.params, strict=True):
        torch.testing.assert_close(ours, theirs)
    assert buffers.keys() == state.buffers.keys()
    for name, values in buffers.items():
        for ours, theirs in zip(values, state.buffers[name], strict=True):
            torch.testing.assert_close(ours, theirs, msg=name)
    torch.testing.assert_close(potentials[:STEPS], torch.stack(expected_potentials).float())
    assert potentials[STEPS:].eq(0).all()  # the padding rows are not stepped
    assert potentials.shape == (STEPS + 2, *lead)


def test_sghmcs_frozen_online_noise_estimate_is_the_programs_too():
    """After burn-in an online estimate of the gradient noise sets each weight's injected noise
    (`bdl.samplers.sghmc.noise_std`); the program's update reads it from the buffers."""
    variances = [torch.full((D,), 4.0), torch.full((1,), 0.5)]
    results = []
    for program in (False, True):
        sampler = SGHMC(
            0.01, alpha=0.1, grad_var="online", generator=torch.Generator().manual_seed(3)
        )
        params = start(None)
        state = sampler.init(params)
        state.buffers["grad_var"] = [v.clone() for v in variances]
        indices = torch.arange(STEPS * BATCH).view(STEPS, BATCH)
        if program:
            params, state.buffers, _ = program_steps(sampler, params, state, indices, False, None)
        else:
            for step, (scale, noise) in enumerate(SETTINGS):
                closure = functools.partial(evaluate, params, indices[step], 1.0)
                sampler.step(state, closure, lr_scale=scale, noise=noise)
        results.append((params, state.buffers["momentum"]))
    for ours, theirs in zip(*results, strict=True):
        for a, b in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a, b)
    assert not sampler.watches_gradients()
    sampler.tuning = True  # the estimate is made step by step: no program while it is
    assert sampler.watches_gradients()


def test_a_full_batch_kernel_cannot_declare_an_epoch_program():
    with pytest.raises(ValueError, match="no minibatch program"):
        Declaration(step_unit="per datum", full_batch=True, epoch_program=True)
