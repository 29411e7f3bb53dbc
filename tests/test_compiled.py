"""``compile=true`` pays compiling once per machine: Inductor's caches live in bdl's cache folder,
and a function compiled before is loaded from them, which the log says; a sampler's program is
kept whole there, under what it was made from, and loaded by a later run."""

from __future__ import annotations

import hashlib
import sys

import pytest
import torch
from torch import Tensor
from torch._inductor import cpp_builder
from torch._inductor.exc import InvalidCxxCompiler
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from bdl import compiled
from bdl.compiled import Compiler, Precompiled, cpu_kind, describe, keep_caches
from bdl.likelihoods import Gaussian
from bdl.models.mlp import MLP
from bdl.potential import Potential
from bdl.priors import Gaussian as GaussianPrior
from bdl.samplers import HMC


def test_the_caches_are_kept_in_bdls_cache_folder_unless_told_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("BDL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", False)
    monkeypatch.setattr(torch._functorch.config, "enable_autograd_cache", False)
    assert keep_caches() == tmp_path / "cache" / "inductor" / cpu_kind()
    assert torch._inductor.config.fx_graph_cache
    assert torch._functorch.config.enable_autograd_cache
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # Inductor's own doing
    assert keep_caches() == tmp_path / "cache" / "inductor" / cpu_kind()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert keep_caches() == tmp_path / "mine"


def test_each_cpu_kind_has_a_cache_folder_of_its_own(monkeypatch):
    """Kernels made where torch may use AVX-512 are not handed to a run limited to AVX2 (an AMD
    node of the same cluster), nor the reverse."""
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    here = cpu_kind()
    assert cpu_kind() == here  # the same machine keeps its folder
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert cpu_kind() != here


def test_a_function_compiled_before_is_loaded_and_says_so(tmp_path, monkeypatch, caplog):
    try:
        cpp_builder.get_cpp_compiler()
    except InvalidCxxCompiler:
        pytest.skip("compile=true needs a C++ compiler (g++) for torch.compile on the CPU")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("BDL_CACHE_DIR", str(tmp_path))
    x = torch.linspace(0, 1, 5)

    def build():
        return lambda x: (x * 2.5).sin() + x.square()

    with caplog.at_level("INFO", logger="bdl"):
        torch._dynamo.reset()
        first = Compiler().call("f", build, x)
        torch._dynamo.reset()  # as a new process: nothing compiled in memory
        second = Compiler().call("f", build, x)
    torch._dynamo.reset()
    assert torch.equal(first, second)
    torch.testing.assert_close(first, (x * 2.5).sin() + x.square())
    messages = [record.getMessage() for record in caplog.records if record.name == "bdl"]
    assert messages[0].startswith("compiled a function in ")
    folder = tmp_path / "inductor" / cpu_kind()
    assert messages[0].endswith(f"; kept in {folder} for later runs")
    assert messages[1].startswith(f"loaded a compiled function from {folder} in ")
    assert len(messages) == 2


def small_hmc(chains: int = 2, temperature: float = 1.0, hidden: int = 8):
    """A float64 regression network with a sampled noise precision on 40 points, ``chains`` HMC
    chains stacked, compiled: the full-data closure of one chunk, whose trajectory
    ``compile=true`` runs as one program."""
    torch.manual_seed(4)
    model = MLP(input_shape=(4,), out_features=1, hidden=[hidden], activation="tanh").double()
    prior = GaussianPrior(0.8)
    potential = Potential(model, Gaussian().double(), prior, 40, temperature, compile=True)
    spread = torch.Generator().manual_seed(2)
    params = [
        p.detach() + 0.1 * torch.randn(chains, *p.shape, dtype=p.dtype, generator=spread)
        for p in potential.params
    ]
    sampler = HMC(0.004, 6, adapt=False).for_chains(
        [torch.Generator().manual_seed(k) for k in range(chains)]
    )
    return potential, sampler, params


def trajectories(steps: int = 3, **settings) -> list[Tensor]:
    """The chains' positions after ``steps`` HMC transitions of `small_hmc`, each a trajectory
    of the compiled program, from a fresh process's point of view (nothing compiled in memory)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    potential, sampler, params = small_hmc(**settings)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 4, dtype=torch.float64, generator=generator)
    y = torch.randn(40, dtype=torch.float64, generator=generator)
    state = sampler.init(params)
    for _ in range(steps):
        closure = potential.chain_full_closure(params, lambda: iter([(x, y)]))
        assert closure.program is not None
        sampler.step(state, closure)
    return [p.clone() for p in params]


class Traced:
    """A program compiled by ``torch.compile`` as it is, kept nowhere: the uncached reference."""

    def __init__(self, function):
        self.function = torch.compile(function, fullgraph=True)

    def guard_check(self, *args) -> bool:
        return True

    def disable_guard_check(self) -> None:
        pass

    def __call__(self, *args):
        return self.function(*args)


def _messages(caplog) -> list[str]:
    messages = [r.getMessage() for r in caplog.records if r.name == "bdl"]
    caplog.clear()
    return messages


class Eager(Traced):
    """A program run as its Python is, for tests of what surrounds compiling, not of it."""

    def __init__(self, function):
        self.function = function


def test_the_first_program_says_apart_what_importing_torchs_compiler_cost(
    tmp_path, monkeypatch, caplog
):
    """Importing torch's compiler, paid once per process by a run that loads its program as by
    one that compiles it, is said apart from the compiling; a process that has imported it
    already says nothing of it."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("BDL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(Precompiled, "compile", lambda self, path, f, args: Eager(f))
    caplog.set_level("INFO", logger="bdl")
    compiled._import_compiler()
    assert all(module in sys.modules for module in compiled.COMPILER_MODULES)
    assert compiled._import_compiler()[0] < 0.01  # the rule that tells a first import apart
    monkeypatch.setattr(compiled, "_import_compiler", lambda: (1.5, 1.25))
    trajectories(steps=1)
    (said,) = _messages(caplog)
    assert said.startswith("compiled a program in ")
    assert said.endswith(
        " for later runs, after importing torch's compiler in 1.50 s (1.25 s of CPU)"
    )
    monkeypatch.setattr(compiled, "_import_compiler", lambda: (0.004, 0.004))
    trajectories(steps=1)
    (said,) = _messages(caplog)
    assert said.endswith(" for later runs")


@pytest.mark.slow
def test_a_program_compiled_before_is_loaded_and_moves_the_chains_alike(
    tmp_path, monkeypatch, caplog, compiler
):
    """A later run loads the sampler's program kept by the first (it says so, and traces
    nothing), and the chains move bitwise as in the first run and as under ``torch.compile``
    uncached; a kept program cut short, altered, or another's, is compiled again and replaced."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("BDL_CACHE_DIR", str(tmp_path))
    caplog.set_level("INFO", logger="bdl")
    folder = tmp_path / "inductor" / cpu_kind() / "programs"
    with monkeypatch.context() as uncached:
        uncached.setattr(Precompiled, "compile", lambda self, path, f, args: Traced(f))
        reference = trajectories()
    assert not folder.exists()
    with monkeypatch.context() as older_torch:  # one that cannot keep a program: compiled anyway
        older_torch.setattr(compiled, "keeps_programs", lambda: False)
        for mine, theirs in zip(trajectories(), reference, strict=True):
            assert torch.equal(mine, theirs)
    assert not folder.exists()
    _messages(caplog)
    first = trajectories()
    (kept,) = folder.iterdir()
    assert _messages(caplog)[0].startswith("compiled a program in ")
    second = trajectories()
    loaded = _messages(caplog)
    assert loaded[0].startswith("loaded a compiled program in ")
    assert loaded[0].endswith(f" from {kept}")
    assert torch._dynamo.utils.counters["frames"]["total"] == 0  # nothing traced
    for run in (first, second):
        for mine, theirs in zip(run, reference, strict=True):
            assert torch.equal(mine, theirs)
    good = kept.read_bytes()
    for bad in (good[: len(good) // 2], good[:-1] + bytes([good[-1] ^ 1])):
        kept.write_bytes(bad)
        again = trajectories()
        said = _messages(caplog)
        assert "does not load (ValueError: its digest does not match its content)" in said[0]
        assert said[1].startswith("compiled a program in ")
        assert kept.read_bytes() != bad
        for mine, theirs in zip(again, reference, strict=True):
            assert torch.equal(mine, theirs)
    # a file whose digest matches a content that is not a program (written by something else)
    payload = b"not a program"
    kept.write_bytes(hashlib.sha256(payload).digest() + payload)
    trajectories(steps=1)
    said = _messages(caplog)
    assert "does not load (UnpicklingError" in said[0]
    assert said[1].startswith("compiled a program in ")
    # another program's file under this one's name (three chains, not two): its guards refuse it
    three = trajectories(chains=3)
    (theirs,) = set(folder.iterdir()) - {kept}
    theirs.write_bytes(kept.read_bytes())
    assert trajectories(chains=3)[0].shape[0] == 3
    said = _messages(caplog)
    assert "does not load (ValueError: its guards do not hold for this run's arguments)" in said[1]
    assert said[2].startswith("compiled a program in ")
    for mine, again in zip(three, trajectories(chains=3), strict=True):
        assert torch.equal(mine, again)


def test_a_program_is_kept_under_what_it_was_made_from(tmp_path):
    """The file a program is kept in changes with the chains' number, the network, the
    temperature and the arguments' dtype, and not with a rebuild of the same objects (no
    address or other per-process value in its key)."""
    kept = Precompiled(tmp_path)

    def path(**settings):
        potential, _, params = small_hmc(**settings)
        x = torch.zeros(40, 4, dtype=torch.float64)
        y = torch.zeros(40, dtype=torch.float64)
        key = ("program", True)

        def build():  # closes over what `Compiler.program`'s build does
            return (potential, x, y, params)

        return kept.path(key, build, (x, y, params))

    here = path()
    assert path() == here
    assert here.parent == tmp_path / "programs"
    others = [path(chains=3), path(hidden=9), path(temperature=0.5)]
    assert len({here, *others}) == 4
    potential, _, params = small_hmc()
    said = describe((potential.at, params))
    assert "0x" not in said
    assert "Linear(in_features=4, out_features=8" in said and "temperature=1.0" in said
    assert describe(torch.zeros(2, dtype=torch.float64)) != describe(torch.zeros(2))


def test_outside_cuda_graphs_a_result_is_handed_back_as_it_is():
    """`Compiler._owned` copies only CUDA tensors, and only in the modes that replay CUDA graphs
    (the GPU suite checks the copy): on the CPU, and in the default mode, nothing is copied."""
    x = torch.ones(2)
    for mode in ("default", "reduce-overhead", "max-autotune-no-cudagraphs"):
        owned = Compiler(mode)._owned((x, [x], 3))
        assert owned[0] is x and owned[1][0] is x and owned[2] == 3
