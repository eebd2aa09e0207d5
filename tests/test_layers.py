"""The import layers hold: the pure core imports no adapter, no package reaches upward, and
no module imports itself through others. Read from the source with ``ast`` (function-local
imports count; imports under ``if TYPE_CHECKING:`` do not, they never run).

    pure core   hardware catalog fit plan diagnose + options units paths errors jsonio
                credentials vllm_args data     (data in, data out)
    gather      the I/O shell of the steps: detect on a host, sync recipes, assemble a plan
    adapters    hosts runtime engine checks     (hosts, processes, docker)
    front ends  agents (the MCP server), then cli (the command, which also starts the MCP
                server); the MCP server never imports the CLI
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "instinct_serve"

PURE = {
    "hardware",
    "catalog",
    "fit",
    "plan",
    "diagnose",
    "options",
    "units",
    "paths",
    "errors",
    "jsonio",
    "credentials",
    "vllm_args",
    "data",
    "__init__",
}
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


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def runtime_imports(path: Path) -> set[str]:
    """The instinct_serve modules a file imports when it runs (anywhere in the file)."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("instinct_serve"):
                found.add(node.module)
                # `from instinct_serve.hardware import gfx`: the submodule too
                found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("instinct_serve"))
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges[name] = {m for m in runtime_imports(path) if m in modules and m != name}
    return edges


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_import_goes_down_the_layers() -> None:
    upward = []
    for module, deps in sorted(graph().items()):
        mine = layer(top(module))
        for dep in sorted(deps):
            if top(dep) not in ALLOWED[mine] and top(dep) != top(module):
                upward.append(f"{module} ({mine}) imports {dep} ({layer(top(dep))})")
    assert upward == [], "\n".join(upward)


def test_no_module_cycle() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert cycles == [], cycles


def test_the_checker_sees_function_local_imports() -> None:
    """The rule is only as good as its reading: a local import is an import."""
    local = PACKAGE / "cli" / "plan.py"
    assert "instinct_serve.gather.plan" in runtime_imports(local)
