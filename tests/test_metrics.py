import math

import numpy as np
import pytest
import torch

from bdl.metrics import (
    ClassificationAverage,
    RegressionAverage,
    UncertaintyAverage,
    accuracy,
    agreement,
    aupr,
    auroc,
    brier,
    ece,
    function_agreement,
    nll,
    ood_detection,
    rmse,
    total_variation,
)

PROBS = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]])
LABELS = torch.tensor([0, 2, 2])


def test_accuracy_nll_brier_by_hand():
    assert accuracy(PROBS, LABELS) == pytest.approx(2 / 3)
    assert nll(PROBS, LABELS) == pytest.approx(-(math.log(0.7) + math.log(0.3) + math.log(0.4)) / 3)
    # (0.09 + 0.04 + 0.01) + (0.01 + 0.36 + 0.49) + (0.09 + 0.09 + 0.36)
    assert brier(PROBS, LABELS) == pytest.approx(1.54 / 3)


def test_nll_is_finite_for_zero_probability():
    probs = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    assert nll(probs, torch.tensor([1, 0])) == pytest.approx((-math.log(1e-12) + math.log(2)) / 2)


def test_ece_by_hand():
    # Two bins: (0, .5] holds conf 0.4 (correct); (.5, 1] holds 0.7 (correct) and 0.6 (wrong).
    assert ece(PROBS, LABELS, bins=2) == pytest.approx(1 / 3 * 0.6 + 2 / 3 * 0.15)


def test_ece_calibrated_and_overconfident():
    probs = torch.tensor([[0.8, 0.2]]).repeat(10, 1)
    labels = torch.tensor([0] * 8 + [1] * 2)
    assert ece(probs, labels) == pytest.approx(0.0, abs=1e-6)
    overconfident = torch.tensor([[0.99, 0.01]]).repeat(10, 1)
    assert ece(overconfident, torch.tensor([0, 1] * 5)) == pytest.approx(0.49)
    certain = torch.eye(3)
    assert ece(certain, torch.arange(3)) == pytest.approx(0.0)


def _guo_ece(confidences, correct, bins):
    """The reference computation of Guo et al. (2017)'s code, in NumPy: bins (lo, hi] with
    ``np.linspace`` edges, |mean confidence − accuracy| weighted by the bin's share."""
    edges = np.linspace(0, 1, bins + 1)
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        in_bin = (confidences > lo) & (confidences <= hi)
        if in_bin.any():
            total += abs(confidences[in_bin].mean() - correct[in_bin].mean()) * in_bin.mean()
    return total


def test_ece_matches_the_reference_binning_on_bin_edges():
    """Confidences on the edges 0.25, 0.5 and 0.75 of 4 bins, right or wrong in turn: bins closed
    on the left would move each into the next bin and change the sum."""
    confidence = np.array([0.25, 0.25, 0.5, 0.5, 0.5, 0.75, 0.75, 0.9, 1.0, 0.6])
    labels = np.array([0, 1, 0, 0, 1, 0, 1, 0, 0, 1])
    probs = torch.tensor(np.stack([confidence, 1 - confidence], axis=1))
    expected = _guo_ece(confidence, (labels == 0).astype(float), bins=4)
    assert ece(probs, torch.tensor(labels), bins=4) == pytest.approx(expected, abs=1e-12)
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.full(5, 0.5), size=400)
    labels = rng.integers(0, 5, size=400)
    correct = (probs.argmax(1) == labels).astype(float)
    for bins in (1, 7, 15):
        expected = _guo_ece(probs.max(1), correct, bins)
        got = ece(torch.tensor(probs), torch.tensor(labels), bins=bins)
        assert got == pytest.approx(expected, abs=1e-12)


def test_agreement_and_total_variation_by_hand():
    probs = torch.tensor([[0.7, 0.3], [0.4, 0.6]])
    ref = torch.tensor([[0.6, 0.4], [0.8, 0.2]])
    assert agreement(probs, ref) == pytest.approx(0.5)
    assert total_variation(probs, ref) == pytest.approx((0.1 + 0.4) / 2)


def test_agreement_and_total_variation_identities():
    torch.manual_seed(0)
    p = torch.distributions.Dirichlet(torch.ones(5)).sample((50,))
    q = torch.distributions.Dirichlet(torch.ones(5)).sample((50,))
    assert agreement(p, p) == 1.0
    assert total_variation(p, p) == 0.0
    assert total_variation(p, q) == pytest.approx(0.5 * (p - q).abs().sum(-1).mean().item())
    assert total_variation(p, q) == pytest.approx(total_variation(q, p))
    assert total_variation(torch.eye(3), torch.eye(3).roll(1, 0)) == pytest.approx(1.0)


def test_reference_shape_mismatch_is_explained():
    with pytest.raises(ValueError, match="reference has 5 test points but predictions have 4;"):
        agreement(torch.full((4, 3), 1 / 3), torch.full((5, 3), 1 / 3))
    with pytest.raises(ValueError, match="reference has 2 classes but predictions have 3"):
        total_variation(torch.full((4, 3), 1 / 3), torch.full((4, 2), 0.5))
    with pytest.raises(ValueError, match="labels"):
        accuracy(PROBS, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="ece needs at least one bin, got 0"):
        ece(PROBS, LABELS, bins=0)


def test_rmse_by_hand():
    assert rmse(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 4.0, 3.0])) == pytest.approx(
        math.sqrt(4 / 3)
    )


def test_classification_average_matches_stacked_mean():
    torch.manual_seed(1)
    samples = [torch.distributions.Dirichlet(torch.ones(4)).sample((6,)) for _ in range(5)]
    average = ClassificationAverage()
    for s in samples:
        average.update(s)
    assert average.count == 5
    expected = torch.stack(samples).double().mean(0)
    torch.testing.assert_close(average.predictive(), expected)
    labels = torch.randint(0, 4, (6,))
    metrics = average.metrics(labels)
    assert set(metrics) == {"test_accuracy", "test_nll", "test_ece", "test_brier"}
    assert metrics["test_nll"] == pytest.approx(nll(expected, labels))
    assert all(isinstance(v, float) for v in metrics.values())


def test_averages_need_a_sample():
    with pytest.raises(ValueError, match="no samples"):
        ClassificationAverage().metrics(LABELS)
    with pytest.raises(ValueError, match="no samples"):
        RegressionAverage(torch.zeros(3)).metrics()


def _normal_pdf(y, mean, var):
    return math.exp(-0.5 * (y - mean) ** 2 / var) / math.sqrt(2 * math.pi * var)


def test_regression_average_single_sample_is_gaussian_in_original_units():
    # Standardised target 1.0 with mean 10, std 2 is 12; predicted N(0.5, 0.25) is N(11, 1).
    average = RegressionAverage(torch.tensor([1.0]), target_mean=10.0, target_std=2.0)
    average.update(torch.tensor([[0.5, 0.25]]))
    torch.testing.assert_close(
        average.predictive(), torch.tensor([[11.0, 1.0]], dtype=torch.float64)
    )
    metrics = average.metrics()
    assert metrics["test_rmse"] == pytest.approx(1.0)
    assert metrics["test_ll"] == pytest.approx(-0.5 * math.log(2 * math.pi) - 0.5)
    # Same prediction scored in standardised units differs by exactly log(std).
    standardised = RegressionAverage(torch.tensor([1.0]))
    standardised.update(torch.tensor([[0.5, 0.25]]))
    assert standardised.metrics()["test_ll"] - math.log(2.0) == pytest.approx(metrics["test_ll"])


def test_regression_average_two_samples_is_mixture():
    y = torch.tensor([0.0, 1.0, -2.0])
    samples = [
        torch.tensor([[0.1, 0.5], [0.8, 1.0], [-1.0, 0.3]]),
        torch.tensor([[-0.3, 0.2], [1.5, 0.4], [-2.5, 2.0]]),
    ]
    average = RegressionAverage(y, target_mean=3.0, target_std=0.5)
    for s in samples:
        average.update(s)
    assert average.count == 2
    lls, means, variances, targets = [], [], [], []
    for i in range(3):
        mu = [float(s[i, 0]) * 0.5 + 3.0 for s in samples]
        var = [float(s[i, 1]) * 0.25 for s in samples]
        t = float(y[i]) * 0.5 + 3.0
        lls.append(math.log(sum(_normal_pdf(t, m, v) for m, v in zip(mu, var, strict=True)) / 2))
        means.append(sum(mu) / 2)
        variances.append(sum(var) / 2 + sum((m - means[-1]) ** 2 for m in mu) / 2)
        targets.append(t)
    expected = torch.tensor([means, variances], dtype=torch.float64).T
    torch.testing.assert_close(average.predictive(), expected)
    metrics = average.metrics(y)
    assert metrics["test_ll"] == pytest.approx(sum(lls) / 3)
    assert metrics["test_rmse"] == pytest.approx(
        math.sqrt(sum((m - t) ** 2 for m, t in zip(means, targets, strict=True)) / 3)
    )


def test_regression_average_log_likelihood_does_not_underflow():
    # Densities ~exp(-5e5) underflow even in float64; the running log-sum-exp must not.
    average = RegressionAverage(torch.tensor([0.0]))
    average.update(torch.tensor([[10.0, 1e-4]]))
    average.update(torch.tensor([[10.0, 1e-4]]))
    expected = -0.5 * math.log(2 * math.pi * 1e-4) - 0.5 * 100 / 1e-4
    assert average.metrics()["test_ll"] == pytest.approx(expected)


def test_regression_average_rejects_other_targets():
    average = RegressionAverage(torch.tensor([0.0, 1.0]))
    average.update(torch.tensor([[0.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="standardised"):
        average.metrics(torch.tensor([5.0, 6.0]))
    with pytest.raises(ValueError, match="shape"):
        average.update(torch.zeros(3, 2))


@pytest.mark.parametrize("split", [0, 1, 3, 5])
def test_merged_averages_are_the_average_of_all_samples(split):
    """Two chains' averages merged give what one average over all their samples gives (the
    Chan-Golub-LeVeque combination of the means' variances; an empty chain changes nothing)."""
    generator = torch.Generator().manual_seed(0)
    y = torch.randn(7, generator=generator, dtype=torch.float64)
    means = torch.randn(5, 7, generator=generator, dtype=torch.float64)
    variances = torch.rand(5, 7, generator=generator, dtype=torch.float64) + 0.1
    samples = torch.stack([means, variances], -1)
    probs = torch.rand(5, 7, 3, generator=generator, dtype=torch.float64).softmax(-1)
    labels = torch.randint(3, (7,), generator=generator)
    for make, predictions, target in (
        (lambda: RegressionAverage(y, 2.0, 3.0), samples, None),
        (ClassificationAverage, probs, labels),
    ):
        whole, first, second = make(), make(), make()
        for i, prediction in enumerate(predictions):
            whole.update(prediction)
            (first if i < split else second).update(prediction)
        merged = first.merge(second)
        assert merged.count == whole.count == 5
        torch.testing.assert_close(merged.predictive(), whole.predictive(), rtol=1e-12, atol=0)
        expected = whole.metrics(target) if target is not None else whole.metrics()
        got = merged.metrics(target) if target is not None else merged.metrics()
        assert got == pytest.approx(expected, rel=1e-12)


def test_function_moments_are_the_samples_mean_and_sd_of_f_in_original_units():
    average = RegressionAverage(torch.zeros(2), target_mean=10.0, target_std=2.0)
    for means in ([1.0, 0.0], [2.0, 0.5], [3.0, 1.0]):  # noise variances play no part
        average.update(torch.tensor([[means[0], 9.0], [means[1], 9.0]]))
    mean, std = average.function_moments()
    # point 0: f = 12, 14, 16 (mean 14, population sd sqrt(8/3)); point 1: f = 10, 11, 12
    torch.testing.assert_close(mean, torch.tensor([14.0, 11.0], dtype=torch.float64))
    expected = torch.tensor([math.sqrt(8 / 3), math.sqrt(2 / 3)], dtype=torch.float64)
    torch.testing.assert_close(std, expected)


def test_function_agreement_by_hand():
    reference = (torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0]))
    other = (torch.tensor([0.5, 0.0]), torch.tensor([1.2, 1.0]))
    result = function_agreement(reference, other)
    assert result["width_ratio"] == pytest.approx((1.2 + 0.5) / 2)
    assert (result["width_ratio_min"], result["width_ratio_max"]) == pytest.approx((0.5, 1.2))
    assert result["mean_offset"] == pytest.approx((0.5 / 1 + 1 / 2) / 2)


def test_mean_offset_noise_by_hand():
    reference = (torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0]))
    errors = (torch.tensor([0.3, 0.0]), torch.tensor([0.4, 0.2]))
    result = function_agreement(reference, reference, errors)
    # point 0: sqrt(0.09 + 0.16) / 1 = 0.5; point 1: 0.2 / 2 = 0.1
    assert result["mean_offset_noise"] == pytest.approx(math.sqrt(2 / math.pi) * 0.3)
    assert "mean_offset_noise" not in function_agreement(reference, reference)


def test_mean_offset_noise_is_the_offset_of_an_unbiased_estimate():
    """Means that differ from the reference's by Monte Carlo error alone, of the stated standard
    errors, are offset by mean_offset_noise, to the Monte Carlo error of its average over the
    points (sd of |Z| is sqrt(1 - 2/pi))."""
    generator = torch.Generator().manual_seed(0)
    points = 4000
    ref_mean = torch.randn(points, generator=generator, dtype=torch.float64)
    ref_std = torch.rand(points, generator=generator, dtype=torch.float64) + 0.5
    ref_error = 0.05 * ref_std
    error = torch.rand(points, generator=generator, dtype=torch.float64) * 0.2 * ref_std
    combined = (ref_error.square() + error.square()).sqrt()
    mean = ref_mean + combined * torch.randn(points, generator=generator, dtype=torch.float64)
    result = function_agreement((ref_mean, ref_std), (mean, ref_std), (ref_error, error))
    tolerance = 5 * math.sqrt(1 - 2 / math.pi) * (combined / ref_std).max().item() / points**0.5
    assert abs(result["mean_offset"] - result["mean_offset_noise"]) < tolerance


def _pairwise_auroc(inside: torch.Tensor, outside: torch.Tensor) -> float:
    """P(s_out > s_in) + P(s_out = s_in) / 2 over every pair, counted directly."""
    diff = outside[:, None] - inside[None, :]
    return ((diff > 0).double() + 0.5 * (diff == 0).double()).mean().item()


def _average_precision_by_thresholds(inside: torch.Tensor, outside: torch.Tensor) -> float:
    """Σ_t (R_t - R_{t-1}) P_t, each threshold t a distinct score, everything at or above it
    called out-of-distribution: precision and recall counted at each threshold."""
    total, previous_recall = 0.0, 0.0
    for t in sorted(set(torch.cat([inside, outside]).tolist()), reverse=True):
        tp, fp = (outside >= t).sum().item(), (inside >= t).sum().item()
        recall = tp / outside.numel()
        total += (recall - previous_recall) * tp / (tp + fp)
        previous_recall = recall
    return total


def test_auroc_and_aupr_by_hand():
    # out 3 > in 1, 2; out 2 ties in 2, beats in 1: (2 + 1.5) / 4
    inside, outside = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 2.0])
    assert auroc(inside, outside) == pytest.approx(3.5 / 4)
    # thresholds 3 (P 1, R 1/2), 2 (P 2/3, R 1): 1/2 + 1/2 * 2/3
    assert aupr(inside, outside) == pytest.approx(0.5 + 1 / 3)
    assert auroc(outside + 10, outside) == 0.0 and auroc(inside, inside + 10) == 1.0


def test_auroc_and_aupr_match_pairwise_counts_and_torchmetrics():
    """Ties (scores rounded to a grid) included, against direct counts and torchmetrics'
    binary AUROC and average precision (sklearn's definitions)."""
    from torchmetrics.functional.classification import (
        binary_auroc,
        binary_average_precision,
    )

    g = torch.Generator().manual_seed(0)
    inside = (torch.randn(300, generator=g, dtype=torch.float64) * 4).round() / 4
    outside = ((torch.randn(200, generator=g, dtype=torch.float64) + 0.7) * 4).round() / 4
    want = _pairwise_auroc(inside, outside)
    assert auroc(inside, outside) == pytest.approx(want, abs=1e-12)
    assert aupr(inside, outside) == pytest.approx(
        _average_precision_by_thresholds(inside, outside), abs=1e-12
    )
    scores = torch.cat([inside, outside])
    labels = torch.cat([torch.zeros(300), torch.ones(200)]).long()
    assert auroc(inside, outside) == pytest.approx(binary_auroc(scores, labels).item(), abs=1e-6)
    assert aupr(inside, outside) == pytest.approx(
        binary_average_precision(scores, labels).item(), abs=1e-6
    )


def test_mutual_information_is_total_less_expected_entropy_by_hand():
    """Two samples that disagree with certainty: the average is uniform over two classes (total
    entropy log 2), each sample certain (expected entropy 0), so all of it is epistemic; two
    samples that agree on (1/2, 1/2) carry log 2 of aleatoric entropy and none epistemic."""
    average = UncertaintyAverage()
    average.update(torch.tensor([[1.0, 0.0], [0.5, 0.5]]))
    average.update(torch.tensor([[0.0, 1.0], [0.5, 0.5]]))
    scores = average.scores()
    log2 = math.log(2)
    assert scores["entropy"].tolist() == pytest.approx([log2, log2])
    assert scores["mutual_information"].tolist() == pytest.approx([log2, 0.0])
    assert scores["max_probability"].tolist() == pytest.approx([0.5, 0.5])
    halves = [UncertaintyAverage(), UncertaintyAverage()]
    halves[0].update(torch.tensor([[1.0, 0.0], [0.5, 0.5]]))
    halves[1].update(torch.tensor([[0.0, 1.0], [0.5, 0.5]]))
    merged = halves[0].merge(halves[1]).scores()
    assert torch.equal(merged["mutual_information"], scores["mutual_information"])


def test_ood_detection_scores_every_uncertainty():
    inside, outside = UncertaintyAverage(), UncertaintyAverage()
    inside.update(torch.tensor([[0.9, 0.1], [0.8, 0.2]]))
    outside.update(torch.tensor([[0.5, 0.5], [0.6, 0.4]]))
    result = ood_detection(inside, outside)
    assert set(result) == {
        f"ood_{area}_{score}"
        for area in ("auroc", "aupr")
        for score in ("entropy", "mutual_information", "max_probability")
    }
    # every out-of-distribution point is less certain than every in-distribution one
    assert result["ood_auroc_entropy"] == 1.0 and result["ood_aupr_max_probability"] == 1.0
    # one sample: no epistemic uncertainty anywhere, every score tied
    assert result["ood_auroc_mutual_information"] == 0.5


def test_ece_and_brier_agree_with_torchmetrics_and_mse():
    """On random predictions (no confidence on a bin edge, where the right-closed bins of Guo et
    al.'s code and torchmetrics' left-closed ones part): the ECE is torchmetrics' l1
    calibration error over the same 15 bins, and the Brier score the summed squared error
    against the one-hot label that torch's mse_loss computes."""
    from torchmetrics.functional.classification import multiclass_calibration_error

    g = torch.Generator().manual_seed(1)
    probs = (torch.randn(2000, 10, generator=g, dtype=torch.float64) * 2).softmax(-1)
    y = torch.randint(0, 10, (2000,), generator=g)
    want = multiclass_calibration_error(probs, y, num_classes=10, n_bins=15, norm="l1")
    assert ece(probs, y) == pytest.approx(want.item(), abs=1e-6)
    one_hot = torch.nn.functional.one_hot(y, 10).double()
    mse = torch.nn.functional.mse_loss(probs, one_hot, reduction="sum") / 2000
    assert brier(probs, y) == pytest.approx(mse.item(), rel=1e-12)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: accuracy(PROBS[0], LABELS), "probs must have shape (n, classes), got (3,)"),
        (
            lambda: nll(PROBS, LABELS[:2]),
            "labels must have shape (3,) to match probs (3, 3), got (2,)",
        ),
        (lambda: ece(PROBS, LABELS, bins=0), "ece needs at least one bin, got 0"),
        (
            lambda: agreement(PROBS, PROBS[0]),
            "probs and reference must have shape (n, classes), got (3, 3) and (3,)",
        ),
        (
            lambda: total_variation(PROBS, PROBS[:2]),
            "reference has 2 test points but predictions have 3; were they computed on the same "
            "test set?",
        ),
        (
            lambda: agreement(PROBS, PROBS[:, :2]),
            "reference has 2 classes but predictions have 3",
        ),
        (lambda: rmse(torch.zeros(3), torch.zeros(4)), "rmse got 3 predictions for 4 targets"),
        (
            lambda: auroc(torch.zeros(2, 1), torch.zeros(2)),
            "scores must be two non-empty vectors (in-distribution, out-of-distribution), got "
            "shapes (2, 1) and (2,)",
        ),
        (
            lambda: aupr(torch.zeros(2), torch.zeros(0)),
            "scores must be two non-empty vectors (in-distribution, out-of-distribution), got "
            "shapes (2,) and (0,)",
        ),
        (
            lambda: ClassificationAverage().predictive(),
            "ClassificationAverage has no samples yet; call update() first",
        ),
        (
            lambda: UncertaintyAverage().scores(),
            "UncertaintyAverage has no samples yet; call update() first",
        ),
        (
            lambda: RegressionAverage(torch.zeros(3)).predictive(),
            "RegressionAverage has no samples yet; call update() first",
        ),
        (
            lambda: RegressionAverage(torch.zeros(3)).function_moments(),
            "RegressionAverage has no samples yet; call update() first",
        ),
        (
            lambda: RegressionAverage(torch.zeros(3)).metrics(),
            "RegressionAverage has no samples yet; call update() first",
        ),
        (
            lambda: RegressionAverage(torch.zeros(3), 0.0, 0.0),
            "target_std must be positive, got 0.0",
        ),
        (
            lambda: RegressionAverage(torch.zeros(3)).update(torch.zeros(3)),
            "prediction must have shape (3, 2) (mean, variance per test point), got (3,)",
        ),
    ],
)
def test_a_misuse_of_the_metrics_names_the_shapes_it_got(call, message):
    with pytest.raises(ValueError) as error:
        call()
    assert str(error.value) == message


def test_an_average_refuses_a_prediction_unlike_the_first():
    average = ClassificationAverage()
    with pytest.raises(ValueError) as error:
        average.update(PROBS[0])
    assert str(error.value) == "prediction must have shape (n, classes), got (3,)"
    average.update(PROBS)
    with pytest.raises(ValueError) as error:
        average.update(PROBS[:2])
    assert str(error.value) == "prediction shape (2, 3) differs from earlier samples' (3, 3)"
    regression = RegressionAverage(torch.zeros(2))
    regression.update(torch.tensor([[0.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(ValueError) as error:
        regression.metrics(torch.ones(2))
    assert str(error.value) == (
        "RegressionAverage.metrics got targets different from the standardised ones given to the "
        "constructor; the log-likelihood is accumulated against those"
    )
