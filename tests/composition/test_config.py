"""Every option of every config group composes with the root schema and instantiates; each group
sets only its own keys; a mistake in a config is refused by `bdl.composition.config.validate`,
before any data is read, with one message naming the key."""

from __future__ import annotations

import functools
import inspect
import math
from importlib.resources import files

import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.utils import get_object, instantiate
from omegaconf import OmegaConf

import bdl.composition.config  # noqa: F401  (registers the root schema)
from bdl.composition.config import ConfigError, validate
from bdl.likelihoods import Gaussian as GaussianLikelihood
from bdl.models.mlp import MLP
from bdl.priors import ARD, Gaussian, ScaleMixture, StudentT
from bdl.samplers.bbb import BBB
from bdl.samplers.hmc import HMC
from bdl.samplers.psgld import PSGLD
from bdl.samplers.sghmc import SGHMC
from bdl.samplers.sgld import SGLD
from bdl.schedules import Polynomial


def options(group: str) -> list[str]:
    folder = files("bdl.conf") / group
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def own(group: str, option: str):
    """An option's YAML file as written, without Hydra."""
    return OmegaConf.load(str(files("bdl.conf") / group / f"{option}.yaml"))


def composed(*overrides: str):
    with initialize_config_module(version_base="1.3", config_module="bdl.conf"):
        return compose("config", overrides=list(overrides))


def build(node, **runtime):
    built = instantiate(node)
    return built(**runtime) if isinstance(built, functools.partial) else built


def test_every_group_has_its_required_options():
    assert {"mlp", "linear", "resnet20_frn"} <= set(options("model"))
    assert {"gaussian"} <= set(options("prior"))
    assert {"sgd", "sgd_momentum", "sgld", "sghmc"} <= set(options("sampler"))
    assert {"constant", "polynomial", "cyclical"} <= set(options("schedule"))
    uci = {"boston", "concrete", "energy", "kin8nm", "naval", "power", "protein", "wine", "yacht"}
    assert {"mnist", "cifar10"} | uci <= set(options("dataset"))


@pytest.mark.parametrize("option", options("sampler"))
def test_sampler_options(option):
    cfg = composed(f"sampler={option}")
    sampler = build(cfg.sampler, lr=1e-4, generator=torch.Generator().manual_seed(0))
    params = [torch.zeros(3, requires_grad=True)]
    state = sampler.init(params)
    assert state.params[0] is params[0]


@pytest.mark.parametrize("option", options("schedule"))
def test_schedule_options(option):
    schedule = build(composed(f"schedule={option}").schedule, total_steps=100, steps_per_epoch=10)
    assert schedule(0) == 1.0  # every schedule starts at the sampler's own step size


@pytest.mark.parametrize("option", options("prior"))
def test_prior_options(option):
    prior = build(composed(f"prior={option}").prior)
    params = {"layers.0.weight": torch.randn(4, 3), "layers.0.bias": torch.randn(4)}
    assert torch.isfinite(prior.log_prob(params))


INPUTS = [("mnist", (1, 28, 28), 10), ("cifar10", (3, 32, 32), 10), ("boston", (13,), 1)]


# a convolutional network needs image inputs: no resnet20_frn or convnet on a flat dataset
@pytest.mark.parametrize(
    "option, dataset, shape, out",
    [
        (option, *inputs)
        for option in options("model")
        for inputs in INPUTS
        if not (option in ("resnet20_frn", "convnet") and len(inputs[1]) == 1)
    ],
)
def test_model_options(option, dataset, shape, out):
    model = build(
        composed(f"dataset={dataset}", f"model={option}").model, input_shape=shape, out_features=out
    )
    assert model(torch.zeros(2, *shape)).shape == (2, out)


@pytest.mark.parametrize("option", options("experiment"))
def test_experiment_presets_compose(option):
    validate(composed(f"experiment={option}"))


@pytest.mark.parametrize("option", options("dataset"))
def test_dataset_options(option, fake_data_root, isolated_cache, no_cifar_md5, tmp_path):
    where = [f"dataset.root={fake_data_root}"]
    if option == "files":  # the user's own files, not a data root
        (tmp_path / "train.csv").write_text("u,v,y\n0.5,1,2.5\n1.5,0,3.5\n")
        (tmp_path / "test.csv").write_text("u,v,y\n2.5,1,4.5\n")
        where = [f"dataset.{part}={tmp_path / part}.csv" for part in ("train", "test")]
    cfg = composed(f"dataset={option}", *where)
    validate(cfg)
    data = instantiate(cfg.dataset)
    assert data.num_train > 0 and data.x_test.shape[1:] == data.x_train.shape[1:]


@pytest.mark.parametrize(
    "overrides, line",
    [
        (["epochs=0"], "epochs=0 is out of range: use a positive number of epochs, e.g. epochs=10"),
        (
            ["batch_size=0"],
            "batch_size=0 is out of range: use a positive minibatch size, e.g. batch_size=128",
        ),
        (["thin=0"], "thin=0 is out of range: use thin=1 or more epochs"),
        (
            ["temperature=0"],
            "temperature=0.0 is out of range: use a positive, finite temperature (1 = Bayes "
            "posterior)",
        ),
        (
            ["burn_in=900"],
            "burn_in=900 leaves no epoch to sample in (epochs=800): raise epochs, or keep "
            "epochs=800 with burn_in=400 thin=1",
        ),
        (
            ["wandb.mode=on"],
            "wandb.mode=on is out of range: use wandb.mode=disabled, offline or online",
        ),
        (
            ["threads=0"],
            "threads=0 is out of range: use threads=auto or a number of threads, 1 or more",
        ),
        (
            ["threads=most"],
            "threads=most is out of range: use threads=auto or a number of threads, 1 or more",
        ),
        (
            ["seed=-1"],
            "seed=-1 is out of range: use seed=0 or more, below 2^64 (torch's seeds are 64-bit) "
            "less the chains",
        ),
        (["chains=0"], "chains=0 is out of range: use chains=1 or more independent chains"),
        (
            ["compile_mode=reduce_overhead"],
            "compile_mode=reduce_overhead compiles nothing without compile=true: add "
            "compile=true, or drop compile_mode",
        ),
        (
            ["sampler._target_=bdl.priors.Gaussian"],
            "sampler._target_=bdl.priors.Gaussian is the target of a prior option, not a "
            "sampler's: choose a sampler option listed by bdl-run --help",
        ),
        (
            ["+sampler.zz=1"],
            "sampler.zz is not an option of SGHMC (options: lr, alpha, grad_var, burn_in_alpha)",
        ),
        (["~sampler.lr"], "sampler.lr is required by SGHMC: set sampler.lr=<value>"),
        (
            ["dataset.root="],
            "dataset.root is empty (a shell variable that is not set?): give a folder, "
            "dataset.root=/path/to/data, or dataset.root=null for $BDL_DATA_DIR or the cache",
        ),
    ],
)
def test_a_value_out_of_range_is_one_line_naming_its_key_and_the_fix(overrides, line):
    with pytest.raises(ConfigError) as refused:
        validate(composed(*overrides))
    assert str(refused.value) == line


def test_a_sweep_prints_its_jobs_configs_with_cfg_job_only():
    from bdl.composition.config import print_sweep

    assert print_sweep(["seed=0", "--cfg", "job"]) is False  # not a sweep: Hydra prints it
    with pytest.raises(SystemExit) as stop:
        print_sweep(["-m", "seed=0,1", "--cfg", "hydra"])
    assert str(stop.value) == (
        "bdl-run: error: a sweep (-m) prints each job's config with --cfg job only"
    )


@pytest.mark.parametrize("option", options("protocol"))
def test_protocol_options(option):
    validate(composed(f"protocol={option}"))


@pytest.mark.parametrize("dataset", options("dataset"))
def test_a_dataset_holds_only_its_loaders_arguments(dataset):
    node = composed(f"dataset={dataset}").dataset
    loader = inspect.signature(get_object(node._target_)).parameters
    assert set(node) - {"_target_"} <= set(loader)


@pytest.mark.parametrize("sampler", options("sampler"))
def test_every_sampler_keeps_its_own_config(sampler):
    node = composed(f"sampler={sampler}").sampler
    if "defaults" not in own("sampler", sampler):
        assert node == own("sampler", sampler)


#: Two samplers that share no hyperparameter's value: a dataset that set any sampler key, or
#: chose another sampler, would change at least one of them.
UNRELATED_SAMPLERS = ("sghmc", "hmc")


@pytest.mark.parametrize("dataset", options("dataset"))
def test_a_dataset_leaves_every_sampler_alone(dataset):
    """A dataset reaches no sampler's keys: composing a sampler next to a dataset is composing
    it alone (a group sets only its own keys); with `test_every_sampler_keeps_its_own_config`,
    every sampler on every dataset keeps its own config."""
    for sampler in UNRELATED_SAMPLERS:
        node = composed(f"sampler={sampler}", f"dataset={dataset}").sampler
        assert node == composed(f"sampler={sampler}").sampler, sampler


@pytest.mark.parametrize("dataset", options("dataset"))
def test_a_dataset_leaves_the_prior_and_schedule_alone(dataset):
    cfg = composed(f"dataset={dataset}")
    assert cfg.prior == own("prior", "gaussian") and cfg.schedule == own("schedule", "constant")


def test_the_uci_preset_chooses_scale_adapted_sghmc_and_reaches_no_other_sampler():
    for overrides in [(), ("dataset=concrete",), ("dataset=naval",)]:
        cfg = composed("experiment=uci_sghmc", *overrides)
        assert cfg.sampler == own("sampler", "sghmc_adaptive")
    assert composed("experiment=uci_sghmc", "sampler=sgld").sampler == own("sampler", "sgld")


def test_the_quick_start_is_chen_et_al_2014s_mnist_setup():
    # Chen, Fox & Guestrin (2014), MNIST: 784-100-10 sigmoid network, minibatch 500, 800 epochs
    # of which 50 burn-in, eta = 2e-6 (lr 0.1 per datum at N = 50 000), friction 0.01
    cfg = composed("sampler=sghmc", "dataset=mnist")
    model = OmegaConf.to_container(cfg.model, resolve=True)
    assert (cfg.epochs, cfg.batch_size, cfg.burn_in, cfg.thin) == (800, 500, 50, 1)
    assert model == {
        "_target_": "bdl.models.mlp.MLP",
        "_partial_": True,
        "hidden": [100],
        "activation": "sigmoid",
        "init_std": 0.01,
    }
    assert (cfg.sampler.lr, cfg.sampler.alpha, cfg.prior.scale) == (0.1, 0.01, 1.0)
    assert (cfg.dataset.validation, cfg.dataset.pixel_divisor) == (10000, 255.0)


def test_the_uci_protocol_is_hernandez_lobato_and_adams():
    # one hidden layer of 50 ReLU units, 100 for protein (Hernandez-Lobato & Adams 2015), sampled on
    # full batches but for naval (conf/protocol/uci_minibatch.yaml); 400 samples everywhere
    for dataset, hidden, batch_size, epochs, burn_in, thin in [
        ("boston", [50], 100000, 10000, 2000, 20),
        ("yacht", [50], 100000, 10000, 2000, 20),
        ("power", [50], 100000, 10000, 2000, 20),
        ("protein", [100], 100000, 30000, 6000, 60),
        ("naval", [50], 32, 500, 100, 1),
    ]:
        cfg = composed(f"dataset={dataset}")
        assert list(cfg.model.hidden) == hidden and cfg.model.activation == "relu"
        assert cfg.prior.scale == 0.3 and cfg.batch_size == batch_size
        assert (cfg.epochs, cfg.burn_in, cfg.thin) == (epochs, burn_in, thin)
        assert (cfg.epochs - cfg.burn_in) // cfg.thin == 400


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["+unknown_key=1"], "unknown_key is not a key of the config"),
        (["+likelihood.foo=1"], "likelihood.foo is not a key of likelihood"),
        (["+protocol.mlp.foo=1"], "protocol.mlp.foo is not a key of protocol.mlp"),
        (
            ["+sampler.foo=1"],
            r"sampler.foo is not an option of SGHMC \(options: lr, alpha, grad_var, burn_in_alph",
        ),
        (["+model.foo=1"], r"model.foo is not an option of MLP \(options: hidden, activation"),
        (["+schedule.foo=1"], r"schedule.foo is not an option of Constant \(options: none\)"),
        (["+prior.foo=1"], r"prior.foo is not an option of Gaussian \(options: scale, layers"),
        (["+dataset.foo=1"], "dataset.foo is not an option of bdl.data.mnist.load"),
        (["+sampler.generator=1"], "sampler.generator is not an option of SGHMC"),
        (["~sampler.lr"], "sampler.lr is required by SGHMC"),
        (
            ["sampler._target_=nowhere.Sampler"],
            "sampler._target_=nowhere.Sampler is not one of bdl.s own targets",
        ),
        (["sampler.lr=[1,2]"], r"sampler.lr=\[1, 2\] must be a finite number"),
        (["sampler.lr=fast"], "sampler.lr=fast must be a finite number"),
        (["sampler.lr=inf"], "sampler.lr=inf must be a finite number"),
        (["sampler=hmc", "sampler.lr=inf"], "sampler.lr=inf must be a finite number"),
        (["sampler=hmc", "sampler.lr=nan"], "sampler.lr=nan must be a finite number"),
        (["sampler=hmc", "sampler.num_steps=2.5"], "sampler.num_steps=2.5 must be an integer or"),
        (["sampler.grad_var=[1]"], "sampler.grad_var=.* must be a finite number or a string"),
        (["sampler.lr=-1"], "sampler.lr must be positive and finite, got -1"),
        (["temperature=inf"], "temperature=inf is out of range"),
        (["temperature=nan"], "temperature=nan is out of range"),
        (["prior.scale=inf"], "prior.scale=inf must be a finite number"),
        (["prior.scale=nan"], "prior.scale=nan must be a finite number"),
        (["prior=student_t", "prior.df=-1"], "prior.df"),
        (["likelihood.noise_std=inf"], "likelihood.noise_std must be positive and finite"),
        (["likelihood.noise_std=nan"], "likelihood.noise_std must be positive and finite"),
        (["schedule=polynomial", "schedule.gamma=2"], "schedule.gamma must be in"),
        (["model.hidden=${protocol.mlp.hiden}"], "protocol.mlp.hiden"),
        # torch's seeds are 64-bit, and chain k is seeded seed + k
        (["seed=18446744073709551616"], r"seed=18446744073709551616 is out of range: use seed"),
        (["seed=18446744073709551615", "chains=2"], "seed=18446744073709551615 is out of range"),
        (
            ["prior=scale_mixture", "prior.neg_log_sigma2=-1000"],
            r"prior.neg_log_sigma2=-1000 is out of range: .* between -100 and 100",
        ),
        (["prior.layers=5"], "prior.layers=5 is not a mapping of parameter-name patterns"),
        (["dataset.root="], "dataset.root is empty .*dataset.root=null"),
        (["dataset.root=''"], "dataset.root is empty"),
    ],
)
def test_config_mistakes_name_their_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(composed(*overrides))


@pytest.mark.parametrize("sampler", ["bbb", "mfvi", "sgd", "sgd_momentum"])
def test_optimisers_and_vi_need_no_burn_in(sampler):
    validate(composed(f"sampler={sampler}", "epochs=2"))  # the protocol's burn_in is 50


@pytest.mark.parametrize("sampler", ["sgld", "sghmc", "csgd", "hmc"])
def test_samplers_that_inject_noise_need_an_epoch_after_burn_in(sampler):
    with pytest.raises(ConfigError, match="burn_in=50 leaves no epoch to sample in"):
        validate(composed(f"sampler={sampler}", "epochs=2"))


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize(
    "build_with, key",
    [
        (lambda v: SGLD(lr=v), "sampler.lr"),
        (lambda v: HMC(lr=1.0, num_steps=None, trajectory_length=v), "sampler.trajectory_length"),
        (lambda v: PSGLD(lr=1.0, damping=v), "sampler.damping"),
        (lambda v: SGHMC(lr=1.0, grad_var=v), "sampler.grad_var"),
        (lambda v: BBB(lr=1.0, init_std=v), "sampler.init_std"),
        (lambda v: Gaussian(scale=v), "prior.scale"),
        (lambda v: Gaussian(layers={"*.bias": v}), "prior.layers"),
        (lambda v: StudentT(df=v), "prior.df"),
        (lambda v: ScaleMixture(neg_log_sigma2=v), "prior.neg_log_sigma2"),
        (lambda v: ARD(beta=v), "prior.beta"),
        (lambda v: GaussianLikelihood(noise_std=v), "likelihood.noise_std"),
        (lambda v: GaussianLikelihood(prior_rate=v), "likelihood.prior_rate"),
        (lambda v: Polynomial(10, 1, b=v), "schedule.b"),
        (lambda v: MLP((3,), 1, init_std=v), "model.init_std"),
    ],
)
def test_constructors_refuse_values_that_are_not_finite(build_with, key, value):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        build_with(value)
