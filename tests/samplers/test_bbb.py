"""Bayes by Backprop: the update is Adam on (μ, ρ) with σ = log(1 + e^ρ)'s chain rule (or, for
Blundell et al.'s own, SGD at a rate per datum), foreach = loop, Blundell's KL weights, draws from
q after training, a conjugate posterior recovered, and MFVI's start from an SGD solution."""

import math

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_module
from test_potential import mlp_potential

import bdl.composition.config  # noqa: F401  (registers the root schema)
from bdl.likelihoods import Gaussian as GaussianLikelihood
from bdl.potential import Potential
from bdl.priors import Gaussian as GaussianPrior
from bdl.priors import ScaleMixture
from bdl.runner.experiment import build
from bdl.runner.run import run
from bdl.samplers.bbb import BBB, BBBSGD
from bdl.storage.store import StoreError, load_samples
from bdl.variational import MeanField


def quadratic_closure(target_mean=1.0, target_std=0.5):
    """F(μ, σ) = Σ ½(μ − a)² + ½(σ − b)²: known gradients in μ and σ."""

    def closure(q):
        value = sum(
            0.5 * ((m - target_mean).square() + (s - target_std).square()).sum()
            for m, s in zip(q.mean, q.std)
        )
        grads = [m - target_mean for m in q.mean] + [s - target_std for s in q.std]
        return value, grads

    return closure


def params():
    return [torch.tensor([0.3, -0.2]), torch.tensor([[0.5, 0.1], [0.0, -1.0]])]


@pytest.mark.parametrize(
    "kind, reference_optimiser, lr, buffers",
    [
        (BBB, torch.optim.Adam, 0.01, {"mu", "rho", "exp_avg", "exp_avg_sq"}),
        # Blundell et al.'s own update: no optimiser state to checkpoint
        (BBBSGD, torch.optim.SGD, 0.1, {"mu", "rho"}),
    ],
    ids=["adam", "sgd"],
)
def test_update_is_the_optimiser_on_mu_and_rho_through_the_softplus(
    kind, reference_optimiser, lr, buffers
):
    theta = params()
    sampler = kind(lr=lr, init_std=0.2)
    state = sampler.init(theta)
    assert set(state.buffers) == buffers
    mu = [p.clone().requires_grad_() for p in params()]
    rho = [torch.full_like(p, math.log(math.expm1(0.2))).requires_grad_() for p in mu]
    reference = reference_optimiser(mu + rho, lr=lr)
    for t in range(5):
        sampler.step(state, quadratic_closure(), lr_scale=1 / (t + 1))
        for group in reference.param_groups:
            group["lr"] = lr / (t + 1)
        reference.zero_grad()
        sum(
            0.5 * ((m - 1.0).square() + (F.softplus(r) - 0.5).square()).sum()
            for m, r in zip(mu, rho)
        ).backward()
        reference.step()
    for ours, theirs in zip(state.params + state.buffers["rho"], mu + rho):
        torch.testing.assert_close(ours, theirs.detach())
    assert state.buffers["mu"] is state.params  # the network's weights are q's mean


def test_bbb_sgd_takes_the_papers_rate_per_datum(fake_data_root, isolated_cache):
    """lr = α n: a step of lr / N on U, M = N / n times the paper's minibatch cost, is α on it."""
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        cfg = compose(
            "config",
            overrides=["sampler=bbb_sgd", f"dataset.root={fake_data_root}", "epochs=1"],
        )
    experiment = build(cfg)
    num_data = experiment.run.data.num_train
    assert isinstance(experiment.sampler, BBBSGD)
    assert experiment.sampler.lr == pytest.approx(0.128 / num_data)
    assert experiment.sampler.kl_weighting == "blundell"


@pytest.mark.parametrize("kind", [BBB, BBBSGD])
def test_foreach_equals_loop(kind):
    a, b = params(), params()
    fast, slow = kind(lr=0.05, num_mc=2), kind(lr=0.05, num_mc=2, foreach=False)
    state_a, state_b = fast.init(a), slow.init(b)
    for t in range(5):
        fast.step(state_a, quadratic_closure(), lr_scale=1 / (t + 1))
        slow.step(state_b, quadratic_closure(), lr_scale=1 / (t + 1))
    for x, y in zip(a + state_a.buffers["rho"], b + state_b.buffers["rho"]):
        torch.testing.assert_close(x, y)
    assert state_a.grad_evals == 10


def test_kl_weights():
    uniform, blundell = BBB(lr=0.1), BBB(lr=0.1, kl_weighting="blundell")
    assert [uniform.prior_weight(i, 7) for i in range(7)] == [1.0] * 7
    for batches in (1, 7, 390, 2000):
        weights = [blundell.prior_weight(i, batches) for i in range(batches)]
        # π_i = 2^(M-i) / (2^M - 1) sums to 1, so the weights M π_i sum to M
        assert sum(weights) == pytest.approx(batches)
        assert weights[0] == pytest.approx(batches * 2 ** (batches - 1) / (2**batches - 1))
        assert all(a == pytest.approx(2 * b) for a, b in zip(weights, weights[1:]) if b > 0)
        assert all(w == 0 or w >= 1e-30 for w in weights)


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"lr": 0.0}, "lr"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"num_mc": 0}, "num_mc"),
        ({"kl_weighting": "linear"}, "kl_weighting"),
        ({"init_std": 0.0}, "init_std"),
        ({"num_samples": 0}, "num_samples"),
    ],
)
def test_bad_hyperparameters_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        BBB(**{"lr": 0.1, **kwargs})


def test_final_samples_are_draws_from_q_and_the_mean_is_restored():
    theta = [torch.zeros(20000)]
    sampler = BBB(lr=0.1, init_std=0.3, num_samples=3, generator=torch.Generator().manual_seed(0))
    state = sampler.init(theta)
    theta[0].fill_(2.0)
    draws = [theta[0].clone() for _ in sampler.final_samples(state)]
    assert len(draws) == 3
    for draw in draws:
        assert draw.mean().item() == pytest.approx(2.0, abs=0.01)
        assert draw.std().item() == pytest.approx(0.3, rel=0.02)
    assert not torch.equal(draws[0], draws[1])
    assert torch.equal(theta[0], torch.full((20000,), 2.0))
    mean, std = sampler.posterior_moments(state)
    torch.testing.assert_close(std[0], torch.full((20000,), 0.3))


@pytest.mark.slow
def test_recovers_a_factorised_gaussian_posterior():
    """Linear regression on one-hot inputs with known noise: the posterior factorises, so
    mean-field VI is exact and BBB's (μ, σ) must reach its means and standard deviations."""
    torch.manual_seed(0)
    features, repeats, noise, prior_std = 3, 40, 0.5, 2.0
    x = torch.eye(features).repeat(repeats, 1).double()
    truth = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
    y = x @ truth + noise * torch.randn(len(x), dtype=torch.float64)
    model = torch.nn.Linear(features, 1, bias=False).double()
    potential = Potential(
        model, GaussianLikelihood(noise_std=noise).double(), GaussianPrior(prior_std), len(x)
    )
    precision = 1 / prior_std**2 + repeats / noise**2
    exact_mean = (y.view(repeats, features).sum(0) / noise**2) / precision
    sampler = BBB(lr=0.01, num_mc=4, generator=torch.Generator().manual_seed(1))
    state = sampler.init(potential.params)
    for t in range(6000):
        sampler.step(state, potential.closure(x, y), lr_scale=1 if t < 4000 else 0.1)
    mean, std = sampler.posterior_moments(state)
    torch.testing.assert_close(mean[0].flatten(), exact_mean, atol=0.01, rtol=0)
    torch.testing.assert_close(
        std[0].flatten(), torch.full((features,), precision**-0.5).double(), atol=0.005, rtol=0
    )


def test_mfvi_starts_from_the_last_sample_of_an_sgd_run(fake_data_root, isolated_cache, tmp_path):
    common = [
        f"dataset.root={fake_data_root}",
        "dataset.validation=59000",
        "epochs=1",
        "burn_in=0",
        "batch_size=100",
    ]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        sgd = compose("config", overrides=["sampler=sgd", *common])
        mfvi = compose(
            "config",
            overrides=["sampler=mfvi", "schedule=cosine", f"init_from={tmp_path / 'sgd'}", *common],
        )
    run(sgd, tmp_path / "sgd")
    ((solution, _),) = load_samples(tmp_path / "sgd" / "samples")
    start = build(mfvi)
    for name, p in start.potential.model.named_parameters():
        torch.testing.assert_close(p.detach(), solution[name])
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        elsewhere = compose("config", overrides=["sampler=mfvi", f"init_from={tmp_path}", *common])
    with pytest.raises(StoreError, match="manifest"):
        build(elsewhere)


@pytest.mark.parametrize("prior", [GaussianPrior(0.8), ScaleMixture()], ids=["closed", "mc"])
@pytest.mark.parametrize("local_reparam", [True, False])
@pytest.mark.parametrize("num_mc", [1, 2])
def test_a_step_moves_by_the_mean_of_the_closures_gradients(num_mc, local_reparam, prior):
    """One SGD step moves (μ, ρ) by the mean of ``num_mc`` evaluations of the closure at q,
    drawn one after the other from q's generator (ρ through ∂σ/∂ρ = 1 / (1 + e^-ρ)), whatever
    memory the sampler keeps across steps."""
    potential = mlp_potential(prior)
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
    start = [p.detach().clone() for p in potential.params]
    generator = torch.Generator().manual_seed(3)
    rho = [torch.full_like(p, math.log(math.expm1(0.2))) for p in start]
    std = [F.softplus(r) for r in rho]
    evaluations = [
        potential.closure(x, y)(MeanField(start, std, generator, local_reparam))[1]
        for _ in range(num_mc)
    ]
    sampler = BBBSGD(
        lr=0.01,
        num_mc=num_mc,
        local_reparam=local_reparam,
        init_std=0.2,
        generator=generator.manual_seed(3),
    )
    state = sampler.init(potential.params)
    sampler.step(state, potential.closure(x, y))
    slopes = [torch.sigmoid(r) for r in rho]
    moved = state.params + state.buffers["rho"]
    for theta, theta0, slope, *grads in zip(
        moved, start + rho, [1.0] * len(start) + slopes, *evaluations
    ):
        torch.testing.assert_close(theta, theta0 - 0.01 * slope * sum(grads) / num_mc)
