r"""The Laplace approximation (``sampler=laplace``): exact on Bayesian linear regression, where
$U_T$ is quadratic, so its draws must have the closed-form posterior's moments
(Bishop 2006, §3.3: $\Lambda = (\tau\Phi^\top\Phi + I/\sigma^2)/T$, mean
$(\tau\Phi^\top\Phi + I/\sigma^2)^{-1}\tau\Phi^\top y$); and end to end in the runner on a
tiny generated UCI-format dataset, starting from an SGD run.

Monte Carlo error, stated: with $S$ independent draws of a Gaussian, the sample mean's
coordinate $i$ has standard deviation $\sqrt{\Sigma_{ii}/S}$ and the sample
covariance's entry $ij$ $\sqrt{(\Sigma_{ij}^2 + \Sigma_{ii}\Sigma_{jj})/S}$; the
tests allow 5 of those (a chance of about 6e-7 per coordinate to fail by noise).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from bdl import likelihoods, priors
from bdl.models import Linear
from bdl.potential import Potential
from bdl.runner.experiment import build
from bdl.runner.run import run
from bdl.samplers.laplace import Laplace
from bdl.storage.store import count_samples, load_samples

NUM_DATA, DIM, NOISE_STD, PRIOR_STD = 200, 3, 0.5, 2.0
DRAWS = 20_000


def _regression(temperature: float):
    """A potential at its exact mode, and the closed-form posterior mean and covariance."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(NUM_DATA, DIM, generator=generator, dtype=torch.float64)
    x -= x.mean(0)  # centred inputs: the bias is a posteriori independent of the weights
    y = x @ torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64) + 0.3
    y += NOISE_STD * torch.randn(NUM_DATA, generator=generator, dtype=torch.float64)
    design = torch.cat([x, torch.ones(NUM_DATA, 1, dtype=torch.float64)], 1)
    tau = NOISE_STD**-2
    untempered = tau * design.T @ design + torch.eye(DIM + 1, dtype=torch.float64) / PRIOR_STD**2
    mean = torch.linalg.solve(untempered, tau * design.T @ y)
    covariance = temperature * torch.linalg.inv(untempered)
    model = Linear((DIM,), 1)
    with torch.no_grad():
        model.linear.weight.copy_(mean[:DIM].reshape(1, DIM))
        model.linear.bias.copy_(mean[DIM:])
    potential = Potential(
        model,
        likelihoods.Gaussian(noise_std=NOISE_STD),
        priors.Gaussian(scale=PRIOR_STD),
        NUM_DATA,
        temperature,
    )
    x32, y32 = x.float(), y.float()

    def batches():
        return zip(x32.split(64), y32.split(64), strict=True)

    return potential, batches, mean, covariance, untempered


def _draws(sampler: Laplace, potential: Potential) -> torch.Tensor:
    state = sampler.init(potential.params)
    kept = [
        torch.cat([p.detach().flatten() for p in potential.params]).double()
        for _ in sampler.final_samples(state)
    ]
    return torch.stack(kept)


def _assert_moments(draws: torch.Tensor, mean: torch.Tensor, covariance: torch.Tensor) -> None:
    count = draws.shape[0]
    variance = covariance.diagonal()
    assert ((draws.mean(0) - mean).abs() <= 5 * (variance / count).sqrt()).all()
    entry_sd = ((covariance.square() + variance[:, None] * variance[None, :]) / count).sqrt()
    assert ((torch.cov(draws.T) - covariance).abs() <= 5 * entry_sd).all()


@pytest.mark.parametrize(
    "structure, subset, temperature",
    [
        ("full", "all", 1.0),
        ("full", "all", 0.5),  # a cold posterior: the covariance scales by T
        # K-FAC is exact here: one output with a constant Hessian τ, and centred inputs.
        ("kron", "all", 1.0),
        # The linear model's one layer is its last: the same posterior.
        ("full", "last_layer", 1.0),
        ("kron", "last_layer", 0.5),
    ],
)
def test_draws_have_the_closed_form_posterior_moments(structure, subset, temperature):
    potential, batches, mean, covariance, _ = _regression(temperature)
    sampler = Laplace(
        hessian_structure=structure,
        subset_of_weights=subset,
        num_samples=DRAWS,
        generator=torch.Generator().manual_seed(1),
    )
    sampler.attach(potential, batches)
    _assert_moments(_draws(sampler, potential), mean, covariance)
    # The mode is restored after the draws.
    assert torch.allclose(potential.model.linear.bias.double(), mean[DIM:], atol=1e-6)


def test_diagonal_approximation_keeps_the_precisions_diagonal():
    """``diag`` keeps $\\Lambda_{ii}$ and drops the rest: variances $1/\\Lambda_{ii}$,
    no correlations."""
    temperature = 0.5
    potential, batches, mean, _, untempered = _regression(temperature)
    sampler = Laplace(hessian_structure="diag", num_samples=DRAWS, generator=torch.Generator())
    sampler.attach(potential, batches)
    covariance = torch.diag(temperature / untempered.diagonal())
    _assert_moments(_draws(sampler, potential), mean, covariance)


def test_marginal_likelihood_moves_the_prior_precision():
    potential, batches, *_ = _regression(1.0)
    sampler = Laplace(hessian_structure="full", marglik=True, marglik_steps=200)
    sampler.attach(potential, batches)
    approximation, _ = sampler.fit()
    # bdl's prior has precision 1/2² = 0.25; the evidence of these data, with weights of size
    # 0.3 to 1, prefers a larger one (the evidence's optimum of an isotropic prior is about
    # D / ||w||² = 4 / 1.4 ≈ 2.9).
    assert approximation.prior_precision.numel() == 1
    assert 1.0 < approximation.prior_precision.item() < 10.0


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"hessian_structure": "lowrank"}, "sampler.hessian_structure"),
        ({"subset_of_weights": "subnetwork"}, "sampler.subset_of_weights"),
        ({"num_samples": 0}, "sampler.num_samples"),
        ({"marglik_steps": 0}, "sampler.marglik_steps"),
        ({"lr": 0.0}, "sampler.lr"),
    ],
)
def test_bad_hyperparameters_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        Laplace(**kwargs)


FIXED = (
    "sampler=laplace approximates the weights' posterior under fixed hyperparameters: use a "
    "prior without hyperprior (prior=gaussian) and, for regression, a fixed noise "
    "(likelihood.noise_std=<value>)"
)


def test_refuses_priors_and_likelihoods_it_cannot_approximate():
    model = Linear((DIM,), 1)

    def refusal(potential, **kwargs) -> str:
        with pytest.raises(ValueError) as error:
            Laplace(**kwargs).attach(potential, lambda: iter(()))
        return str(error.value)

    sampled_noise = Potential(model, likelihoods.Gaussian(), priors.Gaussian(), 10)
    assert refusal(sampled_noise) == FIXED
    # sampled prior precisions alone, the noise fixed: still not the fixed hyperparameters it needs
    hierarchical = Potential(
        model, likelihoods.Gaussian(noise_std=1.0), priors.GammaHierarchical(), 10
    )
    assert refusal(hierarchical) == FIXED
    student = Potential(model, likelihoods.Gaussian(noise_std=1.0), priors.StudentT(), 10)
    assert (
        refusal(student) == "sampler=laplace needs a Gaussian prior (prior=gaussian), got StudentT"
    )
    wide = Linear((20_000,), 1)  # 20,001 parameters: a full precision matrix of 1.6 GB
    big = Potential(wide, likelihoods.Gaussian(noise_std=1.0), priors.Gaussian(), 10)
    assert refusal(big, hessian_structure="full", subset_of_weights="all") == (
        "sampler.hessian_structure=full on 20,001 parameters needs a 20,001² matrix: use kron or "
        "diag, or sampler.subset_of_weights=last_layer"
    )
    Laplace(hessian_structure="kron").attach(big, lambda: iter(()))
    with pytest.raises(RuntimeError) as error:
        Laplace().fit()
    assert str(error.value) == "Laplace.attach(potential, batches) must come before the fit"


def _write_uci(root, name: str = "toy", n: int = 120, n_test: int = 30) -> None:
    """A tiny regression set in the layout of the standard UCI splits."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n + n_test, 2))
    y = x @ np.array([1.0, -2.0]) + 0.5 + 0.3 * rng.normal(size=n + n_test)
    folder = root / "uci" / name
    folder.mkdir(parents=True)
    np.savetxt(folder / "data.txt", np.column_stack([x, y]))
    (folder / "index_features.txt").write_text("0\n1\n")
    (folder / "index_target.txt").write_text("2\n")
    (folder / "n_splits.txt").write_text("1\n")
    np.savetxt(folder / "index_train_0.txt", np.arange(n), fmt="%d")
    np.savetxt(folder / "index_test_0.txt", np.arange(n, n + n_test), fmt="%d")


def test_runner_from_an_sgd_run(tmp_path, isolated_cache):
    _write_uci(tmp_path / "data")
    common = [
        "dataset=boston",
        "dataset.name=toy",
        f"dataset.root={tmp_path / 'data'}",
        "dataset.download=false",
        "protocol.mlp.hidden=[8]",
        "likelihood.noise_std=0.3",
        "batch_size=40",
        "burn_in=0",
        "thin=1",
        "pruning=true",
        "pruning_samples=5",
    ]
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        sgd = compose("config", ["sampler=sgd", "sampler.lr=0.05", "epochs=30", *common])
        laplace = compose(
            "config",
            [
                "sampler=laplace",
                "sampler.num_samples=7",
                "sampler.subset_of_weights=last_layer",
                f"init_from={tmp_path / 'sgd'}",
                "epochs=2",
                *common,
            ],
        )
    run(sgd, tmp_path / "sgd")
    assert build(laplace).run.steps_per_epoch == 1
    metrics = run(laplace, tmp_path / "laplace")
    assert metrics["num_samples"] == 7 and np.isfinite(metrics["test_rmse"])
    # One full-data evaluation of U at the mode, then one pass of 3 batches of 40 for the fit.
    assert metrics["grad_evals"] == 1 + 3
    assert count_samples(tmp_path / "laplace" / "samples") == 7
    # Last-layer Laplace: the hidden layer stays at the SGD solution, the output layer varies.
    samples = [sample for sample, _ in load_samples(tmp_path / "laplace" / "samples")]
    hidden = torch.stack([s["layers.0.weight"] for s in samples])
    output = torch.stack([s["layers.2.weight"] for s in samples])
    assert (hidden == hidden[0]).all() and (output.std(0) > 0).all()
    assert (tmp_path / "laplace" / "pruning.csv").is_file()
    curve = (tmp_path / "laplace" / "curve.csv").read_text().splitlines()
    assert len(curve) == 3


def test_without_laplace_torch_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "laplace", None)  # what `import laplace` meets uninstalled
    with pytest.raises(ValueError, match=r"pip install 'bdl\[laplace\]'"):
        Laplace()
