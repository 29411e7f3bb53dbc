"""Benchmark: bdl against its peers in JAX, run side by side in this one process at one thread.

- **Yacht BNN against NumPyro's NUTS** (Hoffman & Gelman 2014; Phan et al. 2019). The posterior is
  bdl's own at ``sampler=hmc dataset=yacht``: the network, Gaussian prior scale and likelihood are
  read from bdl's composed config (one hidden layer of 50 ReLU units, N(0, 0.3^2) on every weight
  and bias, a Gaussian likelihood whose noise precision has a Gamma(1, 1) prior and is sampled with
  the weights) and written again in NumPyro, on the same standardised tensors from bdl's loader. bdl
  runs full-batch HMC as one chain, as 8 stacked chains, as 8 and as 16 stacked chains whose
  trajectories run as one compiled program (``compile=true``), and as 8 stacked chains that learn
  a diagonal mass and the trajectory's length during burn-in (``sampler.mass=diagonal
  sampler.adapt_length=true``); NumPyro runs one chain of NUTS. The figure
  is ESS per second of the test predictive: arviz's bulk ESS of each test point's log predictive
  density over all draws (median and minimum over the points), over the whole run (warm-up and
  compilation included) and over the sampling after warm-up alone. Every run pays its own
  compilation, as a fresh process on a new machine would: torch's graphs are dropped and Inductor's
  on-disk cache starts empty before each bdl run; NumPyro compiles for each new MCMC. The posteriors
  are compared point by point: the difference of the two posterior means of the network's output
  over its Monte Carlo standard error (each side's standard deviation over the root of its ESS of
  the mean), and the test RMSE and log-likelihood of each model average by bdl's metrics.
- **SGHMC on MNIST's MLP against BlackJAX's SGHMC** (Chen et al. 2014; Cabezas et al. 2024): an
  epoch of bdl's SGHMC (burn-in: steps only; eager and with ``compile=true``), of BlackJAX's SGHMC
  dynamics (its ``sgmcmc.diffusions.sghmc`` and ``sgmcmc.gradients.grad_estimator``, with bdl's step
  size and friction mapped onto its parameterisation, momentum kept across the epoch, one jitted
  scan over the epoch's minibatches) and of the bare PyTorch SGD-with-momentum loop that is the
  yardstick of both, on the same real MNIST tensors from bdl's loader, minibatch and steps.

Rounds are interleaved (each contender in turn, round after round) so that machine noise hits
all alike; ratios are printed as the median over rounds with the range (min-max). torch runs at
one thread and XLA single-threaded (its flags set before JAX is imported). The goals:
bdl's best yacht setting >= 2x NUTS's ESS per second with warm-up included, its slowest test
point's ESS within 2x NUTS's, posteriors agreeing within Monte Carlo error; bdl's SGHMC epoch <=
BlackJAX's.

Needs the ``peers`` extra (``pip install -e .[peers]``: JAX, NumPyro, BlackJAX) and the real
data (BDL_DATA_DIR).

    python scripts/bench_peers.py [--rounds 3] [--part {yacht,mnist,all}] [--quick]
        [--default-threads]

``--quick`` shortens the yacht runs (80 HMC iterations of which 20 burn-in; NUTS 100 warm-up
iterations and 100 draws) for a test to run the whole script in well under a minute.
``--default-threads`` runs every contender as a user would, at its own default thread count
(bdl at ``threads=auto``, torch's and XLA's own elsewhere): run it beside other work to see
which thrashes.
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: every contender at its own default thread count instead of one (read before argparse runs:
#: XLA reads its thread settings once, when JAX starts)
DEFAULT_THREADS = "--default-threads" in sys.argv
if not DEFAULT_THREADS:  # one thread, as torch's
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    )
try:
    import blackjax
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS
except ImportError:
    print("bench_peers.py needs JAX, NumPyro and BlackJAX: pip install -e .[peers]")
    raise SystemExit(0) from None

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_ess import BASE as YACHT  # noqa: E402
from benchtools import (  # noqa: E402
    alternating_times,
    bare_sgd_epoch,
    composed,
    sampling,
)
from omegaconf import DictConfig  # noqa: E402
from torch._inductor.utils import fresh_cache  # noqa: E402

from bdl import diagnostics  # noqa: E402
from bdl.analysis.posterior import load_run  # noqa: E402
from bdl.composition.network import load_data  # noqa: E402
from bdl.runner.experiment import Experiment  # noqa: E402
from bdl.runner.run import run  # noqa: E402
from bdl.storage.outputs import CURVE  # noqa: E402
from bdl.task import Task  # noqa: E402

#: bdl's contenders on yacht: their overrides on top of the common ones
BDL_YACHT = {
    "bdl 1 chain": ["chains=1"],
    "bdl 8 chains": ["chains=8"],
    "bdl 8 compiled": ["chains=8", "compile=true"],
    # the mass in Stan's windows and the trajectory's length by ChEES, learnt in burn-in
    "bdl 8 adapted": ["chains=8", "sampler.mass=diagonal", "sampler.adapt_length=true"],
    # twice the chains for one compilation of the trajectory
    "bdl 16 compiled": ["chains=16", "compile=true"],
}
NUMPYRO = "NumPyro NUTS"
MNIST = ["dataset=mnist", "sampler=sghmc", "device=cpu"]
#: bdl's own default thread count under --default-threads; otherwise this process's one thread
BDL_THREADS = ["threads=auto"] if DEFAULT_THREADS else []


@dataclass
class Settings:
    """Run lengths on yacht."""

    epochs: int  # bdl's HMC iterations per chain (50 leapfrog steps each)
    burn_in: int
    warmup: int  # NUTS's
    samples: int


FULL = Settings(epochs=300, burn_in=100, warmup=500, samples=1000)
QUICK = Settings(epochs=80, burn_in=20, warmup=100, samples=100)


@dataclass
class Draws:
    """One run's test predictions, ``(chains, draws, points, 2)``: each draw's mean and variance
    in the standardised units of the targets, and the run's seconds, whole and after warm-up."""

    predictions: torch.Tensor
    seconds: float
    sampling_seconds: float


@dataclass
class Summary:
    """What one run's draws say of the test points: bulk ESS of the log predictive density, the
    posterior mean of the network's output with its Monte Carlo error, the model average's test
    RMSE and log-likelihood."""

    ess_median: float
    ess_min: float
    mean: np.ndarray  # posterior mean of the network's output on each test point, original units
    standard_error: np.ndarray  # its Monte Carlo standard error
    rmse: float
    ll: float

    @classmethod
    def of(cls, draws: Draws, task: Task) -> Summary:
        predictions = draws.predictions
        chains, count = predictions.shape[:2]
        pointwise = torch.stack([task.log_likelihoods(p) for p in predictions.flatten(0, 1)])
        ess = diagnostics.ess(pointwise.double().reshape(chains, count, -1).numpy())
        data = task.data
        function = (predictions[..., 0].double() * data.target_std + data.target_mean).numpy()
        ess_of_mean = diagnostics.ess(function, "mean")
        average = task.average()
        for prediction in predictions.flatten(0, 1):
            average.update(prediction)
        metrics = average.metrics(task.y_test)
        return cls(
            ess_median=float(np.median(ess)),
            ess_min=float(ess.min()),
            mean=function.mean((0, 1)),
            standard_error=function.std((0, 1)) / np.sqrt(ess_of_mean),
            rmse=metrics["test_rmse"],
            ll=metrics["test_ll"],
        )

    def largest_z(self, other: Summary) -> float:
        """The largest difference of the two posterior means over its Monte Carlo standard
        error, over the test points."""
        error = np.hypot(self.standard_error, other.standard_error)
        return float((np.abs(self.mean - other.mean) / error).max())


def bdl_yacht(cfg: DictConfig, directory: Path) -> Draws:
    """bdl's run of ``cfg`` and its test predictions, read back from the run directory."""
    # each run compiles afresh, as a new process on a new machine would (NumPyro's does): no
    # graphs in memory, and Inductor's on-disk cache of compiled code in a new, empty directory
    torch._dynamo.reset()
    with fresh_cache():
        metrics = run(cfg, directory)
    with (directory / CURVE).open() as file:
        burn_in = max(
            float(row["wall_time_s"])
            for row in csv.DictReader(file)
            if int(row["epoch"]) == cfg.burn_in
        )
    posterior = load_run(directory)
    x_test = posterior.data.x_test
    shape = (posterior.num_chains, len(posterior) // posterior.num_chains, x_test.shape[0], 2)
    predictions = torch.empty(shape)
    for sample, output in posterior.predictions(x_test):
        predictions[sample.chain, sample.draw] = output
    seconds = metrics["wall_time_s"]
    return Draws(predictions, seconds, seconds - burn_in)


def jax_mlp(cfg: DictConfig) -> Callable:
    """bdl's MLP of ``cfg`` as a function of a list of ``(weight, bias)`` pairs, weights
    ``(in, out)``, in JAX."""
    activation = getattr(jax.nn, cfg.model.activation)

    def forward(layers, x):
        for weight, bias in layers[:-1]:
            x = activation(x @ weight + bias)
        weight, bias = layers[-1]
        return x @ weight + bias

    return forward


def widths(cfg: DictConfig, data) -> list[int]:
    return [math.prod(data.input_shape), *cfg.model.hidden, data.out_features]


def check_posterior(cfg: DictConfig) -> None:
    """The NumPyro model below writes this posterior; another one would be compared wrongly."""
    expected = {
        "prior": cfg.prior._target_ == "bdl.priors.Gaussian"
        and cfg.prior.layers is None
        and not cfg.prior.fan_in,
        "likelihood": cfg.likelihood.noise_std is None and not cfg.likelihood.gibbs,
        "temperature": cfg.temperature == 1,
        "model": cfg.model._target_ == "bdl.models.mlp.MLP",
    }
    wrong = [key for key, matches in expected.items() if not matches]
    if wrong:
        raise SystemExit(
            f"bench_peers.py: bdl's {', '.join(wrong)} config is no longer the posterior its "
            "NumPyro model writes (Gaussian prior, sampled noise precision, temperature 1, MLP)"
        )


def nuts_yacht(cfg: DictConfig, data, settings: Settings, seed: int) -> Draws:
    """NumPyro's NUTS on the posterior of ``cfg``, one chain."""
    forward = jax_mlp(cfg)
    sizes = widths(cfg, data)
    scale = float(cfg.prior.scale)

    def model(x, y):
        layers = [
            (
                numpyro.sample(f"w{i}", dist.Normal(0.0, scale).expand([m, n]).to_event(2)),
                numpyro.sample(f"b{i}", dist.Normal(0.0, scale).expand([n]).to_event(1)),
            )
            for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))
        ]
        precision = numpyro.sample(
            "precision", dist.Gamma(cfg.likelihood.prior_shape, cfg.likelihood.prior_rate)
        )
        mean = forward(layers, x)[:, 0]
        numpyro.sample("y", dist.Normal(mean, precision**-0.5), obs=y)

    x, y = jnp.asarray(data.x_train.numpy()), jnp.asarray(data.y_train.numpy())
    mcmc = MCMC(
        NUTS(model),
        num_warmup=settings.warmup,
        num_samples=settings.samples,
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.warmup(jax.random.PRNGKey(seed), x, y)
    jax.block_until_ready(mcmc.post_warmup_state)
    warmed = time.perf_counter()
    mcmc.run(mcmc.post_warmup_state.rng_key, x, y)
    samples = jax.block_until_ready(mcmc.get_samples())
    end = time.perf_counter()

    layers = [(samples[f"w{i}"], samples[f"b{i}"]) for i in range(len(sizes) - 1)]
    x_test = jnp.asarray(data.x_test.numpy())
    mean = jax.vmap(lambda params: forward(params, x_test)[:, 0])(layers)
    variance = jnp.broadcast_to((1 / samples["precision"])[:, None], mean.shape)
    predictions = torch.tensor(np.asarray(jnp.stack([mean, variance], -1)))[None]
    return Draws(predictions, end - start, end - warmed)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def threads() -> str:
    """The thread counts the contenders run at, for the printed header."""
    if DEFAULT_THREADS:
        return f"default threads (bdl threads=auto; torch {torch.get_num_threads()}; XLA its own)"
    return f"torch threads {torch.get_num_threads()}, XLA single-threaded"


def yacht(rounds: int, settings: Settings) -> None:
    common = [*YACHT, f"epochs={settings.epochs}", f"burn_in={settings.burn_in}", *BDL_THREADS]
    cfg = composed(common)
    check_posterior(cfg)
    data = load_data(cfg)
    task = Task(data, data.y_test)
    print(
        f"yacht: bdl {' '.join(common)} (HMC, 50 leapfrog steps an iteration); NumPyro NUTS, one "
        f"chain, {settings.warmup} warm-up + {settings.samples} draws; {len(data.x_test)} test "
        f"points, {rounds} rounds, {threads()}"
    )
    print(
        f"{'contender':<15}{'round':>6}{'ESS med':>8}{'ESS min':>8}{'seconds':>8}{'after wu':>9}"
        f"{'med/s':>7}{'min/s':>7}{'med/s aft':>10}{'rmse':>7}{'ll':>7}{'max|z|':>7}"
    )
    names = [NUMPYRO, *BDL_YACHT]  # NUTS first: each bdl run is compared with its round's
    # per contender, per round: ESS/s of the median and minimum, whole, and of the median after
    # warm-up; the minimum ESS
    rates: dict[str, list[tuple[float, ...]]] = {name: [] for name in names}
    worst_z: dict[str, float] = {}
    skipped: set[str] = set()
    with tempfile.TemporaryDirectory() as root:
        for round_ in range(rounds):
            for name in names:
                if name in skipped:
                    continue
                if name == NUMPYRO:
                    draws = nuts_yacht(cfg, data, settings, seed=round_)
                else:
                    overrides = [*common, *BDL_YACHT[name], f"seed={round_}"]
                    try:
                        draws = bdl_yacht(composed(overrides), Path(root) / f"{name}_{round_}")
                    except torch._dynamo.exc.BackendCompilerFailed as error:
                        print(f"{name}: skipped, torch.compile fails on this machine ({error})")
                        skipped.add(name)
                        continue
                summary = Summary.of(draws, task)
                if name == NUMPYRO:
                    nuts, z = summary, ""
                else:
                    worst = summary.largest_z(nuts)
                    worst_z[name] = max(worst_z.get(name, 0.0), worst)
                    z = f"{worst:.2f}"
                rate = (
                    summary.ess_median / draws.seconds,
                    summary.ess_min / draws.seconds,
                    summary.ess_median / draws.sampling_seconds,
                    summary.ess_min,
                )
                rates[name].append(rate)
                print(
                    f"{name:<15}{round_:>6}{summary.ess_median:>8.0f}{summary.ess_min:>8.0f}"
                    f"{draws.seconds:>8.1f}{draws.sampling_seconds:>9.1f}{rate[0]:>7.1f}"
                    f"{rate[1]:>7.2f}{rate[2]:>10.1f}{summary.rmse:>7.3f}{summary.ll:>7.3f}{z:>7}"
                )
    print(
        "bdl / NumPyro NUTS, median (min-max) over rounds: ESS per second of the test predictive "
        "(median and minimum over the points, the whole run or after warm-up), and the minimum ESS"
    )
    print(
        f"{'contender':<15}{'med/s, whole':>20}{'min/s, whole':>20}{'med/s, after wu':>20}"
        f"{'min ESS':>20}{'max|z|':>8}"
    )
    for name in BDL_YACHT:
        if not rates[name]:
            continue
        ratios = [
            [ours[k] / theirs[k] for ours, theirs in zip(rates[name], rates[NUMPYRO], strict=True)]
            for k in range(4)
        ]
        print(f"{name:<15}{''.join(f'{spread(r):>20}' for r in ratios)}{worst_z[name]:>8.2f}")


class BlackJAXSGHMC:
    """BlackJAX's SGHMC on bdl's network, prior and training data of ``cfg`` (MNIST): each call
    runs one more epoch."""

    def __init__(self, cfg: DictConfig, experiment: Experiment) -> None:
        self.forward = jax_mlp(cfg)
        self.x = jnp.asarray(experiment.run.x_train.flatten(1).numpy())
        self.y = jnp.asarray(experiment.run.y_train.numpy())
        count, batch = self.x.shape[0], experiment.run.batch_size
        steps = count // batch
        scale = float(cfg.prior.scale)

        def log_prior(layers):
            leaves = jax.tree.leaves(layers)
            return sum(jax.scipy.stats.norm.logpdf(leaf, 0.0, scale).sum() for leaf in leaves)

        def log_likelihood(layers, datum):
            image, label = datum
            return jax.nn.log_softmax(self.forward(layers, image))[label]

        gradient = blackjax.sgmcmc.gradients.grad_estimator(log_prior, log_likelihood, count)
        # bdl's v' = (1 - a) v - eta grad U + N(0, 2 a eta), eta = lr / N, is BlackJAX's Euler
        # step x' = x + h p, p' = (1 - alpha h) p + h grad log p + N(0, 2 alpha h) at
        # h = sqrt(eta), alpha = a / h, v = h p
        step_size = math.sqrt(cfg.sampler.lr / count)
        integrator = blackjax.sgmcmc.diffusions.sghmc(alpha=cfg.sampler.alpha / step_size)

        def epoch(state, key, x, y):
            key, shuffle = jax.random.split(key)
            order = jax.random.permutation(shuffle, count)[: steps * batch]

            def step(carry, inputs):
                position, momentum = carry
                index, noise = inputs
                grad = gradient(position, (x[index], y[index]))
                return integrator(noise, position, momentum, grad, step_size), None

            inputs = (order.reshape(steps, batch), jax.random.split(key, steps))
            state, _ = jax.lax.scan(step, state, inputs)
            return state, key

        self.epoch = jax.jit(epoch)
        sizes = widths(cfg, experiment.run.data)
        keys = jax.random.split(jax.random.PRNGKey(0), len(sizes))
        # Chen et al.'s initial weights N(0, init_std^2) and zero biases, as bdl's protocol
        position = [
            (cfg.model.init_std * jax.random.normal(k, (m, n)), jnp.zeros(n))
            for k, m, n in zip(keys[1:], sizes[:-1], sizes[1:], strict=True)
        ]
        self.state = (position, jax.tree.map(jnp.zeros_like, position))
        self.key = keys[0]

    def __call__(self) -> None:
        self.state, self.key = self.epoch(self.state, self.key, self.x, self.y)
        jax.block_until_ready(self.state)

    def accuracy(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """Test accuracy of the chain's current position."""
        logits = np.asarray(self.forward(self.state[0], x.flatten(1).numpy()))
        return float((logits.argmax(-1) == y.numpy()).mean())


def first_layer_products(experiment: Experiment) -> tuple[Callable, Callable]:
    """An epoch of the first layer's two matrix products on a minibatch (most of either
    library's SGHMC step), the forward pass and the weights' gradient, each library's in the
    layout of its own network (torch's ``x Wᵀ`` and ``Gᵀ x`` with ``W`` of shape (out, in), as
    ``nn.Linear`` holds it; JAX's ``x W`` and ``xᵀ G`` with ``W`` of shape (in, out), as the
    BlackJAX contender's); each call one more epoch: what the epochs would cost with nothing
    else."""
    x = experiment.run.x_train[: experiment.run.batch_size].flatten(1)
    weight = experiment.potential.params[0].detach()
    gradient = torch.randn(x.shape[0], weight.shape[0])
    steps = experiment.run.steps_per_epoch

    def torch_epoch() -> None:
        for _ in range(steps):
            x @ weight.T
            gradient.T @ x

    products = jax.jit(lambda x, w, g: (x @ w, x.T @ g))
    x_, weight_, gradient_ = (jnp.asarray(t.numpy()) for t in (x, weight.T, gradient))

    def xla_epoch() -> None:
        for _ in range(steps):
            jax.block_until_ready(products(x_, weight_, gradient_))

    return torch_epoch, xla_epoch


def mnist(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        cfg = composed([*MNIST, *BDL_THREADS])
        loop = sampling(cfg, Path(directory) / "sghmc")  # burn-in: steps only
        compiled_cfg = composed([*MNIST, *BDL_THREADS, "compile=true"])
        compiled = sampling(compiled_cfg, Path(directory) / "compiled")
        sghmc = loop.experiment
        blackjax = BlackJAXSGHMC(cfg, sghmc)
        # the warm-up epoch of each holds torch.compile's compilation
        bare, ours, ours_compiled, theirs = alternating_times(
            [bare_sgd_epoch(sghmc), loop.step_epoch, compiled.step_epoch, blackjax], rounds
        )
        torch_products, xla_products = alternating_times(first_layer_products(sghmc), rounds)
        with torch.no_grad():
            logits = sghmc.potential.model(sghmc.run.x_test)
    y_test = sghmc.run.task.y_test
    accuracy = (logits.argmax(-1) == y_test).double().mean().item()
    print(
        f"MNIST {sghmc.run.x_train.shape[0]} images (real, bdl's loader), MLP "
        f"{'-'.join(map(str, widths(cfg, sghmc.run.data)))}, batch {sghmc.run.batch_size}, "
        f"{sghmc.run.steps_per_epoch} steps an epoch, {rounds} rounds after a warm-up, {threads()}"
    )
    print(f"bare PyTorch SGD-momentum epoch: {statistics.median(bare) * 1e3:8.1f} ms (median)")
    contenders = (
        ("bdl SGHMC", ours),
        ("bdl compiled SGHMC", ours_compiled),
        ("BlackJAX SGHMC", theirs),
    )
    for name, times in contenders:
        ratios = [t / b for t, b in zip(times, bare, strict=True)]
        print(
            f"{name + ' epoch:':<32} {statistics.median(times) * 1e3:8.1f} ms   / bare "
            f"{spread(ratios)}"
        )
    for name, times in (("bdl", ours), ("bdl compile=true", ours_compiled)):
        ratios = [o / t for o, t in zip(times, theirs, strict=True)]
        print(f"{name} / BlackJAX epoch: {spread(ratios)}  (goal <= 1)")
    ratios = [t / x for t, x in zip(torch_products, xla_products, strict=True)]
    print(
        f"the first layer's products alone, an epoch: torch "
        f"{statistics.median(torch_products) * 1e3:.1f} ms, XLA "
        f"{statistics.median(xla_products) * 1e3:.1f} ms, torch / XLA {spread(ratios)}"
    )
    print(
        f"test accuracy of the last state, {rounds + 1} epochs: bdl {accuracy:.3f}, BlackJAX "
        f"{blackjax.accuracy(sghmc.run.x_test, y_test):.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--part", choices=["yacht", "mnist", "all"], default="all")
    parser.add_argument("--quick", action="store_true", help="short yacht runs, for a test")
    parser.add_argument(
        "--default-threads",
        action="store_true",
        help="each contender at its default thread count (bdl: threads=auto), not one thread",
    )
    args = parser.parse_args()
    if not DEFAULT_THREADS:
        torch.set_num_threads(1)
    # the runs' own verdicts (short chains that have not converged) are not what is measured
    logging.getLogger("bdl").setLevel(logging.ERROR)
    if args.part in ("yacht", "all"):
        yacht(args.rounds, QUICK if args.quick else FULL)
    if args.part in ("mnist", "all"):
        mnist(args.rounds)


if __name__ == "__main__":
    main()
