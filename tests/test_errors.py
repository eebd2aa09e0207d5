"""The error-id registry (``error_ids.ERRORS``) and the source agree.

Read from the source with ``ast``: every error constructor (``InstinctError`` and its
subclasses, found by their ``class`` statements) gives an id: its literal ``id=`` (both arms of
``a if c else b``), or the class's ``default_id`` when it passes none. Ids handed to a helper
that raises them (``error_id=``, ``timeout_id=``, as an argument, a default or a keyword
dict), records raised by their id later (``RECORDS``: a plan refusal) and hand-written error
documents (``{"id": ..., "message": ..., "fix": ...}``) count too; an ``id=`` taken from a
variable (``exc.id``: re-raising a caught error) is not a new id.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from instinct_serve import error_ids
from instinct_serve.error_ids import ERRORS, OPTION_ERROR, option_ids
from instinct_serve.errors import ExitCode, HostError, InstinctError, NotReadyError, UsageError
from tests.infra.paths import REPO

SRC = REPO / "src" / "instinct_serve"
BASES = {cls.__name__: cls for cls in (InstinctError, UsageError, NotReadyError, HostError)}
ID_PARAMS = {"error_id", "timeout_id"}  # parameters of helpers that raise the id they get
# Records whose id (the first argument) is raised as an error of this exit class later:
# a plan refusal stops the plan as an InstinctError (plan.planner._refuse).
RECORDS = {"Refusal": ExitCode.FAILED}


def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text()) for path in sorted(SRC.rglob("*.py"))}


TREES = _trees()


def _error_classes() -> dict[str, tuple[ExitCode, str]]:
    """Every error class by name: (exit code, default id), subclasses defined in the source
    included (``class SyncError(InstinctError)``)."""
    classes = {name: (cls.exit_code, cls.default_id) for name, cls in BASES.items()}
    grew = True
    while grew:
        grew = False
        for tree in TREES.values():
            for node in ast.walk(tree):
                if not isinstance(node, ast.ClassDef) or node.name in classes:
                    continue
                parents = [b.id for b in node.bases if isinstance(b, ast.Name)]
                parent = next((classes[p] for p in parents if p in classes), None)
                if parent is None:
                    continue
                default = parent[1]
                for stmt in node.body:
                    target = stmt.targets[0] if isinstance(stmt, ast.Assign) else None
                    if isinstance(target, ast.Name) and target.id == "default_id":
                        assert isinstance(stmt, ast.Assign)
                        default = ast.literal_eval(stmt.value)
                classes[node.name] = (parent[0], default)
                grew = True
    return classes


CLASSES = _error_classes()


def _literals(node: ast.expr | None) -> list[str]:
    """The string ids an expression can take: a literal, or both arms of ``a if c else b``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    return []


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _raised() -> dict[str, set[tuple[ExitCode | None, str]]]:
    """id -> {(exit code of the raise site, where)}; None where the class is not known here
    (an id handed to a helper, a hand-written error document)."""
    found: dict[str, set[tuple[ExitCode | None, str]]] = defaultdict(set)
    for path, tree in TREES.items():
        where = str(path.relative_to(SRC))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                kwargs = {k.arg: k.value for k in node.keywords if k.arg}
                name = _call_name(node)
                if name in CLASSES:
                    exit_code, default = CLASSES[name]
                    ids = _literals(kwargs["id"]) if "id" in kwargs else [default]
                    for id_ in ids:
                        found[id_].add((exit_code, f"{where}:{node.lineno}"))
                if name in RECORDS:
                    first = kwargs.get("id", node.args[0] if node.args else None)
                    for id_ in _literals(first):
                        found[id_].add((RECORDS[name], f"{where}:{node.lineno}"))
                for key in ID_PARAMS & set(kwargs):
                    for id_ in _literals(kwargs[key]):
                        found[id_].add((None, f"{where}:{node.lineno}"))
            elif isinstance(node, ast.arguments):
                params = [*node.posonlyargs, *node.args, *node.kwonlyargs]
                defaults = [
                    *[None] * (len(node.posonlyargs) + len(node.args) - len(node.defaults)),
                    *node.defaults,
                    *node.kw_defaults,
                ]
                for param, default_value in zip(params, defaults, strict=True):
                    if param.arg in ID_PARAMS:
                        for id_ in _literals(default_value):
                            found[id_].add((None, where))
            elif isinstance(node, ast.Dict):
                keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
                for key, value in zip(keys, node.values, strict=True):
                    if key in ID_PARAMS or (key == "id" and {"message", "fix"} <= set(keys)):
                        for id_ in _literals(value):
                            found[id_].add((None, where))
    return found


RAISED = _raised()


def test_the_walk_finds_the_raise_sites() -> None:
    """The walk itself works: it sees the kinds of raise site the registry depends on."""
    assert {"SyncError", "UvError", "HubError", "ApiError", "GitError"} <= set(CLASSES)
    assert "uv_failed" in RAISED  # UvError(...) without id=: the class's default id
    assert "warmup_timeout" in RAISED  # handed to a helper as timeout_id=
    assert "internal_error" in RAISED  # a hand-written error document (the MCP server)
    assert "needs_nightly" in RAISED  # a plan refusal
    assert len(RAISED) > 150


def test_every_raised_id_is_in_the_registry() -> None:
    unknown = {
        id_: sorted(where for _exit, where in sites)
        for id_, sites in RAISED.items()
        if error_ids.lookup(id_) is None
    }
    assert not unknown, f"add these ids to error_ids.ERRORS: {unknown}"


def test_every_registry_entry_is_raised() -> None:
    assert not sorted(set(ERRORS) - set(RAISED)), "ids in error_ids.ERRORS that nothing raises"


def test_option_ids_are_declared_once_by_the_pattern() -> None:
    """``bad_<option>`` ids come from ``options``; an explicit entry would say it twice."""
    ids = option_ids()
    assert {"bad_tp", "bad_port", "bad_model"} <= ids
    assert not sorted(ids & set(ERRORS))
    assert error_ids.lookup("bad_tp") is OPTION_ERROR
    assert OPTION_ERROR.exit == ExitCode.USAGE


def test_every_raise_site_uses_an_exit_class_of_its_id() -> None:
    wrong = []
    for id_, sites in RAISED.items():
        entry = error_ids.lookup(id_)
        if entry is None:
            continue  # reported by test_every_raised_id_is_in_the_registry
        for exit_code, where in sites:
            if exit_code is not None and exit_code not in entry.exits:
                wrong.append(f"{where}: {id_} raised with exit {int(exit_code)}")
    assert not wrong, "\n".join(sorted(wrong))


def test_each_exit_class_listed_is_used() -> None:
    """An ``also`` class that no raise site uses any more is stale: drop it."""
    stale = []
    for id_, entry in ERRORS.items():
        used = {code for code, _where in RAISED.get(id_, ()) if code is not None}
        if used and set(entry.exits) != used:
            stale.append(f"{id_}: registry {sorted(map(int, entry.exits))}, raised {sorted(used)}")
    assert not stale, "\n".join(stale)


@pytest.mark.parametrize("cls", [InstinctError, UsageError, NotReadyError, HostError])
def test_the_default_ids_carry_their_class_exit(cls: type[InstinctError]) -> None:
    entry = error_ids.lookup(cls.default_id)
    assert entry is not None and entry.exit == cls.exit_code
    assert cls("x").exit_code == entry.exit


def test_every_entry_has_a_fix() -> None:
    for id_, entry in ERRORS.items():
        assert id_.isidentifier() and id_ == id_.lower(), id_
        assert entry.fix.strip() and not entry.fix.endswith("."), id_
        assert len(set(entry.exits)) == len(entry.exits), id_
