"""A run whose headline metric ties the trivial predictor's, within the Monte Carlo error of the
test points, is unsound, not completed: a chain blown up to predicting the majority class
everywhere has exactly the trivial predictor's accuracy."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from bdl.runner.results import TIE_MARGIN, headline_gain, refuse_tie
from bdl.task import Task

CLASSES = 10


def classification(n_test: int = 1000, seed: int = 0):
    """An experiment whose training classes put class 3 first (30%), and test labels drawn from
    the same frequencies."""
    generator = torch.Generator().manual_seed(seed)
    frequencies = torch.full((CLASSES,), 0.7 / (CLASSES - 1))
    frequencies[3] = 0.3
    y_train = torch.multinomial(frequencies, 5000, replacement=True, generator=generator)
    y_test = torch.multinomial(frequencies, n_test, replacement=True, generator=generator)
    data = SimpleNamespace(task="classification", y_train=y_train, out_features=CLASSES)
    return SimpleNamespace(run=SimpleNamespace(task=Task(data, y_test))), y_test


def verdict(experiment, predictive) -> dict:
    task = experiment.run.task
    average = task.average()
    average.update(predictive)
    metrics = {"status": "completed", **average.metrics(task.y_test)}
    metrics["trivial"] = task.trivial_metrics()
    refuse_tie(metrics, experiment, average.predictive())
    return metrics


def test_the_majority_class_everywhere_is_unsound():
    experiment, y = classification()
    # a blown-up network: confident, and the majority class whatever the input
    predictive = torch.full((len(y), CLASSES), 0.01, dtype=torch.float64)
    predictive[:, 3] = 1 - 0.01 * (CLASSES - 1)
    metrics = verdict(experiment, predictive)
    assert metrics["test_accuracy"] == metrics["trivial"]["test_accuracy"]  # a tie, exactly
    assert metrics["status"] == "unsound"
    accuracy = float((y == 3).double().mean())  # the majority class's share of the test set
    assert metrics["error"] == (
        f"the posterior predicts no better than ignoring the inputs: test_accuracy {accuracy:.4g} "
        f"against the trivial predictor's {accuracy:.4g}, a gain in accuracy of 0 ± 0 per test "
        "point, within 1 standard errors. Try another sampler, a smaller sampler.lr or more epochs"
    )
    # confident in a guess no better than the trivial one: its density is worse too, and the
    # warning does not say its point predictions beat the trivial predictor's
    (density,) = experiment.run.task.worse_than(metrics, metrics["trivial"], ("test_nll",))
    assert metrics["warnings"] == [
        f"the predictive density is worse than ignoring the inputs: {density} (the trivial "
        "predictor's in brackets); its point predictions do not beat it either (the run's error "
        "above)"
    ]


def test_a_gain_within_the_test_points_error_is_unsound_and_one_beyond_it_is_not():
    experiment, y = classification()
    majority = torch.zeros(len(y), CLASSES, dtype=torch.float64)
    majority[:, 3] = 1
    wrong, right = torch.nonzero(y != 3).flatten(), torch.nonzero(y == 3).flatten()
    # the majority class everywhere, but `fixed` of its errors put right and `broken` of its
    # right answers put wrong: the gain per point is 1, -1 or 0
    for fixed, broken, sound in ((3, 2, False), (60, 0, True)):
        predictive = majority.clone()
        predictive[wrong[:fixed]] = torch.nn.functional.one_hot(y[wrong[:fixed]], CLASSES).double()
        predictive[right[:broken]] = torch.roll(majority[right[:broken]], 1, dims=-1)
        gains = torch.zeros(len(y), dtype=torch.float64)
        gains[:fixed], gains[fixed : fixed + broken] = 1, -1
        expected = (float(gains.mean()), float(gains.std() / math.sqrt(len(y))))
        assert headline_gain(experiment, predictive) == pytest.approx(expected)
        assert (expected[0] > TIE_MARGIN * expected[1]) == sound
        assert verdict(experiment, predictive)["status"] == ("completed" if sound else "unsound")


def test_a_regression_that_predicts_the_training_mean_is_unsound():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(400, generator=generator, dtype=torch.float64)
    y = 2 * x + 0.1 * torch.randn(400, generator=generator, dtype=torch.float64)
    data = SimpleNamespace(task="regression", y_train=y[:300], target_mean=5.0, target_std=2.0)
    experiment = SimpleNamespace(run=SimpleNamespace(task=Task(data, y[300:])))
    variance = torch.ones(100, dtype=torch.float64)
    flat = torch.stack([torch.full((100,), float(y[:300].mean())), variance], -1)
    fitted = torch.stack([2 * x[300:], 0.01 * variance], -1)
    unsound = verdict(experiment, flat)
    assert unsound["status"] == "unsound"
    average = experiment.run.task.average()
    average.update(flat)
    gain, error = headline_gain(experiment, average.predictive())  # in the targets' own units
    rmse = (unsound["test_rmse"], unsound["trivial"]["test_rmse"])
    assert unsound["error"] == (
        f"the posterior predicts no better than ignoring the inputs: test_rmse {rmse[0]:.4g} "
        f"against the trivial predictor's {rmse[1]:.4g}, a gain in squared error of {gain:.3g} ± "
        f"{error:.3g} per test point, within 1 standard errors. Try another sampler, a smaller "
        "sampler.lr or more epochs"
    )
    assert verdict(experiment, fitted)["status"] == "completed"
