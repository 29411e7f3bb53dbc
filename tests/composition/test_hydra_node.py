"""Hydra's node, deny by default: against the node bdl's packaged configs compose, a config may
change only the keys of the allow-list, each value checked; every other change is one line
naming the key and why."""

from __future__ import annotations

import copy

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from bdl.composition.hydra_node import ALLOWED, ENVIRONMENT, check_hydra_node
from bdl.errors import ConfigError


@pytest.fixture(scope="module")
def baselines() -> dict[str, dict]:
    """bdl's packaged node, and with each of its launchers."""
    nodes = {}
    with initialize_config_module("bdl.conf", version_base="1.3"):
        for launcher in ("basic", "slurm", "joblib", "submitit_local"):
            cfg = compose("config", [f"hydra/launcher={launcher}"], return_hydra_config=True)
            nodes[launcher] = OmegaConf.to_container(cfg.hydra, resolve=False)
    return nodes


def changed(baseline: dict, **changes) -> dict:
    """``baseline`` with ``changes`` (dotted keys below hydra.) applied."""
    node = copy.deepcopy(baseline)
    for key, value in changes.items():
        *parents, last = key.split("/")  # "/" separates keys: some hold dots (env_set, params)
        where = node
        for part in parents:
            if not isinstance(where.get(part), dict):
                where[part] = {}
            where = where[part]
        where[last] = value
    return node


def refusal(node: dict, baseline: dict, typed: frozenset[str] = frozenset()) -> str:
    with pytest.raises(ConfigError) as error:
        check_hydra_node(node, baseline, typed)
    line = str(error.value)
    assert len(line.splitlines()) == 1
    return line


@pytest.mark.parametrize(
    "changes, refused",
    [
        ({"job/env_set/CXX": "./evil.sh"}, "hydra.job.env_set.CXX is refused: a config may set"),
        ({"job/env_set/CC": "cc"}, "hydra.job.env_set.CC is refused"),
        ({"job/env_set/TORCHINDUCTOR_CACHE_DIR": "x"}, "hydra.job.env_set.TORCHINDUCTOR_CACHE_DIR"),
        ({"job/env_set/TRITON_CACHE_DIR": "x"}, "hydra.job.env_set.TRITON_CACHE_DIR is refused"),
        ({"job/env_set/LD_PRELOAD": "x.so"}, "hydra.job.env_set.LD_PRELOAD is refused"),
        ({"job/env_set/PYTHONSTARTUP": "x.py"}, "hydra.job.env_set.PYTHONSTARTUP is refused"),
        ({"job/env_set/OMP_NUM_THREADS": "1; touch x"}, "hydra.job.env_set.OMP_NUM_THREADS=1; t"),
        ({"job/env_copy": ["HOME"]}, "hydra.job.env_copy=['HOME'] is refused"),
        (
            {"job_logging/handlers/file/filename": "/home/me/.bashrc"},
            "hydra.job_logging.handlers.file.filename=/home/me/.bashrc is refused: configures "
            "logging",
        ),
        (
            {"job_logging/formatters/simple/format": "touch x # %(message)s"},
            "hydra.job_logging.formatters.simple.format=touch x # %(message)s is refused",
        ),
        ({"hydra_logging/root/level": "DEBUG"}, "hydra.hydra_logging.root.level=DEBUG is refused"),
        (
            {"callbacks/mine": {"_target_": "bdl.cli.SweepFailures"}},
            "hydra.callbacks.mine._target_=bdl.cli.SweepFailures is refused: is a Hydra callback",
        ),
        ({"callbacks": {}}, "hydra.callbacks.sweep_failures is refused: removing it is a Hydra"),
        ({"output_subdir": ".hydra"}, "hydra.output_subdir=.hydra is refused: would make Hydra"),
        ({"searchpath": ["file:///tmp"]}, "hydra.searchpath=['file:///tmp'] is refused"),
        ({"job/name": "../../x"}, "hydra.job.name=../../x is refused: names the run's log file"),
        ({"run/dir": "/home/me"}, "hydra.run.dir=/home/me is refused: it must be a relative path"),
        ({"run/dir": "../../victim"}, "hydra.run.dir=../../victim is refused"),
        ({"run/dir": "${oc.env:HOME}/x"}, "hydra.run.dir=${oc.env:HOME}/x is refused"),
        ({"sweep/subdir": "../x"}, "hydra.sweep.subdir=../x is refused"),
        ({"job/chdir": "yes"}, "hydra.job.chdir=yes is refused: it must be true or false"),
        ({"help/template": "x"}, "hydra.help.template=x is refused: is not one of the keys"),
        ({"sweeper/params/hydra.job.env_set.CXX": "x"}, "hydra.sweeper.params.hydra.job.env_set"),
        ({"launcher/_target_": "os.system"}, "hydra.launcher._target_=os.system is refused"),
    ],
)
def test_a_change_outside_the_allow_list_is_one_line_naming_the_key(baselines, changes, refused):
    line = refusal(changed(baselines["basic"], **changes), baselines["basic"])
    assert line.startswith(refused), line


@pytest.mark.parametrize(
    "changes, refused",
    [
        ({"launcher/setup": ["touch /tmp/x"]}, "hydra.launcher.setup=['touch /tmp/x'] is refused"),
        ({"launcher/srun_args": ["--export=ALL"]}, "hydra.launcher.srun_args"),
        ({"launcher/partition": "gpu\ntouch x"}, "hydra.launcher.partition='gpu\\ntouch x'"),
        (
            {"launcher/additional_parameters/output": "/x"},
            "hydra.launcher.additional_parameters.output=/x is refused: sbatch takes from a "
            "config only",
        ),
        ({"launcher/additional_parameters/mail_user": "a b"}, "hydra.launcher.additional_param"),
        ({"launcher/submitit_folder": "/tmp/x"}, "hydra.launcher.submitit_folder=/tmp/x"),
        ({"launcher/timeout_min": "60"}, "hydra.launcher.timeout_min=60 is refused: it must be"),
    ],
)
def test_a_launcher_s_parameters_are_checked(baselines, changes, refused):
    line = refusal(changed(baselines["slurm"], **changes), baselines["slurm"])
    assert line.startswith(refused), line


def test_the_allowed_keys_pass_with_sound_values(baselines):
    slurm = baselines["slurm"]
    node = changed(
        slurm,
        **{
            "run/dir": "outputs/mine/${now:%H-%M}",
            "sweep/dir": "multirun/${hydra:runtime.choices.dataset}",
            "sweep/subdir": "${hydra.job.num}",
            "job/chdir": True,
            "mode": "MULTIRUN",
            "verbose": True,
            "job/env_set/OMP_NUM_THREADS": "4",
            "job/env_set/CUDA_VISIBLE_DEVICES": "0,1",
            "sweeper/params/sampler": "sgld,sghmc",
            "launcher/partition": "gpu",
            "launcher/timeout_min": 60,
            "launcher/mem_gb": 32,
            "launcher/additional_parameters/mail_user": "me@lab.org",
            "launcher/submitit_folder": "${hydra.sweep.dir}/.submitit/%j",
        },
    )
    check_hydra_node(node, slurm)
    joblib = baselines["joblib"]
    check_hydra_node(changed(joblib, **{"launcher/n_jobs": 2}), joblib)
    assert set(ENVIRONMENT) == {
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "CUBLAS_WORKSPACE_CONFIG",
    }
    assert "job_logging" not in str(ALLOWED) and "callbacks" not in str(ALLOWED)


def test_a_directory_typed_on_the_command_line_may_lie_anywhere(baselines):
    basic = baselines["basic"]
    node = changed(basic, **{"run/dir": "/scratch/me/run"})
    check_hydra_node(node, basic, frozenset({"run.dir"}))
    assert refusal(node, basic).startswith("hydra.run.dir=/scratch/me/run is refused")
    # the command line passes the rest of the list as a file does
    node = changed(basic, **{"job/env_set/CXX": "./evil.sh"})
    assert refusal(node, basic, frozenset({"job.env_set.CXX"})).startswith(
        "hydra.job.env_set.CXX is refused"
    )


def test_hydra_s_record_of_the_command_line_is_the_command_line_s(baselines):
    basic = baselines["basic"]
    node = changed(basic, **{"overrides/task": ["dataset.root=../../x"]})
    hydra = basic["overrides"]["hydra"]
    with pytest.raises(ConfigError, match=r"^hydra.overrides is refused: it is Hydra's record"):
        check_hydra_node(node, basic, overrides=([], hydra))
    check_hydra_node(node, basic, overrides=(["dataset.root=../../x"], hydra))
