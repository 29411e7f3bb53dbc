"""What differs between classification and regression, in one place: the likelihood, the running
model average, the headline metric of progress lines and curves, the pruning score and the
targets stored beside the predictive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from bdl import likelihoods
from bdl.data import Dataset
from bdl.metrics import (
    ClassificationAverage,
    RegressionAverage,
    accuracy,
    gaussian_log_likelihood,
    label_log_probability,
)


@dataclass
class Task:
    """The task-specific pieces of a run on ``data`` (targets ``y_test`` on the CPU)."""

    data: Dataset
    y_test: Tensor

    @property
    def classification(self) -> bool:
        return self.data.task == "classification"

    def likelihood(self, likelihood_cfg: Any) -> nn.Module:
        if self.classification:
            return likelihoods.Categorical()
        return likelihoods.Gaussian(**likelihood_cfg)

    def average(self) -> ClassificationAverage | RegressionAverage:
        """An empty running model average over posterior samples' test predictions."""
        if self.classification:
            return ClassificationAverage()
        return RegressionAverage(self.y_test, self.data.target_mean, self.data.target_std)

    def log_likelihoods(self, prediction: Tensor) -> Tensor:
        """``log p(y_i | x_i, θ)`` of each test point under one sample's ``prediction`` (original
        units for regression): what the convergence diagnostics follow (`bdl.diagnostics`)."""
        if self.classification:
            return label_log_probability(prediction, self.y_test)
        return gaussian_log_likelihood(
            prediction, self.targets(), self.data.target_mean, self.data.target_std
        )

    def trivial_metrics(self) -> dict[str, float]:
        """The test metrics of the predictor that ignores the inputs: for regression the
        training targets' mean and variance, for classification the training classes'
        frequencies. Any posterior worth keeping beats it."""
        y_train = self.data.y_train.double()
        if self.classification:
            counts = torch.bincount(y_train.long(), minlength=self.data.out_features)
            prediction = (counts / counts.sum()).expand(len(self.y_test), -1)
        else:
            moments = torch.stack([y_train.mean(), y_train.var()])
            prediction = moments.expand(len(self.y_test), -1)
        average = self.average()
        average.update(prediction)
        return average.metrics(self.y_test)

    @staticmethod
    def worse_than(
        metrics: dict[str, float], trivial: dict[str, float], keys: tuple[str, ...]
    ) -> list[str]:
        """Those of the metrics ``keys`` of ``metrics`` in which ``trivial`` (the
        `trivial_metrics`) does better, each as ``name value (trivial predictor's)``."""
        lower_is_better = ("test_rmse", "test_nll")
        worse = []
        for key in keys:
            value, baseline = metrics[key], trivial[key]
            better = value <= baseline if key in lower_is_better else value >= baseline
            if not better:  # NaN included
                worse.append(f"{key} {value:.4g} ({baseline:.4g})")
        return worse

    @property
    def calibration(self) -> str:
        """The metric of the predictive density beside the headline's point predictions."""
        return "test_nll" if self.classification else "test_ll"

    @property
    def headline(self) -> str:
        """The metric that progress lines, curves and sweeps report."""
        return "test_accuracy" if self.classification else "test_rmse"

    def headline_value(self, average: ClassificationAverage | RegressionAverage) -> float:
        """The headline metric of ``average``, without the others (it is computed every epoch)."""
        if self.classification:
            return accuracy(average.predictive(), self.y_test)
        return average.metrics()["test_rmse"]

    @property
    def pruning_metric(self) -> str:
        return "test_error" if self.classification else "test_rmse"

    def pruning_score(self, predictions: list[Tensor]) -> float:
        """Test error (RMSE) of the equal-weight model average of ``predictions``."""
        if self.classification:
            return 1 - accuracy(torch.stack(predictions).double().mean(0), self.y_test)
        average = self.average()
        for prediction in predictions:
            average.update(prediction)
        return average.metrics()["test_rmse"]

    def targets(self) -> Tensor:
        """The test targets in original units, saved beside the predictive."""
        return self.y_test * self.data.target_std + self.data.target_mean
