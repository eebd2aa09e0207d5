"""Secrets: which environment names hold credentials, and how their values are kept out
of what the tool prints.

The core never puts a token in a document on purpose (plans name secrets, never carry
them), but a log line can echo an environment and an error message can quote an argument.
So every output path (the CLI, the MCP server) redacts the values of this process's secret
environment variables, the token file ``hf auth login`` writes, and anything shaped like a
Hugging Face token.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from typing import Any

from instinct_serve.paths import hf_token_file, read_regular

# The Hub token's names, as huggingface_hub and vLLM read them.
HF_TOKEN_NAMES: tuple[str, ...] = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")

REDACTED = "[redacted]"

# A credential word as a whole part of the name: HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_...;
# not TOKENIZERS_PARALLELISM or MAX_TOKENS.
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)"
    r"(?:_|$)",
    re.I,
)
_MIN_SECRET = 8  # shorter values ("1", "true") are not worth redacting and would mangle text
# Hugging Face user/org access tokens: "hf_" and 30+ letters (34 today).
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")


def is_secret_name(name: str) -> bool:
    """An environment variable whose value is a credential (``HF_TOKEN``, ``*_API_KEY``...)."""
    return bool(_SECRET_NAME.search(name))


def looks_like_token(value: str) -> bool:
    """A value shaped like a Hugging Face access token, whatever variable holds it."""
    return bool(_HF_TOKEN.search(value))


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values to redact: secret-looking variables of the environment and the token file.

    Longest first, so a secret containing another is replaced whole.
    """
    env = dict(os.environ) if environ is None else environ
    found = {v.strip() for k, v in env.items() if is_secret_name(k)}
    with contextlib.suppress(OSError):  # a regular file only: a FIFO must not hang output
        found.add(read_regular(hf_token_file(), 4096).decode("utf-8", "replace").strip())
    return sorted((v for v in found if len(v) >= _MIN_SECRET), key=len, reverse=True)


class Redactor:
    """Replaces known secret values and token-shaped text in strings.

    What every output path uses (the CLI's ``serve``/``logs``/``diagnose`` and the MCP
    server alike): ``Redactor.default(extra)`` redacts ``secret_values()`` plus ``extra``
    (an endpoint's API key, the values of variables a plan passes by name).
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        found = {s.strip() for s in secrets if s and len(s.strip()) >= _MIN_SECRET}
        self.secrets = sorted(found, key=len, reverse=True)

    @classmethod
    def default(cls, extra: Iterable[str] = ()) -> Redactor:
        return cls([*secret_values(), *extra])

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return _HF_TOKEN.sub(REDACTED, value)

    def __call__(self, doc: Any) -> Any:
        """``doc`` (plain JSON types) with every string, keys included, redacted."""
        if isinstance(doc, str):
            return self.text(doc)
        if isinstance(doc, dict):
            return {self.text(str(k)): self(v) for k, v in doc.items()}
        if isinstance(doc, list | tuple):
            return [self(v) for v in doc]
        return doc
