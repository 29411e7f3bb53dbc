"""``compile=true``: a potential's functions compiled by ``torch.compile``, else eager.

`bdl.potential_evaluation` hands over `bdl.potential.Potential.at`, and a `Compiler` runs it
compiled: its gradient (``torch.func.grad_and_value`` of the forward pass, one fused function per
input shape, which removes most of a small network's per-operation cost), the prior's term, and a
sampler's whole program (`bdl.closures.Program`: HMC's trajectory on the full-data potential, or
an epoch of minibatch steps, as one compiled loop). Each function is compiled at its first call
under its key (``torch.compile`` then keys it on its input shapes too). Without a working
compiler (Inductor needs a C++ compiler on the CPU) the first call warns once and everything goes
on eagerly; a program that Dynamo cannot trace whole is given up after one warning, while the rest
stays compiled.

Compiling is paid once per machine, not once per run: Inductor's FX graph cache and AOT autograd
cache are kept in bdl's cache folder (``$BDL_CACHE_DIR/inductor``, or ``TORCHINDUCTOR_CACHE_DIR``
where set), so that a later run of the same network and shapes, every job of a sweep after the
first included, loads the compiled kernels instead of generating and building them (C++ code and
g++ on the CPU, most of the first run's compiling time). HMC's trajectory program goes further: it
is compiled ahead of its call (``torch.compile(...).aot_compile``: Dynamo's trace, its guards and
Inductor's code together) and kept whole in that folder's ``programs/`` (`Precompiled`), so that a
later run neither traces its Python again nor lowers its graph: it loads the program in a tenth
of a second, once torch's compiler is imported (about a second, once per process, said apart). The
minibatch samplers' epoch programs are not kept so: they draw noise inside, and torch
would keep their generators by value; Dynamo traces them again at each run, and Inductor's caches
cannot hold their loop (``while_loop``, torch 2.14), only their C++ kernels. Each function's first
call says whether it compiled or loaded, and in how long.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import inspect
import io
import logging
import os
import pickle
import platform
import sys
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch._inductor.runtime.cache_dir_utils import default_cache_dir
from torch.func import grad_and_value
from torch.utils._pytree import tree_map

from bdl.atomic import atomic_file
from bdl.closures import Evaluation, Program, writable_gradients
from bdl.data.base import cache_dir

log = logging.getLogger("bdl")

#: compile=true's warnings when it falls back, by whether Inductor found no working compiler
FALLBACKS = {
    True: "compile=true: torch.compile failed (%s); computing gradients eagerly. Install a C++ "
    "compiler (g++) for Inductor on the CPU, or set compile=false",
    False: "compile=true: the sampler's steps do not compile as one program (%s); they are "
    "computed one by one",
}

#: ``torch.compile``'s modes in which Inductor replays a compiled graph's kernels as a CUDA graph
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")

#: ``f(params, x, y, *args) -> (U, value)``: a potential (`bdl.potential.Potential.at`), one
#: ``U`` or one per chain as a graph differentiable in ``params``, and the value to hand back
Function = Callable[..., tuple[Tensor, Tensor]]


def _summed(function: Function) -> Function:
    """``function`` with its ``U`` summed over the chains, to be differentiated."""

    def summed(*args: Any) -> tuple[Tensor, Tensor]:
        energy, value = function(*args)
        return energy.sum(), value

    return summed


def keep_caches() -> Path:
    """Keep Inductor's FX graph and AOT autograd caches in bdl's cache folder (unless
    ``TORCHINDUCTOR_CACHE_DIR`` names another), both on; returns the folder. bdl's folder has one
    subfolder per CPU kind (`cpu_kind`): Inductor's keys do not hold the instruction set its
    kernels and oneDNN's packed weights were made for, and a home folder shared by a cluster's
    Intel and AMD nodes would otherwise hand one node's kernels to the other."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    # Inductor writes its default into the environment when it first looks for its folder
    if folder is None or Path(folder) == Path(default_cache_dir()):
        folder = os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir() / "inductor" / cpu_kind())
    torch._inductor.config.fx_graph_cache = True
    torch._functorch.config.enable_autograd_cache = True
    return Path(folder)


def cpu_kind() -> str:
    """The CPU that compiled kernels are made for, as a folder's name: the processor's model and
    the instruction sets torch, MKL and oneDNN are allowed (``ATEN_CPU_CAPABILITY``,
    ``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``)."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as info:
        model = next((line for line in info if line.startswith("model name")), model)
    allowed = [os.environ.get(k, "") for k in ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")]
    said = "|".join([model.strip(), torch.backends.cpu.get_cpu_capability(), *allowed])
    return hashlib.sha256(said.encode()).hexdigest()[:16]


def _compiling_seconds() -> float:
    """The seconds spent compiling so far in this process (Dynamo's tally: tracing, and
    Inductor's compiling or loading from its caches)."""
    return sum(torch._dynamo.utils.compilation_time_metrics.get("_compile.compile_inner", ()))


def _caching() -> bool:
    """Whether Inductor's caches are on (`keep_caches`), and with them `Precompiled`'s."""
    config = torch._inductor.config
    return config.fx_graph_cache and not config.force_disable_caches


def _cpu_seconds() -> float:
    """The CPU seconds of this process and of its children waited for (g++) so far."""
    return sum(os.times()[:4])


def _cache_tallies() -> tuple[int, int]:
    """The graphs so far that Inductor's FX graph cache did not hold, and those it cannot hold
    (`torch._dynamo.utils.counters`)."""
    counters = torch._dynamo.utils.counters["inductor"]
    return counters["fxgraph_cache_miss"], counters["fxgraph_cache_bypass"]


def _say_how_it_compiled(folder: Path, start: float, tallies: tuple[int, int]) -> None:
    """Log a function's compiling since `_compiling_seconds` was ``start`` and `_cache_tallies`
    ``tallies``: compiled and kept, compiled again (a graph the caches cannot hold), or loaded."""
    seconds = _compiling_seconds() - start
    missed, bypassed = (now - then for now, then in zip(_cache_tallies(), tallies, strict=True))
    if bypassed:
        log.info(
            "compiled a function in %.1f s; Inductor's caches cannot hold its graph (a loop, in "
            "torch %s), only its C++ kernels, kept in %s for later runs",
            seconds,
            torch.__version__,
            folder,
        )
    elif missed:
        log.info("compiled a function in %.1f s; kept in %s for later runs", seconds, folder)
    else:
        log.info("loaded a compiled function from %s in %.1f s", folder, seconds)


#: how deep `describe` looks into the objects a program closes over: a potential's network, prior
#: and likelihood sit two levels under the program's closure, their settings one more
DEPTH = 4


def describe(value: Any, depth: int = 0) -> str:
    """What a traced program may have taken from ``value`` as fixed, as text the same in every
    process: a tensor's layout (its values are read at each call), a network's architecture,
    numbers and strings, a function's qualified name and what it closes over, and any other
    object's class and public attributes, looked into `DEPTH` levels deep."""
    if isinstance(value, Tensor):
        return f"Tensor({value.dtype}, {tuple(value.shape)}, {value.stride()}, {value.device})"
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return repr(value)
    if isinstance(value, nn.Module):
        return repr(value)
    inner = functools.partial(describe, depth=depth + 1)
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__}({', '.join(map(inner, value))})"
    if isinstance(value, dict):
        return f"dict({', '.join(f'{k!r}: {inner(v)}' for k, v in value.items())})"
    if isinstance(value, functools.partial):
        return f"partial({inner(value.func)}, {inner(value.args)}, {inner(value.keywords)})"
    if inspect.ismethod(value):
        return f"{inner(value.__self__)}.{value.__name__}"
    name = getattr(value, "__qualname__", None)
    if name is not None and callable(value):  # a function or a class
        cells = getattr(value, "__closure__", None) or ()
        closed = [inner(cell.cell_contents) for cell in cells] if depth < DEPTH else []
        return f"{value.__module__}.{name}{closed}"
    public = {} if depth >= DEPTH else getattr(value, "__dict__", {})
    settings = [f"{k}={inner(v)}" for k, v in public.items() if not k.startswith("_")]
    return f"{type(value).__module__}.{type(value).__qualname__}({', '.join(settings)})"


@functools.cache
def _code_digest() -> str:
    """The digest of bdl's own source files: a program traced from other code is stale."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes())
    return digest.hexdigest()


#: Inductor's settings for a kept program's C++ kernels, the same when it is compiled and loaded
#: (they name the kernels' files): without a precompiled header, which Inductor makes again at
#: each load by g++'s preprocessor (0.1 s of CPU) though the kernels are built already
KERNELS = {"cpp_cache_precompile_headers": False}

#: the traces again that compiling a program may take: where the loop's 0-dim tensors cannot stay
#: symbolic numbers, Dynamo traces again with them constant, as torch.compile does itself
RETRACES = 4


#: torch's compiler, as far as loading a kept program imports it: Dynamo's and AOT autograd's
#: loaders, Inductor's graph, kernels and C++ builder (with networkx, jinja2 and setuptools
#: under them). Importing them is paid once per process, whether a program is loaded or compiled
COMPILER_MODULES = (
    "torch._dynamo.aot_compile",
    "torch._functorch.aot_autograd",
    "torch._inductor.async_compile",
    "torch._inductor.codecache",
    "torch._inductor.graph",
    "torch._inductor.output_code",
    "torch._inductor.select_algorithm",
    "torch.utils.cpp_extension",
)


def _import_compiler() -> tuple[float, float]:
    """Import `COMPILER_MODULES`: the seconds it took (wall, CPU), next to none once imported."""
    start, cpu = time.perf_counter(), _cpu_seconds()
    for module in COMPILER_MODULES:
        with contextlib.suppress(ImportError):  # another torch's layout: the load imports its own
            importlib.import_module(module)
    return time.perf_counter() - start, _cpu_seconds() - cpu


class Precompiled:
    """A sampler's programs compiled ahead of their call (``torch.compile(...).aot_compile``) and
    kept in ``folder``, one file each: the SHA-256 digest of the rest, then the program as
    ``AOTCompiledFunction.serialize`` writes it (pickled: bdl's cache folder is its own, as
    Inductor's caches are, never a run's directory). A file's name is the digest of everything
    the program was made from (`describe` of what its ``build`` closes over and of its
    arguments, bdl's code, torch's and Python's versions, the CPU kind, whose folder it is in,
    ``torch.compile``'s mode),
    so that a program made from anything else is never loaded; Dynamo's guards, checked at each
    call against this process's objects, come on top. A file that does not load (cut short,
    altered, or from another torch) is compiled again and replaced."""

    def __init__(self, folder: Path, mode: str = "default") -> None:
        self.folder = folder / "programs"
        self.mode = mode

    def path(self, key: Hashable, build: Callable, args: tuple[Any, ...]) -> Path:
        said = [
            sys.version,
            torch.__version__,
            cpu_kind(),
            self.mode,
            _code_digest(),
            describe(key),
            describe(build),
            describe(args),
        ]
        name = hashlib.sha256("\n".join(said).encode()).hexdigest()[:32]
        return self.folder / f"{name}.program"

    def load(self, path: Path, function: Callable, args: tuple[Any, ...]) -> Callable | None:
        """The program kept at ``path`` for ``function`` (whose closure the program reads at
        each call) and ``args``; None where there is none, or where it does not load or its
        guards do not hold for ``args`` (after a warning)."""
        if not path.exists():
            return None
        try:
            data = path.read_bytes()
            digest, payload = data[:32], data[32:]
            if hashlib.sha256(payload).digest() != digest:
                raise ValueError("its digest does not match its content")
            with torch._inductor.config.patch(KERNELS):
                program = torch.compiler.load_compiled_function(
                    io.BytesIO(payload), external_data=_closure(function)
                )
            if not program.guard_check(*args):
                raise ValueError("its guards do not hold for this run's arguments")
            return program
        except Exception as error:  # noqa: BLE001 - whatever a bad file raises: compile again
            log.warning(
                "compile=true: the compiled program %s does not load (%s: %s); compiling it again",
                path,
                type(error).__name__,
                str(error).splitlines()[0] if str(error) else "",
            )
            return None

    def compile(self, path: Path | None, function: Callable, args: tuple[Any, ...]) -> Callable:
        """``function`` compiled for ``args``, kept at ``path`` (None: nowhere)."""
        # torch's own, private: imported where a torch has them (`keeps_programs`)
        from torch._dynamo.exc import TensorifyScalarRestartAnalysis
        from torch._dynamo.symbolic_convert import TensorifyState

        # Inductor's caches take no graph with a loop unless told to (torch 2.14): the program
        # is a ``while_loop``, and its subgraphs' code is in the cache's key like the rest
        loops = {"torch.ops.higher_order.while_loop": torch.__version__}
        try:
            with torch._inductor.config.patch(
                {**KERNELS, "unsafe_marked_cacheable_functions": loops}
            ):
                for attempt in range(RETRACES + 1):
                    try:
                        compiled = torch.compile(
                            function, fullgraph=True, mode=self.mode
                        ).aot_compile((args, {}))
                        break
                    except TensorifyScalarRestartAnalysis:
                        if attempt == RETRACES:
                            raise
        finally:
            TensorifyState.clear()
        if path is None:
            return compiled
        try:
            payload = type(compiled).serialize(compiled, _closure(function)).serialized_data
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_file(path) as out:
                out.write(hashlib.sha256(payload).digest() + payload)
        except (OSError, RuntimeError, pickle.PicklingError) as error:
            log.warning("compile=true: the compiled program is not kept (%s)", error)
        return compiled


def keeps_programs() -> bool:
    """Whether this torch compiles a function ahead of its call and loads it back: with one that
    cannot, programs are compiled at each run as any other function."""
    return hasattr(torch.compiler, "load_compiled_function")


def _closure(function: Callable) -> dict[str, Any]:
    """What ``function`` closes over, by name: this process's objects, which a program kept by
    `Precompiled` reads at each call instead of copies."""
    names = function.__code__.co_freevars
    cells = function.__closure__ or ()
    return {name: cell.cell_contents for name, cell in zip(names, cells, strict=True)}


class Compiler:
    """The compiled functions of one potential, by key, and what failed to compile; each
    compiled in ``torch.compile``'s ``mode``."""

    def __init__(self, mode: str = "default") -> None:
        self.mode = mode
        # None: no working compiler here, everything eager
        self._functions: dict[Hashable, Callable] | None = {}
        # a program by key: one for each set of arguments its guards tell apart
        self._programs: dict[Hashable, list[Callable]] = {}
        # set here, not at the first call, so that a caller's patch of Inductor's config holds
        self._cache_folder = keep_caches()
        self._kept = Precompiled(self._cache_folder, mode)
        self._programs_failed = False

    @property
    def programs(self) -> bool:
        """Whether a sampler's program may be compiled (none has failed to, nor has Inductor)."""
        return self._functions is not None and not self._programs_failed

    def call(
        self,
        key: Hashable,
        build: Callable[[], Callable],
        *args: Any,
        whole: bool = False,
        keep: bool = False,
    ) -> Any:
        """``build()``'s function, compiled at the first call with ``key``, called on ``args``;
        None where compiling failed on this machine (after one warning), for the caller to
        compute eagerly instead. A sampler's program (``whole``) must be traced whole: where
        Dynamo cannot, the programs are given up (after one warning) and None returned, while
        the other functions stay compiled; elsewhere such an error is the caller's. A program
        to ``keep`` is loaded from `Precompiled` where it was compiled before, and kept there
        otherwise."""
        if self._functions is None or (whole and self._programs_failed):
            return None
        kept = whole and keep and keeps_programs()
        first = not kept and key not in self._functions
        if first:
            self._functions[key] = torch.compile(build(), mode=self.mode)
            tallies, start = _cache_tallies(), _compiling_seconds()
        try:
            if kept:
                return self._owned(self._program(key, build, args))
            result = self._owned(self._functions[key](*args))
        except torch._dynamo.exc.TorchDynamoException as error:
            no_compiler = isinstance(error, torch._dynamo.exc.BackendCompilerFailed)
            if not (no_compiler or whole):
                raise
            log.warning(FALLBACKS[no_compiler], str(error).splitlines()[0])
            if no_compiler:
                self._functions = None
            else:
                self._programs_failed = True
            return None
        if first:
            _say_how_it_compiled(self._cache_folder, start, tallies)
        return result

    def _owned(self, result: Any) -> Any:
        """``result`` as a caller may keep it across calls (a chain's state, a cached gradient):
        in a mode that replays CUDA graphs, each CUDA tensor copied out of the graph's memory,
        which its next replay writes over (``torch.compiler.cudagraph_mark_step_begin``'s
        documentation); otherwise as it is."""
        if self.mode not in CUDA_GRAPH_MODES:
            return result
        return tree_map(lambda t: t.clone() if isinstance(t, Tensor) and t.is_cuda else t, result)

    def _program(self, key: Hashable, build: Callable[[], Callable], args: tuple[Any, ...]) -> Any:
        """`call` of a sampler's program: the one made for ``args``, else one loaded or compiled
        (`Precompiled`), whose guards hold for them."""
        programs = self._programs.setdefault(key, [])
        program = next((p for p in programs if p.guard_check(*args)), None)
        if program is None:
            importing = _import_compiler()
            start, cpu = time.perf_counter(), _cpu_seconds()
            function = build()
            # where Inductor's caches are off (a caller's patch), no program is kept either
            path = self._kept.path(key, build, args) if _caching() else None
            program = None if path is None else self._kept.load(path, function, args)
            if program is None:
                program = self._kept.compile(path, function, args)
                how = "compiled a program in %.2f s (%.2f s of CPU)"
                how += "" if path is None else "; kept in %s for later runs"
            else:
                how = "loaded a compiled program in %.2f s (%.2f s of CPU) from %s"
            said = [time.perf_counter() - start, _cpu_seconds() - cpu]
            said += [] if path is None else [path]
            if importing[0] >= 0.01:  # the process's first program: say what it cost apart
                how += ", after importing torch's compiler in %.2f s (%.2f s of CPU)"
                said += importing
            log.info(how, *said)
            program.disable_guard_check()  # checked here, once
            programs.append(program)
        return program(*args)

    def or_eager(self, key: Hashable, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function``, compiled at its first call under ``key``, and called as it is where
        compiling failed."""

        def call(*args: Any) -> Any:
            result = self.call(key, lambda: function, *args)
            return function(*args) if result is None else result

        return call

    def grad_and_value(
        self,
        key: Hashable,
        function: Function,
        params: list[Tensor],
        x: Tensor,
        y: Tensor,
        args: tuple[Any, ...] = (),
    ) -> tuple[list[Tensor], Tensor] | None:
        """The gradient of ``function(params, x, y, *args)``'s ``U`` summed, in ``params``
        (detached values), and its value, by the compiled ``torch.func.grad_and_value`` of
        ``function``, which ``torch.compile`` traces whole; None: compute them eagerly. The
        gradients can be added to in place. It is built once under ``key``: what varies from
        call to call comes in ``args``, never in what ``function`` captures."""

        def build() -> Callable:
            # the potential keeps constants of each layout from its first use (the priors do),
            # which it may not make inside the compiled transform (torch 2.14: "Cannot access
            # storage of TensorWrapper" for stacked chains): that use is an eager one, as in
            # `program`
            with torch.no_grad():
                function(params, x, y, *args)
            differentiated = grad_and_value(_summed(function), has_aux=True)

            def evaluation(params: list[Tensor], x: Tensor, y: Tensor, *args: Any) -> Any:
                grads, (_, value) = differentiated(params, x, y, *args)
                return grads, value

            return evaluation

        compiled = self.call(key, build, params, x, y, *args)
        if compiled is None:
            return None
        grads, value = compiled
        return writable_gradients(grads), value

    def program(
        self,
        key: Hashable,
        potential: Function,
        x: Tensor,
        y: Tensor,
        *example: Any,
        keep: bool = False,
    ) -> Program:
        """The `Program` of a closure on the training set ``(x, y)`` whose potential at values
        ``q`` is ``potential(q, x, y, *at) -> (U, value)`` (`Function`): a sampler's ``fn`` run
        as one compiled program, its ``evaluate(q, *at)`` the value and the gradient of ``U``
        summed over the chains by ``torch.func``, a pure function that ``torch.compile`` traces
        into ``fn``. ``at`` says where in the data the potential is taken (a minibatch's
        indices); the full-data potential takes none. The potential keeps constants of each
        layout from its first use (the priors do), which a traced loop's body may not do: that
        first use is an eager evaluation at ``example``, before the program is compiled. A
        program to ``keep`` is kept whole for later runs (`Precompiled`): only one that draws
        nothing at random, since torch would keep a generator it reads by value, its state
        frozen in the file."""

        def evaluate(values: list[Tensor], *at: Any, x: Tensor, y: Tensor) -> Evaluation:
            differentiated = torch.func.grad(_summed(potential), has_aux=True)
            grads, value = differentiated(list(values), x, y, *at)
            return value, grads

        def run(fn: Callable, params: list[Tensor], *args: Any) -> Any:
            def build() -> Callable:
                with torch.no_grad():
                    potential(list(params), x, y, *example)

                def program(x: Tensor, y: Tensor, *args: Any) -> Any:
                    return fn(functools.partial(evaluate, x=x, y=y), *args)

                return program

            return self.call((key, fn), build, x, y, params, *args, whole=True, keep=keep)

        return run
