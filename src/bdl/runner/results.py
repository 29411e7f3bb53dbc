"""The end of a run: its metrics, the verdict on them, and the tables and figures beside.

`write_metrics` writes ``metrics.json`` (with ``predictive.safetensors``, ``chains.csv``,
``diagnostics.csv`` and ``summary.csv``) for a run that completed, diverged or failed: the pooled
model average's test and validation metrics, agreement and total variation against a reference,
the work done, divergent transitions, R-hat and ESS over the chains, and for a completed run its
verdicts (`judge`, and `judge_convergence` for a sampler's chains).
`write_pruning` adds the pruning curve of ``pruning=true``.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import numpy as np
import torch

from bdl import diagnostics, summary
from bdl.analysis import pruning
from bdl.composition.network import named_parameters, predict_samples
from bdl.metrics import Detection, agreement, pool, total_variation
from bdl.runner.experiment import Experiment
from bdl.runner.loop import Loop
from bdl.storage import outputs
from bdl.storage.outputs import RunDirectory
from bdl.storage.store import load_samples

log = logging.getLogger("bdl")


def write_metrics(
    status: str,
    experiment: Experiment,
    loops: list[Loop],
    directory: RunDirectory,
    wall_time_s: float,
    **extra: Any,
) -> dict[str, Any]:
    """``metrics.json`` of the run whose chains are ``loops`` (``experiment``: the first chain's,
    for what they share), ended with ``status``; returns what it holds."""
    exp = experiment
    average = pool([loop.average for loop in loops])
    metrics: dict[str, Any] = {"status": status, **extra}
    if average.count:
        metrics.update(average.metrics(exp.run.task.y_test))
        predictive = average.predictive()
        if exp.run.reference is not None:
            metrics["agreement"] = agreement(predictive, exp.run.reference)
            metrics["total_variation"] = total_variation(predictive, exp.run.reference)
        directory.write_predictive(predictive, exp.run.task.targets())
    if exp.run.validation is not None and average.count:
        validation = pool([loop.validation for loop in loops])
        for key, value in validation.metrics(exp.run.validation.y_test).items():
            metrics[key.replace("test_", "val_", 1)] = value
    metrics.update(
        num_samples=average.count,
        epochs=exp.run.epochs,
        grad_evals=sum(loop.sampler.grad_evals for loop in loops),
        wall_time_s=round(wall_time_s, 3),
    )
    rates = [rate for loop in loops for rate in loop.accept_rates]
    if rates:
        metrics["accept_rate"] = sum(rates) / len(rates)
    if exp.run.backs_off:
        metrics["step_scale"] = loops[0].step_scale
        late = sum(loop.late_backoffs for loop in loops)
        if late:  # only where there were: the key marks a run whose draws mix step sizes
            metrics["backoffs_after_burn_in"] = late
    if exp.sampler.declaration.injects_noise:
        metrics["rise_max"] = max(loop.rise_max for loop in loops)
    if len(loops) > 1:
        metrics["chains"] = len(loops)
        _write_chain_table(exp, loops, directory)
    metrics.update(divergences(exp, loops))
    found, table = _diagnostics(loops, directory)
    metrics.update(found)
    if status == "completed" and average.count:
        metrics.update(ood_metrics(exp, loops, directory))
        judge(metrics, exp, len(loops))
        refuse_tie(metrics, exp, predictive)
        if exp.sampler.declaration.injects_noise:
            judge_convergence(metrics, exp, loops, table, directory)
    directory.write_metrics(metrics)
    return metrics


def ood_metrics(
    experiment: Experiment, loops: list[Loop], directory: RunDirectory
) -> dict[str, Any]:
    """The out-of-distribution detection metrics of the run's samples (`bdl.metrics.Detection`:
    the test set against ``ood=``'s), pooled over the chains as the model average is; nothing
    without ``ood=`` or samples. Each chain accumulated them as it kept its samples; one resumed
    from the checkpoint of a bdl that did not has its stored samples scored now."""
    exp = experiment
    if exp.run.x_ood is None or not any(loop.average.count for loop in loops):
        return {}
    detections = [loop.detection for loop in loops]
    if any(
        d is None or d.count != loop.average.count
        for d, loop in zip(detections, loops, strict=True)
    ):
        kept = sum(loop.average.count for loop in loops)
        log.info("out-of-distribution scores of the %d stored samples (%s)...", kept, exp.run.ood)
        detections = _stored_detections(exp, directory, len(loops))
    detection = functools.reduce(Detection.merge, detections, Detection())
    if not detection.count:
        return {}
    return {"ood": exp.run.ood, **detection.metrics()}


def _stored_detections(
    experiment: Experiment, directory: RunDirectory, chains: int
) -> list[Detection]:
    """Each chain's `Detection` of its stored samples, the network holding each in turn."""
    exp = experiment
    stores = [folder for folder in directory.store_folders(chains) if folder.is_dir()]
    model, likelihood = exp.potential.model, exp.potential.likelihood
    detections = []
    inputs = [exp.run.x_test, exp.run.x_ood]
    for store in stores:
        samples = (params for params, _ in load_samples(store))
        detections.append(Detection.of(predict_samples(model, likelihood, samples, inputs)))
    return detections


def judge(metrics: dict[str, Any], experiment: Experiment, chains: int) -> None:
    """Set ``metrics``' verdict: ``unsound`` (with the ``error``) where the trivial predictor
    does better on held-out data; ``warnings`` for what is a judgement, not a certainty."""
    task = experiment.run.task
    trivial = metrics["trivial"] = task.trivial_metrics()
    worse = task.worse_than(metrics, trivial, (task.headline,))
    if worse:
        metrics["status"] = "unsound"
        metrics["error"] = (
            f"the posterior predicts worse than ignoring the inputs: {worse[0]} (the trivial "
            "predictor's in brackets). Try another sampler, a smaller sampler.lr or more "
            "epochs"
        )
    metrics["warnings"] = density_warnings(metrics, task, points_beat=not worse)


def density_warnings(metrics: dict[str, Any], task: Any, points_beat: bool) -> list[str]:
    """The warning of a predictive density worse than the trivial predictor's, saying whether
    the point predictions beat it (an overconfident fit) or not (the run's error says so)."""
    clause = (
        "its point predictions beat it, its spread does not (an overconfident fit)"
        if points_beat
        else "its point predictions do not beat it either (the run's error above)"
    )
    return [
        f"the predictive density is worse than ignoring the inputs: {density} (the trivial "
        f"predictor's in brackets); {clause}"
        for density in task.worse_than(metrics, metrics["trivial"], (task.calibration,))
    ]


def judge_convergence(
    metrics: dict[str, Any],
    experiment: Experiment,
    loops: list[Loop],
    table: dict[str, np.ndarray],
    directory: RunDirectory,
) -> None:
    """Set ``metrics``' ``converged`` (true or false), the ``reasons`` it is false and the
    ``notes`` that inform without judging (`bdl.diagnostics.verdict`), from the draws of
    the test predictive (``table``: its per-point R-hat and ESS), of the potential and of the
    sampled hyperparameters, whose ``az.summary``-like table it writes (``summary.csv``)."""
    draws = min(len(loop.log_likelihoods) for loop in loops)
    scalars = _scalar_draws(experiment, loops, draws)
    measured = diagnostics.scalar_diagnostics(scalars) if draws >= diagnostics.MIN_DRAWS else {}
    reasons, notes = _verdict(metrics, experiment, loops, scalars, measured)
    if metrics.get("backoffs_after_burn_in"):
        notes.append(late_backoffs_note(metrics, experiment.run.lr))
    metrics.update({f"potential_{k}": v for k, v in measured.get("potential", {}).items()})
    metrics.update(converged=not reasons, reasons=reasons, notes=notes)
    if draws >= diagnostics.MIN_DRAWS:
        _write_summary(scalars, measured, loops, table, directory)


def late_backoffs_note(metrics: dict[str, Any], lr: float) -> str:
    """The note of a run that backed off after burn-in (`bdl.runner.stability`): its draws come
    from more than one step, and the one that held keeps a single one."""
    count, scale = metrics["backoffs_after_burn_in"], metrics["step_scale"]
    return (
        f"{count} back-off{'s' * (count > 1)} after burn-in: the draws mix step sizes "
        f"(sampler.lr={lr * scale:.3g} starts at the last)"
    )


def _verdict(
    metrics: dict[str, Any],
    experiment: Experiment,
    loops: list[Loop],
    scalars: dict[str, np.ndarray],
    measured: dict[str, dict],
) -> tuple[list[str], list[str]]:
    draws = min(len(loop.log_likelihoods) for loop in loops)
    advice = settings(experiment, loops[0])
    potential = scalars.get("potential")
    return diagnostics.verdict(metrics, measured, len(loops), draws, advice, potential)


def current_verdict(experiment: Experiment, loops: list[Loop]) -> list[str]:
    """The verdict's reasons (`judge_convergence`'s) on the chains as they stand, writing
    nothing: what a run until converged checks before it samples on."""
    draws = min(len(loop.log_likelihoods) for loop in loops)
    metrics = divergences(experiment, loops)
    scalars = _scalar_draws(experiment, loops, draws)
    measured = {}
    if draws >= diagnostics.MIN_DRAWS:
        metrics |= diagnostics.summarise(*_draws(loops, draws))[0]
        measured = diagnostics.scalar_diagnostics(scalars)
    return _verdict(metrics, experiment, loops, scalars, measured)[0]


def _scalar_draws(experiment: Experiment, loops: list[Loop], draws: int) -> dict[str, np.ndarray]:
    """``(chains, draws)`` of the potential (each kept epoch's mean ``U``, the curve's) and of
    each hyperparameter at the epochs that kept a sample, as far as the curve has them."""
    names = ["potential", *experiment.potential.hyperparameters()]
    kept = [_kept_rows(experiment, loop.curve) for loop in loops]
    length = min(draws, *map(len, kept))
    return {
        name: np.array(
            [[np.nan if r[name] is None else r[name] for r in rows[:length]] for rows in kept]
        )
        for name in names
    }


def _kept_rows(experiment: Experiment, curve: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of a chain's ``curve`` whose draws it keeps: those the schedule collects at that
    added one, less those whose draws a back-off after burn-in dropped (its row's count is back
    below theirs; `bdl.runner.stability`)."""
    rows, count = [], 0
    for row in curve:
        while rows and rows[-1]["num_samples"] > row["num_samples"]:
            rows.pop()
        if experiment.collects(row["epoch"] - 1) and row["num_samples"] > count:
            rows.append(row)
        count = row["num_samples"]
    return rows


def settings(experiment: Experiment, loop: Loop) -> diagnostics.Settings:
    """What the verdict's advice changes (`bdl.diagnostics.Settings`): the run's schedule, the
    config's ``sampler.lr``, the kernel's acceptance target where it adapts to one, and
    whether ``until_converged`` can extend the run (a constant step size's schedule)."""
    run, kernel = experiment.run, loop.sampler
    return diagnostics.Settings(
        epochs=run.epochs,
        burn_in=run.burn_in,
        thin=run.thin,
        lr=run.lr,
        target_accept=getattr(kernel, "target_accept", None)
        if getattr(kernel, "adapt", 0)
        else None,
        extendable=run.schedule.extendable(),
    )


def _write_summary(
    scalars: dict[str, np.ndarray],
    measured: dict[str, dict],
    loops: list[Loop],
    table: dict[str, np.ndarray],
    directory: RunDirectory,
) -> None:
    """``summary.csv``: `bdl.summary.summary_rows` of the scalars and of each test point's
    log predictive density, ``log_lik[i]``, with the R-hat and ESS of ``table``."""
    draws = min(len(loop.log_likelihoods) for loop in loops)
    pointwise = np.stack(
        [torch.stack(loop.log_likelihoods[:draws]).double().numpy() for loop in loops]
    )
    rows = []
    if scalars:
        names = list(scalars)
        rated = {
            key: np.array([measured.get(name, {}).get(key) for name in names], dtype=np.float64)
            for key in summary.RATINGS
        }
        rows += summary.summary_rows(names, np.stack(list(scalars.values()), axis=-1), rated)
    points = [f"log_lik[{i}]" for i in range(pointwise.shape[-1])]
    rows += summary.summary_rows(points, pointwise, table)
    fields = list(dict.fromkeys(key for row in rows for key in row))
    directory.write_table(diagnostics.SUMMARY_FILE, fields, rows)


def divergences(experiment: Experiment, loops: list[Loop]) -> dict[str, Any]:
    """The divergent transitions after burn-in (`bdl.samplers.metropolis`): their count
    over all chains, their fraction of the Metropolis tests, and each chain's list of the
    (1-based) epochs that had any; nothing for a kernel without a Metropolis test."""
    tests = sum(loop.sampling_tests for loop in loops)
    if not tests:
        return {}
    rows = [
        [r for r in loop.curve if r["epoch"] > experiment.run.burn_in and r.get("divergences")]
        for loop in loops
    ]
    count = sum(r["divergences"] for chain in rows for r in chain)
    return {
        "divergences": count,
        "divergence_fraction": count / tests,
        "divergent_epochs": [[r["epoch"] for r in chain] for chain in rows],
    }


#: Standard errors by which the headline metric must beat the trivial predictor's for a run to
#: be sound: a difference within one is what test points drawn again could take back.
TIE_MARGIN = 1.0


def headline_gain(experiment: Experiment, predictive: torch.Tensor) -> tuple[float, float]:
    """How much the model average's ``predictive`` beats the trivial predictor on the headline
    metric, and the standard error of that over the test points: the mean and standard error
    of the paired per-point gain, in accuracy (1 where only the model is right, -1 where only
    the trivial predictor is) or in squared error (the trivial predictor's minus the model's,
    original units), so that RMSE's order is kept."""
    task = experiment.run.task
    data = task.data
    y = task.y_test.cpu()
    if task.classification:
        counts = torch.bincount(data.y_train.long().cpu(), minlength=data.out_features)
        model = predictive.cpu().argmax(-1) == y
        gain = model.double() - (y == counts.argmax()).double()
    else:
        targets = task.targets().cpu().double()
        trivial = float(data.y_train.double().mean()) * data.target_std + data.target_mean
        gain = (targets - trivial) ** 2 - (targets - predictive[:, 0].cpu().double()) ** 2
    error = float(gain.std() / len(gain) ** 0.5) if len(gain) > 1 else float("inf")
    return float(gain.mean()), error


def refuse_tie(metrics: dict[str, Any], experiment: Experiment, predictive: torch.Tensor) -> None:
    """A run judged completed whose headline metric does not beat the trivial predictor's by
    more than `TIE_MARGIN` standard errors (`headline_gain`) is ``unsound``: a
    blown-up chain predicting the majority class everywhere ties it exactly."""
    if metrics.get("status") != "completed":
        return
    gain, error = headline_gain(experiment, predictive)
    if gain > TIE_MARGIN * error:
        return
    key = experiment.run.task.headline
    unit = "accuracy" if experiment.run.task.classification else "squared error"
    metrics["status"] = "unsound"
    metrics["warnings"] = density_warnings(metrics, experiment.run.task, points_beat=False)
    metrics["error"] = (
        f"the posterior predicts no better than ignoring the inputs: {key} "
        f"{metrics[key]:.4g} against the trivial predictor's {metrics['trivial'][key]:.4g}, a gain "
        f"in {unit} of {gain:.3g} ± {error:.3g} per test point, within {TIE_MARGIN:g} standard "
        "errors. Try another sampler, a smaller sampler.lr or more epochs"
    )


def _write_chain_table(experiment: Experiment, loops: list[Loop], directory: RunDirectory) -> None:
    """``chains.csv``: each chain's own model average, work and accept rate."""
    rows = []
    for chain, loop in enumerate(loops):
        row: dict[str, Any] = {"chain": chain, "num_samples": loop.average.count}
        if loop.average.count:
            row.update(loop.average.metrics(experiment.run.task.y_test))
        row["grad_evals"] = loop.sampler.grad_evals
        if loop.accept_rates:
            row["accept_rate"] = sum(loop.accept_rates) / len(loop.accept_rates)
        rows.append(row)
    fields = list(dict.fromkeys(key for row in rows for key in row))
    directory.write_table(outputs.CHAINS, fields, rows)


def _diagnostics(
    loops: list[Loop], directory: RunDirectory
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """R-hat and ESS over the chains' first draws (as many as the shortest chain has), in
    function space per test point (``diagnostics.csv``, the table returned) and on the weight
    probes."""
    draws = min(len(loop.log_likelihoods) for loop in loops)
    if draws < diagnostics.MIN_DRAWS:
        return {}, {}
    metrics, table = diagnostics.summarise(*_draws(loops, draws))
    rows = [dict(zip(table, values, strict=True)) for values in zip(*table.values(), strict=True)]
    directory.write_table(diagnostics.FILE, list(table), rows)
    return metrics, table


def _draws(loops: list[Loop], draws: int) -> tuple[np.ndarray, np.ndarray]:
    """The chains' first ``draws`` log densities of the test points and weight probes,
    ``(chains, draws, points)`` and ``(chains, draws, probes)``."""
    pointwise = np.stack([torch.stack(loop.log_likelihoods[:draws]).numpy() for loop in loops])
    probes = np.stack([torch.stack(loop.probes[:draws]).numpy() for loop in loops])
    return pointwise, probes


def write_pruning(experiment: Experiment, loop: Loop, directory: RunDirectory) -> None:
    """``pruning.csv`` and ``pruning.png``: the model average's test metric as the weights
    with the lowest signal-to-noise ratio are removed (`bdl.analysis.pruning`); one chain's.
    ``signal_to_noise.{csv,png}``: the distribution of σ and of the ratio it ranked by."""
    exp = experiment
    log.info(
        "pruning curve: the model average of at most %d samples at %d fractions...",
        exp.run.pruning_samples,
        len(pruning.FRACTIONS),
    )
    live = named_parameters(exp.potential.model, exp.potential.likelihood)
    moments = exp.sampler.posterior_moments(loop.sampler)
    if moments is not None:
        moments = tuple(dict(zip(live, m, strict=True)) for m in moments)
    rows, mean, std = pruning.curve_from_store(
        directory.path / "samples",
        exp.potential.model,
        exp.potential.likelihood,
        list(exp.potential.model_params),
        moments,
        exp.run.x_test,
        exp.run.task.pruning_score,
        exp.run.pruning_samples,
    )
    path = pruning.write_curve(directory.path, rows, exp.run.task.pruning_metric)
    pruning.write_signal_to_noise(directory.path, mean, std)
    log.info(
        "pruning curve in %s: %s",
        path,
        ", ".join(f"{r['fraction_removed']:.0%} {r['score']:.4f}" for r in rows),
    )
