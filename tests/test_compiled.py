"""``compile=true`` pays compiling once per machine: Inductor's caches live in bdl's cache folder,
and a function compiled before is loaded from them, which the log says."""

from __future__ import annotations

import pytest
import torch
from torch._inductor import cpp_builder
from torch._inductor.exc import InvalidCxxCompiler
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from bdl.compiled import Compiler, keep_caches


def test_the_caches_are_kept_in_bdls_cache_folder_unless_told_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("BDL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", False)
    monkeypatch.setattr(torch._functorch.config, "enable_autograd_cache", False)
    assert keep_caches() == tmp_path / "cache" / "inductor"
    assert torch._inductor.config.fx_graph_cache
    assert torch._functorch.config.enable_autograd_cache
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # Inductor's own doing
    assert keep_caches() == tmp_path / "cache" / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert keep_caches() == tmp_path / "mine"


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
    assert messages[0].endswith(f"; kept in {tmp_path / 'inductor'} for later runs")
    assert messages[1].startswith(f"loaded a compiled function from {tmp_path / 'inductor'} in ")
    assert len(messages) == 2
