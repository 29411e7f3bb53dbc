r"""Predictive metrics and running Bayesian model averages.

The Bayesian predictive $p(y \mid x, D) \approx \frac1S \sum_s p(y \mid x, \theta_s)$
is scored with the usual test metrics, and compared with a reference posterior (e.g. HMC) by
agreement and total variation as in Izmailov et al. (2021), "What are Bayesian neural network
posteriors really like?". The averages keep running sums only, so a long chain costs no more
memory than one sample.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

_PROB_FLOOR = 1e-12


def _check_classification(probs: Tensor, y: Tensor) -> None:
    if probs.ndim != 2:
        raise ValueError(f"probs must have shape (n, classes), got {tuple(probs.shape)}")
    if y.shape != probs.shape[:1]:
        raise ValueError(
            f"labels must have shape ({probs.shape[0]},) to match probs {tuple(probs.shape)}, "
            f"got {tuple(y.shape)}"
        )


def _check_reference(probs: Tensor, ref: Tensor) -> None:
    if probs.ndim != 2 or ref.ndim != 2:
        raise ValueError(
            f"probs and reference must have shape (n, classes), got {tuple(probs.shape)} "
            f"and {tuple(ref.shape)}"
        )
    if probs.shape[0] != ref.shape[0]:
        raise ValueError(
            f"reference has {ref.shape[0]} test points but predictions have {probs.shape[0]}; "
            "were they computed on the same test set?"
        )
    if probs.shape[1] != ref.shape[1]:
        raise ValueError(
            f"reference has {ref.shape[1]} classes but predictions have {probs.shape[1]}"
        )


def accuracy(probs: Tensor, y: Tensor) -> float:
    """Fraction of points whose most probable class is the label."""
    _check_classification(probs, y)
    return (probs.argmax(-1) == y).double().mean().item()


def nll(probs: Tensor, y: Tensor) -> float:
    """Mean negative log predictive probability of the label.

    Probabilities are floored at 1e-12 so one confidently wrong point gives a large finite loss
    rather than ``inf`` that would hide every other difference between methods.
    """
    _check_classification(probs, y)
    return -label_log_probability(probs, y).mean().item()


def label_log_probability(probs: Tensor, y: Tensor) -> Tensor:
    """``log p(y_i | x_i)`` of each point, float64, the probabilities floored as in `nll`."""
    p_y = probs.double().gather(-1, y.long().to(probs.device).unsqueeze(-1)).squeeze(-1)
    return p_y.clamp_min(_PROB_FLOOR).log()


def gaussian_log_likelihood(prediction: Tensor, y: Tensor, mean: float, std: float) -> Tensor:
    """``log N(y_i | μ_i, σ_i²)`` of each point in original units, float64, from ``(n, 2)``
    means and variances in units standardised by ``mean`` and ``std`` and targets ``y`` in
    original units."""
    prediction = prediction.double()
    mu = prediction[:, 0] * std + mean
    var = prediction[:, 1] * std**2
    return -0.5 * (math.log(2 * math.pi) + var.log() + (y.to(mu) - mu).square() / var)


def ece(probs: Tensor, y: Tensor, bins: int = 15) -> float:
    r"""Expected calibration error (Guo et al. 2017, "On calibration of modern neural networks").

    $\sum_b \frac{|B_b|}{n} |\mathrm{acc}(B_b) - \mathrm{conf}(B_b)|$ over ``bins``
    equal-width bins of the top-class confidence, bin ``b`` covering $(b/M, (b+1)/M]$
    (`calibration_bins`).
    """
    count, conf_sum, acc_sum = calibration_bins(probs, y, bins)
    # |sum acc - sum conf| / n per bin equals |B_b|/n |acc_b - conf_b|, and is 0 for empty bins.
    return ((acc_sum - conf_sum).abs().sum() / y.shape[0]).item()


def calibration_bins(probs: Tensor, y: Tensor, bins: int = 15) -> tuple[Tensor, Tensor, Tensor]:
    """Per bin of the top-class confidence (``bins`` equal-width bins, right-closed as in Guo et
    al. 2017's code): the number of points, the sum of their confidences and the number of them
    predicted correctly, float64; the reliability diagram's bars and `ece`'s terms."""
    _check_classification(probs, y)
    if bins < 1:
        raise ValueError(f"ece needs at least one bin, got {bins}")
    confidence, prediction = probs.double().max(-1)
    correct = (prediction == y.to(prediction.device)).double()
    # Right-closed bins (lo, hi] with linspace edges, exactly as Guo et al.'s reference code, so
    # a confidence on an edge lands in the same bin; confidence 0 (impossible) goes to bin 0.
    edges = torch.linspace(0, 1, bins + 1, dtype=torch.float64, device=probs.device)
    index = torch.bucketize(confidence, edges[1:-1], right=False)
    count = torch.zeros_like(edges[1:]).index_add_(0, index, torch.ones_like(confidence))
    conf_sum = torch.zeros_like(edges[1:]).index_add_(0, index, confidence)
    acc_sum = torch.zeros_like(edges[1:]).index_add_(0, index, correct)
    return count, conf_sum, acc_sum


def brier(probs: Tensor, y: Tensor) -> float:
    r"""Brier score (Brier 1950): mean over points of $\sum_k (p_k - 1[k=y])^2$."""
    _check_classification(probs, y)
    one_hot = torch.nn.functional.one_hot(y.long(), probs.shape[-1]).double()
    return (probs.double() - one_hot).square().sum(-1).mean().item()


def agreement(probs: Tensor, ref: Tensor) -> float:
    """Fraction of points where the top class matches the reference's (Izmailov et al. 2021)."""
    _check_reference(probs, ref)
    return (probs.argmax(-1) == ref.argmax(-1)).double().mean().item()


def total_variation(probs: Tensor, ref: Tensor) -> float:
    r"""Mean total variation $\frac12 \sum_k |p_k - p^{\mathrm{ref}}_k|$ to a reference
    predictive (Izmailov et al. 2021); 0 for identical and 1 for disjoint predictions."""
    _check_reference(probs, ref)
    return (0.5 * (probs.double() - ref.double()).abs().sum(-1)).mean().item()


def rmse(mean: Tensor, y: Tensor) -> float:
    """Root mean squared error of the predictive mean."""
    mean, y = mean.reshape(-1), y.reshape(-1)
    if mean.shape != y.shape:
        raise ValueError(f"rmse got {mean.numel()} predictions for {y.numel()} targets")
    return (mean.double() - y.double()).square().mean().sqrt().item()


class ClassificationAverage:
    """Running mean of per-sample class probabilities p(y|x, θ_s).

    Averaging probabilities (not logits) is the Bayesian model average; a float64 running sum
    keeps the mean exact to rounding over the thousands of samples of a long chain.
    """

    def __init__(self) -> None:
        self.count = 0
        self._sum: Tensor | None = None

    def update(self, prediction: Tensor) -> None:
        """Add one posterior sample's probabilities, shape ``(n, classes)``."""
        prediction = prediction.detach().to(torch.float64)
        if prediction.ndim != 2:
            raise ValueError(
                f"prediction must have shape (n, classes), got {tuple(prediction.shape)}"
            )
        if self._sum is None:
            self._sum = prediction.clone()
        elif prediction.shape != self._sum.shape:
            raise ValueError(
                f"prediction shape {tuple(prediction.shape)} differs from earlier samples' "
                f"{tuple(self._sum.shape)}"
            )
        else:
            self._sum += prediction.to(self._sum.device)
        self.count += 1

    def merge(self, other: ClassificationAverage) -> ClassificationAverage:
        """The average over this one's samples and ``other``'s (the chains of one run)."""
        merged = ClassificationAverage()
        merged.count = self.count + other.count
        sums = [s for s in (self._sum, other._sum) if s is not None]
        merged._sum = sum(sums[1:], sums[0].clone()) if sums else None
        return merged

    def state_dict(self) -> dict[str, Tensor]:
        """The running sum and count, for checkpoints."""
        state = {"count": torch.tensor(self.count)}
        if self._sum is not None:
            state["sum"] = self._sum
        return state

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.count = int(state["count"])
        self._sum = state["sum"].to(torch.float64) if "sum" in state else None

    def predictive(self) -> Tensor:
        """Averaged probabilities, shape ``(n, classes)``, float64."""
        if self._sum is None:
            raise ValueError("ClassificationAverage has no samples yet; call update() first")
        return self._sum / self.count

    def metrics(self, y: Tensor) -> dict[str, float]:
        probs = self.predictive()
        y = y.to(probs.device)
        return {
            "test_accuracy": accuracy(probs, y),
            "test_nll": nll(probs, y),
            "test_ece": ece(probs, y),
            "test_brier": brier(probs, y),
        }


class UncertaintyAverage(ClassificationAverage):
    r"""A `ClassificationAverage` that also keeps the running mean of each sample's
    predictive entropy, which splits the model average's uncertainty (Depeweg et al. 2018;
    Smith & Gal 2018): the total $\mathbb H[\bar p]$ of the average
    $\bar p = \frac1S\sum_s p_s$ is the expected entropy
    $\frac1S\sum_s \mathbb H[p_s]$ (aleatoric) plus the mutual information between the
    label and the weights (epistemic), which is zero where all samples agree."""

    def __init__(self) -> None:
        super().__init__()
        self._entropy_sum: Tensor | None = None

    def update(self, prediction: Tensor) -> None:
        super().update(prediction)
        entropy = _entropy(prediction.detach().to(torch.float64))
        if self._entropy_sum is None:
            self._entropy_sum = entropy
        else:
            self._entropy_sum += entropy.to(self._entropy_sum.device)

    def merge(self, other: UncertaintyAverage) -> UncertaintyAverage:
        merged = UncertaintyAverage()
        pooled = super().merge(other)
        merged.count, merged._sum = pooled.count, pooled._sum
        sums = [s for s in (self._entropy_sum, other._entropy_sum) if s is not None]
        merged._entropy_sum = sum(sums[1:], sums[0].clone()) if sums else None
        return merged

    def state_dict(self) -> dict[str, Tensor]:
        state = super().state_dict()
        if self._entropy_sum is not None:
            state["entropy_sum"] = self._entropy_sum
        return state

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        super().load_state_dict(state)
        entropy = state.get("entropy_sum")
        self._entropy_sum = None if entropy is None else entropy.to(torch.float64)

    def scores(self) -> dict[str, Tensor]:
        """Per point, each higher where the input looks less like the training data:
        ``entropy`` (total), ``mutual_information`` (epistemic) and ``max_probability`` as
        one minus the top class's averaged probability."""
        if self._entropy_sum is None:
            raise ValueError("UncertaintyAverage has no samples yet; call update() first")
        probs = self.predictive()
        total = _entropy(probs)
        # the difference of two entropies can round below 0 where the samples agree
        information = (total - self._entropy_sum / self.count).clamp_min(0)
        return {
            "entropy": total,
            "mutual_information": information,
            "max_probability": 1 - probs.max(-1).values,
        }


def _entropy(probs: Tensor) -> Tensor:
    r"""Entropy in nats of each row of probabilities, with $0 \log 0 = 0$."""
    return -torch.special.xlogy(probs, probs).sum(-1)


def auroc(inside: Tensor, outside: Tensor) -> float:
    r"""Area under the ROC curve of telling ``outside`` from ``inside`` points by a score that
    is higher outside: $P(s_\mathrm{out} > s_\mathrm{in}) + \frac12 P(s_\mathrm{out} =
    s_\mathrm{in})$, the Mann-Whitney statistic (Hanley & McNeil 1982) from average ranks."""
    _check_scores(inside, outside)
    scores = torch.cat([inside, outside]).double()
    ranks = _average_ranks(scores)
    n_in, n_out = inside.numel(), outside.numel()
    rank_sum = ranks[n_in:].sum().item()
    return (rank_sum - n_out * (n_out + 1) / 2) / (n_in * n_out)


def aupr(inside: Tensor, outside: Tensor) -> float:
    r"""Area under the precision-recall curve with the ``outside`` points as positives, as
    average precision $\sum_t (R_t - R_{t-1}) P_t$ over the distinct score thresholds
    $t$ from the highest down (tied scores enter together), the step-wise estimate
    without interpolation (Davis & Goadrich 2006)."""
    _check_scores(inside, outside)
    scores = torch.cat([inside, outside]).double()
    positive = torch.cat([torch.zeros(inside.numel()), torch.ones(outside.numel())]).double()
    order = scores.argsort(descending=True, stable=True)
    scores, positive = scores[order], positive[order]
    true_positives = positive.cumsum(0)
    # the last index of each run of tied scores: a threshold there takes the whole run
    last = torch.ones_like(scores, dtype=torch.bool)
    last[:-1] = scores[1:] != scores[:-1]
    true_positives = true_positives[last]
    predicted = torch.arange(1, scores.numel() + 1, dtype=torch.float64)[last]
    precision = true_positives / predicted
    recall_gain = torch.diff(true_positives, prepend=true_positives.new_zeros(1))
    return (recall_gain * precision).sum().item() / outside.numel()


def _average_ranks(scores: Tensor) -> Tensor:
    """1-based ranks of ``scores`` in ascending order, ties given the mean of their ranks."""
    values, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    upper = counts.cumsum(0).double()
    return (upper - (counts.double() - 1) / 2)[inverse]


def _check_scores(inside: Tensor, outside: Tensor) -> None:
    if inside.ndim != 1 or outside.ndim != 1 or not inside.numel() or not outside.numel():
        raise ValueError(
            "scores must be two non-empty vectors (in-distribution, out-of-distribution), got "
            f"shapes {tuple(inside.shape)} and {tuple(outside.shape)}"
        )


def ood_detection(inside: UncertaintyAverage, outside: UncertaintyAverage) -> dict[str, float]:
    """AUROC and AUPR (out-of-distribution points positive) of each uncertainty score of
    `UncertaintyAverage.scores` at telling the ``outside`` set from the ``inside`` one
    (Hendrycks & Gimpel 2017), from the model average over the posterior's samples:
    ``ood_auroc_entropy``, ``ood_aupr_entropy``, ``ood_auroc_mutual_information``, …"""
    ins, outs = inside.scores(), outside.scores()
    result = {}
    for name in ins:
        result[f"ood_auroc_{name}"] = auroc(ins[name].cpu(), outs[name].cpu())
        result[f"ood_aupr_{name}"] = aupr(ins[name].cpu(), outs[name].cpu())
    return result


class Detection:
    """The running `UncertaintyAverage` of the posterior's samples on the in-distribution
    inputs (``inside``) and on the out-of-distribution ones (``outside``), sample by sample, and
    their `ood_detection` metrics: what a run accumulates as it keeps each sample and what
    ``bdl-eval ood=`` computes from the stored ones."""

    def __init__(self) -> None:
        self.inside, self.outside = UncertaintyAverage(), UncertaintyAverage()

    @classmethod
    def of(cls, predictions: Iterable[Sequence[Tensor]]) -> Detection:
        """The detection of stored samples from each one's class probabilities on the two sets
        (`bdl.composition.network.predict_samples` on the in- and out-of-distribution inputs):
        what ``bdl-eval ood=`` and a run's end that scores its stored samples both call."""
        detection = cls()
        for inside, outside in predictions:
            detection.update(inside, outside)
        return detection

    @property
    def count(self) -> int:
        return self.inside.count

    def update(self, inside: Tensor, outside: Tensor) -> None:
        """Add one sample's class probabilities on the two sets of inputs."""
        self.inside.update(inside)
        self.outside.update(outside)

    def merge(self, other: Detection) -> Detection:
        merged = Detection()
        merged.inside = self.inside.merge(other.inside)
        merged.outside = self.outside.merge(other.outside)
        return merged

    def state_dict(self) -> dict[str, Tensor]:
        return {
            f"{side}/{key}": value
            for side in ("inside", "outside")
            for key, value in getattr(self, side).state_dict().items()
        }

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        for side in ("inside", "outside"):
            prefix = f"{side}/"
            part = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            getattr(self, side).load_state_dict(part)

    def metrics(self) -> dict[str, float]:
        return ood_detection(self.inside, self.outside)


class RegressionAverage:
    r"""Mixture of Gaussians over samples, in ORIGINAL target units.

    Each sample predicts $\mathcal N(\mu_s, \sigma_s^2)$; the model average is their equal
    mixture. Metrics are reported in the data's original units so they are comparable with the
    UCI literature (Hernández-Lobato & Adams 2015), which standardised units are not: the
    log-likelihood shifts by $-\log \mathrm{std}$ and the RMSE scales by ``std``.

    The mixture's mean and variance $E[\sigma^2] + \mathrm{Var}[\mu]$ come from running sums
    (Welford 1962 for the variance of the means, which avoids the cancellation of
    $E[\mu^2] - E[\mu]^2$), and the test log-likelihood
    $\frac1n\sum_i \log \frac1S \sum_s \mathcal N(y_i \mid \mu_{s,i}, \sigma_{s,i}^2)$ from a
    running log-sum-exp per point, which neither underflows for far-off samples nor needs the
    samples kept.
    """

    def __init__(self, y: Tensor, target_mean: float = 0.0, target_std: float = 1.0) -> None:
        if not target_std > 0:
            raise ValueError(f"target_std must be positive, got {target_std}")
        self._y_standardised = y.detach().reshape(-1).to(torch.float64)
        self.target_mean = float(target_mean)
        self.target_std = float(target_std)
        self.y = self._y_standardised * self.target_std + self.target_mean
        self.count = 0
        self._mean: Tensor | None = None  # running mean of μ_s
        self._m2: Tensor | None = None  # running Σ_s (μ_s - mean)^2
        self._var_sum: Tensor | None = None  # running Σ_s σ_s^2
        self._log_sum: Tensor | None = None  # running log Σ_s N(y | μ_s, σ_s^2)

    def update(self, prediction: Tensor) -> None:
        """Add one sample's ``(n, 2)`` mean and variance, given in standardised units."""
        prediction = prediction.detach().to(torch.float64)
        n = self.y.shape[0]
        if prediction.shape != (n, 2):
            raise ValueError(
                f"prediction must have shape ({n}, 2) (mean, variance per test point), "
                f"got {tuple(prediction.shape)}"
            )
        self.y = self.y.to(prediction.device)
        mean = prediction[:, 0] * self.target_std + self.target_mean
        var = prediction[:, 1] * self.target_std**2
        log_lik = gaussian_log_likelihood(prediction, self.y, self.target_mean, self.target_std)
        self.count += 1
        if self._mean is None:
            self._mean = mean.clone()
            self._m2 = torch.zeros_like(mean)
            self._var_sum = var.clone()
            self._log_sum = log_lik
            return
        delta = mean - self._mean
        self._mean += delta / self.count
        self._m2 += delta * (mean - self._mean)
        self._var_sum += var
        self._log_sum = torch.logaddexp(self._log_sum, log_lik)

    _SUMS = ("_mean", "_m2", "_var_sum", "_log_sum")

    def merge(self, other: RegressionAverage) -> RegressionAverage:
        """The mixture over this one's samples and ``other``'s (the chains of one run); the
        variances of the means combine by Chan, Golub & LeVeque (1979)."""
        merged = RegressionAverage(self._y_standardised, self.target_mean, self.target_std)
        if not other.count or not self.count:
            source = self if self.count else other
            merged.load_state_dict({k: v.clone() for k, v in source.state_dict().items()})
            return merged
        merged.count = self.count + other.count
        delta = other._mean - self._mean
        merged._mean = self._mean + delta * (other.count / merged.count)
        merged._m2 = (
            self._m2 + other._m2 + delta.square() * (self.count * other.count / merged.count)
        )
        merged._var_sum = self._var_sum + other._var_sum
        merged._log_sum = torch.logaddexp(self._log_sum, other._log_sum)
        merged.y = self.y
        return merged

    def state_dict(self) -> dict[str, Tensor]:
        """The running sums and count, for checkpoints."""
        state = {"count": torch.tensor(self.count)}
        if self._mean is not None:
            state.update({name.lstrip("_"): getattr(self, name) for name in self._SUMS})
        return state

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.count = int(state["count"])
        for name in self._SUMS:
            value = state.get(name.lstrip("_"))
            setattr(self, name, None if value is None else value.to(torch.float64))

    def predictive(self) -> Tensor:
        """Mixture mean and variance per test point, shape ``(n, 2)``, original units."""
        if self._mean is None:
            raise ValueError("RegressionAverage has no samples yet; call update() first")
        variance = self._var_sum / self.count + self._m2 / self.count
        return torch.stack([self._mean, variance], dim=-1)

    def function_moments(self) -> tuple[Tensor, Tensor]:
        """Mean and standard deviation over the samples of the network's output $f$ per
        test point, original units: the posterior of the regression function, without the
        noise that the predictive adds."""
        if self._mean is None:
            raise ValueError("RegressionAverage has no samples yet; call update() first")
        return self._mean, (self._m2 / self.count).sqrt()

    def metrics(self, y: Tensor | None = None) -> dict[str, float]:
        """``test_rmse`` and ``test_ll`` in original units.

        ``y`` is optional and only checked: it must be the standardised targets given to the
        constructor, since the log-likelihood was accumulated against those online.
        """
        if self._mean is None:
            raise ValueError("RegressionAverage has no samples yet; call update() first")
        if y is not None:
            y = y.detach().reshape(-1).to(torch.float64).cpu()
            if y.shape != self._y_standardised.shape or not torch.allclose(
                y, self._y_standardised.cpu()
            ):
                raise ValueError(
                    "RegressionAverage.metrics got targets different from the standardised ones "
                    "given to the constructor; the log-likelihood is accumulated against those"
                )
        log_predictive = self._log_sum - math.log(self.count)
        return {
            "test_rmse": rmse(self._mean, self.y),
            "test_ll": log_predictive.mean().item(),
        }


def pool(
    averages: list[ClassificationAverage | RegressionAverage],
) -> ClassificationAverage | RegressionAverage:
    """The model average over the samples of all ``averages`` (the chains of one run); a single
    chain's own average as it is."""
    return functools.reduce(lambda merged, other: merged.merge(other), averages)


def function_agreement(
    reference: tuple[Tensor, Tensor],
    other: tuple[Tensor, Tensor],
    standard_errors: tuple[Tensor, Tensor] | None = None,
) -> dict[str, float]:
    r"""How well the posterior of a regression function ``other`` matches ``reference`` (e.g. a
    long full-batch HMC run), each the per-point mean and standard deviation of $f$
    (`RegressionAverage.function_moments`): ``width_ratio`` the mean over points of the
    ratio of standard deviations (1 for the same width; its least and largest as
    ``width_ratio_min``, ``width_ratio_max``), and ``mean_offset`` the mean over points of the
    distance between the means in the reference's standard deviations.

    With the Monte Carlo ``standard_errors`` of the two means per point (the reference's, then
    ``other``'s; `bdl.analysis.posterior.Posterior.function_standard_error`), also
    ``mean_offset_noise``: the offset two unbiased runs of these lengths would show on average,
    $\sqrt{2/\pi}\,\sqrt{e_\mathrm{ref}^2 + e^2}/s_\mathrm{ref}$ averaged over points
    (the mean of $|\mathcal{N}(0, e^2)|$ is $e\sqrt{2/\pi}$). An offset near it is
    Monte Carlo error, one well above it a bias."""
    (ref_mean, ref_std), (mean, std) = reference, other
    ratio = std / ref_std
    result = {
        "width_ratio": ratio.mean().item(),
        "width_ratio_min": ratio.min().item(),
        "width_ratio_max": ratio.max().item(),
        "mean_offset": ((mean - ref_mean).abs() / ref_std).mean().item(),
    }
    if standard_errors is not None:
        ref_error, error = standard_errors
        combined = (ref_error.square() + error.square()).sqrt() / ref_std
        result["mean_offset_noise"] = math.sqrt(2 / math.pi) * combined.mean().item()
    return result
