"""The SG samplers: one hand-computed update each (for SGLD, SGHMC and SGD in each form of their
rule: foreach, loop and an epoch program's), foreach = loop, and SGHMC's noise-free limit."""

import math

import pytest
import torch

from bdl import samplers
from bdl.samplers import HMC, PSGLD, SGD, SGHMC, SGLD, ConstantSGD, NaiveSGHMC
from bdl.samplers.bbb import BBB


def quadratic_closure(params, scale=1.0):
    """U(θ) = scale · ½‖θ‖², so ∇U = scale · θ."""

    def closure():
        value = sum(0.5 * scale * p.square().sum() for p in params)
        return value, [scale * p.clone() for p in params]

    return closure


def two_params():
    return [torch.tensor([1.0, -2.0]), torch.tensor([[0.5]])]


def draws(seed, params):
    """The standard normals a sampler seeded with `seed` will draw for `params`."""
    flat = torch.randn(
        sum(p.numel() for p in params), generator=torch.Generator().manual_seed(seed)
    )
    return [z.view_as(p) for z, p in zip(flat.split([p.numel() for p in params]), params)]


@pytest.mark.parametrize("form", ["foreach", "loop", "program"])
def test_sgld_hand_computed_update(step_in, form):
    params = two_params()
    z = draws(0, params)
    sampler = SGLD(lr=0.01, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    expected = [p - 0.005 * p + 0.1 * zi for p, zi in zip(two_params(), z)]
    step_in(form, sampler, state, quadratic_closure(params))
    for got, want in zip(params, expected):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("form", ["foreach", "loop", "program"])
def test_sghmc_hand_computed_two_steps(step_in, form):
    eta, alpha = 0.01, 0.1
    params = [torch.tensor([2.0])]
    sampler = SGHMC(lr=eta, alpha=alpha, generator=torch.Generator().manual_seed(3))
    gen = torch.Generator().manual_seed(3)
    state = sampler.init(params)
    sigma = math.sqrt(2 * alpha * eta)
    theta, v = 2.0, 0.0
    for _ in range(2):
        z = torch.randn(1, generator=gen).item()
        v = (1 - alpha) * v - eta * theta + sigma * z
        theta = theta + v
        step_in(form, sampler, state, quadratic_closure(params))
    assert params[0].item() == pytest.approx(theta, rel=1e-5)
    assert state.buffers["momentum"][0].item() == pytest.approx(v, rel=1e-5)


@pytest.mark.parametrize("form", ["foreach", "loop", "program"])
def test_sgd_hand_computed_update(step_in, form):
    params = [torch.tensor([1.0, -3.0])]
    state = SGD(lr=0.1).init(params)
    step_in(form, SGD(lr=0.1), state, quadratic_closure(params, scale=2.0))
    torch.testing.assert_close(params[0], torch.tensor([0.8, -2.4]))


@pytest.mark.parametrize("momentum", [0.0, 0.9, 0.99])
def test_noise_free_sghmc_is_torch_sgd_with_momentum(momentum):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    twin = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    twin.load_state_dict(model.state_dict())
    x, y = torch.randn(32, 5), torch.randint(0, 3, (32,))
    lr = 0.05

    def loss(net):
        return torch.nn.functional.cross_entropy(net(x), y, reduction="sum")

    params = list(model.parameters())

    def closure():
        with torch.enable_grad():
            value = loss(model)
            return value.detach(), list(torch.autograd.grad(value, params))

    sampler = SGHMC(lr=lr, alpha=1 - momentum)
    state = sampler.init(params)
    reference = torch.optim.SGD(twin.parameters(), lr=lr, momentum=momentum)
    for _ in range(20):
        sampler.step(state, closure, noise=False)
        reference.zero_grad()
        loss(twin).backward()
        reference.step()
    for ours, theirs in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize(
    "make",
    [
        lambda g, fe: SGLD(0.01, foreach=fe, generator=g),
        lambda g, fe: SGHMC(0.01, alpha=0.2, foreach=fe, generator=g),
        lambda g, fe: SGD(0.01, momentum=0.5, foreach=fe, generator=g),
    ],
    ids=["sgld", "sghmc", "sgd"],
)
def test_foreach_equals_loop(assert_foreach_matches_loop, make):
    assert_foreach_matches_loop(
        lambda foreach: make(torch.Generator().manual_seed(7), foreach),
        quadratic_closure,
        steps=5,
        step_options=lambda t: {"lr_scale": 1 / (t + 1)},
    )


def test_same_seed_same_chain_and_different_seed_differs():
    def chain(seed):
        params = two_params()
        sampler = SGHMC(0.01, generator=torch.Generator().manual_seed(seed))
        state = sampler.init(params)
        for _ in range(10):
            sampler.step(state, quadratic_closure(params))
        return torch.cat([p.flatten() for p in params])

    assert torch.equal(chain(0), chain(0))
    assert not torch.equal(chain(0), chain(1))


def test_noise_flag_switches_off_injected_noise():
    params = two_params()
    sampler = SGLD(0.01, generator=torch.Generator().manual_seed(0))
    sampler.step(sampler.init(params), quadratic_closure(params), noise=False)
    for got, p in zip(params, two_params()):
        torch.testing.assert_close(got, p * (1 - 0.005))


@pytest.mark.parametrize(
    "build, key",
    [
        (lambda: SGLD(lr=-1.0), "lr"),
        (lambda: SGHMC(lr=0.1, alpha=0.0), "alpha"),
        (lambda: SGHMC(lr=0.0), "lr"),
        (lambda: SGD(lr=0.1, momentum=1.0), "momentum"),
        (lambda: HMC(lr=0.1, num_steps=None, trajectory_length=0.0), "trajectory_length"),
    ],
)
def test_bad_hyperparameters_raise_value_error_naming_the_key(build, key):
    with pytest.raises(ValueError, match=key):
        build()


def test_sgld_samples_a_gaussian():
    """Small-step SGLD on U = ½θ²/σ² recovers the variance σ² (the target exp(-U))."""
    sigma2 = 4.0
    params = [torch.zeros(2000)]
    sampler = SGLD(0.01, generator=torch.Generator().manual_seed(0))
    state = sampler.init(params)
    for _ in range(3000):
        sampler.step(state, quadratic_closure(params, scale=1 / sigma2))
    assert params[0].var().item() == pytest.approx(sigma2, rel=0.1)


@pytest.mark.parametrize(
    "build",
    [
        lambda: BBB(0.1, num_samples=1, betas=(0.0, 0.0)),
        lambda: ConstantSGD(0.1, variance_floor=1.0),
        lambda: NaiveSGHMC(0.1, resample_every=1),
        lambda: PSGLD(0.1, beta=0.0),
    ],
    ids=["bbb", "csgd", "naive_sghmc", "psgld"],
)
def test_hyperparameters_on_the_edge_of_their_range_are_accepted(build):
    """The closed ends of each range (one sample, Adam's β = 0, a variance floor of 1, one step
    between momentum resamplings, no RMSprop averaging) are valid settings."""
    build()


def _sampler_classes() -> list[type]:
    """Every public, concrete sampler class defined in a module of bdl.samplers."""
    import importlib
    import inspect
    import pkgutil

    import bdl.samplers
    from bdl.samplers.base import Sampler

    found = []
    for module in pkgutil.iter_modules(bdl.samplers.__path__):
        namespace = importlib.import_module(f"bdl.samplers.{module.name}")
        for name, cls in vars(namespace).items():
            if (
                inspect.isclass(cls)
                and issubclass(cls, Sampler)
                and cls.__module__ == namespace.__name__
                and not name.startswith("_")
                and not inspect.isabstract(cls)
            ):
                found.append(cls)
    return found


def test_every_sampler_class_is_exported_from_bdl():
    import bdl

    classes = _sampler_classes()
    assert {"BBB", "BBBSGD", "Laplace", "SGHMC", "HMC"} <= {c.__name__ for c in classes}
    for cls in classes:
        assert cls.__name__ in bdl.__all__ and getattr(bdl, cls.__name__) is cls
    assert bdl.MeanField.__name__ == "MeanField" and "MeanField" in bdl.__all__


@pytest.mark.parametrize("cls", _sampler_classes(), ids=lambda c: c.__name__)
def test_torch_optim_style_construction_names_the_contract(cls):
    model = torch.nn.Linear(2, 1)
    with pytest.raises(TypeError, match=r"sampler.init\(list\(model.parameters\(\)\)\)") as error:
        cls(model.parameters(), lr=0.1)
    name = cls.__name__
    assert str(error.value) == (
        f"{name} takes its hyperparameters only, not the parameters (torch.optim's style): "
        f"sampler = {name}(lr=...); state = sampler.init(list(model.parameters())); state = "
        "sampler.step(state, closure) with closure() returning (U, grads of U)"
    )
    assert cls(lr=0.1).lr == 0.1  # the contract's own construction is untouched


def test_a_sampler_that_does_not_stack_chains_says_so():
    with pytest.raises(ValueError) as error:
        samplers.SWAG(0.1).for_chains([torch.Generator()])
    assert str(error.value) == "SWAG does not declare vectorisable"


#: Each sampler's hyperparameters out of range, and the line that refuses them: the key, its
#: range (the paper's constraint) and the value given.
OUT_OF_RANGE = [
    (lambda: SGHMC(0.1, alpha=0), "sampler.alpha (friction) must be in (0, 1], got 0"),
    (
        lambda: SGHMC(0.1, burn_in_alpha=2),
        "sampler.burn_in_alpha (friction) must be in (0, 1], got 2",
    ),
    (
        lambda: SGHMC(0.1, grad_var=-1),
        "sampler.grad_var must be a finite variance ≥ 0 or 'online', got -1",
    ),
    (
        lambda: SGHMC(0.1, grad_var="sometimes"),
        "sampler.grad_var must be a finite variance ≥ 0 or 'online', got sometimes",
    ),
    (
        lambda: samplers.AdaptiveSGHMC(0.1, alpha=0),
        "sampler.alpha (friction) must be in (0, 1], got 0",
    ),
    (
        lambda: samplers.AdaptiveSGHMC(0.1, damping=0),
        "sampler.damping must be positive and finite, got 0",
    ),
    (lambda: BBB(0.1, betas=(0.9, 1.0)), "sampler.betas must both be in [0, 1), got [0.9, 1.0]"),
    (lambda: BBB(0.1, num_mc=0), "sampler.num_mc must be at least 1, got 0"),
    (
        lambda: BBB(0.1, kl_weighting="none"),
        "sampler.kl_weighting must be one of uniform, blundell, got 'none'",
    ),
    (lambda: BBB(0.1, init_std=0), "sampler.init_std must be positive and finite, got 0"),
    (lambda: BBB(0.1, num_samples=0), "sampler.num_samples must be at least 1, got 0"),
    (
        lambda: ConstantSGD(0.1, preconditioner="full"),
        "sampler.preconditioner must be one of ('scalar', 'diagonal'), got 'full'",
    ),
    (lambda: ConstantSGD(0.1, variance_floor=0), "sampler.variance_floor must be in (0, 1], got 0"),
    (
        lambda: HMC(0.1, num_steps=None, trajectory_length=None),
        "give exactly one of sampler.num_steps and sampler.trajectory_length (got None and "
        "None): set the other to null",
    ),
    (lambda: HMC(0.1, num_steps=0), "sampler.num_steps must be ≥ 1, got 0"),
    (
        lambda: HMC(0.1, num_steps=None, trajectory_length=-1),
        "sampler.trajectory_length must be positive and finite, got -1",
    ),
    (lambda: HMC(0.1, refresh=1), "sampler.refresh must be in [0, 1), got 1"),
    (
        lambda: samplers.Laplace(hessian_structure="dense"),
        "sampler.hessian_structure must be one of diag, kron, full, got 'dense'",
    ),
    (
        lambda: samplers.Laplace(subset_of_weights="some"),
        "sampler.subset_of_weights must be one of all, last_layer, got 'some'",
    ),
    (lambda: samplers.Laplace(marglik_steps=0), "sampler.marglik_steps must be at least 1, got 0"),
    (lambda: samplers.Laplace(num_samples=0), "sampler.num_samples must be at least 1, got 0"),
    (lambda: samplers.MCDropout(0.1, p=1), "sampler.p (the dropout rate) must be in (0, 1), got 1"),
    (
        lambda: samplers.MCDropout(0.1, num_samples=0),
        "sampler.num_samples must be 1 or more, got 0",
    ),
    (lambda: samplers.MALA(0.1, target_accept=1), "sampler.target_accept must be in (0, 1), got 1"),
    (
        lambda: HMC(0.1, divergence_threshold=0),
        "sampler.divergence_threshold must be positive, got 0 (Stan's is 1000)",
    ),
    (lambda: NaiveSGHMC(0.1, resample_every=0), "sampler.resample_every must be ≥ 1, got 0"),
    (lambda: PSGLD(0.1, beta=1), "sampler.beta must be in [0, 1), got 1"),
    (lambda: PSGLD(0.1, damping=0), "sampler.damping must be positive and finite, got 0"),
    (lambda: SGD(0.1, momentum=1), "sampler.momentum must be in [0, 1), got 1"),
    (lambda: samplers.SGNHT(0.1, a=0), "sampler.a (the noise's friction) must be in (0, 1], got 0"),
    (
        lambda: samplers.SWAG(0.1, rank=1),
        "sampler.rank (SWAG's K deviations) must be 2 or more, got 1",
    ),
    (
        lambda: samplers.SWAG(0.1, collect_every=0),
        "sampler.collect_every must be 1 step or more, got 0",
    ),
    (lambda: samplers.SWAG(0.1, num_samples=0), "sampler.num_samples must be 1 or more, got 0"),
    (lambda: SGLD(0), "sampler.lr must be positive and finite, got 0"),
    (lambda: SGLD(math.inf), "sampler.lr must be positive and finite, got inf"),
]


@pytest.mark.parametrize("make, line", OUT_OF_RANGE)
def test_a_hyperparameter_out_of_range_is_one_line_naming_its_range_and_value(make, line):
    with pytest.raises(ValueError) as error:
        make()
    assert str(error.value) == line
