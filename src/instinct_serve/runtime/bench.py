"""``instinct bench``: run a server's own benchmark client against a running endpoint, store
the run.

The client is the endpoint's server kind's (``ServerKind.bench_client``: ``vllm bench serve``
for vLLM, ``python3 -m sglang.bench_serving`` for SGLang), or vLLM's with ``--vllm``. Which
executable runs it, in order:

1. ``--vllm PATH`` (a benchmark-capable vLLM on the host, e.g. another venv's): vLLM's client,
   whatever the server;
2. a Docker endpoint: the endpoint's own image, ``docker run --rm --network host
   --volumes-from ENDPOINT --entrypoint EXECUTABLE IMAGE ARGS...`` (the same server release,
   the same model cache, offline; the executable as the image's entrypoint names it, else the
   client's own: ``vllm``, ``python3``), results written to a temporary directory on the host;
3. a native endpoint: the executable it was launched with when it is the client's, else the
   managed engine's (``engine.discovery``) when it provides the client (vLLM's), else the
   client's executable on the host's PATH.

Each concurrency step is bounded: ``--num-prompts`` requests and a wall-clock limit (the
process, or the benchmark container, is killed when it is exceeded). Runs are stored on
this machine under ``<data dir>/bench/<plan hash>/<UTC time>.json``.

What a user names is never a glob nor a path into the store: ``compare``'s argument is a
file (it has a ``/``, starts with ``~`` or ``.``, ends in ``.json``, or is a file here: a
regular one, read with ``paths.read_regular``) or the prefix of a plan hash (``PLAN_REF``),
matched against the store's folder names; a plan hash from a container's label names a
folder only when it is a plain name.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import posixpath
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import InstinctError, NotReadyError, UsageError
from instinct_serve.names import CONTAINER_NAME
from instinct_serve.observe.bench import (
    VLLM_CLIENT,
    BenchClient,
    BenchRun,
    Point,
    Settings,
    from_bench_result,
)
from instinct_serve.runtime.observe import Endpoint, endpoints, executable_in_entrypoint

if TYPE_CHECKING:
    from instinct_serve.hosts import Host

# Environment of the endpoint's container that locates the model cache for the tokenizer.
CACHE_ENV = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE")
# what both clients send as "Authorization: Bearer" (vllm bench serve; sglang.bench_serving's
# get_auth_headers)
API_KEY_ENV = "OPENAI_API_KEY"
OUTPUT_TAIL = 1500
PLAN_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # a plan hash (prefix), or no-plan
NO_PLAN = "no-plan"
REFERENCE_POINTS = "reference_points.json"


def resolve(host: Host, name: str | None) -> Endpoint:
    """The endpoint to benchmark: the named one, or the only running one."""
    if name is not None and not CONTAINER_NAME.fullmatch(name):
        raise UsageError(
            f"invalid endpoint name {name[:80]!r}",
            fix="name a running endpoint (`instinct ps` lists them), or none for the only one",
            id="bad_name",
        )
    found = endpoints(host, [name] if name else [])
    if name is None:
        running = [e for e in found if e.running and e.port]
        if not running:
            raise NotReadyError(
                f"no running instinct-serve endpoint on {host.name}",
                fix="start one with `instinct serve MODEL`, or name it",
                id="no_endpoint",
            )
        if len(running) > 1:
            names = ", ".join(e.name for e in running)
            raise UsageError(
                f"{len(running)} endpoints run on {host.name} ({names}): name one",
                fix="instinct bench NAME",
                id="ambiguous_endpoint",
            )
        return running[0]
    endpoint = found[0]
    if not endpoint.running or not endpoint.port:
        raise NotReadyError(
            f"endpoint {endpoint.name} is not running ({endpoint.status})",
            fix="start it again with `instinct serve`",
            id="not_running",
        )
    return endpoint


@dataclass
class Runner:
    """How each step is started on the host, and what to clean up."""

    kind: str  # docker | native | path
    prefix: list[str]  # argv before the client's (`bench serve ...`, `-m sglang.bench_serving`)
    result_dir: str
    env: dict[str, str] = field(default_factory=dict)
    client: BenchClient = VLLM_CLIENT
    container: str | None = None  # docker: the benchmark container's name

    def describe(self) -> list[str]:
        return list(self.prefix)


def _mktemp(host: Host) -> str:
    made = host.run(["mktemp", "-d", "-t", "instinct-bench.XXXXXX"], timeout=30)
    path = made.stdout.strip()
    if not made.ok or not path.startswith("/"):
        raise InstinctError(
            f"cannot create a temporary directory on {host.name}: {made.stderr.strip()}",
            id="bench_failed",
        )
    return path


def runner(
    host: Host,
    endpoint: Endpoint,
    *,
    vllm: str | None = None,
    api_key: str | None = None,
) -> Runner:
    """How to run the benchmark client against ``endpoint`` on ``host``."""
    from instinct_serve import servers

    env = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    if api_key:
        env[API_KEY_ENV] = api_key
    if vllm:
        return Runner("path", [vllm], _mktemp(host), env, VLLM_CLIENT)
    client = servers.get(endpoint.server).bench_client
    if endpoint.engine == "docker":
        if not endpoint.image:
            raise InstinctError(f"cannot tell the image of {endpoint.name}", id="bench_failed")
        result_dir = _mktemp(host)
        container = f"instinct-bench-{uuid.uuid4().hex[:8]}"
        argv = ["docker", "run", "--rm", "--name", container, "--network", "host"]
        argv += ["--volumes-from", endpoint.name]
        for key in CACHE_ENV:
            value = (endpoint.container_env or {}).get(key)
            if value:
                argv += ["-e", f"{key}={value}"]
        for key in env:
            argv += ["-e", key]  # by name: docker copies the value from our environment
        argv += ["-v", f"{result_dir}:{result_dir}"]
        executable = executable_in_entrypoint(endpoint.entrypoint, client.executable)
        argv += ["--entrypoint", executable or client.executable]
        argv.append(endpoint.image)
        return Runner("docker", argv, result_dir, env, client, container)
    command = None
    if endpoint.command and _same_executable(endpoint.command[0], client.executable):
        command = endpoint.command[0]  # the install it runs: SGLang's interpreter, vLLM's script
    if command is None:
        command = _host_executable(host, client)
    return Runner("native", [command], _mktemp(host), env, client)


_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


def _same_executable(path: str, executable: str) -> bool:
    """``path`` runs ``executable``: the same name, or both a Python interpreter (a native
    SGLang is launched by the interpreter discovery found: ``.../venv/bin/python``)."""
    name = posixpath.basename(path)
    if name == executable:
        return True
    return bool(_PYTHON.fullmatch(name) and _PYTHON.fullmatch(executable))


def _host_executable(host: Host, client: BenchClient) -> str:
    """The client's executable here: the engine's when the engine provides it, else on PATH."""
    from instinct_serve.engine import discovery

    found = None
    if client.engine:
        try:
            found = discovery.discover(host, probe=False)
        except InstinctError:
            found = None
    if found is not None and found.engine is not None:
        return found.engine.vllm_command
    path = host.which(client.executable)
    if path:
        return path
    raise NotReadyError(
        f"no {client.executable} to run {client.title} with on {host.name}",
        fix="install the server it comes with (`instinct engine install` for vLLM), or pass "
        "--vllm /path/to/vllm to run vLLM's client",
        id="vllm_not_found",
    )


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


StepCallback = Callable[[int, Point | None, dict[str, Any] | None], None]
StartCallback = Callable[[int, int, int], None]  # concurrency, step (from 1), steps


def run(
    host: Host,
    endpoint: Endpoint,
    settings: Settings,
    *,
    vllm: str | None = None,
    api_key: str | None = None,
    tokenizer: str | None = None,
    on_step: StepCallback | None = None,
    on_start: StartCallback | None = None,
) -> BenchRun:
    """Every concurrency step against ``endpoint``; failures are recorded, not raised.
    ``on_start`` hears of each step as it begins, ``on_step`` as it ends."""
    assert endpoint.port is not None
    bench = BenchRun(
        plan_hash=endpoint.plan_hash,
        endpoint=endpoint.name,
        model=endpoint.model,
        engine=endpoint.engine,
        host=host.name,
        started_at=_now(),
        settings=settings,
        image=endpoint.image,
    )
    how = runner(host, endpoint, vllm=vllm, api_key=api_key)
    bench.command = how.describe()
    bench.client = how.client.title
    model = endpoint.model or endpoint.served_model_name or ""
    try:
        for index, level in enumerate(settings.concurrency, 1):
            if on_start is not None:
                on_start(level, index, len(settings.concurrency))
            point, error = _step(host, how, endpoint, model, tokenizer, level, settings)
            if point is not None:
                bench.points.append(point)
            if error is not None:
                bench.errors.append(error)
            if on_step is not None:
                on_step(level, point, error)
            if point is None:  # nothing measured: the next steps would fail the same way
                skipped = [c for c in settings.concurrency if c > level]
                if skipped:
                    bench.errors.append(
                        {"concurrency": skipped, "message": "skipped after the failed step"}
                    )
                break
    finally:
        host.run(["rm", "-rf", "--", how.result_dir], timeout=30)
    return bench


def sweep(
    host: Host,
    endpoint: Endpoint,
    settings: Settings,
    *,
    vllm: str | None = None,
    api_key: str | None = None,
    tokenizer: str | None = None,
    gpu_name: str | None = None,
    store: bool = True,
    on_step: StepCallback | None = None,
    on_start: StartCallback | None = None,
) -> tuple[BenchRun, dict[str, Any]]:
    """``bench``, the CLI's and the MCP tool's: the run (stored unless ``store`` is False
    or nothing was measured) and AMD's published points next to it (``gpu_name``: that
    GPU's, else the endpoint's)."""
    result = run(
        host,
        endpoint,
        settings,
        vllm=vllm,
        api_key=api_key,
        tokenizer=tokenizer,
        on_step=on_step,
        on_start=on_start,
    )
    if result.points and store:
        save(result)
    gpu, gpus = gpu_of_endpoint(host, endpoint)
    if gpu_name:
        from instinct_serve.hardware.profiles import get_profile

        gpu = get_profile(gpu_name).key
    return result, against_reference(result, gpu, gpus)


def against_reference(run: BenchRun, gpu: str | None, gpus: int | None) -> dict[str, Any]:
    """The run next to AMD's published points (``observe.reference_points``)."""
    import json

    from instinct_serve.catalog.overrides import data_text
    from instinct_serve.observe import reference_points as ref

    points = ref.points_from_doc(json.loads(data_text(REFERENCE_POINTS)))
    return {
        "source": f"AMD's published figures ({REFERENCE_POINTS}; each point names its source)",
        "gpu": gpu,
        "gpus": gpus,
        "points": ref.against(run, gpu, gpus, points),
    }


_ERROR_LINE = re.compile(r"^\s*([\w.]*(?:Error|Exception)\b.*)$")


def last_error_line(output: str) -> str | None:
    """The last ``SomethingError: why`` line of a traceback, shortened."""
    found = None
    for line in output.splitlines():
        match = _ERROR_LINE.match(line)
        if match:
            found = match.group(1).strip()
    return None if found is None else found[:300]


def _step(
    host: Host,
    how: Runner,
    endpoint: Endpoint,
    model: str,
    tokenizer: str | None,
    level: int,
    settings: Settings,
) -> tuple[Point | None, dict[str, Any] | None]:
    client = how.client
    result_file = client.result_file(level)
    args = client.argv(
        base_url=f"http://127.0.0.1:{endpoint.port}",
        model=model,
        served_model_name=endpoint.served_model_name,
        tokenizer=tokenizer or model or None,
        concurrency=level,
        settings=settings,
        result_dir=how.result_dir,
        result_file=result_file,
    )
    done = host.run([*how.prefix, *args], timeout=settings.step_timeout_s, env=how.env)
    if done.timed_out and how.container:
        host.run(["docker", "rm", "-f", how.container], timeout=60)
    text = host.read_text(posixpath.join(how.result_dir, result_file))
    error: dict[str, Any] | None = None
    if not done.ok or text is None:
        tail = (done.stdout + "\n" + done.stderr).strip()[-OUTPUT_TAIL:]
        error = {
            "concurrency": level,
            "exit_code": done.returncode,
            "timed_out": done.timed_out,
            "seconds": round(done.duration_s, 1),
            "output_tail": tail,
        }
        if done.timed_out:
            error["message"] = f"the step ran past its {settings.step_timeout_s:g} s limit"
        elif done.returncode == 127:
            error["message"] = f"{how.prefix[0]} not found on {host.name}"
        else:
            cause = last_error_line(tail)
            error["message"] = f"{client.title} exited with {done.returncode}" + (
                f": {cause}" if cause else ""
            )
    if text is None:
        return None, error
    try:
        return client.parse(text, level, settings.requests_for(level)), error
    except (ValueError, UsageError) as exc:
        return None, error or {"concurrency": level, "message": f"unreadable result: {exc}"}


# --------------------------------------------------------------------------- the store


def store_root() -> Path:
    from instinct_serve.paths import data_dir

    return data_dir() / "bench"


def save(bench: BenchRun, root: Path | None = None) -> Path:
    """Write the run under its plan hash; returns the file."""
    key = bench.key if PLAN_REF.fullmatch(bench.key) else NO_PLAN  # a label is data
    folder = (root or store_root()) / key
    folder.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    path = folder / f"{stamp}.json"
    n = 1
    while path.exists():
        path = folder / f"{stamp}-{n}.json"
        n += 1
    bench.path = str(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(bench.to_dict(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_file(path: Path) -> BenchRun:
    """A stored run, or one raw ``vllm bench serve --save-result`` file (a regular file)."""
    from instinct_serve.paths import read_regular

    try:
        doc = json.loads(read_regular(path))
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(
            f"cannot read {str(path)[:200]}: {why[:200]}",
            fix="give a regular file written by `instinct bench` or `vllm bench serve "
            "--save-result`, or a plan hash",
            id="bad_bench_result",
        ) from exc
    if isinstance(doc, dict) and "points" in doc:
        return BenchRun.from_dict(doc, str(path))
    return from_bench_result(doc, str(path))


def stored(root: Path | None = None) -> list[BenchRun]:
    """Every stored run, oldest first."""
    return _readable((root or store_root()).glob("*/*.json"))


def load(ref: str, root: Path | None = None) -> BenchRun:
    """A run by file path, or the latest stored run of a plan hash (a unique prefix)."""
    if _is_file_ref(ref):
        return read_file(Path(ref).expanduser())
    if not PLAN_REF.fullmatch(ref):
        raise UsageError(
            f"{ref[:80]!r} is neither a result file nor a plan hash",
            fix="give a plan hash (`instinct bench list`) or a result file's path",
            id="bad_bench_ref",
        )
    base = root or store_root()
    folders = sorted(p for p in _folders(base) if p.name.startswith(ref))
    if not folders:
        raise UsageError(
            f"no stored benchmark for {ref!r} (not a file, nor a plan hash in {base})",
            fix="list them with `instinct bench list`",
            id="bench_not_found",
        )
    if len(folders) > 1:
        raise UsageError(
            f"{ref!r} matches {len(folders)} plan hashes: "
            + ", ".join(f.name for f in folders[:5]),
            fix="give more of the plan hash",
            id="ambiguous_plan_hash",
        )
    runs = stored_in(folders[0])
    if not runs:
        raise UsageError(f"no readable run in {folders[0]}", id="bench_not_found")
    return runs[-1]


def _is_file_ref(ref: str) -> bool:
    """``compare``'s argument names a file: a path's shape, or a file in this directory."""
    if "/" in ref or ref.startswith(("~", ".")) or ref.endswith(".json"):
        return True
    return os.path.isfile(ref)  # False for a name too long, with NUL, or unreadable


def _folders(base: Path) -> list[Path]:
    """The plan hash folders of the store (none when there is no store yet)."""
    try:
        return [p for p in base.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def stored_in(folder: Path) -> list[BenchRun]:
    """The runs of one plan hash, oldest first."""
    return _readable(folder.glob("*.json"))


def _readable(paths: Iterable[Path]) -> list[BenchRun]:
    """The runs these files hold, oldest first; a damaged file is skipped."""
    runs = []
    for path in sorted(paths):
        try:
            runs.append(read_file(path))
        except UsageError:
            continue
    runs.sort(key=lambda r: (r.started_at, r.path or ""))
    return runs


def api_key_from(env_name: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The key in this machine's environment variable ``env_name`` (never a flag value)."""
    if not env_name:
        return None
    source = os.environ if environ is None else environ
    value = source.get(env_name)
    if not value:
        raise UsageError(
            f"--api-key-env {env_name}: that variable is not set here",
            fix=f"export {env_name}=... (the endpoint's API key) and try again",
            id="bad_api_key_env",
        )
    return value


def gpu_of_endpoint(host: Host, endpoint: Endpoint) -> tuple[str | None, int | None]:
    """The GPU model (profile key, ``mi300x``) and GPU count of one endpoint, from the plan
    it was launched with (``runtime.plans``); (None, None) when there is no record."""
    from instinct_serve.hardware.profiles import profile_named
    from instinct_serve.runtime import plans

    plan = plans.load(host, endpoint.name).current
    if plan is None:
        return None, None
    profile = profile_named(plan.gpu_name)
    return (profile.key if profile else None), plan.tensor_parallel_size
