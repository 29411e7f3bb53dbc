"""``bdl.run_model``: a network and data of the caller's own, run by bdl's runner into a run
directory that ``bdl-eval``, ``bdl-report`` and ``load_run`` read like any other, and that
resumes bit for bit after a kill."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import arviz
import numpy as np
import pytest
import torch
from conftest import gaussian_mixture_of_samples
from torch import nn

import bdl
from bdl.analysis.evaluate import main as bdl_eval
from bdl.analysis.report import main as bdl_report
from bdl.errors import ConfigError
from bdl.runner import checkpoint
from bdl.runner.steppers import StackedStepper
from runner.test_resume import Kill, outputs


class Wave(nn.Module):
    """A network of the caller's own: bdl passes the data's shapes, the caller its width."""

    def __init__(self, input_shape, out_features, width=8):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(math.prod(input_shape), width), nn.Tanh(), nn.Linear(width, out_features)
        )

    def forward(self, x):
        return self.layers(x)


def sine(points: int = 80, seed: int = 0):
    """y = sin(x) + N(0, 0.1^2) on [-3, 3]: (train, test) as (x, y) pairs, 3 to 1."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(points, 1, generator=generator) * 6 - 3
    y = torch.sin(x[:, 0]) + 0.1 * torch.randn(points, generator=generator)
    cut = points * 3 // 4
    return (x[:cut], y[:cut]), (x[cut:], y[cut:])


SHORT = dict(epochs=6, burn_in=2, thin=1, overrides=["batch_size=12", "checkpoint_every=1"])


def test_a_killed_run_model_resumes_bitwise(tmp_path, monkeypatch):
    train, test = sine()
    args = dict(model_args={"width": 8}, chains=2, **SHORT)
    bdl.run_model(Wave, train, test, directory=tmp_path / "whole", **args)
    real_step, calls = StackedStepper.closure, {"n": 0}

    def dying(self, *a):
        calls["n"] += 1
        if calls["n"] == 13:  # mid-epoch 3 of the two chains stepped as one
            raise Kill
        return real_step(self, *a)

    monkeypatch.setattr(StackedStepper, "closure", dying)
    with pytest.raises(Kill):
        bdl.run_model(Wave, train, test, directory=tmp_path / "killed", **args)
    monkeypatch.undo()
    posterior = bdl.run_model(Wave, train, test, directory=tmp_path / "killed", resume=True, **args)
    assert outputs(tmp_path / "killed") == outputs(tmp_path / "whole")
    assert posterior.num_chains == 2 and len(posterior) == 2 * 4
    assert posterior.metrics["status"] == "completed"
    recorded = recorded_log_likelihoods(tmp_path / "killed")
    torch.testing.assert_close(recorded, log_likelihoods(posterior), rtol=0, atol=1e-5)
    assert posterior.metrics["rhat_max"] == pytest.approx(rhat_max(recorded), rel=1e-9)


def recorded_log_likelihoods(directory) -> np.ndarray:
    """The run's own record of each draw's test log-densities, ``(chains, draws, points)``, as
    its checkpoint holds them (float32, original units), in float64."""
    tensors, _ = checkpoint.load(directory / "checkpoint.safetensors")
    chains = sorted(name for name in tensors if name.endswith("/loop/log_likelihoods"))
    return np.stack([tensors[name].double().numpy() for name in chains])


def log_likelihoods(posterior) -> np.ndarray:
    """Each stored sample's Gaussian log-density of each test target in original units,
    ``(chains, draws, points)``, rebuilt with torch.distributions."""
    chains = []
    for chain in range(posterior.num_chains):
        targets, mixture = gaussian_mixture_of_samples(posterior, chain)
        chains.append(mixture.component_distribution.log_prob(targets[:, None]).T)
    return torch.stack(chains).numpy()


def rhat_max(pointwise: np.ndarray) -> float:
    """The largest rank-normalised split R-hat (arviz's, Vehtari et al. 2021) over the test
    points of ``pointwise`` ``(chains, draws, points)``; points whose draws are all equal are
    left out.

    It is computed from the run's recorded values, not from the rebuilt ones: with an even
    number of draws, the two middle draws of a point lie at the same distance from its median,
    so its folded (tail) ranks tie exactly in float64 from float32 values, and break either
    way from values rebuilt to other last bits (3.71 against 3.00 for this run with torch's
    kernels held to AVX2). The recorded values are checked against the rebuilt ones instead,
    within float32 rounding."""
    flat = pointwise.reshape(-1, pointwise.shape[-1])
    varying = [j for j in range(flat.shape[1]) if flat[:, j].max() > flat[:, j].min()]
    return max(float(arviz.rhat(pointwise[:, :, j], method="rank")) for j in varying)


def test_its_run_directory_is_read_by_bdl_eval_bdl_report_and_load_run(tmp_path):
    train, test = sine()
    directory = tmp_path / "run"
    short = {**SHORT, "overrides": [*SHORT["overrides"], "protocol.mlp.hidden=[8]"]}
    posterior = bdl.run_model("mlp", train, test, directory=directory, **short)
    metrics = json.loads((directory / "metrics.json").read_text())
    assert metrics["status"] == "completed" and posterior.metrics == metrics
    # bdl-eval, in a fresh read of the directory, reproduces the run's own test metrics
    assert bdl_eval([str(directory)]) == 0
    (evaluated,) = (directory / "eval").glob("*/metrics.json")
    again = json.loads(evaluated.read_text())
    for key in ("test_rmse", "test_ll"):
        assert again[key] == pytest.approx(metrics[key], rel=1e-5), key
    assert bdl_report([str(directory)]) == 0
    assert (directory / "report.csv").is_file()
    reread = bdl.load_run(directory)
    assert len(reread) == len(posterior) == 4
    # the targets standardised by the training rows' mean and standard deviation alone
    y = train[1].double()
    expected = (test[1].double() - y.mean()) / y.std(unbiased=False)
    torch.testing.assert_close(reread.data.y_test.double(), expected, rtol=1e-5, atol=1e-6)


def test_a_network_of_the_callers_own_is_rebuilt_only_when_handed_over_again(tmp_path):
    train, test = sine()
    bdl.run_model(Wave, train, test, directory=tmp_path / "run", model_args={"width": 5}, **SHORT)
    with pytest.raises(ConfigError) as error:
        bdl.load_run(tmp_path / "run").network()
    assert str(error.value) == (
        "model._target_=runner.test_python_api.Wave is not one of bdl's own targets: a network "
        "of your own (bdl.run_model's) is trusted again by bdl.load_run(RUN, trust=[Wave]) or "
        "bdl-eval RUN --trust runner.test_python_api.Wave; else choose a model option listed by "
        "bdl-run --help"
    )
    model, _ = bdl.load_run(tmp_path / "run", trust=[Wave]).network()
    assert isinstance(model, Wave) and model.layers[0].out_features == 5

    class Local(Wave):
        pass

    with pytest.raises(ConfigError, match="cannot be found again by its name"):
        bdl.run_model(Local, train, test, directory=tmp_path / "local", **SHORT)


def test_data_run_model_cannot_take_is_refused_before_anything_runs(tmp_path):
    """Each mistake in the data handed over is one line naming the fix, and no run starts."""
    train, test = sine()
    for kwargs, message in [
        (
            {"train": train, "test": test, "dataset": "boston"},
            "give train= and test= data, or dataset= an option, not both",
        ),
        ({"train": train}, "give train= and test= data, or dataset= an option, not both"),
        (
            {"train": [1, 2, 3], "test": test},
            "train must be a pair (x, y) of tensors or a torch Dataset of pairs",
        ),
        (
            {"train": (train[0][:, 0], train[1]), "test": test},
            "train: x of shape (60,) and y of (60,); x needs one row per point (n, features...) "
            "and y one target per row (n,)",
        ),
        (
            {"train": train, "test": (test[0], test[1][:5])},
            "test: x of shape (20, 1) and y of (5,); x needs one row per point (n, features...) "
            "and y one target per row (n,)",
        ),
    ]:
        with pytest.raises(ConfigError) as error:
            bdl.run_model(Wave, directory=tmp_path / "run", **kwargs, **SHORT)
        assert str(error.value) == message
    assert not (tmp_path / "run" / "metrics.json").exists()
    folder = tmp_path / "other" / "data"
    folder.mkdir(parents=True)
    (folder / "train.safetensors").write_bytes(b"another call's data")
    with pytest.raises(ConfigError) as error:
        bdl.run_model(Wave, directory=tmp_path / "other", train=train, test=test, **SHORT)
    assert str(error.value) == (
        f"{folder / 'train.safetensors'} holds other train data than this call's: give the run a "
        "fresh directory, or the same data to resume it"
    )


def test_bdl_eval_reads_a_run_of_a_network_of_ones_own_from_another_folder_when_trusted(
    tmp_path, monkeypatch, capsys
):
    """The fix the refusal names works: ``--trust module.Name``, from any folder."""
    train, test = sine()
    posterior = bdl.run_model(Wave, train, test, directory=tmp_path / "run", **SHORT)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert bdl_eval([str(tmp_path / "run")]) == 2
    assert "bdl-eval RUN --trust runner.test_python_api.Wave" in capsys.readouterr().err
    assert bdl_eval([str(tmp_path / "run"), "--trust", "runner.test_python_api.Wave"]) == 0
    (evaluated,) = (tmp_path / "run" / "eval").glob("*/metrics.json")
    again = json.loads(evaluated.read_text())
    assert again["test_rmse"] == pytest.approx(posterior.metrics["test_rmse"], rel=1e-5)
    assert bdl_eval([str(tmp_path / "run"), "--trust", "nowhere_such.Net"]) == 2
    assert "put the folder of its module on PYTHONPATH" in capsys.readouterr().err


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"dataset": "boston", "validation": sine()[1]},
            "validation= describes train= data, which dataset='boston' replaces: set the "
            "option's own keys by overrides (dataset.validation=...), or drop dataset=",
        ),
        (
            {"dataset": "boston", "task": "classification"},
            "task= describes train= data, which dataset='boston' replaces: set the option's own "
            "keys by overrides (dataset.validation=...), or drop dataset=",
        ),
        (
            {"train": sine()[0], "test": sine()[1], "overrides": ["sampler=sgld"]},
            "overrides=['sampler=sgld'] sets sampler, which run_model's argument sampler= sets: "
            "pass sampler= alone",
        ),
        (
            {"train": sine()[0], "test": sine()[1], "overrides": ["dataset=boston"]},
            "overrides=['dataset=boston'] sets dataset, which run_model's argument dataset= "
            "sets: pass dataset= alone",
        ),
        (
            {"train": sine()[0], "test": sine()[1], "sampler": "sghmcc"},
            "sampler=sghmcc is not an option of the sampler group: did you mean sampler=sghmc?",
        ),
        (
            {"train": sine()[0], "test": sine()[1], "overrides": ["epochz=3"]},
            "epochz is not a key of the config: did you mean epochs=3?",
        ),
        (
            {"train": sine()[0], "test": sine()[1], "overrides": ["sampler.lr=-1"]},
            "sampler.lr must be positive and finite, got -1",
        ),
    ],
)
def test_a_mistake_is_bdls_own_exception_in_its_one_line(tmp_path, kwargs, message):
    """Contradictory arguments refused, not one of them dropped; Hydra's composition errors
    and instantiation wrapper unwrapped: the caller catches `ConfigError` and reads one line.
    Nothing is written for a call refused before its run."""
    with pytest.raises(ConfigError) as error:
        bdl.run_model("mlp", directory=tmp_path / "run", epochs=2, burn_in=1, **kwargs)
    assert type(error.value) is ConfigError and str(error.value) == message
    assert not (tmp_path / "run" / "metrics.json").exists()
    if "sampler.lr=-1" not in kwargs.get("overrides", ()):
        assert not (tmp_path / "run").exists()


def test_a_script_sees_the_runs_progress_and_table_by_default(tmp_path):
    """A script that configures no logging: the progress line and the closing table reach its
    stderr, as bdl-run shows them; one that does keeps its own handlers alone."""
    script = (
        "import torch, bdl\n"
        "x = torch.linspace(-3, 3, 80)[:, None]; y = torch.sin(x[:, 0])\n"
        "bdl.run_model('mlp', (x[::2], y[::2]), (x[1::2], y[1::2]), directory=DIRECTORY,\n"
        "    epochs=4, burn_in=2, thin=1, overrides=['protocol.mlp.hidden=[8]'])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for configured, directory in (
        ("", "a"),
        ("import logging; logging.basicConfig(level=40)\n", "b"),
    ):
        code = configured + script.replace("DIRECTORY", repr(str(tmp_path / directory)))
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
        )
        assert result.returncode == 0, result.stderr
        if configured:
            assert (
                "epoch 4/4" not in result.stderr and "completed (metrics.json)" not in result.stderr
            )
        else:
            assert "epoch 4/4" in result.stderr and "completed (metrics.json):" in result.stderr
            assert "test_rmse" in result.stderr
