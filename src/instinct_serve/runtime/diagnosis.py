"""``diagnose`` an endpoint on a host: read its log, hand the text to the pure rules.

The I/O half of ``instinct diagnose --container NAME`` and of the MCP ``diagnose`` tool
(``diagnose`` itself only ever sees text). The log is a container's (``docker logs``) or a
native process's log file, so the command that a failed ``serve --engine native``
suggests works too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from instinct_serve.diagnose import DiagnoseContext, Diagnosis, diagnose
from instinct_serve.errors import InstinctError, NotReadyError, UsageError
from instinct_serve.paths import hf_home

if TYPE_CHECKING:
    from instinct_serve.hosts import Host

ENDPOINT_TAIL = 5000  # log lines handed to diagnose
MAX_LOG_BYTES = 64 * 2**20  # the end of a longer log is kept: that is where failures are


def keep_end(text: str, limit: int) -> str:
    """The last ``limit`` bytes of ``text`` (UTF-8), whole characters only."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text
    return data[-limit:].decode("utf-8", errors="ignore")


def endpoint_log(
    host: Host, name: str, *, managed_only: bool, tail: int = ENDPOINT_TAIL
) -> tuple[str, str]:
    """(docker | native, the last ``tail`` lines of the container or native process
    ``name``), secrets redacted (``endpoints.log_redactor``: the caller's secrets,
    token-shaped text and the endpoint's API key; the same text for the CLI and MCP). The
    route names the findings' words (``diagnose.wording``).

    ``managed_only``: refuse (``not_managed``) a container this tool did not start, as the
    MCP tools do; the CLI diagnoses any container the user names.
    """
    from instinct_serve.runtime.endpoints import log_redactor

    engine, text = _raw_log(host, name, managed_only, tail)
    return engine, log_redactor(host, name).text(text)


def _raw_log(host: Host, name: str, managed_only: bool, tail: int) -> tuple[str, str]:
    if managed_only:
        from instinct_serve.runtime.endpoints import read_log

        engine, text = read_log(host, name, tail, managed_only=True)
        return engine, keep_end(text, MAX_LOG_BYTES)
    from instinct_serve.engine import launcher
    from instinct_serve.runtime.docker import Docker

    try:
        return "docker", keep_end(Docker(host).logs(name, tail=tail), MAX_LOG_BYTES)
    except InstinctError as exc:  # no such container, or no Docker at all: a native one?
        if not isinstance(exc, NotReadyError) and exc.id != "container_not_found":
            raise
        missing = exc
    try:
        process = launcher.load(host, name)
    except UsageError:  # not a valid process name: it can only have been a container
        process = None
    if process is None:
        raise missing
    result = host.run(["tail", "-n", str(tail), process.log_path], timeout=60)
    return "native", keep_end(result.stdout, MAX_LOG_BYTES)


def diagnose_endpoint(
    host: Host, name: str, context: DiagnoseContext | None = None, *, managed_only: bool
) -> Diagnosis:
    """``diagnose`` over the endpoint's log, in the words of its route (a native process:
    directories and the host's settings); ``empty_log`` when it logged nothing."""
    engine, text = endpoint_log(host, name, managed_only=managed_only)
    if not text.strip():
        raise UsageError("the log is empty", fix="check the log source", id="empty_log")
    if engine == "native":
        context = replace(context or DiagnoseContext(), launcher=engine, hf_home=hf_home(host))
    return diagnose(text, context)
