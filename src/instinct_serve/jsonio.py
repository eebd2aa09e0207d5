"""JSON encoding shared by the CLI, the MCP server and renderers: one stable form.

Dataclasses with ``to_dict()`` use it; pydantic models use ``model_dump(mode="json")``;
dates become ISO strings, enums their values, paths strings.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
from pathlib import PurePath
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types from dataclasses, pydantic models, enums, paths and dates.

    An object's own ``to_dict()`` wins over its shape, so a NamedTuple record with
    ``to_dict`` becomes an object, not a list.
    """
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict) and not isinstance(obj, type):
        return to_jsonable(to_dict())
    as_dict = getattr(obj, "_asdict", None)
    if isinstance(obj, tuple) and callable(as_dict):  # a NamedTuple record
        return to_jsonable(as_dict())
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    model_dump = getattr(obj, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json")
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value)
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, _dt.datetime | _dt.date):
        return obj.isoformat()
    return str(obj)


def dumps(doc: Any) -> str:
    return json.dumps(to_jsonable(doc), indent=2, ensure_ascii=False)
