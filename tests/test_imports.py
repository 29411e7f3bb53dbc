"""bdl's modules import one another without a cycle, and along its layers (the library below
the application's packages, the analysis never reaching into the runner): each can be read after
the ones it builds on. Every import counts, inside functions too (a lazy import hides a cycle, it
does not remove it) and under ``if TYPE_CHECKING:`` (a module that needs another's types to be
read depends on it)."""

import ast
import functools
import subprocess
import sys
from pathlib import Path

import bdl

SOURCE = Path(bdl.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, modules: set[str], package: str = "bdl") -> set[str]:
    """The modules of bdl that ``tree``, a module of ``package``, imports, each by the name it is
    imported by (``from bdl.analysis import papers`` imports ``bdl.analysis.papers``; ``from
    bdl.samplers import HMC`` the package ``bdl.samplers``; ``from .base import X`` in
    ``bdl.data`` imports ``bdl.data.base``)."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            parent = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (parent, node.module) if part)
            if module in modules:
                submodules = {f"{module}.{alias.name}" for alias in node.names}
                found.update(submodules & modules or {module})
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in SOURCE.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = imported(tree, set(paths), package) - {name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the modules along it, or None (depth-first search)."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for successor in sorted(graph[node]):
            if state.get(successor) == "open":
                return path[path.index(successor) :] + [successor]
            if successor not in state and (found := visit(successor)):
                return found
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_is_read_from_every_kind_of_import():
    tree = ast.parse(
        "from bdl.analysis import papers\n"
        "from bdl.samplers import HMC\n"
        "import bdl.runner.run\n"
        "def lazy():\n"
        "    from bdl.analysis.plots import draw\n"
        "if TYPE_CHECKING:\n"
        "    from bdl.potential import Potential\n"
    )
    modules = {
        "bdl",
        "bdl.analysis",
        "bdl.analysis.papers",
        "bdl.samplers",
        "bdl.runner.run",
        "bdl.analysis.plots",
        "bdl.potential",
    }
    assert imported(tree, modules) == modules - {"bdl", "bdl.analysis"}
    relative = ast.parse("from .base import Dataset\nfrom . import uci\n")
    data = {"bdl.data", "bdl.data.base", "bdl.data.uci"}
    assert imported(relative, data, "bdl.data") == {"bdl.data.base", "bdl.data.uci"}
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_module_of_bdl_imports_itself_through_others():
    graph = import_graph()
    assert {
        "bdl.analysis.report",
        "bdl.analysis.papers",
        "bdl.potential",
        "bdl.variational",
    } <= set(graph)
    assert cycle(graph) is None


#: the application's packages, by job; every other module of bdl is the library (what a config's
#: ``_target_`` names, and what those build on). ``bdl`` itself (the public names) and ``bdl.cli``
#: (the entry point) stand above all of them.
APPLICATION = ("bdl.composition", "bdl.storage", "bdl.analysis", "bdl.checks", "bdl.runner")
ENTRY_POINTS = {"bdl", "bdl.cli"}
#: what each application package may import besides the library
MAY_IMPORT = {
    "bdl.composition": set(),
    "bdl.storage": set(),
    "bdl.analysis": {"bdl.composition", "bdl.storage"},
    "bdl.checks": {"bdl.composition", "bdl.storage", "bdl.analysis"},
    "bdl.runner": {"bdl.composition", "bdl.storage", "bdl.analysis"},
}


def layer(module: str) -> str:
    if module in ENTRY_POINTS:
        return module
    return next((p for p in APPLICATION if module == p or module.startswith(p + ".")), "library")


def crossings(graph: dict[str, set[str]]) -> list[str]:
    """The imports that go against the layers: the library importing the application, an
    application package importing one it may not (the analysis never the runner, storage neither
    the analysis nor the runner), anything importing the entry points."""
    wrong = []
    for module, imports in sorted(graph.items()):
        own = layer(module)
        allowed = (
            {"library"} if own == "library" else {"library", own, *MAY_IMPORT.get(own, APPLICATION)}
        )
        if own in ENTRY_POINTS:
            allowed = {"library", *APPLICATION}
        wrong += [f"{module} -> {name}" for name in sorted(imports) if layer(name) not in allowed]
    return wrong


def test_the_layer_rules_are_read_from_the_graph():
    graph = {
        "bdl.potential": {"bdl.priors"},
        "bdl.priors": {"bdl.runner.run"},
        "bdl.storage.outputs": {"bdl.runner.checkpoint", "bdl.composition.config"},
        "bdl.analysis.report": {"bdl.analysis.plots", "bdl.runner.results"},
        "bdl.runner.run": {"bdl.analysis.plots", "bdl.cli"},
    }
    assert crossings(graph) == [
        "bdl.analysis.report -> bdl.runner.results",
        "bdl.priors -> bdl.runner.run",
        "bdl.runner.run -> bdl.cli",
        "bdl.storage.outputs -> bdl.composition.config",
        "bdl.storage.outputs -> bdl.runner.checkpoint",
    ]


def test_the_package_is_layered_by_job():
    graph = import_graph()
    assert {layer(module) for module in graph} == {"library", *APPLICATION, *ENTRY_POINTS}
    assert crossings(graph) == []


def folder(module: str) -> str:
    """The unit of ``module`` in the graph of folders: its folder below ``bdl`` (``bdl.runner``
    for ``bdl.runner.loop``), or itself for a module of ``bdl``'s own folder, whose modules are
    the library's flat pieces and the entry points, each a unit of its own."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (SOURCE / parts[1]).is_dir() else module


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    folders: dict[str, set[str]] = {}
    for module, imports in graph.items():
        own = folder(module)
        folders.setdefault(own, set()).update(folder(name) for name in imports)
        folders[own].discard(own)
    return folders


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest chain of imports in ``graph`` (which holds no cycle), as its units from the
    importing one down: how many layers a reader climbs from the bottom to the top."""

    @functools.cache
    def from_(node: str) -> tuple[str, ...]:
        below = [from_(successor) for successor in sorted(graph[node])]
        return (node, *max(below, key=len, default=()))

    return list(max((from_(node) for node in sorted(graph)), key=len))


#: The most layers the longest import chain between bdl's folders may climb: each layer more is
#: one more module a reader holds in mind to follow the top one (docs/development.md).
MOST_LAYERS = 10


def test_the_longest_chain_is_read_from_the_graph():
    graph = {"a": {"b", "c"}, "b": {"d"}, "c": set(), "d": set()}
    assert longest_chain(graph) == ["a", "b", "d"]
    modules = {"bdl.runner.loop": {"bdl.potential", "bdl.runner.steppers"}}
    modules |= {"bdl.runner.steppers": {"bdl.samplers.sghmc"}, "bdl.potential": set()}
    assert folder_graph(modules | {"bdl.samplers.sghmc": {"bdl.samplers.base"}}) == {
        "bdl.runner": {"bdl.potential", "bdl.samplers"},
        "bdl.samplers": set(),
        "bdl.potential": set(),
    }


def test_the_folders_climb_at_most_ten_layers():
    chain = longest_chain(folder_graph(import_graph()))
    assert chain[0] in ENTRY_POINTS
    assert len(chain) <= MOST_LAYERS, " -> ".join(chain)


def test_import_bdl_loads_no_hydra():
    """``import bdl`` (a saved run, a potential, the samplers) leaves Hydra unread: only
    composing a config needs it, and ``bdl.run_model`` brings it on first use."""
    program = (
        "import sys, bdl\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'hydra', 'bdl'}))\n"
        "bdl.run_model\n"
        "print('hydra' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:2] == ["['bdl']", "True"]
