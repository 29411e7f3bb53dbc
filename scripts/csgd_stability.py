"""Is constant SGD's optimal step stable on this posterior? Runs ``sampler=csgd``'s burn-in as
``bdl-run`` would, then compares Mandt et al. (2017)'s scalar step ``h* = 2D/ΣV`` (``V`` the
minibatch gradient noise estimated during burn-in) with SGD's stability limit ``2/λ_max`` of the
full-data potential's curvature ``∇²U`` at the end of burn-in: a ratio ``h* λ_max / 2`` above 1
means the chain diverges along the top eigenvector once the step is fixed.

``λ_max`` comes from power iteration and the mean curvature ``Tr(∇²U)/D`` from Hutchinson's
estimator, both on Hessian-vector products by central differences of the full-data gradient
(float32 gradients: two or three significant digits, enough to tell a ratio of 2 from one of 0.5).
``h*`` follows the mean gradient noise, and with it the mean curvature rather than the largest:
the ratio ``λ_max / mean`` says how far from isotropic the posterior is.

    python scripts/csgd_stability.py [--iterations 30] [--probes 10] [overrides ...]
    python scripts/csgd_stability.py init_from=<an sgd_momentum run> burn_in=5 epochs=6
    python scripts/csgd_stability.py dataset=yacht protocol=uci_minibatch
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from benchtools import composed, sampling
from torch import Tensor

from bdl.potential import Potential


def hessian_vector(potential: Potential, chunks, direction: list[Tensor], h: float) -> list[Tensor]:
    """``∇²U v`` by central differences of the full-data gradient at the parameters' values."""
    origin = [p.detach().clone() for p in potential.params]
    sides = []
    for sign in (1, -1):
        with torch.no_grad():
            for p, p0, v in zip(potential.params, origin, direction, strict=True):
                p.copy_(p0 + sign * h * v.to(p.dtype))
        sides.append([g.double() for g in potential.full_closure(chunks)()[1]])
    with torch.no_grad():
        for p, p0 in zip(potential.params, origin, strict=True):
            p.copy_(p0)
    return [(a - b) / (2 * h) for a, b in zip(*sides, strict=True)]


def dot(a: list[Tensor], b: list[Tensor]) -> float:
    return sum((x * y).sum() for x, y in zip(a, b, strict=True)).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30, help="of the power iteration")
    parser.add_argument("--probes", type=int, default=10, help="of Hutchinson's estimator")
    parser.add_argument("--step", type=float, default=1e-3, help="of the finite differences")
    parser.add_argument("overrides", nargs="*", help="bdl-run overrides (sampler=csgd is set)")
    args = parser.parse_args()
    cfg = composed(["sampler=csgd", "wandb.mode=disabled", *args.overrides])
    with tempfile.TemporaryDirectory() as directory:
        run = sampling(cfg, Path(directory))
        for _ in range(cfg.burn_in):
            run.step_epoch()
    variances = run.loops[0].sampler.buffers["grad_var"]
    dim = sum(v.numel() for v in variances)
    step = 2 * dim / sum(v.sum() for v in variances).item()

    experiment = run.experiment
    potential, chunks = experiment.potential, experiment.run.train_chunks
    generator = torch.Generator().manual_seed(0)
    shapes = [p.shape for p in potential.params]
    vector = [torch.randn(s, generator=generator, dtype=torch.float64) for s in shapes]
    top = 0.0
    for _ in range(args.iterations):
        norm = dot(vector, vector) ** 0.5
        vector = [v / norm for v in vector]
        product = hessian_vector(potential, chunks, vector, args.step)
        top = dot(product, vector)  # the Rayleigh quotient of the unit vector
        vector = product
    trace = 0.0
    for _ in range(args.probes):
        signs = [torch.randint(0, 2, s, generator=generator).double() * 2 - 1 for s in shapes]
        trace += dot(hessian_vector(potential, chunks, signs, args.step), signs) / args.probes
    mean = trace / dim
    fraction = experiment.run.batch_size / experiment.run.data.num_train
    ratio = step * top / 2
    print(
        f"{experiment.run.data.name}, {cfg.burn_in} burn-in epochs, D = {dim}, n/N = {fraction:.3g}"
    )
    print(f"h* = 2D/ΣV = {step:.3g} on U; λ_max(∇²U) = {top:.4g}, limit 2/λ_max = {2 / top:.3g}")
    print(f"h* λ_max / 2 = {ratio:.3g}: {'unstable' if ratio > 1 else 'stable'}")
    print(f"mean curvature Tr(∇²U)/D = {mean:.4g}; λ_max / mean = {top / mean:.3g}")


if __name__ == "__main__":
    main()
