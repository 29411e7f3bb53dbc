"""Benchmark: a Bayes by Backprop step against a plain PyTorch SGD step on Blundell's network.

Blundell et al. (2015)'s MNIST setup (784-1200-1200-10 ReLU, minibatch 128, pixels / 126). Every
variant runs in this one process on the same in-memory minibatches, interleaved round by round
with the bare SGD loop, so that machine noise hits all alike; the figure of merit is the ratio of
median step times (goal for the local reparameterisation trick: <= 2.0). Rows: BBB with the local
reparameterisation trick and without (a weight draw per step), under the scale-mixture prior
(Monte Carlo KL) and under a Gaussian prior (closed-form KL).

    python scripts/bench_bbb.py [--rounds 5] [--steps 20] [--hidden 1200] [--device cpu]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from benchtools import alternating_medians, bare_model, composed, machine_load

from bdl.runner.experiment import Experiment, build

VARIANTS = {
    "BBB, local reparam, scale mixture (MC KL)": ["prior=scale_mixture"],
    "BBB, local reparam, Gaussian (closed-form KL)": ["prior=gaussian"],
    "BBB, weight draws, scale mixture (MC KL)": [
        "prior=scale_mixture",
        "sampler.local_reparam=false",
    ],
    "BBB, weight draws, Gaussian (closed-form KL)": [
        "prior=gaussian",
        "sampler.local_reparam=false",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="steps timed per round")
    parser.add_argument("--hidden", type=int, default=1200)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    base = [
        "sampler=bbb",
        "sampler.kl_weighting=uniform",  # every step pays for the KL term
        "experiment=blundell2015_mnist",
        f"protocol.mlp.hidden=[{args.hidden},{args.hidden}]",
        f"device={args.device}",
    ]
    runs = {name: build(composed(base + extra)) for name, extra in VARIANTS.items()}
    first = next(iter(runs.values()))
    device, batch = first.run.device, first.run.batch_size
    x, y = first.run.x_train, first.run.y_train
    generator = torch.Generator(device).manual_seed(0)
    index = [
        torch.randint(0, x.shape[0], (batch,), generator=generator, device=device)
        for _ in range(args.steps)
    ]
    baseline = bare_model(first)
    optimizer = torch.optim.SGD(baseline.parameters(), lr=1e-3)

    def sgd_steps() -> None:
        for i in index:
            loss = F.cross_entropy(baseline(x[i]), y[i])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    def bdl_steps(run: Experiment, state) -> None:
        for i in index:
            run.sampler.step(state, run.potential.closure(x[i], y[i]))

    states = [run.sampler.init(run.potential.params) for run in runs.values()]
    bbb_steps = [
        lambda run=run, state=state: bdl_steps(run, state)
        for run, state in zip(runs.values(), states, strict=True)
    ]
    sgd, *variants = (
        median / args.steps for median in alternating_medians([sgd_steps, *bbb_steps], args.rounds)
    )

    print(
        f"device {device}, 784-{args.hidden}-{args.hidden}-10, batch {batch}, {args.rounds} rounds "
        f"x {args.steps} steps, torch threads {torch.get_num_threads()}"
    )
    print(f"{'plain PyTorch SGD step':48s} {sgd * 1e3:8.1f} ms")
    for name, step in zip(runs, variants, strict=True):
        print(f"{name:48s} {step * 1e3:8.1f} ms   ratio {step / sgd:.2f}")
    print("goal: BBB with the local reparameterisation trick <= 2.0 x SGD")


if __name__ == "__main__":
    with machine_load(torch.get_num_threads()):
        main()
