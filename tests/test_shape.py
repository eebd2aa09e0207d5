"""The code stays a size one person can hold: no module over 800 lines, no function over 80,
no class over 400 (issue 25: a 323-line ``build_plan`` and a 927-line ``Deployer`` were where
the decisions hid). When one of these fails, the seam is missing: make it rather than raise
the bound.

Read from the source with ``ast`` (a function's lines run from its ``def`` to its last
statement, decorators and docstring included).
"""

from __future__ import annotations

import ast

from tests.infra.paths import REPO

SRC = REPO / "src" / "instinct_serve"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 400


def _sizes(source: str) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """The module's line count, and each function's and class's (name, lines)."""
    tree = ast.parse(source)
    functions: list[tuple[str, int]] = []
    classes: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        end = getattr(node, "end_lineno", None)
        if end is None:
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions.append((node.name, end - node.lineno + 1))
        elif isinstance(node, ast.ClassDef):
            classes.append((node.name, end - node.lineno + 1))
    return len(source.splitlines()), functions, classes


def _over() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC.parent)
        lines, functions, classes = _sizes(path.read_text(encoding="utf-8"))
        if lines > MAX_MODULE_LINES:
            found.append(f"{where}: {lines} lines (module bound {MAX_MODULE_LINES})")
        found += [
            f"{where}:{name}: {n} lines (function bound {MAX_FUNCTION_LINES})"
            for name, n in functions
            if n > MAX_FUNCTION_LINES
        ]
        found += [
            f"{where}:{name}: {n} lines (class bound {MAX_CLASS_LINES})"
            for name, n in classes
            if n > MAX_CLASS_LINES
        ]
    return found


def test_the_measure_counts_functions_classes_and_modules() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = f"class C:\n    def long(self):\n{body.replace('    ', '        ')}\n"
    lines, functions, classes = _sizes(source)
    assert lines == MAX_FUNCTION_LINES + 2
    assert functions == [("long", MAX_FUNCTION_LINES + 1)]
    assert classes == [("C", MAX_FUNCTION_LINES + 2)]


def test_no_module_function_or_class_outgrows_its_bound() -> None:
    assert _over() == []


def test_the_source_tree_is_where_the_measure_looks() -> None:
    """An empty walk would pass the bound test while checking nothing."""
    assert (SRC / "__init__.py").is_file()
    assert len(list(SRC.rglob("*.py"))) > 100
