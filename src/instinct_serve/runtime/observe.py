"""Reading running endpoints: their ``/metrics`` and the host's GPUs, for ``top`` and MCP.

The endpoints are ``ps``'s (``runtime.endpoints.list_endpoints``: containers labelled by
this tool, native processes it launched). ``/metrics`` is fetched the way ``ps`` probes
``/health``: on this machine directly, on a remote host through an ssh port forward
(``runtime.tunnel``), kept open across refreshes. vLLM never puts ``/metrics`` behind
``--api-key``, so no key is sent. GPU power, activity and memory come from ``amd-smi
metric --power --mem-usage --usage --json`` run through the ``Host``.

    with Observer(host, ["vllm-qwen3-8b"]) as obs:
        first = obs.refresh()      # since-start latencies, no rates yet
        time.sleep(2)
        doc = obs.refresh()        # rates and latencies over the last 2 s
"""

from __future__ import annotations

import datetime as dt
import json
import posixpath
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from instinct_serve import servers
from instinct_serve.errors import InstinctError, UsageError
from instinct_serve.gather.http import HttpErrors, get
from instinct_serve.hardware.values import Unparsable
from instinct_serve.observe.gpu import GpuSample, parse_metric
from instinct_serve.observe.top import EndpointView, TopDocument
from instinct_serve.observe.vllm import Snapshot, reading, snapshot

if TYPE_CHECKING:
    from instinct_serve.hosts import Host
    from instinct_serve.runtime.tunnel import Tunnel

SCRAPE_TIMEOUT_S = 5.0
AMD_SMI_TIMEOUT_S = 20.0
AMD_SMI_METRIC = ["amd-smi", "metric", "--power", "--mem-usage", "--usage", "--json"]
MAX_SCRAPE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Endpoint:
    """An endpoint ``ps`` lists, with what ``top`` and ``bench`` need to reach it."""

    name: str
    engine: str  # docker | native
    model: str | None
    port: int | None
    running: bool
    status: str
    plan_hash: str | None = None
    image: str | None = None
    served_model_name: str | None = None
    gpu_indices: list[int] | None = None
    entrypoint: list[str] | None = None  # docker: the container's entrypoint
    container_env: dict[str, str] | None = None  # docker: Config.Env (never printed)
    command: list[str] | None = None  # native: the argv it was launched with
    server: str = "vllm"  # the kind of server (``servers``): which metric names it has
    fingerprint: dict[str, Any] | None = None  # when it last passed (runtime.fingerprints)

    def view(self) -> EndpointView:
        return EndpointView(
            self.name,
            self.engine,
            self.model,
            self.port,
            self.plan_hash,
            self.gpu_indices,
            fingerprint=self.fingerprint,
        )


def _indices(text: str | None) -> list[int] | None:
    if not text:
        return None
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        return None
    return [int(p) for p in parts]


def _flag(args: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def docker_details(host: Host, name: str) -> dict[str, Any]:
    """Env, args and entrypoint of a container (``docker inspect``); {} when unreadable."""
    result = host.run(["docker", "inspect", "--type", "container", name], timeout=30)
    if not result.ok:
        return {}
    try:
        docs = json.loads(result.stdout)
    except ValueError:
        return {}
    if not isinstance(docs, list) or not docs or not isinstance(docs[0], dict):
        return {}
    doc = docs[0]
    config = doc.get("Config") if isinstance(doc.get("Config"), dict) else {}
    assert isinstance(config, dict)
    env = {}
    for item in config.get("Env") or []:
        if isinstance(item, str) and "=" in item:
            key, value = item.split("=", 1)
            env[key] = value
    args = [str(a) for a in doc.get("Args") or config.get("Cmd") or []]
    entry = config.get("Entrypoint")
    return {
        "env": env,
        "args": args,
        "entrypoint": [str(e) for e in entry] if isinstance(entry, list) else None,
    }


def endpoints(host: Host, names: Sequence[str] = ()) -> list[Endpoint]:
    """``ps``'s endpoints (all, or the ones named; an unknown name is an error)."""
    from instinct_serve.engine import launcher
    from instinct_serve.runtime.endpoints import list_endpoints

    # a name is asked for on purpose, whoever started it; all: the caller's own, as ps
    listing = list_endpoints(host, health=False, everyone=bool(names))
    rows = listing.rows
    if names:
        known = {r.name for r in rows}
        missing = [n for n in names if n not in known]
        if missing:
            shown = ", ".join(sorted(known)) or "none"
            raise InstinctError(
                f"no endpoint named {', '.join(missing)} on {host.name} (endpoints: {shown})",
                fix="list them with `instinct ps`",
                id="not_found",
            )
        rows = [r for r in rows if r.name in names]
    found = []
    for row in rows:
        gpus = served = entry = command = None
        env: dict[str, str] | None = None
        if row.engine == "docker" and row.running:
            details = docker_details(host, row.name)
            env = dict(details.get("env") or {})
            gpus = _indices(env.get("HIP_VISIBLE_DEVICES") or env.get("ROCR_VISIBLE_DEVICES"))
            served = _flag(details.get("args") or [], "--served-model-name")
            entry = details.get("entrypoint")
        elif row.engine == "native":
            proc = launcher.load(host, row.name)
            if proc is not None:
                meta = proc.meta
                raw = meta.get("gpu_indices")
                if isinstance(raw, list) and all(isinstance(i, int) for i in raw):
                    gpus = list(raw)
                served = str(meta.get("served_model_name") or "") or None
                command = list(proc.argv)
        found.append(
            Endpoint(
                name=row.name,
                engine=row.engine,
                model=row.model,
                port=row.port,
                running=row.running,
                status=row.status,
                plan_hash=row.plan_hash,
                image=row.image,
                served_model_name=served,
                gpu_indices=gpus,
                entrypoint=entry,
                container_env=env,
                command=command,
                server=row.server,
                fingerprint=(row.verified or {}).get("fingerprint"),
            )
        )
    return found


def gpu_samples(host: Host) -> tuple[list[GpuSample] | None, str | None]:
    """The host's GPUs from amd-smi, or (None, why not)."""
    result = host.run(AMD_SMI_METRIC, timeout=AMD_SMI_TIMEOUT_S)
    if result.returncode == 127:
        return None, f"amd-smi is not installed on {host.name}: no GPU power or memory"
    if result.timed_out:
        return None, f"amd-smi metric did not answer within {AMD_SMI_TIMEOUT_S:g} s"
    try:
        return parse_metric(result.stdout), None
    except Unparsable as exc:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
        why = tail[0][:200] or str(exc)
        return None, f"amd-smi metric failed (exit {result.returncode}): {why}"


_SCRAPE_ERRORS = HttpErrors(
    unreachable=lambda url, exc: InstinctError(
        f"GET {url} failed: {type(exc).__name__}: {exc}",
        fix="check the endpoint with `instinct ps`",
        id="scrape_failed",
    ),
    status=lambda url, resp: InstinctError(
        f"GET {url} answered HTTP {resp.status_code}",
        fix="a vLLM still loading answers 503; wait for `instinct ps` to say healthy",
        id="scrape_failed",
    ),
)


class Scraper:
    """``GET /metrics`` of endpoints on one host; remote ports through kept-open tunnels."""

    def __init__(self, host: Host, timeout: float = SCRAPE_TIMEOUT_S) -> None:
        self.host = host
        self.timeout = timeout
        self._tunnels: dict[int, Tunnel] = {}

    def base_url(self, port: int) -> str:
        from instinct_serve.runtime.tunnel import Tunnel

        if self.host.is_local:
            return f"http://127.0.0.1:{port}"
        tunnel = self._tunnels.get(port)
        if tunnel is not None and not tunnel.alive():
            tunnel.close()
            tunnel = None
        if tunnel is None:
            tunnel = Tunnel(self.host, port)
            tunnel.open()
            self._tunnels[port] = tunnel
        return tunnel.base_url

    def metrics(self, port: int) -> str:
        """The ``/metrics`` text; ``InstinctError`` (id ``scrape_failed``) when unreadable."""
        import httpx

        url = f"{self.base_url(port)}/metrics"
        with httpx.Client(timeout=self.timeout, trust_env=False) as client:
            resp = get(client, url, _SCRAPE_ERRORS)
        return resp.text[:MAX_SCRAPE_BYTES]

    def close(self) -> None:
        for tunnel in self._tunnels.values():
            tunnel.close()
        self._tunnels.clear()


class Observer:
    """Repeated readings of a host's endpoints (all of ``ps``'s, or the named ones)."""

    def __init__(
        self,
        host: Host,
        names: Sequence[str] = (),
        *,
        gpus: bool = True,
        clock: Callable[[], float] = time.monotonic,
        scrape_timeout: float = SCRAPE_TIMEOUT_S,
    ) -> None:
        self.host = host
        self.names = list(names)
        self.gpus = gpus
        self.clock = clock
        self.scraper = Scraper(host, scrape_timeout)
        self._previous: dict[tuple[str, str | None, int | None], Snapshot] = {}

    def refresh(self, *, gpus: bool | None = None) -> TopDocument:
        """One scrape of every endpoint (and the GPUs unless ``gpus`` is False), with rates
        since the last one."""
        views = []
        for ep in endpoints(self.host, self.names):
            if not ep.running and not self.names:
                continue  # a stopped endpoint `ps` still lists: only shown when named
            view = ep.view()
            views.append(view)
            if not ep.running or not ep.port:
                view.error = f"not running ({ep.status})" if not ep.running else "no port"
                continue
            try:
                text = self.scraper.metrics(ep.port)
            except InstinctError as exc:
                view.error = exc.message
                continue
            now = snapshot(text, self.clock(), servers.get(ep.server).metric_names)
            key = (ep.name, ep.plan_hash, ep.port)
            view.reading = reading(now, self._previous.get(key))
            self._previous[key] = now
        read_gpus = self.gpus if gpus is None else gpus and self.gpus
        samples, problem = gpu_samples(self.host) if read_gpus else (None, None)
        at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        notes = []
        if not views:
            notes.append(f"no instinct-serve endpoint on {self.host.name} (`instinct serve`)")
        return TopDocument(self.host.name, views, samples, problem, at, notes)

    def close(self) -> None:
        self.scraper.close()

    def __enter__(self) -> Observer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


MAX_WINDOW_S = 60.0


def observe_once(
    host: Host, names: Sequence[str] = (), window_s: float = 2.0, *, gpus: bool = True
) -> TopDocument:
    """One reading: two scrapes ``window_s`` apart (rates over the window), or a single
    scrape when ``window_s`` is 0 (latencies since start, no rates)."""
    if not 0 <= window_s <= MAX_WINDOW_S:
        raise UsageError(
            f"the window must be 0 to {MAX_WINDOW_S:g} s, not {window_s:g}",
            fix="e.g. --interval 2",
            id="bad_interval",
        )
    with Observer(host, names, gpus=gpus) as obs:
        if window_s == 0:
            return obs.refresh()
        obs.refresh(gpus=False)  # the rates' starting point: GPUs are read once, at the end
        time.sleep(window_s)
        return obs.refresh()


def executable_in_entrypoint(entrypoint: Sequence[str] | None, name: str) -> str | None:
    """The executable called ``name`` in an image's entrypoint, as the entrypoint spells it
    (``[.../vllm, "serve"]``: ``.../vllm``); None when it has none (``lmsysorg/sglang``)."""
    for word in entrypoint or ():
        if posixpath.basename(word) == name:
            return word
    return None
