"""Planning in tests: ``make_plan`` as a user's options would call it, the refusal it
raises, and a reason of the plan document (shared by the plan tests)."""

from __future__ import annotations

from typing import Any

import pytest

from instinct_serve.errors import InstinctError
from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions


def plan(model: str, gpu: str = "mi300x", **kw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = make_plan(PlanOptions(model=model, gpu=gpu, **kw)).to_dict()
    return doc


def refused(model: str, gpu: str = "mi300x", **kw: Any) -> InstinctError:
    with pytest.raises(InstinctError) as err:
        make_plan(PlanOptions(model=model, gpu=gpu, **kw))
    return err.value


def reason(doc: dict[str, Any], item: str) -> str:
    return next(r["why"] for r in doc["reasons"] if r["item"].startswith(item))
