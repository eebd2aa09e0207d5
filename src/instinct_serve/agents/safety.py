"""What every MCP result goes through before it leaves: secret redaction and size bounds.

The core never puts a token in a document on purpose (plans name secrets, never carry
them), but an agent can paste anything into ``diagnose``, a log line can echo an
environment, and an error message can quote an argument. So the server redacts, in every
string of every result, the values of this process's secret environment variables (and of
the token file ``hf auth login`` writes) plus anything shaped like a Hugging Face
token, and bounds every string and the whole document, so one call cannot flood the
agent's context.
"""

from __future__ import annotations

from typing import Any

from instinct_serve.credentials import REDACTED, Redactor, is_secret_name, secret_values

__all__ = ["MAX_DOCUMENT", "REDACTED", "Redactor", "bound", "is_secret_name", "secret_values"]

MAX_STRING = 64 * 1024  # characters of one string value
MAX_LIST = 2000  # items of one list (tool-specific bounds are much lower)
MAX_DOCUMENT = 1024 * 1024  # characters of one serialized result


def bound(doc: Any) -> Any:
    """``doc`` with over-long strings cut (their end kept: logs fail at the end) and lists
    cut to ``MAX_LIST`` items. The tools bound their own outputs far below this; this is the
    last guard."""
    if isinstance(doc, str):
        if len(doc) > MAX_STRING:
            return f"[{len(doc) - MAX_STRING} characters cut]" + doc[-MAX_STRING:]
        return doc
    if isinstance(doc, dict):
        return {k: bound(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [bound(v) for v in doc[:MAX_LIST]]
    return doc
