"""bdl's modules import one another without a cycle: each can be read after the ones it builds
on. Every import counts, inside functions too (a lazy import hides a cycle, it does not remove
it) and under ``if TYPE_CHECKING:`` (a module that needs another's types to be read depends on
it)."""

import ast
from pathlib import Path

import bdl

SOURCE = Path(bdl.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, modules: set[str], package: str = "bdl") -> set[str]:
    """The modules of bdl that ``tree``, a module of ``package``, imports, each by the name it is
    imported by (``from bdl import papers`` imports ``bdl.papers``; ``from
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
        "from bdl import papers\n"
        "from bdl.samplers import HMC\n"
        "import bdl.run\n"
        "def lazy():\n"
        "    from bdl.plots import draw\n"
        "if TYPE_CHECKING:\n"
        "    from bdl.potential import Potential\n"
    )
    modules = {"bdl", "bdl.papers", "bdl.samplers", "bdl.run", "bdl.plots", "bdl.potential"}
    assert imported(tree, modules) == modules - {"bdl"}
    relative = ast.parse("from .base import Dataset\nfrom . import uci\n")
    data = {"bdl.data", "bdl.data.base", "bdl.data.uci"}
    assert imported(relative, data, "bdl.data") == {"bdl.data.base", "bdl.data.uci"}
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_module_of_bdl_imports_itself_through_others():
    graph = import_graph()
    assert {"bdl.report", "bdl.papers", "bdl.potential", "bdl.variational"} <= set(graph)
    assert cycle(graph) is None
