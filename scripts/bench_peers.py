"""Benchmark: bdl against its peers in JAX, run side by side in this one process on one core.

- **Yacht BNN against NumPyro's NUTS and BlackJAX's ChEES-HMC, each at its best.** The
  posterior is bdl's own at ``sampler=hmc dataset=yacht``: the network, Gaussian prior scale and
  likelihood are read from bdl's composed config (one hidden layer of 50 ReLU units, N(0, 0.3^2)
  on every weight and bias, a Gaussian likelihood whose noise precision has a Gamma(1, 1) prior
  and is sampled with the weights) and written again in NumPyro, on the same standardised
  tensors from bdl's loader; BlackJAX samples that model's log density on NumPyro's
  unconstrained space. bdl runs full-batch HMC as one chain, as 8 stacked chains, as 8 and as 16
  stacked chains whose trajectories run as one compiled program (``compile=true``), and as 8
  eager and 16 compiled stacked chains that learn a diagonal mass and the trajectory's length
  during burn-in (``sampler.mass=diagonal sampler.adapt_length=true``; compiled, the learnt mass
  and length are inputs of the same program); and, each of 16 compiled chains, the mass alone
  (50 leapfrog steps), the length alone (the identity mass), and the diagonal mass that
  minimises the Fisher divergence (``sampler.mass=fisher``; Seyboldt, Carlson & Carpenter 2026)
  alone and with the length. Each keeps every iteration after burn-in (``thin=1``) and draws no
  figures (``figures=false``), as the peers keep every draw and draw none. The peers: one chain
  of NumPyro's NUTS (Hoffman & Gelman 2014; Phan et al. 2019); 16 chains of it vectorised as
  one program (``chain_method="vectorized"``); and 16 vmapped chains of BlackJAX's ChEES-HMC
  (Hoffman, Radul & Sountsov 2021: a jittered trajectory length shared by the chains, learnt by
  Adam on the ChEES criterion, the step size by dual averaging), with the identity mass and the
  diagonal mass BlackJAX estimates from the ensemble over warm-up's second half
  (``mass_matrix_estimation="diagonal"``). The 16-chain peers run as many iterations a chain
  after their warm-up as bdl's chains after burn-in, each a draw.

  The figure is the ESS of the test predictive, arviz's bulk ESS of each test point's log
  predictive density over all draws, at the median test point and at the slowest, per second
  of wall time and per CPU-second (``benchtools.cpu_seconds``: every thread of the process, so
  XLA's and JAX's compile threads, and child processes, so Inductor's compile workers), over
  the whole run (warm-up and compilation included, the runs' own test predictions too) and over
  the sampling after warm-up alone, compilation excluded: bdl's from the end of burn-in (torch
  compiles in the first epoch), the peers' from the end of XLA's compilation of the sampling
  program (the longest compilation after warm-up, heard from JAX's monitoring events). Every run
  pays its own compilation, as a fresh process would: torch's graphs are dropped and
  Inductor's on-disk cache starts empty before each bdl run; the peers compile for each new
  run. What each library does once a process (JAX's backend; Inductor's modules and its probe
  of the CPU's vector instructions, several seconds that Inductor then keeps on disk for every
  later process on the machine; arviz's import, a second that bdl's first run paid alone) is
  done before the first timed run and printed with its seconds. The posteriors are compared
  point by point against a reference run, bdl's 16 compiled chains (its 8 eager ones where
  torch.compile fails): the difference of the two posterior means of the network's output over
  its Monte Carlo standard error (each side's standard deviation over the root of its ESS of the
  mean), and the test RMSE and log-likelihood of each model average by bdl's metrics. Every bdl
  setting is set against every peer.
- **A gradient of the yacht network** (``--part gradient``): CPU and wall seconds per gradient
  of one chain in an HMC iteration of 16 stacked chains, 50 leapfrog steps: bdl's compiled
  trajectory after burn-in (momentum, trajectory, Metropolis test; no draw kept) against
  BlackJAX's HMC kernel vmapped over 16 chains on the same log density, a jitted scan over the
  iterations.
- **SGHMC on MNIST's MLP against BlackJAX's SGHMC** (Chen et al. 2014; Cabezas et al. 2024): an
  epoch of bdl's SGHMC (burn-in: steps only; eager, with ``compile=true``, which runs the epoch as
  one compiled program, and with ``compile=true``'s steps taken one by one), of BlackJAX's SGHMC
  dynamics (its ``sgmcmc.diffusions.sghmc`` and ``sgmcmc.gradients.grad_estimator``, with bdl's step
  size and friction mapped onto its parameterisation, momentum kept across the epoch, one jitted
  scan over the epoch's minibatches) and of the bare PyTorch SGD-with-momentum loop that is the
  yardstick of both, on the same real MNIST tensors from bdl's loader, minibatch and steps.

Rounds are interleaved (each contender in turn, round after round) so that machine noise hits
all alike; ratios are printed as the median over rounds with the range (min-max). The process
is confined to one core before JAX starts (``os.sched_setaffinity``, as ``taskset -c 0``): XLA's
flags keep its arithmetic on one thread, but its runtime runs independent operations on a pool
of its own (a vmapped HMC step used 1.5 CPU-seconds a second without it), and only the affinity
confines that pool, JAX's maintainers' own advice; torch runs at one thread, and Inductor's
compile workers share the core. The run ends with the
machine's load average before and after it and its wall and CPU seconds
(``benchtools.machine_load``), and a warning when other work shared the machine: ratios taken
under load are not evidence, and such a run is repeated on a quiet machine, not reported. The
goals: bdl's best yacht setting >= 3x the ESS per second of BlackJAX's ChEES x16 (its better
variant) and of NumPyro's vectorised NUTS x16 at the median test point and >= 2.5x at the
slowest, warm-up and compilation included, by wall and by CPU time, posteriors agreeing within
Monte Carlo error; bdl's cost per gradient <= 1.2x BlackJAX's; bdl's SGHMC epoch <= BlackJAX's.

Needs the ``peers`` extra (``pip install -e .[peers]``: JAX, NumPyro, BlackJAX) and the real
data (BDL_DATA_DIR).

    python scripts/bench_peers.py [--rounds 3] [--part {yacht,gradient,mnist,all}] [--quick]
        [--contenders NAME,NAME,...] [--burn-in N] [--default-threads]

``--contenders`` runs only the named yacht contenders (their names as printed). Round ``r``
seeds every contender with ``r``; bdl's draws are the same in every run of a commit, so only the
seconds differ from run to run, and a ratio at the slowest test point, which moves several-fold
from seed to seed, needs many rounds (ten, not three) to be told apart from its seeds' luck.
``--burn-in`` sets bdl's burn-in iterations (as many draws after it): its chains need fewer than
the peers' 200 warm-up iterations.
``--quick`` shortens the yacht runs (50 HMC iterations of which 20 burn-in, 30 draws a chain;
one NUTS chain's 100 warm-up iterations and 100 draws; the 16-chain peers' 40 warm-up iterations
and 30 draws a chain) for a test to run the whole script in a few minutes; its figures say that
the script works, not how fast anything is.
``--default-threads`` runs every contender as a user would, at its own default thread count
and on every core (bdl at ``threads=auto``, torch's and XLA's own elsewhere): run it beside
other work to see which thrashes.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from unittest import mock

#: every contender at its own default thread count instead of one (read before argparse runs:
#: XLA reads its thread settings once, when JAX starts)
DEFAULT_THREADS = "--default-threads" in sys.argv
if not DEFAULT_THREADS:
    # One core for the whole process, before JAX starts: XLA's flags below keep its arithmetic
    # on one thread, but its runtime runs independent operations on a pool of its own (a
    # vmapped HMC step used 1.5 CPU-seconds a second), which only the affinity confines, as
    # JAX's maintainers advise (``taskset -c 0``); Inductor's compile workers inherit it.
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
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
    import optax
    from blackjax.adaptation.base import get_filter_adapt_info_fn
    from jax.flatten_util import ravel_pytree
    from numpyro.infer import MCMC, NUTS
    from numpyro.infer.util import initialize_model
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
    cpu_seconds,
    machine_load,
    one_by_one,
    sampling,
    under_load,
)
from omegaconf import DictConfig  # noqa: E402
from torch._inductor.utils import fresh_cache  # noqa: E402

from bdl import diagnostics  # noqa: E402
from bdl.analysis.posterior import load_run  # noqa: E402
from bdl.composition.network import load_data  # noqa: E402
from bdl.runner.experiment import Experiment  # noqa: E402
from bdl.runner.run import run  # noqa: E402
from bdl.runner.sampling import Sampling  # noqa: E402
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
    # both: the learnt mass and length are tensors of the one compiled trajectory program
    "bdl 16 adapted": [
        "chains=16",
        "compile=true",
        "sampler.mass=diagonal",
        "sampler.adapt_length=true",
    ],
    # each alone: on yacht's posterior the variances' mass slows the parameters the predictive
    # hinges on most (the noise precision, the output bias: the smallest variances, to which the
    # unit mass gave the largest steps), and the length alone is BlackJAX's identity-mass ChEES
    "bdl 16 mass": ["chains=16", "compile=true", "sampler.mass=diagonal"],
    "bdl 16 length": ["chains=16", "compile=true", "sampler.adapt_length=true"],
    # the diagonal that minimises the Fisher divergence (Seyboldt, Carlson & Carpenter 2026)
    # instead of the variances, alone and with the length
    "bdl 16 fisher": ["chains=16", "compile=true", "sampler.mass=fisher"],
    "bdl 16 fisher adapted": [
        "chains=16",
        "compile=true",
        "sampler.mass=fisher",
        "sampler.adapt_length=true",
    ],
}
#: the fixed-length kernel that bdl's adaptive settings are set against: does adaptation pay?
FIXED = "bdl 16 compiled"
#: the settings that learn a mass or a length over the same 16 compiled chains
ADAPTIVE = [name for name in BDL_YACHT if name.startswith("bdl 16 ") and name != FIXED]
#: the chains of bdl's best setting, and of the peers that run many
CHAINS = 16
MNIST = ["dataset=mnist", "sampler=sghmc", "device=cpu"]
#: bdl's own default thread count under --default-threads; otherwise this process's one thread
BDL_THREADS = ["threads=auto"] if DEFAULT_THREADS else []


@dataclass
class Settings:
    """Run lengths on yacht."""

    epochs: int  # bdl's HMC iterations per chain (50 leapfrog steps each), one draw each
    burn_in: int
    warmup: int  # the single NUTS chain's
    samples: int
    chains_warmup: int  # the peers' K chains', each (ChEES's and vectorised NUTS's)


FULL = Settings(epochs=200, burn_in=100, warmup=500, samples=1000, chains_warmup=200)
QUICK = Settings(epochs=50, burn_in=20, warmup=100, samples=100, chains_warmup=40)


@dataclass(frozen=True)
class Instant:
    """The clocks at one moment: wall and CPU (`benchtools.cpu_seconds`)."""

    wall: float
    cpu: float

    @classmethod
    def now(cls) -> Instant:
        return cls(time.perf_counter(), cpu_seconds())


@dataclass(frozen=True)
class Seconds:
    wall: float
    cpu: float

    @classmethod
    def between(cls, start: Instant, end: Instant) -> Seconds:
        return cls(end.wall - start.wall, end.cpu - start.cpu)


class Compilations:
    """The clocks at the end of each of XLA's compilations, heard from JAX's own monitoring
    event, with the compilation's wall seconds."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self) -> None:
        self.heard: list[tuple[float, Instant]] = []
        jax.monitoring.register_event_duration_secs_listener(self._heard)

    def _heard(self, event: str, duration: float, **_) -> None:
        if event == self.EVENT:  # heard on the compiling thread as the compilation ends
            self.heard.append((duration, Instant.now()))

    def longest_between(self, start: Instant, end: Instant) -> Instant:
        """The clocks at the end of the longest compilation between ``start`` and ``end``
        (``start`` if none): where the sampling program it compiled starts to run, the small
        programs around it (NumPyro's set-up, its samples' reshaping) compiled in a fraction of
        its time."""
        heard = [(seconds, at) for seconds, at in self.heard if start.wall < at.wall < end.wall]
        return max(heard, key=lambda each: each[0])[1] if heard else start


COMPILATIONS = Compilations()


@dataclass
class Draws:
    """One run's test predictions, ``(chains, draws, points, 2)``: each draw's mean and variance
    in the standardised units of the targets; the run's seconds, whole (warm-up and compilation
    included) and of its sampling after warm-up (compilation excluded)."""

    predictions: torch.Tensor
    whole: Seconds
    sampling: Seconds

    @classmethod
    def timed(
        cls, predictions: torch.Tensor, start: Instant, warmed: Instant, end: Instant
    ) -> Draws:
        """The draws of a run that began at ``start``, ended its warm-up at ``warmed`` and its
        sampling at ``end``; its sampling is timed from the end of the compilation of its
        program (torch compiles in burn-in: bdl's starts at ``warmed``)."""
        sampling = COMPILATIONS.longest_between(warmed, end)
        return cls(predictions, Seconds.between(start, end), Seconds.between(sampling, end))


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
    # each run compiles afresh, as a new process on a new machine would (the peers' do): no
    # graphs in memory, and Inductor's on-disk cache of compiled code in a new, empty directory
    torch._dynamo.reset()
    warmed: list[Instant] = []
    step_epoch = Sampling.step_epoch

    def noting_burn_in(sampling: Sampling) -> bool:
        stepped = step_epoch(sampling)
        if sampling.epoch == cfg.burn_in:
            warmed.append(Instant.now())
        return stepped

    start = Instant.now()
    with fresh_cache(), mock.patch.object(Sampling, "step_epoch", noting_burn_in):
        run(cfg, directory)  # its test predictions made as it kept each draw
    end = Instant.now()
    posterior = load_run(directory)
    x_test = posterior.data.x_test
    shape = (posterior.num_chains, len(posterior) // posterior.num_chains, x_test.shape[0], 2)
    predictions = torch.empty(shape)
    for sample, output in posterior.predictions(x_test):
        predictions[sample.chain, sample.draw] = output
    return Draws.timed(predictions, start, warmed[0], end)


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


class Posterior:
    """The posterior of ``cfg`` on yacht written in NumPyro (the peers' one model: BlackJAX
    samples its log density on NumPyro's unconstrained space), and the test predictions of its
    draws."""

    def __init__(self, cfg: DictConfig, data) -> None:
        self.forward = jax_mlp(cfg)
        sizes = widths(cfg, data)
        self.layers = len(sizes) - 1
        scale = float(cfg.prior.scale)
        forward = self.forward

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

        self.model = model
        self.x, self.y = jnp.asarray(data.x_train.numpy()), jnp.asarray(data.y_train.numpy())
        self.x_test = jnp.asarray(data.x_test.numpy())

    def predictions(self, samples: dict) -> torch.Tensor:
        """The test predictions ``(chains, draws, points, 2)`` of ``samples``, each site's
        draws ``(chains, draws, ...)``."""
        layers = [(samples[f"w{i}"], samples[f"b{i}"]) for i in range(self.layers)]
        outputs = jax.vmap(jax.vmap(lambda params: self.forward(params, self.x_test)[:, 0]))
        mean = outputs(layers)
        variance = jnp.broadcast_to((1 / samples["precision"])[..., None], mean.shape)
        return torch.tensor(np.asarray(jnp.stack([mean, variance], -1)))


def nuts_yacht(posterior: Posterior, warmup: int, samples: int, chains: int, seed: int) -> Draws:
    """NumPyro's NUTS (Hoffman & Gelman 2014) on ``posterior``: one chain, or ``chains``
    chains vectorised as one program (``chain_method="vectorized"``)."""
    start = Instant.now()
    mcmc = MCMC(
        NUTS(posterior.model),
        num_warmup=warmup,
        num_samples=samples,
        num_chains=chains,
        chain_method="vectorized" if chains > 1 else "sequential",
        progress_bar=False,
    )
    mcmc.warmup(jax.random.PRNGKey(seed), posterior.x, posterior.y)
    jax.block_until_ready(mcmc.post_warmup_state)
    warmed = Instant.now()
    mcmc.run(mcmc.post_warmup_state.rng_key, posterior.x, posterior.y)
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    end = Instant.now()
    return Draws.timed(posterior.predictions(samples), start, warmed, end)


#: ChEES's optimiser of the log trajectory length, Hoffman, Radul & Sountsov (2021)'s and bdl's
#: (`bdl.samplers.chees`): Adam without momentum, learning rate 0.025, squared gradients'
#: average decaying by 0.95
CHEES_OPTIMISER = optax.adam(0.025, b1=0.0, b2=0.95)


@dataclass
class Flat:
    """NumPyro's model of a `Posterior` in BlackJAX's form, for ``K`` chains: each chain's
    position one flat vector of NumPyro's unconstrained space (ChEES's ensemble statistics take
    them so), NumPyro's own start for each (uniform on (-2, 2) there), the log density at a
    position and the model's sites there."""

    starts: jax.Array  # (K, dimension)
    log_density: Callable[[jax.Array], jax.Array]
    constrained: Callable[[jax.Array], dict]

    @classmethod
    def of(cls, posterior: Posterior, chains: int, key: jax.Array) -> Flat:
        model = initialize_model(
            jax.random.split(key, chains), posterior.model, model_args=(posterior.x, posterior.y)
        )
        unravel = ravel_pytree(jax.tree.map(lambda x: x[0], model.param_info.z))[1]
        return cls(
            starts=jax.vmap(lambda z: ravel_pytree(z)[0])(model.param_info.z),
            log_density=lambda position: -model.potential_fn(unravel(position)),
            constrained=lambda position: model.postprocess_fn(unravel(position)),
        )


def chees_yacht(
    posterior: Posterior, warmup: int, samples: int, chains: int, seed: int, diagonal: bool
) -> Draws:
    """BlackJAX's ChEES-HMC (Hoffman, Radul & Sountsov 2021) on ``posterior``: ``chains``
    vmapped chains whose step size (dual averaging) and jittered trajectory length (ChEES, shared
    by the chains) are learnt over ``warmup`` iterations, with a diagonal mass estimated from the
    ensemble over warm-up's second half when ``diagonal`` (BlackJAX's
    ``mass_matrix_estimation="diagonal"``) or the identity, then ``samples`` draws a chain."""
    start = Instant.now()
    init_key, warmup_key, sample_key = jax.random.split(jax.random.PRNGKey(seed), 3)
    flat = Flat.of(posterior, chains, init_key)
    adaptation = blackjax.chees_adaptation(
        flat.log_density,
        chains,
        mass_matrix_estimation="diagonal" if diagonal else None,
        adaptation_info_fn=get_filter_adapt_info_fn(),  # keeps no trace of warm-up
    )
    (states, parameters), _ = adaptation.run(
        warmup_key,
        flat.starts,
        step_size=0.1,  # dual averaging's start
        optim=CHEES_OPTIMISER,
        num_steps=warmup,
    )
    jax.block_until_ready(states)
    warmed = Instant.now()
    step = jax.vmap(blackjax.dhmc(flat.log_density, **parameters).step)

    @jax.jit
    def sample(states, key):
        def draw(states, key):
            states, _ = step(jax.random.split(key, chains), states)
            return states, states.position

        return jax.lax.scan(draw, states, jax.random.split(key, samples))[1]

    positions = jax.block_until_ready(sample(states, sample_key))
    end = Instant.now()
    constrained = jax.vmap(jax.vmap(flat.constrained))(positions)
    predictions = posterior.predictions(jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), constrained))
    return Draws.timed(predictions, start, warmed, end)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def threads() -> str:
    """The thread counts the contenders run at, for the printed header."""
    if DEFAULT_THREADS:
        return f"default threads (bdl threads=auto; torch {torch.get_num_threads()}; XLA its own)"
    return f"one core: torch threads {torch.get_num_threads()}, XLA single-threaded"


#: the peers on yacht
NUTS_ONE = "NumPyro NUTS"
NUTS_K = f"NumPyro NUTS x{CHAINS}"
CHEES = f"ChEES x{CHAINS}"
CHEES_DIAGONAL = f"ChEES diag x{CHAINS}"
PEERS = [NUTS_ONE, NUTS_K, CHEES, CHEES_DIAGONAL]
#: the runs every other is checked against, the first that ran: bdl's best, or eager chains
REFERENCES = ["bdl 16 compiled", "bdl 8 chains"]
#: a run's four rates: ESS (median and slowest test point) per second and per CPU-second
RATES = ["med/s", "min/s", "med/CPU-s", "min/CPU-s"]


def rates(summary: Summary, seconds: Seconds) -> list[float]:
    return [
        summary.ess_median / seconds.wall,
        summary.ess_min / seconds.wall,
        summary.ess_median / seconds.cpu,
        summary.ess_min / seconds.cpu,
    ]


def start_libraries() -> None:
    """Each library's once-a-process start, before any timed run, printed with its seconds:
    JAX's CPU backend, and Inductor's modules and its probe of the CPU's vector instructions (a
    small program compiled for each; Inductor keeps the probe's findings on disk, so that only
    the first process on a machine pays it), by one small compiled function of each, and the
    import of arviz, whose ESS and R-hat a bdl run reports as it ends (the peers' draws are
    summarised by it after their timing); every run still compiles its own programs."""
    start = Instant.now()
    jax.block_until_ready(jax.jit(lambda x: x + 1)(jnp.ones(1)))
    jax_seconds = Seconds.between(start, Instant.now())
    start = Instant.now()
    with fresh_cache():
        torch.compile(lambda x: x + 1)(torch.ones(1))
    torch._dynamo.reset()
    torch_seconds = Seconds.between(start, Instant.now())
    start = Instant.now()
    diagnostics.ess(np.random.default_rng(0).normal(size=(2, 50, 1)))
    arviz_seconds = Seconds.between(start, Instant.now())
    print(
        f"before the timed runs: JAX's start {jax_seconds.wall:.1f} s ({jax_seconds.cpu:.1f} "
        f"CPU-s), Inductor's start and vector probe {torch_seconds.wall:.1f} s "
        f"({torch_seconds.cpu:.1f} CPU-s), arviz's import {arviz_seconds.wall:.1f} s "
        f"({arviz_seconds.cpu:.1f} CPU-s)"
    )


def yacht(
    rounds: int, settings: Settings, contenders: set[str] | None
) -> dict[str, list[list[float]]]:
    """Runs the yacht contenders; per contender, per round, the four `RATES` of the whole run
    then of the sampling after warm-up."""
    # every iteration after burn-in a draw, as the peers keep theirs; no figures, which the
    # peers do not draw (a short run's summary.png is a second of its time)
    common = [
        *(override for override in YACHT if not override.startswith("thin=")),
        "thin=1",
        "figures=false",
        f"epochs={settings.epochs}",
        f"burn_in={settings.burn_in}",
        *BDL_THREADS,
    ]
    cfg = composed(common)
    check_posterior(cfg)
    data = load_data(cfg)
    task = Task(data, data.y_test)
    posterior = Posterior(cfg, data)
    # as many draws a chain as each of bdl's chains keeps after burn-in
    draws = (cfg.epochs - cfg.burn_in) // cfg.thin
    runs: dict[str, Callable[[int], Draws]] = {
        NUTS_ONE: lambda seed: nuts_yacht(posterior, settings.warmup, settings.samples, 1, seed),
        NUTS_K: lambda seed: nuts_yacht(posterior, settings.chains_warmup, draws, CHAINS, seed),
        CHEES: lambda seed: chees_yacht(
            posterior, settings.chains_warmup, draws, CHAINS, seed, diagonal=False
        ),
        CHEES_DIAGONAL: lambda seed: chees_yacht(
            posterior, settings.chains_warmup, draws, CHAINS, seed, diagonal=True
        ),
    }
    print(
        f"yacht: bdl {' '.join(common)} (HMC, 50 leapfrog steps an iteration, {draws} draws a "
        f"chain); NumPyro NUTS, one chain, {settings.warmup} warm-up + {settings.samples} draws; "
        f"NumPyro NUTS vectorised and BlackJAX ChEES-HMC, {CHAINS} chains, "
        f"{settings.chains_warmup} warm-up + {draws} draws a chain; {len(data.x_test)} test "
        f"points, {rounds} rounds, {threads()}"
    )
    print(
        "ESS of the test predictive (median and slowest point) per second and per CPU-second, "
        "the whole run (warm-up and compilation included) and after warm-up (compilation "
        "excluded); max|z|: the largest difference of posterior means over its Monte Carlo "
        "error against the reference run (ref)"
    )
    print(
        f"{'contender':<20}{'round':>6}{'ESS med':>8}{'ESS min':>8}{'wall':>7}{'CPU':>7}"
        f"{'wall aft':>9}{'CPU aft':>8}{'med/s':>7}{'min/s':>7}{'med/CPU':>8}{'min/CPU':>8}"
        f"{'rmse':>7}{'ll':>7}{'max|z|':>7}"
    )
    # the references first, so that each run is compared with its round's as it ends
    names = [*REFERENCES, *(name for name in BDL_YACHT if name not in REFERENCES), *PEERS]
    names = [name for name in names if contenders is None or name in contenders]
    # per contender, per round: the four rates of the whole run, then of the sampling after it
    measured: dict[str, list[list[float]]] = {name: [] for name in names}
    worst_z: dict[str, float] = {}
    skipped: set[str] = set()
    start_libraries()
    with tempfile.TemporaryDirectory() as root:
        for round_ in range(rounds):
            reference: Summary | None = None
            for name in names:
                if name in skipped:
                    continue
                if name in runs:
                    draws_ = runs[name](round_)
                else:
                    overrides = [*common, *BDL_YACHT[name], f"seed={round_}"]
                    try:
                        draws_ = bdl_yacht(composed(overrides), Path(root) / f"{name}_{round_}")
                    except torch._dynamo.exc.BackendCompilerFailed as error:
                        print(f"{name}: skipped, torch.compile fails on this machine ({error})")
                        skipped.add(name)
                        continue
                summary = Summary.of(draws_, task)
                if reference is None:
                    reference, z = summary, "ref"
                else:
                    worst = summary.largest_z(reference)
                    worst_z[name] = max(worst_z.get(name, 0.0), worst)
                    z = f"{worst:.2f}"
                whole, after = rates(summary, draws_.whole), rates(summary, draws_.sampling)
                measured[name].append(whole + after)
                print(
                    f"{name:<20}{round_:>6}{summary.ess_median:>8.0f}{summary.ess_min:>8.0f}"
                    f"{draws_.whole.wall:>7.1f}{draws_.whole.cpu:>7.1f}"
                    f"{draws_.sampling.wall:>9.1f}{draws_.sampling.cpu:>8.1f}"
                    f"{whole[0]:>7.1f}{whole[1]:>7.2f}{whole[2]:>8.1f}{whole[3]:>8.2f}"
                    f"{summary.rmse:>7.3f}{summary.ll:>7.3f}{z:>7}",
                    flush=True,
                )
    for offset, phase in ((0, "the whole run"), (len(RATES), "after warm-up")):
        print(
            f"bdl / peer, ESS of the test predictive per second and per CPU-second, {phase}: "
            "median (min-max) over rounds"
        )
        print(f"{'bdl / peer':<40}{''.join(f'{rate:>20}' for rate in RATES)}")
        for ours in BDL_YACHT:
            for theirs in PEERS:
                print_ratios(measured, ours, theirs, offset)
        print(f"bdl's adaptive settings / its fixed-length kernel ({FIXED}), {phase}")
        for ours in ADAPTIVE:
            print_ratios(measured, ours, FIXED, offset, "fixed")
    print("max|z| over rounds: " + ", ".join(f"{name} {z:.2f}" for name, z in worst_z.items()))
    return measured


def print_ratios(
    measured: dict[str, list[list[float]]],
    ours: str,
    theirs: str,
    offset: int,
    label: str | None = None,
) -> None:
    """The row ``ours / theirs`` (``label`` for ``theirs``) of the rates from ``offset`` on
    (the whole run's, or after warm-up's), each a median (min-max) over the rounds; none where
    either did not run."""
    if not (measured.get(ours) and measured.get(theirs)):
        return
    pairs = list(zip(measured[ours], measured[theirs], strict=True))
    ratios = [spread([a[offset + k] / b[offset + k] for a, b in pairs]) for k in range(len(RATES))]
    print(f"{ours + ' / ' + (label or theirs):<40}{''.join(f'{r:>20}' for r in ratios)}")


#: HMC iterations a round of the per-gradient comparison times, after one of warm-up
GRADIENT_ITERATIONS = 20


def gradient_cost(rounds: int) -> list[float]:
    """CPU and wall seconds per gradient of the yacht network in an HMC iteration of 16 stacked
    chains: bdl's compiled trajectory (``chains=16 compile=true``, after burn-in, the iteration as
    ``bdl-run`` runs it, no draw kept: momentum, trajectory, Metropolis test) against
    BlackJAX's HMC kernel vmapped over as many chains on the same posterior (the NumPyro model's
    log density), 50 leapfrog steps each, a jitted scan over the iterations; interleaved rounds.
    Returns bdl / BlackJAX in CPU seconds, a ratio a round."""
    # no draw kept in the timed iterations (the first at the run's last epoch): its files and
    # test predictions are not a gradient's cost
    overrides = ["thin=300", "epochs=400", "burn_in=100", f"chains={CHAINS}", "compile=true"]
    cfg = composed(
        [*(override for override in YACHT if not override.startswith("thin=")), *overrides]
    )
    check_posterior(cfg)
    posterior = Posterior(cfg, load_data(cfg))
    with tempfile.TemporaryDirectory() as directory:
        loop = sampling(cfg, Path(directory), start_epoch=cfg.burn_in)
        steps = loop.experiment.sampler.num_steps
        step_size = float(loop.experiment.sampler.lr / posterior.x.shape[0]) ** 0.5
        flat = Flat.of(posterior, CHAINS, jax.random.PRNGKey(0))
        kernel = blackjax.hmc(
            flat.log_density,
            step_size=step_size,
            inverse_mass_matrix=jnp.ones(flat.starts.shape[1]),
            num_integration_steps=steps,
        )
        states = jax.vmap(kernel.init)(flat.starts)

        @jax.jit
        def iterations(states, key):
            def iteration(states, key):
                return jax.vmap(kernel.step)(jax.random.split(key, CHAINS), states)[0], None

            return jax.lax.scan(iteration, states, jax.random.split(key, GRADIENT_ITERATIONS))[0]

        keys = iter(jax.random.split(jax.random.PRNGKey(1), rounds + 1))

        def blackjax_round() -> None:
            nonlocal states
            states = jax.block_until_ready(iterations(states, next(keys)))

        def bdl_round() -> None:
            for _ in range(GRADIENT_ITERATIONS):
                loop.step_epoch()

        costs: dict[str, list[Seconds]] = {"bdl": [], "BlackJAX": []}
        contenders = {"bdl": bdl_round, "BlackJAX": blackjax_round}
        for round_ in range(rounds + 1):  # the first compiles each
            for name, contender in contenders.items():
                start = Instant.now()
                contender()
                if round_:
                    costs[name].append(Seconds.between(start, Instant.now()))
    gradients = GRADIENT_ITERATIONS * steps * CHAINS
    print(
        f"yacht, {CHAINS} stacked chains, HMC iterations of {steps} leapfrog steps: seconds per "
        f"gradient of one chain, {GRADIENT_ITERATIONS} iterations a round, {rounds} rounds after "
        f"a warm-up, {threads()}"
    )
    for name, seconds in costs.items():
        cpu = statistics.median(s.cpu for s in seconds) / gradients * 1e6
        wall = statistics.median(s.wall for s in seconds) / gradients * 1e6
        print(f"{name:<10} {cpu:7.1f} µs CPU {wall:7.1f} µs wall (median)")
    by_clock = {
        clock: [
            getattr(ours, clock) / getattr(theirs, clock)
            for ours, theirs in zip(costs["bdl"], costs["BlackJAX"], strict=True)
        ]
        for clock in ("cpu", "wall")
    }
    for clock, ratios in by_clock.items():
        print(f"bdl / BlackJAX per gradient, {clock.upper()}: {spread(ratios)}  (goal <= 1.2)")
    return by_clock["cpu"]


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


def mnist(rounds: int) -> list[float]:
    """Times the MNIST SGHMC epochs; returns bdl's compiled epoch / BlackJAX's, a ratio a round."""
    with tempfile.TemporaryDirectory() as directory:
        cfg = composed([*MNIST, *BDL_THREADS])
        loop = sampling(cfg, Path(directory) / "sghmc")  # burn-in: steps only
        compiled_cfg = composed([*MNIST, *BDL_THREADS, "compile=true"])
        compiled = sampling(compiled_cfg, Path(directory) / "compiled")
        steps = one_by_one(sampling(compiled_cfg, Path(directory) / "steps"))
        sghmc = loop.experiment
        blackjax = BlackJAXSGHMC(cfg, sghmc)
        # the warm-up epoch of each holds torch.compile's compilation
        bare, ours, ours_steps, ours_compiled, theirs = alternating_times(
            [
                bare_sgd_epoch(sghmc),
                loop.step_epoch,
                steps.step_epoch,
                compiled.step_epoch,
                blackjax,
            ],
            rounds,
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
        ("bdl compiled steps SGHMC", ours_steps),
        ("bdl compiled SGHMC", ours_compiled),
        ("BlackJAX SGHMC", theirs),
    )
    for name, times in contenders:
        ratios = [t / b for t, b in zip(times, bare, strict=True)]
        print(
            f"{name + ' epoch:':<32} {statistics.median(times) * 1e3:8.1f} ms   / bare "
            f"{spread(ratios)}"
        )
    against_blackjax = {
        name: [o / t for o, t in zip(times, theirs, strict=True)]
        for name, times in (
            ("bdl", ours),
            ("bdl compiled steps", ours_steps),
            ("bdl compile=true", ours_compiled),
        )
    }
    for name, ratios in against_blackjax.items():
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
    return against_blackjax["bdl compile=true"]


#: bdl's 16-chain setting the guard holds against ChEES x16: the learnt length alone, as BlackJAX
#: learns it (with the identity mass)
GUARDED = "bdl 16 length"


@dataclass(frozen=True)
class Goal:
    """A ratio's pass line: its median over the rounds at most (or at least) ``line``."""

    name: str
    ratios: list[float]
    line: float
    at_most: bool

    def held(self) -> bool:
        median = statistics.median(self.ratios)
        return median <= self.line if self.at_most else median >= self.line

    def row(self) -> str:
        sign = "<=" if self.at_most else ">="
        verdict = "held" if self.held() else "FAILED"
        return f"{self.name:<62} {spread(self.ratios):>17}  goal {sign} {self.line:<4} {verdict}"


def guard(rounds: int, settings: Settings) -> int:
    """Measures the three ratios that keep bdl's lead and judges each at its pass line; returns
    the exit status: 0 all held, 1 one failed, 2 not judged (the machine was not quiet)."""
    before = os.getloadavg()[0]
    measured = yacht(rounds, settings, {GUARDED, CHEES})
    at_median = RATES.index("med/CPU-s")  # the whole run's, compilation and warm-up included
    goals = [
        Goal("bdl / BlackJAX, CPU seconds per gradient", gradient_cost(rounds), 1.3, True),
        Goal("bdl compile=true / BlackJAX, MNIST SGHMC epoch", mnist(rounds), 1.1, True),
        Goal(
            f"{GUARDED} / {CHEES}, ESS per CPU-second (median point)",
            [
                ours[at_median] / theirs[at_median]
                for ours, theirs in zip(measured[GUARDED], measured[CHEES], strict=True)
            ],
            1.0,
            False,
        ),
    ]
    print(f"guard, median (min-max) over {rounds} rounds:")
    print("\n".join(goal.row() for goal in goals))
    if under_load(1, before, os.getloadavg()[0]):
        print("guard: NOT JUDGED, other work shared the machine; rerun it on a quiet one")
        return 2
    failed = [goal.name for goal in goals if not goal.held()]
    print(f"guard: {'FAILED: ' + '; '.join(failed) if failed else 'every goal held'}")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--part", choices=["yacht", "gradient", "mnist", "all"], default="all")
    parser.add_argument("--quick", action="store_true", help="short yacht runs, for a test")
    parser.add_argument(
        "--contenders",
        help="the yacht contenders to run, comma-separated (default: all): "
        + ", ".join([*BDL_YACHT, *PEERS]),
    )
    parser.add_argument(
        "--burn-in",
        type=int,
        help="bdl's burn-in iterations on yacht (default 100, with --quick 20); as many draws "
        "after it; the peers' warm-up is unchanged",
    )
    parser.add_argument(
        "--guard",
        action="store_true",
        help="measure only the ratios that keep bdl's lead and judge them at their pass lines "
        "(exit 1 when one fails, 2 when the machine was not quiet)",
    )
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
    if args.guard:
        if DEFAULT_THREADS or args.part != "all" or args.contenders or args.burn_in is not None:
            parser.error("--guard runs its own parts and contenders on one thread: drop the rest")
        with machine_load(1):
            status = guard(args.rounds, QUICK if args.quick else FULL)
        sys.exit(status)
    with machine_load(os.cpu_count() if DEFAULT_THREADS else 1):
        if args.part in ("yacht", "all"):
            contenders = None if args.contenders is None else set(args.contenders.split(","))
            unknown = (contenders or set()) - {*BDL_YACHT, *PEERS}
            if unknown:
                parser.error(f"unknown contenders: {', '.join(sorted(unknown))}")
            settings = QUICK if args.quick else FULL
            if args.burn_in is not None:  # as many draws after it
                if args.burn_in < 0:
                    parser.error(f"--burn-in must be 0 or more iterations, not {args.burn_in}")
                draws = settings.epochs - settings.burn_in
                settings = dataclasses.replace(
                    settings, burn_in=args.burn_in, epochs=args.burn_in + draws
                )
            yacht(args.rounds, settings, contenders)
        if args.part in ("gradient", "all"):
            gradient_cost(args.rounds)
        if args.part in ("mnist", "all"):
            mnist(args.rounds)


if __name__ == "__main__":
    main()
