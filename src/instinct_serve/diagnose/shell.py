"""Quoting log text into remediation commands without ever producing a broken command.

A user's failing line is the best search query, but it is untrusted text: it may hold a
single quote, a newline, an escape sequence or ``$(...)``. It is used only when it fits,
whole, inside one pair of single quotes (where the shell interprets nothing); otherwise the
command carries a fixed canonical description of the symptom instead. Never truncated:
a cut line would be a different, misleading query.
"""

from __future__ import annotations

MAX_QUOTED = 300  # longer lines are not useful as a search query


def quotable(text: str) -> bool:
    """Can ``text`` be one intact single-quoted shell word?"""
    return (
        0 < len(text) <= MAX_QUOTED
        and "'" not in text
        and text.isprintable()  # no newline, tab, escape, NUL or Unicode separators
        and text.strip() == text
    )


def quote_line(text: str | None, canonical: str) -> str:
    """``'text'`` when quotable, else ``'canonical'`` (which must itself be quotable)."""
    if not quotable(canonical):
        raise ValueError(f"canonical text is not a safe shell word: {canonical!r}")
    chosen = text if text is not None and quotable(text) else canonical
    return f"'{chosen}'"


def issue_search(text: str | None, canonical: str, repo: str = "vllm-project/vllm") -> str:
    """A ``gh`` command that searches the upstream tracker for this error."""
    return f"gh search issues --repo {repo} -- {quote_line(text, canonical)}"
