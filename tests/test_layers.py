"""The import layers hold: the pure core imports no adapter and no I/O library, its step
packages import each other in one order only, no package reaches upward, and no module
imports itself through others.

Read from the source (``ast``), so an import inside a function counts as much as one at the
top; only imports under ``if TYPE_CHECKING:`` are left out (they never run). Importing
``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` too, so those are edges as well.

    pure core   hardware < catalog < fit < plan, diagnose and observe beside them (STEPS),
                + options names units paths errors jsonio credentials vllm_args data
                (SHARED)     (data in, data out: no HTTP, Hub, process, socket or temp file)
    gather      the I/O shell of the steps: detect on a host, sync recipes, assemble a plan
    adapters    hosts runtime engine checks     (hosts, processes, docker)
    front ends  agents (the MCP server), then cli (the command, which also starts the MCP
                server); the MCP server never imports the CLI
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.infra.paths import REPO

SRC = REPO / "src"
PACKAGE = "instinct_serve"

# The pure core's step packages, in order: each may import the ones listed (and SHARED).
CHAIN = ("hardware", "catalog", "fit", "plan")
STEPS: dict[str, set[str]] = {step: set(CHAIN[:i]) for i, step in enumerate(CHAIN)} | {
    "diagnose": {"hardware", "catalog"},  # beside the chain: log lines against the recipes
    "observe": {"hardware"},  # beside the chain: metrics and GPU readings
}
STEPS["plan"] |= {"observe"}  # a plan's Prometheus scrape config (observe.scrape)
# What each inference server answers (``servers``) is held by the steps below it; a plan asks it.
STEPS["servers"] = {"hardware", "catalog", "fit", "diagnose", "observe"}
STEPS["plan"] |= {"servers"}
# Modules every step may import; they import each other and, for the GPU names, hardware.
SHARED = {
    "options",
    "names",
    "units",
    "paths",
    "errors",
    "error_ids",
    "jsonio",
    "credentials",
    "vllm_args",
    "data",
    "__init__",
}
SHARED_MAY_IMPORT = SHARED | {"hardware"}
PURE = set(STEPS) | SHARED
# What the pure core never imports (gather/ and the adapters do the I/O).
IO_LIBRARIES = (
    "httpx",
    "huggingface_hub",
    "subprocess",
    "socket",
    "tempfile",
    "shutil",
    "concurrent.futures",
    "filelock",
    "requests",
    "urllib.request",
    "http.client",
)
GATHER = {"gather"}
ADAPTERS = {"hosts", "runtime", "engine", "checks"}
FRONT = {"cli", "agents", "__main__"}
# What each layer may import (besides itself).
ALLOWED = {
    "pure": PURE,
    "gather": PURE | GATHER | {"hosts"},
    "adapters": PURE | GATHER | ADAPTERS,
    "agents": PURE | GATHER | ADAPTERS | {"agents"},
    "cli": PURE | GATHER | ADAPTERS | {"cli", "agents"},  # `instinct mcp` starts the server
}


def layer(top: str) -> str:
    if top in PURE:
        return "pure"
    if top in GATHER:
        return "gather"
    if top in ADAPTERS:
        return "adapters"
    if top in FRONT:
        return "cli" if top == "__main__" else top
    raise AssertionError(f"instinct_serve.{top} is in no layer: add it to tests/test_layers.py")


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


def _imported(source: str, module: str, is_package: bool) -> set[str]:
    """Every name an import of ``source`` names (``a.b`` and ``a.b.c`` for ``from a.b import
    c``), those under ``if TYPE_CHECKING:`` aside."""
    visitor = _Imports(module, is_package)
    visitor.visit(ast.parse(source))
    return visitor.names


IMPORTS = {
    module: _imported(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
    for module, path in MODULES.items()
}


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        edges: set[str] = set()
        for name in IMPORTS[module]:
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


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_local_imports_and_parent_packages() -> None:
    assert "instinct_serve.plan.render" in GRAPH["instinct_serve.runtime.docker_backend"]
    assert "instinct_serve.diagnose" in GRAPH["instinct_serve.runtime.retry"]
    assert "instinct_serve.gather.plan" in GRAPH["instinct_serve.cli.plan"]


def test_no_module_import_cycle() -> None:
    assert _cycles(GRAPH) == []


def test_every_import_goes_down_the_layers() -> None:
    upward = []
    for module, deps in sorted(GRAPH.items()):
        mine = layer(top(module))
        for dep in sorted(deps):
            if top(dep) not in ALLOWED[mine] and top(dep) != top(module):
                upward.append(f"{module} ({mine}) imports {dep} ({layer(top(dep))})")
    assert upward == [], "\n".join(upward)


def _io_imports(names: set[str]) -> list[str]:
    """The I/O libraries among ``names``, each as the shortest name that imports it."""
    found = []
    for lib in IO_LIBRARIES:
        hits = sorted((n for n in names if n == lib or n.startswith(lib + ".")), key=len)
        if hits:
            found.append(hits[0])
    return found


def test_the_io_check_finds_io_imports() -> None:
    source = (
        "import os\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import httpx\n"
        "def f():\n"
        "    import subprocess\n"
        "    from concurrent.futures import ThreadPoolExecutor\n"
        "    from huggingface_hub.errors import GatedRepoError\n"
        "    import socketserver\n"
    )
    names = _imported(source, f"{PACKAGE}.fit.example", False)
    assert _io_imports(names) == ["huggingface_hub.errors", "subprocess", "concurrent.futures"]


def test_the_pure_core_imports_no_io_library() -> None:
    found = [
        f"{module} imports {name}"
        for module in sorted(MODULES)
        if layer(top(module)) == "pure"
        for name in _io_imports(IMPORTS[module])
    ]
    assert found == [], "\n".join(found)


def test_the_pure_steps_import_each_other_in_order() -> None:
    wrong = []
    for module, deps in sorted(GRAPH.items()):
        mine = top(module)
        if mine not in PURE:
            continue
        may = (STEPS[mine] | SHARED) if mine in STEPS else SHARED_MAY_IMPORT
        for dep in sorted(deps):
            theirs = top(dep)
            if theirs != mine and theirs in PURE and theirs not in may:
                wrong.append(f"{module} imports {dep}: {mine} may import only {sorted(may)}")
    assert wrong == [], "\n".join(wrong)


def test_vllm_args_depends_on_nothing_of_ours() -> None:
    assert GRAPH[f"{PACKAGE}.vllm_args"] == set()
