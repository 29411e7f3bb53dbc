"""``compile=true`` pays compiling once per machine: Inductor's caches live in bdl's cache folder,
and a function compiled before is loaded from them, which the log says."""

from __future__ import annotations

import pytest
import torch
from torch._inductor import cpp_builder
from torch._inductor.exc import InvalidCxxCompiler
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from bdl.compiled import Compiler, cpu_kind, keep_caches


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
