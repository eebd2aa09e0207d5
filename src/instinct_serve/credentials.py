"""Secrets: which environment names hold credentials, and how their values are kept out
of what the tool prints.

The core never puts a token in a document on purpose (plans name secrets, never carry
them), but a log line can echo an environment and an error message can quote an argument.
So every output path (the CLI, the MCP server) redacts the values of this process's secret
environment variables, the token file ``hf auth login`` writes, and anything shaped like a
known credential (Hub, OpenAI, GitHub, GitLab, Slack, Google, AWS keys, JWTs, a bearer
header, a password in a URL).

The same two rules refuse a value on the command line (``--env NAME=VALUE`` and
``--env-literal``): a name that says credential, or a value shaped like one.
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

# A credential word as a whole part of the name (parts are split by "_"): HF_TOKEN,
# NGROK_AUTHTOKEN, SSH_KEY, OPENAI_APIKEY, DB_PASS, AUTH_HEADER, SESSION_ID, COOKIE...;
# not TOKENIZERS_PARALLELISM or MAX_TOKENS (plural), KEYS_DIR, BYPASS, SSH_ASKPASS, PWD,
# AUTH_MODE. KEY is a credential alone or after a word that makes it one (API_KEY, SSH_KEY,
# SECRETKEY); a word merely ending in "key" (MONKEY, HOTKEY) is not.
_PART = r"(?:^|_)(?:{})(?:_|$)"
_WORDS = "|".join(
    (
        r"[A-Z0-9]*TOKEN",
        r"(?:API|SSH|SECRET|ACCESS|PRIVATE|AUTH|CLIENT|SESSION|SIGNING|ENCRYPTION|MASTER|LICENSE)?KEY",
        r"PASS|[A-Z0-9]*PASS(?:WORD|WD|PHRASE)",
        r"CREDENTIALS?|COOKIES?|BEARER|SESSID|SESSION_?ID|DSN|CONN(?:ECTION)?_?STR(?:ING)?",
    )
)
_SECRET_NAME = re.compile(
    _PART.format(_WORDS)
    # anywhere: the words that are never part of a harmless one
    + r"|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|AUTH_?HEADER|AUTHORIZATION"
    # AUTH as the last part (BASIC_AUTH, PROXY_AUTH); AUTH_MODE is a setting
    + r"|(?:^|_)[A-Z0-9]*AUTH$"
    # MYSQL_PWD, not PWD and OLDPWD (the working directories)
    + r"|_PWD(?:_|$)",
    re.I,
)
_MIN_SECRET = 8  # shorter values ("1", "true") are not worth redacting and would mangle text
# Shapes of credentials, whatever variable holds them; a group named ``secret`` (where
# there is one) is the part redacted, the rest (``Bearer ``, ``user:``) stays readable.
_SHAPES = re.compile(
    "|".join(
        (
            r"\bhf_[A-Za-z0-9]{30,}\b",  # Hugging Face (34 letters today)
            r"\bsk-[A-Za-z0-9_-]{20,}",  # OpenAI, Anthropic (sk-proj-..., sk-ant-...)
            r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",  # GitHub classic
            r"\bgithub_pat_[A-Za-z0-9_]{30,}",  # GitHub fine-grained
            r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab
            r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
            r"\bAIza[0-9A-Za-z_-]{35}",  # Google API key
            r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",  # AWS access key id
            r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",  # a JWT
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----",  # PEM (SSH, TLS)
            r"(?i:\bbearer\s+)(?P<bearer>[A-Za-z0-9._~+/-]{8,}=*)",  # an Authorization value
            r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]+:(?P<url>[^\s/@]+)@",  # user:password@
        )
    )
)

# Where an MCP caller's Hub token comes from: the server's own environment (the server
# launches with what it has: ``runtime.secret_env``), or the file ``hf auth login`` writes.
AGENT_TOKEN = (
    "the user gives this MCP server a read token of that account: HF_TOKEN in the server's "
    "environment (its entry in the MCP client's configuration, then restart it) or `hf auth "
    "login` on this machine"
)


def is_secret_name(name: str) -> bool:
    """An environment variable whose value is a credential (``HF_TOKEN``, ``*_API_KEY``,
    ``SSH_KEY``, ``DB_PASSWORD``, ``AUTH_HEADER``, ``SESSION_ID``...)."""
    return bool(_SECRET_NAME.search(name))


def looks_like_token(value: str) -> bool:
    """A value shaped like a credential (``hf_...``, ``sk-...``, ``ghp_...``, a JWT, an AWS
    key id, ``Bearer ...``, a URL with a password), whatever variable holds it."""
    return bool(_SHAPES.search(value))


def _hide_shape(match: re.Match[str]) -> str:
    """The match with its secret part redacted (all of it, for shapes without a part)."""
    for group in ("bearer", "url"):
        if match.group(group) is not None:
            start, end = match.span(group)
            base = match.start()
            text = match.group(0)
            return text[: start - base] + REDACTED + text[end - base :]
    return REDACTED


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
        return _SHAPES.sub(_hide_shape, value)

    def __call__(self, doc: Any) -> Any:
        """``doc`` (plain JSON types) with every string, keys included, redacted."""
        if isinstance(doc, str):
            return self.text(doc)
        if isinstance(doc, dict):
            return {self.text(str(k)): self(v) for k, v in doc.items()}
        if isinstance(doc, list | tuple):
            return [self(v) for v in doc]
        return doc
