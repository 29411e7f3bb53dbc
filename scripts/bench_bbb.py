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
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_module

import bdl.config  # noqa: F401  (registers the root schema)
from bdl.run import Run

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


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


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
        f"dataset.mlp.hidden=[{args.hidden},{args.hidden}]",
        f"device={args.device}",
    ]
    with (
        tempfile.TemporaryDirectory() as directory,
        initialize_config_module(version_base="1.3", config_module="bdl.conf"),
    ):
        runs = {
            name: Run(compose("config", overrides=base + extra), Path(directory) / str(i))
            for i, (name, extra) in enumerate(VARIANTS.items())
        }
        first = next(iter(runs.values()))
        device, batch = first.device, first.batch_size
        x, y = first.x_train, first.y_train
        generator = torch.Generator(device).manual_seed(0)
        index = [
            torch.randint(0, x.shape[0], (batch,), generator=generator, device=device)
            for _ in range(args.steps)
        ]

        torch.manual_seed(0)
        baseline = type(first.potential.model)(
            input_shape=first.data.input_shape,
            out_features=first.data.out_features,
            hidden=[args.hidden, args.hidden],
            activation="relu",
        ).to(device)
        optimizer = torch.optim.SGD(baseline.parameters(), lr=1e-3)

        def sgd_steps() -> None:
            for i in index:
                loss = F.cross_entropy(baseline(x[i]), y[i])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        def bdl_steps(run: Run, state) -> None:
            for i in index:
                closure = run.potential.closure(x[i], y[i])
                run.sampler.step(state, closure)

        states = {name: run.sampler.init(run.potential.params) for name, run in runs.items()}
        timings: dict[str, list[float]] = {"sgd": [], **{name: [] for name in runs}}
        for round_ in range(args.rounds + 1):  # the first round warms up and is not counted
            for name, fn in [("sgd", sgd_steps)] + [
                (name, lambda r=run, s=states[name]: bdl_steps(r, s)) for name, run in runs.items()
            ]:
                synchronize()
                start = time.perf_counter()
                fn()
                synchronize()
                if round_:
                    timings[name].append((time.perf_counter() - start) / args.steps)

    sgd = statistics.median(timings["sgd"])
    print(
        f"device {device}, 784-{args.hidden}-{args.hidden}-10, batch {batch}, {args.rounds} rounds "
        f"x {args.steps} steps, torch threads {torch.get_num_threads()}"
    )
    print(f"{'plain PyTorch SGD step':48s} {sgd * 1e3:8.1f} ms")
    for name in runs:
        step = statistics.median(timings[name])
        print(f"{name:48s} {step * 1e3:8.1f} ms   ratio {step / sgd:.2f}")
    print("goal: BBB with the local reparameterisation trick <= 2.0 x SGD")


if __name__ == "__main__":
    main()
