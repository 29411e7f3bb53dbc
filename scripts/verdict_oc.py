"""The convergence verdict's operating characteristics (`bdl.diagnostics.verdict`): how often it
fails chains that have mixed (false alarms) and passes chains that have not (missed detections).

Each case is chains of draws of a parameter $\\theta$ in 5 dimensions from a known posterior,
$\\mathcal N(\\mu, 0.05^2 I)$, the posterior of a linear-Gaussian regression, pushed through the
code a run's end uses (`bdl.diagnostics.summarise`, `scalar_diagnostics`, `verdict`): the test
predictive is $\\log \\mathcal N(y_i \\mid x_i^\\top \\theta, 1)$ at ``points`` test points
$(x_i, y_i)$, the potential is $\\tfrac12 \\lVert \\theta - \\mu\\rVert^2 / 0.05^2$.

Mixed: independent draws; HMC (5 leapfrog steps) on the posterior, started in it; one chain of
independent draws; an AR(1) chain (coefficient 0.9, so an ESS of about 5% of the draws) long
enough for 100 effective draws a chain. Unmixed: too short (AR(1), coefficient 0.98); started
20 posterior standard deviations off and still relaxing; three chains in one of two modes and
one in the other; HMC with a step 8 times the narrowest scale (divergent); one chain that never
moves; one chain whose potential drifts down through the run (3 standard deviations off at its
start).

    OMP_NUM_THREADS=1 python scripts/verdict_oc.py --reps 200 --points 31
    OMP_NUM_THREADS=1 python scripts/verdict_oc.py --reps 20 --points 10000

prints, per case and draws a chain, the fraction of seeds the verdict fails and the causes named.
Seed ``s`` of a case draws from ``numpy.random.default_rng([s, case, draws, points])``.
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np
import torch

from bdl import diagnostics
from bdl.samplers import HMC

DIM, SCALE, CHAINS = 5, 0.05, 4


def test_points(rng: np.random.Generator, points: int, mu: np.ndarray):
    x = rng.standard_normal((points, DIM))
    return x, x @ mu + rng.standard_normal(points)


def hmc(rng, chains: int, draws: int, scales: np.ndarray, step: float):
    """``draws`` HMC transitions of each chain (5 leapfrog steps of ``step``, no adaptation) on
    the standard normal of scales ``scales``, started in it: the draws in standard units and the
    divergent transitions counted."""
    start = torch.tensor(rng.standard_normal((chains, DIM)) * scales)
    params = [start]
    precision = torch.tensor(1 / scales**2)

    def closure():
        return 0.5 * (params[0].square() * precision).sum(-1), [params[0].clone()]

    seeds = rng.integers(2**62, size=chains)
    generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
    sampler = HMC(step**2, 5, adapt=False).for_chains(generators)
    state = sampler.init(params)
    out, divergent = [], 0
    for _ in range(draws):
        sampler.step(state, closure)
        divergent += int(torch.as_tensor(state.info.get("divergent", 0)).sum())
        out.append(params[0].clone())
    return torch.stack(out, 1).numpy() / scales, divergent


def ar1(rng, chains: int, draws: int, rho: float, start: np.ndarray | None = None) -> np.ndarray:
    """Standard-normal AR(1) chains with coefficient ``rho``, stationary or from ``start``."""
    z = np.empty((chains, draws, DIM))
    z[:, 0] = rng.standard_normal((chains, DIM)) if start is None else start
    noise = rng.standard_normal((chains, draws, DIM)) * np.sqrt(1 - rho**2)
    for t in range(1, draws):
        z[:, t] = rho * z[:, t - 1] + noise[:, t]
    return z


def case_draws(name: str, rng, draws: int) -> tuple[np.ndarray, int, int]:
    """Standardised draws ``(chains, draws, DIM)`` of case ``name``, its chain count and its
    divergent transitions."""
    if name == "independent":
        return rng.standard_normal((CHAINS, draws, DIM)), CHAINS, 0
    if name == "HMC":
        z, divergent = hmc(rng, CHAINS, draws, np.ones(DIM), 0.4)
        return z, CHAINS, divergent
    if name == "one chain, independent":
        return rng.standard_normal((1, draws, DIM)), 1, 0
    if name == "AR(1) 0.9, 4000 draws":
        return ar1(rng, CHAINS, 4000, 0.9), CHAINS, 0
    if name == "too short (AR(1) 0.98)":
        return ar1(rng, CHAINS, draws, 0.98), CHAINS, 0
    if name == "started 20 sd off":
        start = 20 * np.sign(rng.standard_normal((CHAINS, DIM)))
        return ar1(rng, CHAINS, draws, 1 - 4 / draws, start), CHAINS, 0
    if name == "stuck in one of two modes":
        z = rng.standard_normal((CHAINS, draws, DIM))
        z[:3, :, 0] += 6  # the modes 12 posterior sd apart, chain 3 alone in the other
        z[3, :, 0] -= 6
        return z, CHAINS, 0
    if name == "divergent":
        scales = np.array([1, 1, 1, 1, 0.05])
        z, divergent = hmc(rng, CHAINS, draws, scales, 0.4)
        return z * scales, CHAINS, divergent
    if name == "one chain never moves":
        z = rng.standard_normal((CHAINS, draws, DIM))
        z[3] = z[3, 0]
        return z, CHAINS, 0
    if name == "one chain's potential drifts":
        z = rng.standard_normal((CHAINS, draws, DIM))
        z[3] += 3 * np.linspace(1, 0, draws)[:, None] / np.sqrt(DIM)
        return z, CHAINS, 0
    raise ValueError(name)


MIXED = ["independent", "HMC", "one chain, independent", "AR(1) 0.9, 4000 draws"]
UNMIXED = [
    "too short (AR(1) 0.98)",
    "started 20 sd off",
    "stuck in one of two modes",
    "divergent",
    "one chain never moves",
    "one chain's potential drifts",
]


def judge(z: np.ndarray, chains: int, divergent: int, x, y, mu) -> list[str]:
    """The verdict's reasons on standardised draws ``z``, as a run's end computes them."""
    theta = mu + SCALE * z
    residual = y - theta @ x.T  # (chains, draws, points)
    pointwise = -0.5 * residual**2 - 0.5 * np.log(2 * np.pi)
    potential = 0.5 * (z**2).sum(-1)
    metrics, _ = diagnostics.summarise(pointwise, theta)
    if divergent:
        metrics.update(divergences=divergent, divergence_fraction=divergent / z[:, :, 0].size)
    scalars = diagnostics.scalar_diagnostics({"potential": potential})
    settings = diagnostics.Settings(epochs=200 + z.shape[1], burn_in=200, lr=0.01)
    reasons, _ = diagnostics.verdict(metrics, scalars, chains, z.shape[1], settings, potential)
    return reasons


def cause(reason: str) -> str:
    """A reason's cause: its words before the measured numbers."""
    words = reason.split(" (")[0].split(":")[0].split()
    return " ".join(w for w in words if not w[0].isdigit())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--points", type=int, default=31)
    parser.add_argument("--draws", type=int, nargs="+", default=[100, 400])
    parser.add_argument("--cases", nargs="+", default=MIXED + UNMIXED)
    args = parser.parse_args()
    print("| case | draws a chain | test points | failed | causes named |")
    print("|---|---|---|---|---|")
    for index, name in enumerate(MIXED + UNMIXED):
        if name not in args.cases:
            continue
        for draws in args.draws:
            if name.endswith("4000 draws") and (draws != args.draws[0] or args.points > 1000):
                continue
            failed, causes, start = 0, collections.Counter(), time.process_time()
            for seed in range(args.reps):
                rng = np.random.default_rng([seed, index, draws, args.points])
                mu = rng.standard_normal(DIM)
                x, y = test_points(rng, args.points, mu)
                reasons = judge(*case_draws(name, rng, draws), x, y, mu)
                failed += bool(reasons)
                causes.update(cause(r) for r in reasons)
            shown = "; ".join(f"{c} ({n})" for c, n in causes.most_common(3))
            length = 4000 if name.endswith("4000 draws") else draws
            print(
                f"| {name} | {length} | {args.points} | {failed}/{args.reps} | {shown} |"
                f" <!-- {time.process_time() - start:.0f} s CPU -->",
                flush=True,
            )


if __name__ == "__main__":
    main()
