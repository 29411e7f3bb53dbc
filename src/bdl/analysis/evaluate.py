"""``bdl-eval``: a saved posterior evaluated on a dataset, with the metrics of ``metrics.json``.

    bdl-eval RUN_DIR|SWEEP_DIR [dataset=NAME] [dataset.KEY=VALUE ...] [split=test|validation]
                               [shift.rotate=DEGREES] [shift.corrupt=NAME [shift.severity=1-5|all]]
                               [ood=NAME] [data=FILE] [device=cpu|cuda|auto] [out=DIR]
                               [overwrite=true] [--trust MODULE.NAME ...]

Without ``dataset=`` the run's own dataset is used, so ``bdl-eval RUN_DIR`` on the run's device
reproduces the test metrics of its ``metrics.json``. ``dataset=NAME`` is an option of the
``dataset`` config group of ``bdl-run``; ``split=validation`` takes the points the protocol holds
out of training (MNIST's last 10 000 training images); ``shift.rotate=30`` rotates the images by
30 degrees (rotated MNIST, Ovadia et al. 2019); ``shift.corrupt=gaussian_noise`` (or ``blur``,
``translate``, ``contrast``) corrupts them at ``shift.severity`` 1-5 (3 unless given; Hendrycks &
Dietterich 2019), and ``shift.severity=all`` at each of 1-5, printed as one table (a row per run
and severity: a sweep of samplers gives the metrics against severity per sampler).
``ood=fashion_mnist`` (or ``mnist``, ``noise``) adds the AUROC and AUPR of telling that set's test
inputs from the evaluation set by each uncertainty score
(`bdl.metrics.ood_detection`). ``data=FILE`` is a ``.safetensors`` file with
tensors ``x`` (inputs preprocessed as the run's dataset preprocesses them) and ``y`` (integer
labels, or regression targets in original units). The metrics and the model average are written
to ``OUT/metrics.json`` and ``OUT/predictive.safetensors``, ``OUT`` being
``RUN_DIR/eval/<dataset>-<split>[-rotate<deg>][-<corruption><severity>][-ood-<name>]`` unless
``out=`` says otherwise. ``out=`` is refused on a run's directory (the run's own included:
its ``metrics.json`` would be replaced), inside another run's or on a folder holding a run,
unless ``overwrite=true``.

``--trust mynet.MyNet`` reads a run of `bdl.run_model` whose network is a class or function of the
user's own: it is imported (from the installed packages and ``PYTHONPATH``) and admitted as a
target, as ``bdl.load_run(RUN_DIR, trust=[MyNet])`` admits it; naming it is the act of trust.

The options are overrides in Hydra's grammar, as ``bdl-run``'s are (quoting, types, ``+`` to add a
loader's argument the dataset's config does not set). Given a sweep's directory (or any directory
holding runs), every run in it is evaluated, each into its own ``eval/`` (``OUT/<job>`` with
``out=``), and the metrics are printed as one table, a row per run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from torch import Tensor

from bdl.analysis.posterior import CONFIG_FILE, Posterior, RunError
from bdl.analysis.sweeps import find_runs
from bdl.composition import plugins
from bdl.composition.config import constructor_error
from bdl.composition.network import load_data, resolve_device
from bdl.composition.overrides import check_group, config_keys
from bdl.data import DataError, Dataset
from bdl.data.ood import ood_inputs
from bdl.data.shift import SEVERITIES, corrupt, rotate
from bdl.errors import did_you_mean
from bdl.metrics import Detection
from bdl.storage.outputs import refuse_link_on_path, strict_json
from bdl.storage.store import StoreError, save_predictive

__all__ = ["evaluation_set", "main"]

KEYS = (
    "dataset",
    "split",
    "shift.rotate",
    "shift.corrupt",
    "shift.severity",
    "ood",
    "data",
    "device",
    "out",
    "overwrite",
)
DEFAULT_SEVERITY = 3
USER_ERRORS = (RunError, StoreError, DataError, ValueError, HydraException, OmegaConfBaseException)


def user_message(error: Exception) -> str:
    """One line for a user error: a loader's own message (which names the fix, e.g. where the data
    should be) rather than Hydra's wrapper around it."""
    error = constructor_error(error, USER_ERRORS)
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _dataset_config(name: str) -> DictConfig:
    """The ``dataset`` node of bdl-run's config with ``dataset=name`` chosen."""
    from hydra import compose, initialize_config_module

    check_group("dataset", name)
    with initialize_config_module(config_module="bdl.conf", version_base="1.3"):
        return compose(config_name="config", overrides=[f"dataset={name}"]).dataset


def _override_dataset(dataset: DictConfig, options: dict[str, Any]) -> DictConfig:
    """``dataset`` with the ``dataset.KEY`` options set, as Hydra sets an override: a key the
    config lacks is a mistake unless added with ``+``."""
    dataset = dataset.copy()
    OmegaConf.set_struct(dataset, True)
    for option, value in options.items():
        key = option.lstrip("+").partition(".")[2]
        try:
            OmegaConf.update(dataset, key, value, merge=True, force_add=option.startswith("+"))
        except (ConfigAttributeError, ConfigKeyError):
            keys = [f"dataset.{k}" for k in config_keys(dataset)]
            hint = did_you_mean(f"dataset.{key}", keys, str(value)) or (
                f": add it with +dataset.{key}={value}"
            )
            raise ValueError(f"dataset.{key} is not a key of the run's dataset{hint}") from None
    return dataset


def _read_file(path: Path) -> tuple[Tensor, Tensor]:
    try:
        tensors = st_load(path.read_bytes())
    except (OSError, SafetensorError, ValueError, RuntimeError) as e:
        raise DataError(f"data={path} cannot be read as safetensors ({e})") from None
    if not {"x", "y"} <= tensors.keys():
        raise DataError(
            f"data={path} holds the tensors {sorted(tensors)}; it needs 'x' (inputs) and 'y' "
            "(labels or targets)"
        )
    return tensors["x"], tensors["y"]


def evaluation_set(
    posterior: Posterior, options: dict[str, str]
) -> tuple[str, str, Tensor, Tensor]:
    """``(label, task, x, y)`` of the evaluation set that ``options`` describe, checked against
    the run: regression targets come back in the standardised units of the run's dataset."""
    run_data = posterior.data
    if "data" in options:
        path = Path(options["data"])
        x, y = _read_file(path)
        x, label = x.to(run_data.x_test.dtype), path.stem
        task = "regression" if y.is_floating_point() else "classification"
        if task == "regression":
            y = (y.double() - run_data.target_mean) / run_data.target_std
        elif (  # a regression run given labels is refused below, for its task
            run_data.task == "classification"
            and y.numel()
            and not 0 <= int(y.min()) <= int(y.max()) < run_data.out_features
        ):
            raise DataError(
                f"data={path} has labels in [{int(y.min())}, {int(y.max())}], but the run "
                f"classifies into {run_data.out_features} classes"
            )
    else:
        changes = {k: v for k, v in options.items() if k.lstrip("+").startswith("dataset.")}
        if "dataset" in options or changes:
            dataset = (
                _dataset_config(options["dataset"])
                if "dataset" in options
                else posterior.config.dataset.copy()
            )
            data: Dataset = load_data(
                OmegaConf.create({"dataset": _override_dataset(dataset, changes)})
            )
        else:  # the run's own, loaded once however many shifts of it are evaluated
            data = run_data
        split = options.get("split", "test")
        if split == "test":
            x, y = data.x_test, data.y_test
        elif split == "validation":
            if data.x_validation is None:
                raise DataError(
                    f"{data.name} has no validation split here (MNIST holds out "
                    "dataset.validation training images; it is 0 or the dataset has none)"
                )
            x, y = data.x_validation, data.y_validation
        else:
            raise ValueError(f"split={split} is unknown: use split=test or split=validation")
        label, task = f"{data.name}-{split}", data.task
        if task != run_data.task or data.out_features != run_data.out_features:
            raise DataError(
                f"{posterior.directory} was trained for {_describe(run_data)} on "
                f"{run_data.name}, but {data.name} is {_describe(data)}: evaluate it on a dataset "
                "of the same task"
            )
        if task == "regression" and (data.target_mean, data.target_std) != (
            run_data.target_mean,
            run_data.target_std,
        ):
            original = y.double() * data.target_std + data.target_mean
            y = (original - run_data.target_mean) / run_data.target_std
    if task != run_data.task:
        raise DataError(
            f"{posterior.directory} was trained for {_describe(run_data)}, but the targets of "
            f"{label} are {'real numbers' if task == 'regression' else 'integer labels'}"
        )
    if tuple(x.shape[1:]) != run_data.input_shape:
        raise DataError(
            f"{posterior.directory} holds a network for inputs of shape {run_data.input_shape} "
            f"({run_data.name}), but {label} has inputs of shape {tuple(x.shape[1:])}: evaluate "
            "it on data of the same shape"
        )
    if "shift.rotate" in options:
        degrees = float(options["shift.rotate"])
        x = rotate(x, degrees)
        label += f"-rotate{degrees:g}"
    if "shift.corrupt" in options:
        name, severity = options["shift.corrupt"], options.get("shift.severity", DEFAULT_SEVERITY)
        try:
            severity = int(severity)
        except ValueError:
            raise ValueError(
                f"shift.severity={severity} is not a severity: choose 1, 2, 3, 4 or 5"
            ) from None
        x = corrupt(x, name, severity)
        label += f"-{name}{severity}"
    elif "shift.severity" in options:
        raise ValueError("shift.severity grades a corruption: give shift.corrupt=NAME with it")
    return label, task, x, y


def _describe(data: Dataset) -> str:
    if data.task == "classification":
        return f"classification into {data.out_features} classes"
    return "regression"


def _trusted(names: list[str]) -> list[Any]:
    """The objects ``--trust`` names (``module.Name``), imported."""
    found = []
    for name in names:
        module, _, attribute = name.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module), attribute) if module else None
        except ImportError as error:
            raise ValueError(
                f"--trust {name}: {error}; put the folder of its module on PYTHONPATH "
                f"(PYTHONPATH=FOLDER bdl-eval ... --trust {name})"
            ) from None
        if obj is None:
            raise ValueError(f"--trust {name}: give the class or function as module.Name")
        found.append(obj)
    return found


def _parse(argv: list[str] | None) -> tuple[Path, dict[str, Any], list[str]]:
    parser = argparse.ArgumentParser(
        prog="bdl-eval",
        description="Evaluate a saved posterior (a bdl-run directory), or every run of a sweep, "
        "on a dataset.",
        epilog="Options, in Hydra's override grammar: dataset=NAME, dataset.KEY=VALUE, "
        "split=test|validation, shift.rotate=DEGREES, shift.corrupt=gaussian_noise|blur|"
        "translate|contrast, shift.severity=1-5|all, ood=fashion_mnist|mnist|noise, "
        "data=FILE.safetensors (tensors x, y), "
        "device=cpu|cuda|auto, out=DIR, overwrite=true (out= in or over a run's directory).",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by bdl-run")
    parser.add_argument("options", nargs="*", metavar="KEY=VALUE")
    parser.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="MODULE.NAME",
        help="a network of your own that a bdl.run_model run records, imported and admitted",
    )
    args = parser.parse_args(argv)
    options: dict[str, Any] = {}
    for override in OverridesParser.create().parse_overrides(args.options):
        key, value = override.key_or_group, override.value()
        dataset_key = key.startswith("dataset.")
        if override.is_sweep_override() or override.is_delete() or value is None:
            raise ValueError(f"{override.input_line!r}: give each option one value (KEY=VALUE)")
        if not (key in KEYS and not override.is_add() or dataset_key):
            shown = override.input_line.partition("=")[2]
            hint = did_you_mean(key, KEYS, shown) or f": use KEY=VALUE with KEY in {KEYS}"
            raise ValueError(f"{override.input_line} is not an option of bdl-eval{hint}")
        options[f"+{key}" if override.is_add() else key] = value if dataset_key else str(value)
    if "data" in options and any(
        k.lstrip("+").startswith("dataset") or k == "split" for k in options
    ):
        raise ValueError("data=FILE replaces dataset= and split=: give one or the other")
    return Path(args.run_dir), options, args.trust


def evaluate(
    run_dir: Path, options: dict[str, str], posterior: Posterior | None = None
) -> tuple[dict[str, Any], Path]:
    """The metrics of the run's posterior on the evaluation set of ``options``, written to disk;
    returns them and the output directory. ``posterior``: the run's, already read, whose data
    many evaluations then share."""
    posterior = Posterior(run_dir) if posterior is None else posterior
    label, task, x, y = evaluation_set(posterior, options)
    device = resolve_device(options.get("device", posterior.config.device.value))
    detection: dict[str, Any] = {}
    if "ood" in options:
        if task != "classification":
            raise DataError(
                f"ood={options['ood']}: out-of-distribution detection needs a classifier"
            )
        x_ood = ood_inputs(options["ood"], posterior.data, posterior.config.dataset)
        scores = Detection.of(p for _, p in posterior.predictions_on([x, x_ood], device))
        average = scores.inside
        detection = {"ood": options["ood"], **scores.metrics()}
        label += f"-ood-{options['ood']}"
    else:
        average = posterior.average(x, y, device=device)
    metrics: dict[str, Any] = {**average.metrics(y.cpu()), "num_samples": average.count}
    metrics.update(detection)
    metrics["evaluated_on"] = label
    metrics |= posterior.verdict  # the chains' verdict, whatever set they are evaluated on
    out = Path(options["out"]) if "out" in options else run_dir / "eval" / label
    overwrite = str(options.get("overwrite", "false")).lower()
    if overwrite not in ("true", "false"):
        raise ValueError(f"overwrite={options['overwrite']} must be true or false")
    if "out" in options:
        _check_out(out, run_dir, overwrite == "true")
    if _inside(out, run_dir):  # the run's own folders, never written through a link
        refuse_link_on_path(run_dir, out / "metrics.json")
    out.mkdir(parents=True, exist_ok=True)
    targets = y if task == "classification" else average.y
    save_predictive(out / "predictive.safetensors", average.predictive(), targets=targets)
    (out / "metrics.json").write_text(json.dumps(strict_json(metrics), indent=2) + "\n")
    return metrics, out


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or below it, as written: a link on the way is refused by
    `refuse_link_on_path`, not followed."""
    path, folder = (Path(os.path.normpath(p.absolute())) for p in (path, folder))
    return path == folder or folder in path.parents


def _check_out(out: Path, run_dir: Path, overwrite: bool) -> None:
    """``out=DIR`` is a folder below the run's own directory, or a folder that is no run's:
    neither a run directory nor inside one (whose ``metrics.json`` it would replace) nor holding
    one, unless ``overwrite=true``."""
    if overwrite or (_inside(out, run_dir) and not _inside(run_dir, out)):
        return
    target = out.resolve()
    held = next((f for f in (target, *target.parents) if (f / CONFIG_FILE).is_file()), None)
    if held is None and target.is_dir():
        held = next(iter(find_runs([target])), None)
    if held is not None:
        where = "holds the run" if target in held.parents else "is in the run directory"
        raise ValueError(
            f"out={out} {where} {held}: bdl-eval writes metrics.json and predictive.safetensors "
            "there, replacing the run's own; choose a folder of its own (or the run's eval/), or "
            "add overwrite=true"
        )


def evaluate_sweep(
    sweep: Path, runs: list[Path], options: dict[str, Any]
) -> tuple[pd.DataFrame, list[str]]:
    """The ``runs`` found below ``sweep`` evaluated as `evaluate` does, each written into
    its own ``eval/`` (``out=DIR``: ``DIR/<the run's path in the sweep>``): their metrics, a row
    per run, and the runs that could not be evaluated, each with why."""
    rows, failures = [], []
    for run_dir in runs:
        name = run_dir.relative_to(sweep.resolve()).as_posix()
        job = {**options, "out": str(Path(options["out"]) / name)} if "out" in options else options
        try:
            metrics, _ = evaluate(run_dir, job)
        except USER_ERRORS as e:
            failures.append(f"{name}: {user_message(e)}")
            continue
        rows.append({"run": name, **metrics})
    return pd.DataFrame(rows), failures


def severity_table(
    run_dir: Path, runs: list[Path], options: dict[str, Any]
) -> tuple[pd.DataFrame, list[str]]:
    """``shift.severity=all``: the run (or each of the sweep's ``runs``) evaluated under
    ``shift.corrupt`` at every severity, 1 to 5, each written where `evaluate` writes it;
    the metrics as one table, a row per run and severity, and the evaluations that failed."""
    if "shift.corrupt" not in options:
        raise ValueError("shift.severity=all grades a corruption: give shift.corrupt=NAME with it")
    frames, failures = [], []
    for severity in SEVERITIES:
        job = {**options, "shift.severity": str(severity)}
        if "out" in options:
            job["out"] = str(Path(options["out"]) / f"severity{severity}")
        if runs:
            table, failed = evaluate_sweep(run_dir, runs, job)
            failures += failed
        else:
            table = pd.DataFrame([{"run": run_dir.name, **evaluate(run_dir, job)[0]}])
        frames.append(table.assign(severity=severity) if not table.empty else table)
    table = pd.concat(frames, ignore_index=True)
    if not table.empty:
        first = ["run", "severity"]
        table = table[first + [c for c in table.columns if c not in first]]
    return table.sort_values(first, kind="stable") if not table.empty else table, failures


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``bdl-eval``; user errors end in one line and exit status 2."""
    try:
        run_dir, options, trust = _parse(argv)
        with plugins.trusted(*_trusted(trust)):
            return _main(run_dir, options)
    except SystemExit as e:  # --help, or a usage error argparse already reported
        return e.code if isinstance(e.code, int) else 2
    except USER_ERRORS as e:
        print(f"bdl-eval: error: {user_message(e)}", file=sys.stderr)
        return 2


def _main(run_dir: Path, options: dict[str, Any]) -> int:
    """`main` for the run (or the sweep) ``run_dir``: the table or the metrics printed."""
    runs = [] if (run_dir / CONFIG_FILE).is_file() else find_runs([run_dir])
    if options.get("shift.severity") == "all":
        table, failures = severity_table(run_dir, runs, options)
        print(table.to_markdown(index=False, floatfmt=".4g"))
        for failure in failures:
            print(f"bdl-eval: error: {failure}", file=sys.stderr)
        return 2 if failures else 0
    if runs:
        table, failures = evaluate_sweep(run_dir, runs, options)
        if not table.empty:
            print(table.to_markdown(index=False, floatfmt=".4g"))
        for failure in failures:
            print(f"bdl-eval: error: {failure}", file=sys.stderr)
        return 2 if failures else 0
    metrics, out = evaluate(run_dir, options)
    print(json.dumps(metrics, indent=2))
    print(f"bdl-eval: wrote {out / 'metrics.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
