"""The runner: data, model, prior, potential, sampler and schedule from one config; burn-in,
sample collection into a running Bayesian model average, evaluation and outputs.

Everything written lands in the run directory (Hydra's working directory by default):
``metrics.json``, ``curve.csv``, ``predictive.safetensors`` and ``samples/``. Samples are written
as they are taken, so a run that stops early (a diverged chain, Ctrl-C) keeps what it had.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from bdl import likelihoods, pruning
from bdl.config import ConfigError, validate
from bdl.data import Dataset
from bdl.data.augment import random_crop_flip
from bdl.metrics import (
    ClassificationAverage,
    RegressionAverage,
    accuracy,
    agreement,
    total_variation,
)
from bdl.potential import Potential
from bdl.store import SampleStore, StoreError, load_reference, load_samples, save_predictive

log = logging.getLogger("bdl")


# Keys of the dataset configs read by the runner and the model and prior configs, not by the
# loaders.
RUNNER_DATASET_KEYS = ("mlp", "augment", "prior_scale")


class DivergedError(RuntimeError):
    """The chain's potential became NaN or infinite."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but CUDA is not available here: use device=auto or cpu")
    return torch.device(name)


def minibatches(num_data: int, batch_size: int, generator: torch.Generator, device: torch.device):
    """Index slices of one random permutation; a last, smaller batch is dropped so that every
    step sees ``n = batch_size`` points (the estimator's N/n scaling is exact either way)."""
    order = torch.randperm(num_data, generator=generator, device=device)
    for start in range(0, num_data - batch_size + 1, batch_size):
        yield order[start : start + batch_size]


@torch.no_grad()
def predict(model: nn.Module, likelihood: nn.Module, x: Tensor, chunk: int = 2048) -> Tensor:
    """The predictive of the current parameters on ``x`` (probabilities, or mean and variance)."""
    return torch.cat([likelihood.predict(model(part)) for part in x.split(chunk)])


def named_parameters(potential: Potential) -> dict[str, Tensor]:
    named = dict(potential.model.named_parameters())
    named.update({f"likelihood.{k}": v for k, v in potential.likelihood.named_parameters()})
    return named


@torch.no_grad()
def load_initial(potential: Potential, run_directory: str) -> None:
    """Start from the last sample of an earlier run (``init_from=``), e.g. MFVI's mean from an SGD
    solution (Izmailov et al. 2021). The network's parameters must match by name and shape."""
    samples = Path(run_directory) / "samples"
    last = deque((sample for sample, _ in load_samples(samples)), maxlen=1)
    if not last:
        raise StoreError(f"init_from={run_directory}: {samples} holds no samples to start from")
    last = last[0]
    wrong = [
        n for n, p in potential.model_params.items() if n not in last or last[n].shape != p.shape
    ]
    if wrong:
        raise ConfigError(
            f"init_from={run_directory} has no parameters matching this run's {', '.join(wrong)}: "
            "point it at a run of the same model on the same dataset"
        )
    for name, p in named_parameters(potential).items():
        if name in last:
            p.copy_(last[name])


class Run:
    """One experiment, built from a composed config, writing into ``directory``."""

    def __init__(self, cfg: DictConfig, directory: Path) -> None:
        validate(cfg)
        self.cfg = cfg
        self.directory = directory
        self.device = resolve_device(cfg.device.name)
        self.reference = load_reference(cfg.reference) if cfg.reference else None
        torch.manual_seed(cfg.seed)

        loader_keys = [key for key in cfg.dataset if key not in RUNNER_DATASET_KEYS]
        data: Dataset = instantiate(OmegaConf.masked_copy(cfg.dataset, loader_keys))
        self.data = data
        to = self.device
        self.x_train, self.y_train = data.x_train.to(to), data.y_train.to(to)
        self.x_test, self.y_test = data.x_test.to(to), data.y_test.to(to)
        self.augment = bool(cfg.dataset.get("augment", False))
        if self.reference is not None and data.task != "classification":
            raise ConfigError("reference= compares class probabilities: classification only")
        expected = (data.x_test.shape[0], data.out_features)
        if self.reference is not None and tuple(self.reference.shape) != expected:
            raise ConfigError(
                f"reference={cfg.reference} holds predictions of shape "
                f"{tuple(self.reference.shape)}, but this test set needs {expected}: "
                "point reference= at a run on the same dataset"
            )

        model = instantiate(cfg.model)(input_shape=data.input_shape, out_features=data.out_features)
        if data.task == "classification":
            likelihood: nn.Module = likelihoods.Categorical()
            self.average: Any = ClassificationAverage()
        else:
            likelihood = likelihoods.Gaussian(**cfg.likelihood)
            self.average = RegressionAverage(self.y_test.cpu(), data.target_mean, data.target_std)
        self.potential = Potential(
            model.to(to), likelihood.to(to), instantiate(cfg.prior), data.num_train, cfg.temperature
        )
        if cfg.init_from:
            load_initial(self.potential, cfg.init_from)

        self.batch_size = min(cfg.batch_size, data.num_train)
        self.data_generator = torch.Generator(to).manual_seed(cfg.seed)
        noise_generator = torch.Generator(to).manual_seed(cfg.seed + 1)
        self.gibbs_generator = torch.Generator(to).manual_seed(cfg.seed + 2)
        factory = instantiate(cfg.sampler)
        lr = cfg.sampler.lr
        self.sampler = factory(
            lr=self.potential.step_size(lr) if factory.func.lr_per_datum else lr,
            generator=noise_generator,
        )
        self.sampler.attach(self.potential, self._train_chunks)
        # A full-batch kernel (HMC) takes one step per epoch; batch_size is then its chunk size.
        self.steps_per_epoch = 1 if self.sampler.full_batch else data.num_train // self.batch_size
        self.gibbs_every = cfg.gibbs_every or self.steps_per_epoch
        # Without hyperparameters there is nothing to resample, and U never changes under a kernel.
        self.resamples = bool(self.potential.hyperparameters())
        self.schedule = instantiate(cfg.schedule)(
            total_steps=cfg.epochs * self.steps_per_epoch, steps_per_epoch=self.steps_per_epoch
        )
        if self.sampler.injects_noise and not any(
            self.schedule.collects(epoch, cfg.burn_in, cfg.thin) for epoch in range(cfg.epochs)
        ):
            raise ConfigError(
                f"no epoch would keep a sample (epochs={cfg.epochs}, burn_in={cfg.burn_in}, "
                f"thin={cfg.thin}, schedule={cfg.schedule._target_.rsplit('.', 1)[-1]}): "
                "raise epochs or lower burn_in or thin"
            )
        self.store = SampleStore(directory / "samples")
        log.info(
            "%s on %s: N=%d, n=%d, T=%g, %d steps/epoch, lr %g%s, %d parameters, device %s",
            type(self.sampler).__name__,
            data.name,
            data.num_train,
            self.batch_size,
            cfg.temperature,
            self.steps_per_epoch,
            cfg.sampler.lr,
            f" per datum = step {self.sampler.lr:.3g} on U" if factory.func.lr_per_datum else "",
            sum(p.numel() for p in self.potential.params),
            self.device,
        )

    def _train_chunks(self):
        chunks = self.x_train.split(self.batch_size), self.y_train.split(self.batch_size)
        return zip(*chunks, strict=True)

    def _closures(self):
        """One epoch's closures: one per random minibatch, or one full-data closure."""
        if self.sampler.full_batch:
            yield self.potential.full_closure(self._train_chunks)
            return
        batches = minibatches(
            self.data.num_train, self.batch_size, self.data_generator, self.device
        )
        for i, index in enumerate(batches):
            x, y = self.x_train.index_select(0, index), self.y_train.index_select(0, index)
            if self.augment:
                x = random_crop_flip(x, self.data_generator)
            yield self.potential.closure(x, y, self.sampler.prior_weight(i, self.steps_per_epoch))

    def _epoch(self, epoch: int, state: Any) -> tuple[Any, Tensor]:
        """One pass over the training data; returns the state and the summed potential."""
        potentials = []
        accepted, tests = torch.zeros((), device=self.device, dtype=torch.float64), 0
        for i, closure in enumerate(self._closures()):
            t = epoch * self.steps_per_epoch + i
            state = self.sampler.step(
                state,
                closure,
                lr_scale=self.schedule(t),
                noise=not self.schedule.explores(t),
                tune=epoch < self.cfg.burn_in,
            )
            potentials.append(state.info["potential"])
            if "accepted" in state.info:  # this step made a Metropolis test
                accepted += state.info["accepted"].double().mean()
                tests += 1
            if self.resamples and (t + 1) % self.gibbs_every == 0:
                self.potential.gibbs_step(self.gibbs_generator, self._train_chunks)
                state.buffers.pop("grad", None)  # U changed: a kernel's cached ∇U is stale
        self.accept_rate = accepted.item() / tests if tests else None
        return state, torch.stack(potentials).double().sum()

    def _collect(self, epoch: int) -> None:
        self.average.update(
            predict(self.potential.model, self.potential.likelihood, self.x_test).cpu()
        )
        self.store.add(named_parameters(self.potential), epoch=epoch)

    def execute(self) -> dict[str, float]:
        cfg = self.cfg
        state = self.sampler.init(self.potential.params)
        curve_path = self.directory / "curve.csv"
        fields = ["epoch", "potential", "lr_scale", "num_samples", "test_metric", "wall_time_s"]
        fields += ["accept_rate", *self.potential.hyperparameters()]
        self.sampling_accept_rates: list[float] = []
        wandb_run = _start_wandb(cfg, self.directory)
        start = time.perf_counter()
        with curve_path.open("w", newline="") as curve_file:
            curve = csv.DictWriter(curve_file, fieldnames=fields)
            curve.writeheader()
            for epoch in range(cfg.epochs):
                state, total = self._epoch(epoch, state)
                mean_potential = total.item() / self.steps_per_epoch
                if not math.isfinite(mean_potential):
                    raise DivergedError(
                        f"the chain diverged in epoch {epoch + 1} (U = {mean_potential}); "
                        f"the {len(self.store)} samples taken before are kept in "
                        f"{self.store.directory}. Lower sampler.lr or raise the friction "
                        "(sampler.alpha)."
                    )
                if self.sampler.injects_noise and self.schedule.collects(
                    epoch, cfg.burn_in, cfg.thin
                ):
                    self._collect(epoch)
                row = {
                    "epoch": epoch + 1,
                    "potential": mean_potential,
                    "lr_scale": self.schedule((epoch + 1) * self.steps_per_epoch - 1),
                    "num_samples": self.average.count,
                    "test_metric": self._headline() if self.average.count else "",
                    "wall_time_s": round(time.perf_counter() - start, 3),
                    "accept_rate": "" if self.accept_rate is None else self.accept_rate,
                }
                if self.accept_rate is not None and epoch >= cfg.burn_in:
                    self.sampling_accept_rates.append(self.accept_rate)
                row.update({k: v.item() for k, v in self.potential.hyperparameters().items()})
                curve.writerow(row)
                if wandb_run is not None:
                    wandb_run.log(row)
                if (epoch + 1) % cfg.log_every == 0 or epoch + 1 == cfg.epochs:
                    curve_file.flush()
                    log.info(
                        "epoch %d/%d  U/step %.4g  samples %d  %s",
                        epoch + 1,
                        cfg.epochs,
                        mean_potential,
                        self.average.count,
                        f"{self._headline_name()} {row['test_metric']:.4f}"
                        if self.average.count
                        else ("burn-in" if self.sampler.injects_noise else "optimising"),
                    )
        for _ in self.sampler.final_samples(state):
            self._collect(cfg.epochs - 1)
        metrics = self._metrics(state, time.perf_counter() - start)
        if cfg.pruning:
            self._pruning(state)
        if wandb_run is not None:
            wandb_run.summary.update(metrics)
            wandb_run.finish()
        return metrics

    def _headline_name(self) -> str:
        return "test acc (BMA)" if self.data.task == "classification" else "test RMSE (BMA)"

    def _headline(self) -> float:
        key = "test_accuracy" if self.data.task == "classification" else "test_rmse"
        return self.average.metrics(self.y_test.cpu())[key]

    def _metrics(self, state: Any, wall_time: float) -> dict[str, float]:
        metrics = self.average.metrics(self.y_test.cpu())
        predictive = self.average.predictive()
        if self.reference is not None:
            metrics["agreement"] = agreement(predictive, self.reference)
            metrics["total_variation"] = total_variation(predictive, self.reference)
        metrics.update(
            num_samples=self.average.count,
            epochs=self.cfg.epochs,
            grad_evals=state.grad_evals,
            wall_time_s=round(wall_time, 3),
        )
        if self.sampling_accept_rates:
            rates = self.sampling_accept_rates
            metrics["accept_rate"] = sum(rates) / len(rates)
        targets = self.data.y_test * self.data.target_std + self.data.target_mean
        save_predictive(self.directory / "predictive.safetensors", predictive, targets=targets)
        (self.directory / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        log.info("metrics: %s", json.dumps(metrics))
        return metrics

    def _pruning(self, state: Any) -> None:
        """``pruning.csv`` and ``pruning.png``: the model average's test metric as the weights
        with the lowest signal-to-noise ratio are removed (:mod:`bdl.pruning`)."""
        live = named_parameters(self.potential)
        moments = self.sampler.posterior_moments(state)
        if moments is not None:
            moments = tuple(dict(zip(live, m, strict=True)) for m in moments)
        y = self.y_test.cpu()
        if self.data.task == "classification":
            metric = "test_error"

            def score(predictions: list[Tensor]) -> float:
                return 1 - accuracy(torch.stack(predictions).double().mean(0), y)

        else:
            metric = "test_rmse"

            def score(predictions: list[Tensor]) -> float:
                average = RegressionAverage(y, self.data.target_mean, self.data.target_std)
                for prediction in predictions:
                    average.update(prediction)
                return average.metrics()["test_rmse"]

        rows = pruning.curve_from_store(
            self.store.directory,
            live,
            list(self.potential.model_params),
            moments,
            lambda: predict(self.potential.model, self.potential.likelihood, self.x_test).cpu(),
            score,
            self.cfg.pruning_samples,
        )
        path = pruning.write_curve(self.directory, rows, metric)
        log.info(
            "pruning curve in %s: %s",
            path,
            ", ".join(f"{r['fraction_removed']:.0%} {r['score']:.4f}" for r in rows),
        )


def _start_wandb(cfg: DictConfig, directory: Path):
    if cfg.wandb.mode == "disabled":
        return None
    import wandb  # imported only when asked for: it is slow to import

    return wandb.init(
        mode=cfg.wandb.mode,
        project=cfg.wandb.project,
        entity=cfg.wandb.entity,
        dir=str(directory),
        config=OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
    )


def run(cfg: DictConfig, directory: str | Path = ".") -> dict[str, float]:
    """Run the experiment ``cfg`` and write its outputs into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return Run(cfg, directory).execute()
