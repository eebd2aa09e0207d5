"""The package's import structure: no module cycle, and the pure core stays pure.

Read from the source (``ast``), so an import inside a function counts as much as one at the
top; only imports under ``if TYPE_CHECKING:`` are left out (they never run). Importing
``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` too, so those are edges as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.infra.paths import REPO

SRC = REPO / "src"
PACKAGE = "instinct_serve"


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / PACKAGE).rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.is_package = is_package
        self.names: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.names.update(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.module.split(".")
            if not self.is_package:
                parts.pop()
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, *([node.module] if node.module else [])])
        self.names.add(base)
        self.names.update(f"{base}.{alias.name}" for alias in node.names)


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        visitor = _Imports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        edges: set[str] = set()
        for name in visitor.names:
            target = _resolve(name)
            if target is None:
                continue
            parts = target.split(".")
            for i in range(2, len(parts) + 1):  # the packages it runs on the way
                step = ".".join(parts[:i])
                if step in MODULES and step != module and not module.startswith(step + "."):
                    edges.add(step)
        graph[module] = edges
    return graph


GRAPH = _graph()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_local_imports_and_parent_packages() -> None:
    assert "instinct_serve.plan.render" in GRAPH["instinct_serve.runtime.docker_backend"]
    assert "instinct_serve.diagnose" in GRAPH["instinct_serve.runtime.retry"]


def test_no_module_import_cycle() -> None:
    assert _cycles(GRAPH) == []


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if m.startswith(f"{PACKAGE}.diagnose"))
)
def test_diagnose_is_pure(module: str) -> None:
    """Text in, findings out: no host, runtime, engine, CLI or agent behind it."""
    forbidden = ("hosts", "runtime", "engine", "cli", "agents")
    for target in GRAPH[module]:
        top = target.split(".")[1] if "." in target else target
        assert top not in forbidden, f"{module} imports {target}"


def test_vllm_args_depends_on_nothing_of_ours() -> None:
    assert GRAPH[f"{PACKAGE}.vllm_args"] == set()
