#!/usr/bin/env python3
"""TEST DOUBLE of vLLM's OpenAI-compatible server (``vllm serve``). Not an inference engine.

It exists so that the real launch path (docker argv, ``docker logs -f``, startup phases,
``/health`` polling, warm-up, coherence probe, relaunch with ``--enforce-eager``) can be
tested on machines without a GPU. Standard library only: it runs inside the stripped test
image (``tests/infra/docker.py``), directly on the host for fast tests, and as a fake
``vllm`` executable (``vllm serve MODEL ...``) for the native-engine route.

It accepts the real ``vllm serve`` command line (the ``serve`` word, a positional model or
``--model``, ``--port``, ``--host``, ``--served-model-name``, ``--enforce-eager``,
``--api-key`` and any unknown option, which it ignores) and takes its behaviour from the
environment, because the argv is produced by the real planner and must stay unchanged:

``VLLM_DOUBLE_MODE``
    ``healthy`` (default), ``oom_graph_capture`` (the out-of-memory during CUDA/HIP graph
    capture, exit 1, unless ``--enforce-eager`` is on the command line: then it skips graph
    capture and comes up healthy, which is how serve's relaunch is tested),
    ``hang_in_graph_capture`` (stops logging in the middle of graph capture and never turns
    healthy; with ``--enforce-eager`` there is no capture and it comes up healthy, unless
    ``VLLM_DOUBLE_HANG_EAGER=1`` makes it hang all the same), ``die`` (replays a failure
    log and exits with ``VLLM_DOUBLE_EXIT_CODE``, default 1), ``incoherent`` (healthy, but
    answers with word salad).
``VLLM_DOUBLE_STAY_UP``
    ``1``: in ``die`` mode, keep running after the failure log instead of exiting, as vLLM
    0.32's API server does when its engine core dies during start-up (real-vllm-cpu/16:
    still up 30 s after ``Engine core initialization failed``).
``VLLM_DOUBLE_LOAD_S``
    Seconds spent "loading" (printing the startup lines) before turning healthy
    (default 1.5). ``/health`` answers 503 meanwhile.
``VLLM_DOUBLE_BIND``
    ``early`` (default: listen at once and answer 503 while loading) or ``late`` (listen only
    once loaded, like the real server, so clients see "connection refused" meanwhile).
``VLLM_DOUBLE_FIRST_REQUEST_S``
    Extra delay of the first completion (real engines compile kernels then; default 0).
``VLLM_DOUBLE_REPLAY``
    The fixture log replayed by ``die`` (default ``01_engine_core_init_failed_...``).
``VLLM_DOUBLE_NO_CHAT_TEMPLATE``
    ``1``: behave like a base model without a chat template (chat requests get vLLM's 400).
``VLLM_DOUBLE_LOG_DIR``
    Where the real captured logs are (default: ``logs/`` next to this file in the test
    image, else ``tests/fixtures/logs``).
``VLLM_DOUBLE_SALAD``
    The kind of garbage in ``incoherent`` mode: ``multilingual`` (default), ``exclaim``
    (``!!!!``, the classic broken-kernel output) or ``repeat``.
``VLLM_DOUBLE_DIE_AFTER_REQUESTS``
    ``N``: once healthy, exit (with ``VLLM_DOUBLE_EXIT_CODE``, default 1) right after
    answering its N-th completion request (chat or text; serve's warm-up and coherence
    probe count, the fingerprint's scoring requests, which ask for log-probabilities, do
    not): a server that dies in service, for ``instinct watch`` and the daemon's restart
    policy. Each run of the process counts afresh.
``VLLM_DOUBLE_HANG_AFTER_REQUESTS``
    ``N``: like ``VLLM_DOUBLE_DIE_AFTER_REQUESTS``, but the process stays up and its HTTP
    server stops answering (requests are read, never answered): a hung server, whose
    ``/health`` times out.
``VLLM_DOUBLE_DIE_REPLAY``
    With ``VLLM_DOUBLE_DIE_AFTER_REQUESTS``: a captured failure log (a file name under the
    log directory) printed just before that exit, so the death has a diagnosable cause.
``VLLM_DOUBLE_TTFT_S`` / ``VLLM_DOUBLE_ITL_S``
    A fixed time to first token and a fixed delay between tokens (default 0 and 0): token
    ``i`` of a completion leaves ``TTFT + i * ITL`` seconds after the request arrived, on a
    schedule (not by adding sleeps), so what a benchmark measures is what was set.

``VLLM_DOUBLE_NAN_AFTER``
    ``N``: generated tokens from the N-th on (0-based) come out as ``!`` with NaN
    log-probabilities (a NaN logit makes greedy pick token 0, ``!`` in most vocabularies:
    vllm#51580's "correct first token, then NaN").
``VLLM_DOUBLE_GARBAGE_PAST``
    ``L``: prompt tokens from position L on are scored with garbage log-probabilities, and a
    prompt longer than L is answered with word salad (vllm#40018: garbage past ~20K tokens).
``VLLM_DOUBLE_DRIFT_AFTER_S``
    ``T``: from T seconds after it turned healthy, every log-probability it reports moves by
    ``VLLM_DOUBLE_DRIFT`` nats (default -2.0): a kernel computing something else while
    serving.
``VLLM_DOUBLE_FAULT_FIX``
    What clears those three faults on a relaunch: ``aiter`` (default: the environment has
    ``VLLM_ROCM_USE_AITER=0``, the AITER switch), ``eager`` (``--enforce-eager`` on the
    command line) or ``none``.

``VLLM_DOUBLE_HEALTH_PATH`` / ``VLLM_DOUBLE_MODELS_PATH``
    Another server's routes (``tests/infra/fake_server.py``): health answers on this path
    only (default ``/health`` and ``/ping``, as vLLM), the model list on this one (default
    ``/v1/models``); the vLLM paths they replace answer 404.
``VLLM_DOUBLE_READY_LINE``
    Another server's ready line: printed instead of vLLM's API-server lines once healthy
    (``{host}`` and ``{port}`` filled in).

``VLLM_DOUBLE_COMPILE_S``
    Seconds of a *simulated* torch.compile (default 0: none; never with
    ``--enforce-eager``). The double looks in ``$VLLM_CACHE_ROOT/torch_compile_cache/<hash>/
    rank_0`` (default root ``~/.cache/vllm``, as vLLM's ``envs.py``) for the artifact an
    earlier start of the double wrote there: when present it "loads" it in
    ``VLLM_DOUBLE_WARM_COMPILE_S`` (default a tenth) and says so as vLLM does ("Directly load
    the compiled graph(s) ... from the cache"); else it sleeps the full time, writes the
    artifact (a text file that says it is the double's) and logs vLLM's "Compiling a graph"
    line. Nothing is compiled: this only shows that a cache directory survives a restart.
``VLLM_DOUBLE_FAIL_RANKS``
    Multi-node only: the node ranks (comma list) that join the rendezvous, then replay the
    ``die`` log and exit (a worker failing after start-up, which must fail the group).
``VLLM_DOUBLE_RENDEZVOUS_S``
    Multi-node only: how long rank 0 waits for every rank, and a rank for rank 0 (default 60).
    ``VLLM_DOUBLE_FAIL_RANKS`` with ``0``: the head replays the ``die`` log and exits before it
    listens (a head that dies at load, as the real rank 0 did on a TP its heads do not divide).
``VLLM_DOUBLE_PP_FIRST_REQUEST=die``
    Multi-node only: the real eager + pipeline-parallel trap of vLLM's CPU build
    (``real-vllm-cpu/18_...``): healthy, then the first completion tells every rank to fail;
    each headless rank replays the real rank 1's assertion and exits 1, the head answers 500
    (``EngineDeadError``), replays its own real lines and exits.
``VLLM_DOUBLE_NO_CXX=1``
    No C++ compiler, as vLLM's CPU build in an image without g++ (``real-vllm-cpu/20_...``):
    healthy, then the first request that asks for log-probabilities (``logprobs`` or
    ``prompt_logprobs``) replays the real worker's ``InvalidCxxCompiler`` lines, is answered
    500 (``EngineCore encountered an issue``) and the process exits 1, unless the
    environment has ``TORCHDYNAMO_DISABLE=1`` (torch.compile off, as the real one answers).
``VLLM_DOUBLE_HEADLESS_STAYS=1``
    Multi-node only: a headless rank outlives its head (as the real vLLM's did), instead of
    exiting when the head's connection ends.
``VLLM_DOUBLE_CHILDREN``
    ``N``: start N child processes first, standing in for vLLM's engine-core processes
    (argv ``python vllm_double.py engine-core --port P --index I``; they only sleep). On
    SIGTERM the double ends them first and waits for them (up to 5 s), as vLLM's shutdown
    does; killed with SIGKILL it leaves them running, as a real vLLM whose API server was
    killed leaves its engine processes. ``VLLM_DOUBLE_CHILDREN_TERM=ignore``: the children
    ignore SIGTERM (only SIGKILL ends them). ``VLLM_DOUBLE_CHILDREN_DETACH``: ``group`` puts
    them in a process group of their own (same session), ``session`` in a session of their
    own (they leave the launch's session and group).

Multi-node (``--nnodes N --node-rank R --master-addr A [--master-port P]``, ``--headless`` on
ranks > 0, vLLM's mp-backend flags): a real TCP rendezvous, standing in for torch's store.
Rank 0 listens on ``0.0.0.0:P`` (default 29501, vLLM's) before anything else; every other
rank connects (retrying until the deadline), sends ``JOIN R`` and waits for ``OK``; rank 0
loads and turns healthy only once all ``N-1`` ranks joined, and exits 1 with a log line
when a joined rank's connection drops (a dead worker kills the head, as in vLLM); a headless
rank serves no HTTP and exits 1 when the head goes away. Connections that send nothing
(reachability probes) are ignored. Rendezvous lines are the double's own (``vllm-double:``).

``/v1/completions`` scores as vLLM does (``real-vllm-cpu`` 0.32, SmolLM2): ``prompt_logprobs``
(``[null, {"<id>": {"logprob": x, "rank": r, "decoded_token": t}}, ...]``), ``logprobs`` (with
``echo``, the prompt's tokens first), ``return_token_ids`` (``prompt_token_ids``,
``token_ids``). Its log-probabilities are deterministic: a word after the same word as
earlier in the prompt scores -0.3 (a model copies), any other between -2 and -8 by a hash of
the word; its token ids are a hash of the word.

``/v1/completions`` streams (``"stream": true``) as vLLM 0.32 does: one ``data:`` event per
token, the usage event when ``stream_options.include_usage`` is set, then ``data: [DONE]``
(``real-vllm-cpu/bench/stream_completion.txt``); ``"ignore_eos": true`` makes every answer
exactly ``max_tokens`` tokens long. ``/metrics`` serves the ``vllm:*`` families ``instinct
top`` reads, with the real server's names, help, types, labels and buckets
(``real-vllm-cpu/metrics.txt``), counting the double's own requests.

Every log line it prints comes verbatim from ``tests/fixtures/logs`` (real vLLM runs), except
its own banner (prefixed ``vllm-double:``) and the API-server lines printed when it turns
healthy, which are the real vLLM 0.32 lines (``tests/fixtures/logs/real-vllm-cpu/``) with
this run's pid, time, address and the double's routes filled in, and the torch.compile
lines of the simulated compile (``simulate_compile``: the wording of 09c and of
``public/23_startup_...log``, with the double's cache path and times filled in). Its
answers (bodies and error shapes) are shaped as the real vLLM 0.32's
(``real-vllm-cpu/responses.json``).
``tests/realvllm/test_double_matches_real.py`` holds both to the captures.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import random
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

BANNER = "vllm-double: TEST DOUBLE of vLLM (tests/infra/vllm_double.py), not a real engine"
MODES = ("healthy", "oom_graph_capture", "hang_in_graph_capture", "die", "incoherent")

HEALTHY_LOG = "09_healthy_startup_MI300X_Llama-3.1-8B-Instruct_fp16_gmu0.9_vllm0.9.2dev_V0.log"
V1_EXCERPTS_LOG = "09c_healthy_startup_V1_excerpts.log"
OOM_LOG = "02_oom_during_cuda_graph_capture.log"
DEFAULT_REPLAY = "01_engine_core_init_failed_flashinfer_jit_cause.log"

DEFAULT_MAX_MODEL_LEN = 131072  # when the command line names none (Llama-3.1-8B's)
FINGERPRINT = "vllm-0.0.0-double"
BAD = "Bad Request"  # the error type of vLLM 0.32's request-validation 400s

# vLLM's answer to a chat request for a base model whose tokenizer has no chat template.
NO_CHAT_TEMPLATE = (
    "As of transformers v4.44, default chat template is no longer allowed, so you must provide "
    "a chat template if the tokenizer does not define one."
)

# Flags of `vllm serve` that take no value (the rest of `--x VALUE` pairs are skipped whole).
_BOOLEAN_FLAGS = {
    "--enforce-eager",
    "--trust-remote-code",
    "--enable-prefix-caching",
    "--enable-chunked-prefill",
    "--disable-log-requests",
    "--enable-log-requests",
    "--disable-log-stats",
    "--enable-auto-tool-choice",
    "--disable-custom-all-reduce",
    "--enable-expert-parallel",
    "--disable-sliding-window",
    "--headless",
    "--async-scheduling",
    "--skip-tokenizer-init",
    "--disable-frontend-multiprocessing",
}


# --------------------------------------------------------------------------- command line


class Args:
    """What the double understood of its ``vllm serve`` command line."""

    def __init__(self) -> None:
        self.model: str | None = None
        self.served_names: list[str] = []
        self.host = "0.0.0.0"
        self.port = 8000
        self.max_model_len: int | None = None
        self.enforce_eager = False
        self.api_key: str | None = os.environ.get("VLLM_API_KEY") or None
        self.ignored: list[str] = []
        self.nnodes = 1
        self.node_rank = 0
        self.master_addr = "127.0.0.1"
        self.master_port = 29501  # vLLM's ParallelConfig.master_port default
        self.headless = False

    @property
    def names(self) -> list[str]:
        return self.served_names or [self.model or "unknown-model"]


def parse_args(argv: list[str]) -> Args:
    """Parse a ``vllm serve`` argv leniently: unknown options are kept, never rejected."""
    args = Args()
    items = list(argv)
    if items and items[0] == "serve":
        items = items[1:]
    i = 0
    while i < len(items):
        token = items[i]
        if token.startswith("--") and "=" in token:
            key, value = token.split("=", 1)
            _apply(args, key, [value])
            i += 1
            continue
        if token in _BOOLEAN_FLAGS or token.startswith("--no-"):
            _apply(args, token, [])
            i += 1
            continue
        if token.startswith("-") and token != "-":
            values: list[str] = []
            j = i + 1
            # --served-model-name takes several names; every other option takes one value.
            while j < len(items) and not items[j].startswith("-"):
                values.append(items[j])
                j += 1
                if token != "--served-model-name":
                    break
            _apply(args, token, values)
            i = j
            continue
        if args.model is None:
            args.model = token
        else:
            args.ignored.append(token)
        i += 1
    return args


def _apply(args: Args, key: str, values: list[str]) -> None:
    first = values[0] if values else ""
    if key == "--model" and first:
        args.model = first
    elif key == "--served-model-name" and values:
        args.served_names = list(values)
    elif key == "--host" and first:
        args.host = first
    elif key == "--port" and first.isdigit():
        args.port = int(first)
    elif key == "--max-model-len" and first.isdigit():
        args.max_model_len = int(first)
    elif key == "--enforce-eager":
        args.enforce_eager = True
    elif key == "--api-key" and first:
        args.api_key = first
    elif key == "--nnodes" and first.isdigit():
        args.nnodes = int(first)
    elif key == "--node-rank" and first.isdigit():
        args.node_rank = int(first)
    elif key == "--master-addr" and first:
        args.master_addr = first
    elif key == "--master-port" and first.isdigit():
        args.master_port = int(first)
    elif key == "--headless":
        args.headless = True
    else:
        args.ignored.append(key if not values else f"{key}={' '.join(values)}")


# --------------------------------------------------------------------------- real log lines


def log_dir() -> Path:
    env = os.environ.get("VLLM_DOUBLE_LOG_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for candidate in (here / "logs", here.parent / "fixtures" / "logs"):
        if candidate.is_dir():
            return candidate
    raise SystemExit(f"vllm-double: cannot find the captured vLLM logs next to {here}")


_PROMPT = re.compile(r"^\([\w.-]+\) \S+@\S+:.*\$\s*$")  # a pasted shell prompt, not output


def real_lines(name: str) -> list[str]:
    """The output lines of one captured log: provenance notes and cut markers removed."""
    out = []
    for line in (log_dir() / name).read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or _PROMPT.match(stripped):
            continue
        if stripped.startswith("[...") and stripped.endswith("]"):
            continue
        out.append(line.rstrip())
    return out


def healthy_startup() -> list[str]:
    """Startup of a real MI300X run (09) with the V1 KV-cache lines (09c, block C) spliced in."""
    lines = real_lines(HEALTHY_LOG)
    start = next(i for i, s in enumerate(lines) if "Automatically detected platform" in s)
    end = next(i for i, s in enumerate(lines) if "init engine (profile, create kv cache" in s)
    picked = [s for s in lines[start : end + 1] if not s.startswith("Namespace(")]
    v1 = [s for s in real_lines(V1_EXCERPTS_LOG) if "(EngineCore_DP0 pid=1133552)" in s]
    at = next(i for i, s in enumerate(picked) if "Maximum concurrency for" in s) + 1
    return picked[:at] + v1 + picked[at:]


# torch.compile's lines (vLLM backends.py / monitor.py), as in 09c_healthy_startup_V1_excerpts
# and public/23_startup_2x3090_tp2_kimi-linear-48b-awq_V1_figures.log
_CACHE_LINE = "INFO {ts} [backends.py:577] Using cache directory: {path} for vLLM's torch.compile"
_COMPILED_LINE = "INFO {ts} [backends.py:321] Compiling a graph for dynamic shape takes {s:.2f} s"
_LOADED_LINE = (
    "INFO {ts} [backends.py:209] Directly load the compiled graph(s) for dynamic shape from the "
    "cache, took {s:.3f} s"
)
_TOTAL_LINE = "INFO {ts} [monitor.py:34] torch.compile takes {s:.2f} s in total"
ARTIFACT = "double-compiled-graph.txt"


def _ts() -> str:
    return time.strftime("%m-%d %H:%M:%S")


def compile_cache_dir(args: Args) -> Path:
    """Where vLLM keeps this model's torch.compile artifacts (``VLLM_CACHE_ROOT``)."""
    root = os.environ.get("VLLM_CACHE_ROOT") or os.path.expanduser("~/.cache/vllm")
    digest = hashlib.sha256(str(args.model).encode()).hexdigest()[:10]
    return Path(root) / "torch_compile_cache" / digest / "rank_0"


def simulate_compile(args: Args, cold_s: float) -> None:
    """The simulated torch.compile (``VLLM_DOUBLE_COMPILE_S``): full time and an artifact
    written when the cache directory has none, a short "load" when it has."""
    path = compile_cache_dir(args)
    emit(_CACHE_LINE.format(ts=_ts(), path=path))
    artifact = path / ARTIFACT
    if artifact.is_file():
        warm_s = float(os.environ.get("VLLM_DOUBLE_WARM_COMPILE_S", str(cold_s / 10)))
        time.sleep(warm_s)
        emit(_LOADED_LINE.format(ts=_ts(), s=warm_s))
        emit(_TOTAL_LINE.format(ts=_ts(), s=warm_s))
        return
    time.sleep(cold_s)
    path.mkdir(parents=True, exist_ok=True)
    artifact.write_text(
        f"TEST DOUBLE artifact (tests/infra/vllm_double.py), not a compiled graph: {args.model}\n",
        encoding="utf-8",
    )
    emit(_COMPILED_LINE.format(ts=_ts(), s=cold_s))
    emit(_TOTAL_LINE.format(ts=_ts(), s=cold_s))


def _is_capture(line: str) -> bool:
    return "Capturing CUDA graph shapes" in line or "Capturing cudagraphs" in line


def _index(lines: list[str], needle: str) -> int:
    return next(i for i, s in enumerate(lines) if needle in s)


# The routes the double serves, in the order (and with the methods) the real vLLM 0.32
# lists them; a real server has many more (tests/fixtures/logs/real-vllm-cpu/01_...log).
ROUTES = (
    ("/version", "GET"),
    ("/health", "GET"),
    ("/v1/models", "GET"),
    ("/ping", "GET"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
)


def health_paths() -> tuple[str, ...]:
    """Where health answers: vLLM's ``/health`` and ``/ping``, or ``VLLM_DOUBLE_HEALTH_PATH``."""
    path = os.environ.get("VLLM_DOUBLE_HEALTH_PATH")
    return (path,) if path else ("/health", "/ping")


def models_path() -> str:
    return os.environ.get("VLLM_DOUBLE_MODELS_PATH", "/v1/models")


def api_server_lines(args: Args) -> list[str]:
    """What vLLM 0.32's API server prints once the engine is up (real lines, this run's
    pid, time and address), or another server's ``VLLM_DOUBLE_READY_LINE``."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    host = "0.0.0.0" if args.host in ("", "0.0.0.0") else args.host
    ready = os.environ.get("VLLM_DOUBLE_READY_LINE")
    if ready:
        return [ready.format(host=host, port=args.port)]
    head = f"(APIServer pid={os.getpid()}) INFO {stamp}"
    lines = [
        f"{head} [entry.py:140] Starting vLLM server on http://{host}:{args.port}",
        f"{head} [launcher.py:186] Available routes are:",
    ]
    lines += [f"{head} [launcher.py:195] Route: {r}, Methods: {m}" for r, m in ROUTES]
    lines += [
        f"INFO:     Started server process [{os.getpid()}]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
    ]
    return lines


# --------------------------------------------------------------------------- answers


def _salad(kind: str, n_words: int) -> str:
    rng = random.Random(1234)
    if kind == "exclaim":
        return "!" * max(8, n_words * 4)
    if kind == "repeat":
        return " ".join(["the"] * max(8, n_words))
    junk = [
        "ungeachtet",
        "ĠĠĠ",
        "Принимая",
        "zyst",
        "\u0e40\u0e1e\u0e37\u0e48\u0e2d",
        "\u8bf7\u95ee",
        "._",
        "\ufffd\ufffd",
        "ometric",
        "\u05e9\u05dc\u05d5\u05dd",
        ">>>",
        "\u30c8\u30fc\u30af\u30f3",
    ]
    return " ".join(rng.choice(junk) for _ in range(max(8, n_words)))


def _tokens(text: str) -> list[str]:
    """Words with their leading space: the double's notion of a token."""
    return re.findall(r"\s*\S+", text)


def _prompt_text(path: str, body: dict[str, Any]) -> str:
    if path == "/v1/completions":
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else json.dumps(prompt)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    return " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))


# vLLM 0.32 (entrypoints/serve/exception_handling/utils.py: sanitize_message) strips file
# paths from every error message it returns.
_PATHS = (
    re.compile(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+"),
    re.compile(r"(?:/[\w\-]+)+/[\w\-]+\.\w+"),
)


def sanitize(message: str) -> str:
    for pattern in _PATHS:
        message = pattern.sub("<path>", message)
    return message.strip()


def validation(kind: str, loc: str, msg: str) -> str:
    """The message of vLLM 0.32's 400 for a request that fails validation (one error)."""
    detail = {"type": kind, "loc": loc, "msg": msg or "Field required", "input": "<dict>"}
    return f"1 validation error:\n  {detail}"


def answer(prompt: str, max_tokens: int, incoherent: bool, fill: bool = False) -> tuple[str, str]:
    """(text, finish_reason) for a prompt, at most ``max_tokens`` tokens long; exactly that
    long with ``fill`` (a request's ``ignore_eos``: the reply repeats until the limit)."""
    if fill and not incoherent:
        text, finish = answer(prompt, max_tokens, incoherent)
        tokens = _tokens(text)
        if len(tokens) >= max_tokens:
            return text, finish
        again = _tokens(" " + text.strip())
        while len(tokens) < max_tokens:
            tokens += again[: max_tokens - len(tokens)]
        return "".join(tokens), "length"
    if incoherent:
        text = _salad(os.environ.get("VLLM_DOUBLE_SALAD", "multilingual"), max_tokens)
        return "".join(_tokens(text)[: max(1, max_tokens)]), "length"
    low = prompt.lower()
    if "capital of france" in low:
        text = "Paris" if "one word" in low else " Paris. It is also the largest city in France."
    else:
        text = "This is a reply from the vLLM test double."
    tokens = _tokens(text)
    if len(tokens) > max_tokens:
        return "".join(tokens[:max_tokens]), "length"
    return text, "stop"


# --------------------------------------------------------------------------- scores and faults


def _word_hash(word: str) -> int:
    return int.from_bytes(hashlib.sha256(word.strip().encode()).digest()[:4], "big")


def token_id(token: str) -> int:
    """The double's token id of a word (stable across runs and processes)."""
    return _word_hash(token) % 49152


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "")
    return int(raw) if raw.isdigit() else None


def fault_cleared(args: Args) -> bool:
    """``VLLM_DOUBLE_FAULT_FIX``: the relaunch's fallback that clears the faults."""
    fix = os.environ.get("VLLM_DOUBLE_FAULT_FIX", "aiter")
    if fix == "aiter":  # the server's own switch (the SGLang double's: SGLANG_USE_AITER)
        return os.environ.get(getattr(args, "aiter_env", "VLLM_ROCM_USE_AITER")) == "0"
    if fix == "eager":
        return args.enforce_eager
    return False


def drift(state: State) -> float:
    """The move of every log-probability once ``VLLM_DOUBLE_DRIFT_AFTER_S`` has passed."""
    after = os.environ.get("VLLM_DOUBLE_DRIFT_AFTER_S", "")
    if not after or state.healthy_at is None or fault_cleared(state.args):
        return 0.0
    if time.monotonic() - state.healthy_at < float(after):
        return 0.0
    return float(os.environ.get("VLLM_DOUBLE_DRIFT", "-2.0"))


def garbage_past(state: State) -> int | None:
    return None if fault_cleared(state.args) else _env_int("VLLM_DOUBLE_GARBAGE_PAST")


def nan_after(state: State) -> int | None:
    return None if fault_cleared(state.args) else _env_int("VLLM_DOUBLE_NAN_AFTER")


def prompt_scores(tokens: list[str], state: State) -> list[float]:
    """Each prompt token's log-probability but the first (see the module docstring)."""
    past, shift = garbage_past(state), drift(state)
    seen: set[tuple[str, str]] = set()
    values = []
    for i in range(1, len(tokens)):
        pair = (tokens[i - 1].strip(), tokens[i].strip())
        value = -0.3 if pair in seen else -2.0 - (_word_hash(tokens[i]) % 600) / 100
        seen.add(pair)
        if past is not None and i >= past:
            value = -8.0 - (_word_hash(f"{i}{tokens[i]}") % 600) / 100
        values.append(round(value + shift, 6))
    return values


def generated(text: str, state: State) -> tuple[list[str], list[float]]:
    """The answer's tokens and their log-probabilities, with ``VLLM_DOUBLE_NAN_AFTER``."""
    tokens = _tokens(text)
    shift, after = drift(state), nan_after(state)
    values = [-0.5 - (_word_hash(t) % 100) / 200 + shift for t in tokens]
    if after is not None:
        for i in range(after, len(tokens)):
            tokens[i], values[i] = "!", math.nan
    return tokens, values


def logprob_fields(
    body: dict[str, Any], prompt: str, text: str, state: State
) -> tuple[str, dict[str, Any]]:
    """The answer's text (faults applied) and its choice's scoring fields, as asked."""
    tokens, values = generated(text, state)
    text = "".join(tokens)
    fields: dict[str, Any] = {}
    prompt_tokens = _tokens(prompt)
    ids = body.get("return_token_ids") is True
    if ids:
        fields["prompt_token_ids"] = [token_id(t) for t in prompt_tokens]
        fields["token_ids"] = [token_id(t) for t in tokens]
    scores: list[float] | None = None
    if isinstance(body.get("prompt_logprobs"), int) or body.get("echo") is True:
        scores = prompt_scores(prompt_tokens, state)
    if isinstance(body.get("prompt_logprobs"), int) and scores is not None:
        fields["prompt_logprobs"] = [None] + [
            {str(token_id(t)): {"logprob": v, "rank": 1, "decoded_token": t}}
            for t, v in zip(prompt_tokens[1:], scores, strict=True)
        ]
    if isinstance(body.get("logprobs"), int):
        listed, numbers = list(tokens), list(values)
        lead: list[float | None] = []
        if body.get("echo") is True and scores is not None:
            listed = prompt_tokens + listed
            lead = [None, *scores]
            text = prompt + text
        fields["logprobs"] = {
            "text_offset": list(itertools.accumulate([0] + [len(t) for t in listed[:-1]])),
            "token_logprobs": lead + numbers,
            "tokens": listed,
            "top_logprobs": [
                None if v is None else {t: v} for t, v in zip(listed, lead + numbers, strict=True)
            ],
        }
    return text, fields


# --------------------------------------------------------------------------- server


# --------------------------------------------------------------------------- /metrics

# The families the double keeps, as vLLM 0.32 declares them (real-vllm-cpu/metrics.txt).
GAUGE_HELP = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
}
COUNTER_HELP = {
    "vllm:prefix_cache_queries_total": "Prefix cache queries, in terms of number of queried "
    "tokens.",
    "vllm:prefix_cache_hits_total": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:num_preemptions_total": "Cumulative number of preemption from the engine.",
    "vllm:prompt_tokens_total": "Number of prefill tokens processed.",
    "vllm:generation_tokens_total": "Number of generation tokens processed.",
}
SUCCESS = "vllm:request_success_total"
SUCCESS_HELP = "Count of successfully processed requests."
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5)
_TTFT_BUCKETS += (5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_ITL_BUCKETS += (5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0)
_E2E_BUCKETS += (60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": (
        "Histogram of time to first token in seconds.",
        _TTFT_BUCKETS,
    ),
    "vllm:inter_token_latency_seconds": (
        "Histogram of inter-token latency in seconds.",
        _ITL_BUCKETS,
    ),
    "vllm:e2e_request_latency_seconds": (
        "Histogram of e2e request latency in seconds.",
        _E2E_BUCKETS,
    ),
}


def _labels(items: dict[str, str]) -> str:
    """prometheus_client's rendering: sorted keys, escaped values."""
    parts = []
    for key in sorted(items):
        value = items[key].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'{key}="{value}"')
    return "{" + ",".join(parts) + "}"


class Metrics:
    """The double's own request counts and latencies, rendered as vLLM's /metrics."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.counters = dict.fromkeys(COUNTER_HELP, 0.0)
        self.success = dict.fromkeys(FINISH_REASONS, 0.0)
        self.observations: dict[str, list[float]] = {name: [] for name in HISTOGRAMS}

    def started(self) -> None:
        with self.lock:
            self.running += 1

    def finished(
        self, prompt_tokens: int, times: list[float], start: float, end: float, finish: str
    ) -> None:
        """One request: its prompt size, the moments its tokens left, when it ended."""
        with self.lock:
            self.running -= 1
            self.counters["vllm:prompt_tokens_total"] += prompt_tokens
            self.counters["vllm:prefix_cache_queries_total"] += prompt_tokens
            self.counters["vllm:generation_tokens_total"] += len(times)
            self.success[finish if finish in self.success else "stop"] += 1
            if times:
                self.observations["vllm:time_to_first_token_seconds"].append(times[0] - start)
                self.observations["vllm:inter_token_latency_seconds"].extend(
                    b - a for a, b in itertools.pairwise(times)
                )
            self.observations["vllm:e2e_request_latency_seconds"].append(end - start)

    def render(self, model: str) -> str:
        base = {"engine": "0", "model_name": model}
        lines: list[str] = []
        with self.lock:
            gauges = {
                "vllm:num_requests_running": float(self.running),
                "vllm:num_requests_waiting": 0.0,
                "vllm:kv_cache_usage_perc": 0.0,
            }
            for name, value in gauges.items():
                lines += [f"# HELP {name} {GAUGE_HELP[name]}", f"# TYPE {name} gauge"]
                lines.append(f"{name}{_labels(base)} {value!r}")
            for name, value in self.counters.items():
                lines += [f"# HELP {name} {COUNTER_HELP[name]}", f"# TYPE {name} counter"]
                lines.append(f"{name}{_labels(base)} {value!r}")
            lines += [f"# HELP {SUCCESS} {SUCCESS_HELP}", f"# TYPE {SUCCESS} counter"]
            for reason, value in self.success.items():
                lines.append(f"{SUCCESS}{_labels({**base, 'finished_reason': reason})} {value!r}")
            for name, (help_text, buckets) in HISTOGRAMS.items():
                seen = self.observations[name]
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
                for bound in buckets:
                    count = float(sum(1 for v in seen if v <= bound))
                    lines.append(f"{name}_bucket{_labels({**base, 'le': repr(bound)})} {count!r}")
                inf = {**base, "le": "+Inf"}
                lines.append(f"{name}_bucket{_labels(inf)} {float(len(seen))!r}")
                lines.append(f"{name}_count{_labels(base)} {float(len(seen))!r}")
                lines.append(f"{name}_sum{_labels(base)} {float(sum(seen))!r}")
        return "\n".join(lines) + "\n"


def _compact(doc: Any) -> str:
    """JSON as vLLM streams it (no spaces)."""
    return json.dumps(doc, separators=(",", ":"))


def delays() -> tuple[float, float]:
    """(time to first token, inter-token delay) in seconds, from the environment."""
    return (
        float(os.environ.get("VLLM_DOUBLE_TTFT_S", "0") or 0),
        float(os.environ.get("VLLM_DOUBLE_ITL_S", "0") or 0),
    )


def sleep_until(deadline: float) -> None:
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(left)


class State:
    def __init__(self, args: Args, mode: str) -> None:
        self.args = args
        self.mode = mode
        self.ready = threading.Event()
        self.first_request_lock = threading.Lock()
        self.first_request_done = False
        self.created = int(time.time())
        self.metrics = Metrics()
        self.answered = 0  # completion requests answered (VLLM_DOUBLE_DIE_AFTER_REQUESTS)
        self.answered_lock = threading.Lock()
        self.hung = threading.Event()  # VLLM_DOUBLE_HANG_AFTER_REQUESTS reached
        self.healthy_at: float | None = None  # monotonic, once ready (VLLM_DOUBLE_DRIFT_AFTER_S)


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def version_string(self) -> str:
            return "uvicorn"

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            # uvicorn's access-log line, which is what `docker logs` shows for vLLM. The real
            # server only listens once loaded, so nothing is logged before: a stall in graph
            # capture must stay silent even while clients poll /health.
            if not state.ready.is_set():
                return
            host, port = self.client_address[:2]
            print(f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {code}')
            sys.stdout.flush()

        def log_message(self, format: str, *fargs: Any) -> None:
            sys.stderr.write("vllm-double: " + (format % fargs) + "\n")

        def _send(self, code: int, body: Any = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(code)
            if body is not None:
                self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, message: str, typ: str, param: str | None = None) -> None:
            body = {"message": sanitize(message), "type": typ, "param": param, "code": code}
            self._send(code, {"error": body})

        def _authorized(self, path: str) -> bool:
            """vLLM's --api-key (or VLLM_API_KEY) middleware: every /v1 path needs
            ``Authorization: Bearer KEY`` (401 ``{"error": "Unauthorized"}`` otherwise, the
            route unseen); /health, /ping, /version and /metrics stay open
            (``real-vllm-cpu/responses.json``: models_without_key, chat_wrong_key)."""
            key = state.args.api_key
            if not key or not path.startswith("/v1"):
                return True
            if self.headers.get("authorization") == f"Bearer {key}":
                return True
            self._send(401, {"error": "Unauthorized"})
            return False

        def _hang(self) -> bool:
            """A hung server: the request is read, never answered (the client times out)."""
            if state.hung.is_set():
                time.sleep(3600)
                return True
            return False

        def do_GET(self) -> None:
            if self._hang():
                return
            path = self.path.split("?", 1)[0]
            if not self._authorized(path):
                return
            if path in health_paths():
                self._send(200 if state.ready.is_set() and not ENGINE_DIED.is_set() else 503)
            elif path == "/version":
                self._send(200, {"version": "0.0.0+vllm-double"})
            elif path == "/metrics":  # not behind the API key, as in vLLM
                body = state.metrics.render(state.args.names[0]).encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain; version=1.0.0; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif path == models_path():
                if not self._ready():
                    return
                self._send(200, self._models())
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            if self._hang():
                return
            path = self.path.split("?", 1)[0]
            if not self._authorized(path):
                return
            if path not in ("/v1/completions", "/v1/chat/completions"):
                self._send(404, {"detail": "Not Found"})
                return
            if not self._ready():
                return
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"null")
            except ValueError as exc:
                pos = getattr(exc, "pos", 0)
                msg = getattr(exc, "msg", str(exc))
                self._error(400, validation("json_invalid", f"body.{pos}", msg), BAD, f"body.{pos}")
                return
            if not isinstance(body, dict):
                self._error(400, validation("model_attributes_type", "body", ""), BAD, "body")
                return
            if path == "/v1/chat/completions" and "messages" not in body:
                self._error(400, validation("missing", "body.messages", ""), BAD, "body.messages")
                return
            model = body.get("model")
            if model not in state.args.names:
                names = ", ".join(state.args.names)
                message = f"The model `{model}` does not exist. Valid aliases: {names}."
                self._error(404, message, "NotFoundError", "model")
                return
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            limit = state.args.max_model_len or DEFAULT_MAX_MODEL_LEN
            if max_tokens > limit:
                message = (
                    f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. "
                    f"Please request fewer output tokens. (parameter=max_tokens, "
                    f"value={max_tokens})"
                )
                self._error(400, message, "BadRequestError", "max_tokens")
                return
            prompt_text = _prompt_text(path, body)
            if len(_tokens(prompt_text)) >= limit:
                message = (
                    f"This model's maximum context length is {limit} tokens. However, your "
                    f"prompt contains at least {limit + 1} input tokens, which exceeds this "
                    "limit even without any output tokens. Please reduce the length of the "
                    f"input prompt. (parameter=input_tokens, value={limit + 1})"
                )
                self._error(400, message, "BadRequestError", "input_tokens")
                return
            if pp_first_request_trap() or no_cxx_trap(body):
                self._error(500, ENGINE_DEAD, "InternalServerError")
                return
            start = time.monotonic()
            self._first_request_delay()
            incoherent = state.mode == "incoherent"
            fill = body.get("ignore_eos") is True
            if path == "/v1/completions":
                past = garbage_past(state)
                too_long = past is not None and len(_tokens(prompt_text)) > past
                text, finish = answer(prompt_text, max_tokens, incoherent or too_long, fill)
                text, scored = logprob_fields(body, prompt_text, text, state)
                options = body.get("stream_options")
                usage = isinstance(options, dict) and options.get("include_usage") is True
                scoring = "prompt_logprobs" in body or "logprobs" in body  # a fingerprint
                with self._counted(prompt_text, start, finish, not scoring) as times:
                    if body.get("stream") is True:
                        self._stream(model, prompt_text, text, finish, start, times, usage)
                    else:
                        times += self._pace(_tokens(text), start)
                        doc = self._completion(model, prompt_text, text, finish)
                        doc["choices"][0].update(scored)
                        self._send(200, doc)
            elif os.environ.get("VLLM_DOUBLE_NO_CHAT_TEMPLATE") == "1":
                self._error(400, NO_CHAT_TEMPLATE, "BadRequestError")
            else:
                messages = body.get("messages")
                if not isinstance(messages, list) or not messages:
                    self._error(400, "messages must be a non-empty list", "BadRequestError")
                    return
                last = messages[-1].get("content") if isinstance(messages[-1], dict) else ""
                text, finish = answer(str(last), max_tokens, incoherent, fill)
                with self._counted(prompt_text, start, finish) as times:
                    times += self._pace(_tokens(text), start)
                    self._send(200, self._chat(model, str(last), text, finish))

        @contextlib.contextmanager
        def _counted(
            self, prompt: str, start: float, finish: str, toward_death: bool = True
        ) -> Iterator[list[float]]:
            """Count one request in /metrics; the caller appends when each token left.
            ``toward_death``: it counts for ``VLLM_DOUBLE_DIE/HANG_AFTER_REQUESTS``."""
            times: list[float] = []
            state.metrics.started()
            try:
                yield times
            finally:
                end = time.monotonic()
                state.metrics.finished(len(_tokens(prompt)), times, start, end, finish)
                if toward_death:
                    self._maybe_die()

        def _maybe_die(self) -> None:
            """``VLLM_DOUBLE_DIE_AFTER_REQUESTS``: the answer is out, then the process ends."""
            limit = os.environ.get("VLLM_DOUBLE_DIE_AFTER_REQUESTS", "")
            hang = os.environ.get("VLLM_DOUBLE_HANG_AFTER_REQUESTS", "")
            if not limit.isdigit() and not hang.isdigit():
                return
            with state.answered_lock:
                state.answered += 1
                if hang.isdigit() and state.answered == int(hang):
                    print(
                        f"vllm-double: hanging after {state.answered} requests "
                        "(VLLM_DOUBLE_HANG_AFTER_REQUESTS)",
                        flush=True,
                    )
                    state.hung.set()
                    return
                if not limit.isdigit() or state.answered < int(limit):
                    return
                with contextlib.suppress(OSError):
                    self.wfile.flush()
                code = int(os.environ.get("VLLM_DOUBLE_EXIT_CODE", "1"))
                cause = os.environ.get("VLLM_DOUBLE_DIE_REPLAY")
                if cause:
                    replay(real_lines(cause), 0.0)
                print(
                    f"vllm-double: dying after {state.answered} requests "
                    f"(VLLM_DOUBLE_DIE_AFTER_REQUESTS), exit {code}",
                    flush=True,
                )
                _exit_now(code)

        @staticmethod
        def _pace(tokens: list[str], start: float) -> list[float]:
            """Wait out each token's moment (TTFT, then ITL apart); when each was ready."""
            ttft, itl = delays()
            times = []
            for i in range(len(tokens)):
                sleep_until(start + ttft + i * itl)
                times.append(time.monotonic())
            return times

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _stream(
            self,
            model: str,
            prompt: str,
            text: str,
            finish: str,
            start: float,
            times: list[float],
            include_usage: bool,
        ) -> None:
            """vLLM 0.32's streamed completion (real-vllm-cpu/bench/stream_completion.txt)."""
            ttft, itl = delays()
            tokens = _tokens(text)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            head = {
                "id": f"cmpl-{uuid.uuid4().hex[:16]}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
            }
            for i, token in enumerate(tokens):
                sleep_until(start + ttft + i * itl)
                choice = {
                    "index": 0,
                    "text": token,
                    "logprobs": None,
                    "finish_reason": finish if i == len(tokens) - 1 else None,
                    "stop_reason": None,
                    "prompt_token_ids": None,
                    "token_ids": None,
                }
                self._chunk(f"data: {_compact({**head, 'choices': [choice]})}\n\n".encode())
                times.append(time.monotonic())
            if include_usage:
                p, c = len(_tokens(prompt)), len(tokens)
                usage = {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c}
                last = {**head, "choices": [], "usage": usage, "system_fingerprint": FINGERPRINT}
                self._chunk(f"data: {_compact(last)}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")

        def _ready(self) -> bool:
            if state.ready.is_set():
                return True
            self._send(503)
            return False

        def _first_request_delay(self) -> None:
            with state.first_request_lock:
                if not state.first_request_done:
                    time.sleep(float(os.environ.get("VLLM_DOUBLE_FIRST_REQUEST_S", "0")))
                    state.first_request_done = True

        def _models(self) -> dict[str, Any]:
            cards = []
            for name in state.args.names:
                cards.append(
                    {
                        "id": name,
                        "object": "model",
                        "created": state.created,
                        "owned_by": "vllm",
                        "root": state.args.model or name,
                        "parent": None,
                        "max_model_len": state.args.max_model_len or DEFAULT_MAX_MODEL_LEN,
                        "permission": [
                            {
                                "id": f"modelperm-{uuid.uuid4().hex}",
                                "object": "model_permission",
                                "created": state.created,
                                "allow_create_engine": False,
                                "allow_sampling": True,
                                "allow_logprobs": True,
                                "allow_search_indices": False,
                                "allow_view": True,
                                "allow_fine_tuning": False,
                                "organization": "*",
                                "group": None,
                                "is_blocking": False,
                            }
                        ],
                    }
                )
            return {"object": "list", "data": cards}

        @staticmethod
        def _usage(prompt: str, text: str) -> dict[str, Any]:
            p, c = len(_tokens(prompt)), len(_tokens(text))
            return {
                "prompt_tokens": p,
                "total_tokens": p + c,
                "completion_tokens": c,
                "prompt_tokens_details": None,
                "completion_tokens_details": None,
            }

        # Both bodies have exactly the fields of vLLM 0.32's (real-vllm-cpu/responses.json).
        def _completion(self, model: str, prompt: str, text: str, finish: str) -> dict[str, Any]:
            return {
                "id": f"cmpl-{uuid.uuid4().hex[:16]}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                        "token_ids": None,
                        "prompt_logprobs": None,
                        "prompt_token_ids": None,
                        "routed_experts": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": FINGERPRINT,
                "usage": self._usage(prompt, text),
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            }

        def _chat(self, model: str, prompt: str, text: str, finish: str) -> dict[str, Any]:
            return {
                "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": text,
                            "refusal": None,
                            "annotations": None,
                            "audio": None,
                            "function_call": None,
                            "reasoning": None,
                        },
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                        "token_ids": None,
                        "routed_experts": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": FINGERPRINT,
                "usage": self._usage(prompt, text),
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "prompt_text": None,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            }

    return Handler


# --------------------------------------------------------------------------- multi-node


def _rendezvous_s() -> float:
    return float(os.environ.get("VLLM_DOUBLE_RENDEZVOUS_S", "60"))


def _fail_ranks() -> set[int]:
    raw = os.environ.get("VLLM_DOUBLE_FAIL_RANKS", "")
    return {int(part) for part in raw.split(",") if part.strip().isdigit()}


def _die(message: str) -> None:
    print(f"vllm-double: {message} (TEST DOUBLE)", flush=True)
    _exit_now(1)


def _watch(sock: socket.socket, what: str) -> None:
    """Exit 1 when the peer's connection ends (a joined rank died, or the head did)."""

    def run() -> None:
        with contextlib.suppress(OSError):
            while sock.recv(64):
                pass
        _die(f"rendezvous: {what} closed its connection: the group is broken")

    threading.Thread(target=run, name="watch", daemon=True).start()


JOINED: dict[int, socket.socket] = {}  # rank 0: the joined ranks' connections
PP_TRAP = "real-vllm-cpu/18_pp2_eager_first_request_kills_engine.log"
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."


NO_CXX = "real-vllm-cpu/20_eager_logprobs_without_cxx_compiler.log"
ENGINE_DIED = threading.Event()


def no_cxx_trap(body: dict[str, Any]) -> bool:
    """``VLLM_DOUBLE_NO_CXX=1``: whether this request compiles the sampler's ranks with no
    compiler (it asks for log-probabilities, torch.compile is on); the worker's real lines
    are replayed and the process exits a second after the 500 is out."""
    if os.environ.get("VLLM_DOUBLE_NO_CXX") != "1":
        return False
    if os.environ.get("TORCHDYNAMO_DISABLE") == "1":
        return False
    if not isinstance(body.get("logprobs"), int) and not isinstance(
        body.get("prompt_logprobs"), int
    ):
        return False
    replay([ln for ln in real_lines(NO_CXX) if "(Worker" in ln and "ERROR" in ln], 0.0)
    ENGINE_DIED.set()  # vLLM's /health answers 503 once its engine client saw the death
    threading.Timer(1.0, _exit_now, args=(1,)).start()
    return True


def pp_first_request_trap() -> bool:
    """``VLLM_DOUBLE_PP_FIRST_REQUEST=die`` on the head: tell every rank to fail (they replay
    the real rank 1's assertion), replay the head's real lines; True when it did."""
    if os.environ.get("VLLM_DOUBLE_PP_FIRST_REQUEST") != "die" or not JOINED:
        return False
    for conn in JOINED.values():
        with contextlib.suppress(OSError):
            conn.sendall(b"DIE\n")
    time.sleep(0.3)
    replay([ln for ln in real_lines(PP_TRAP) if "(EngineCore" in ln and "ERROR" in ln], 0.0)
    threading.Timer(1.0, _exit_now, args=(0,)).start()  # the real head exits 0 (KeyError)
    return True


def head_rendezvous(args: Args) -> None:
    """Rank 0: listen on the master port, wait until every other rank joined."""
    if 0 in _fail_ranks():  # the head dies at load, before it listens
        replay(real_lines(os.environ.get("VLLM_DOUBLE_REPLAY", DEFAULT_REPLAY)), 0.0)
        _exit_now(int(os.environ.get("VLLM_DOUBLE_EXIT_CODE", "1")))
    server = socket.create_server(("0.0.0.0", args.master_port), reuse_port=False)
    print(
        f"vllm-double: rendezvous: rank 0 listening on 0.0.0.0:{args.master_port} "
        f"for {args.nnodes - 1} ranks at {time.time():.6f}",
        flush=True,
    )
    deadline = time.monotonic() + _rendezvous_s()
    joined: dict[int, socket.socket] = {}
    while len(joined) < args.nnodes - 1:
        left = deadline - time.monotonic()
        if left <= 0:
            missing = sorted(set(range(1, args.nnodes)) - set(joined))
            _die(f"rendezvous: timed out waiting for ranks {missing} on port {args.master_port}")
        server.settimeout(left)
        try:
            conn, peer = server.accept()
        except TimeoutError:
            continue
        conn.settimeout(5)
        try:
            hello = conn.recv(64).decode(errors="replace").strip()
        except OSError:
            hello = ""
        words = hello.split()
        if len(words) != 2 or words[0] != "JOIN" or not words[1].isdigit():
            conn.close()  # a reachability probe, or garbage
            continue
        rank = int(words[1])
        if not 0 < rank < args.nnodes or rank in joined:
            conn.sendall(b"NO\n")
            conn.close()
            continue
        conn.settimeout(None)
        conn.sendall(b"OK\n")
        joined[rank] = conn
        print(
            f"vllm-double: rendezvous: rank {rank} joined from {peer[0]} "
            f"({len(joined)}/{args.nnodes - 1}) at {time.time():.6f}",
            flush=True,
        )
    JOINED.update(joined)
    for rank, conn in joined.items():
        _watch(conn, f"rank {rank}")

    def keep_listening() -> None:  # as torch's store does: later probes connect, then go
        server.settimeout(None)
        with contextlib.suppress(OSError):
            while True:
                conn, _peer = server.accept()
                conn.close()

    threading.Thread(target=keep_listening, name="store", daemon=True).start()
    print(
        f"vllm-double: rendezvous: all {args.nnodes} ranks joined at {time.time():.6f}", flush=True
    )


def worker_rendezvous(args: Args) -> socket.socket:
    """Rank > 0: connect to rank 0 (retrying until the deadline), join, keep the socket."""
    deadline = time.monotonic() + _rendezvous_s()
    last = ""
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection((args.master_addr, args.master_port), timeout=5)
            sock.sendall(f"JOIN {args.node_rank}\n".encode())
            reply = sock.recv(64).decode(errors="replace").strip()
        except OSError as exc:
            last = str(exc)
            time.sleep(0.2)
            continue
        if reply != "OK":
            _die(f"rendezvous: rank 0 refused rank {args.node_rank}: {reply!r}")
        sock.settimeout(None)
        print(
            f"vllm-double: rendezvous: rank {args.node_rank} joined "
            f"{args.master_addr}:{args.master_port} at {time.time():.6f}",
            flush=True,
        )
        return sock
    where = f"{args.master_addr}:{args.master_port}"
    _die(f"rendezvous: rank {args.node_rank} could not reach {where}: {last}")
    raise AssertionError  # unreachable: _die exits


def headless_main(args: Args, load_s: float) -> int:
    """A headless rank: join, "load" its shard, then live as long as the head does."""
    sock = worker_rendezvous(args)
    lines = healthy_startup()
    if args.node_rank in _fail_ranks():
        name = os.environ.get("VLLM_DOUBLE_REPLAY", DEFAULT_REPLAY)
        replay(lines[: _index(lines, "Starting to load model")], load_s / 2)
        replay(real_lines(name), load_s / 2)
        return int(os.environ.get("VLLM_DOUBLE_EXIT_CODE", "1"))
    replay(lines[: _index(lines, "Starting to load model") + 1], load_s)
    with contextlib.suppress(OSError):
        while data := sock.recv(64):
            if b"DIE" in data:  # the head's first request (VLLM_DOUBLE_PP_FIRST_REQUEST)
                replay([ln for ln in real_lines(PP_TRAP) if "(Worker_PP1" in ln], 0.0)
                return 1
    if os.environ.get("VLLM_DOUBLE_HEADLESS_STAYS") == "1":
        print("vllm-double: rendezvous: rank 0 went away; staying up (TEST DOUBLE)", flush=True)
        while True:
            time.sleep(3600)
    print(
        "vllm-double: rendezvous: rank 0 went away: headless rank exits (TEST DOUBLE)", flush=True
    )
    return 1


# --------------------------------------------------------------------------- main


def emit(line: str) -> None:
    """Progress bars go to stderr (tqdm), log records to stdout (vLLM's logging config)."""
    stream = sys.stderr if ("it/s]" in line or "s/it]" in line or "?it/s" in line) else sys.stdout
    stream.write(line + "\n")
    stream.flush()


def replay(lines: list[str], seconds: float) -> None:
    pause = seconds / max(1, len(lines))
    for line in lines:
        emit(line)
        time.sleep(pause)


def serve(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    return thread


def engine_core(index: str) -> int:
    """The engine-core stand-in (``vllm_double.py engine-core --port P --index I``):
    detaches as told, ignores SIGTERM if told, then sleeps."""
    how = os.environ.get("VLLM_DOUBLE_CHILDREN_DETACH", "")
    if how == "group":
        os.setpgid(0, 0)
    elif how == "session":
        os.setsid()
    if os.environ.get("VLLM_DOUBLE_CHILDREN_TERM") == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"vllm-double: engine core {index} pid {os.getpid()} ({how or 'same group'})", flush=True)
    ready = os.environ.pop("VLLM_DOUBLE_READY_FD", "")
    if ready:  # the handshake: detached and signals set before the API server serves
        os.write(int(ready), b"1")
        os.close(int(ready))
    while True:
        time.sleep(3600)


CHILDREN: list[subprocess.Popen[bytes]] = []


def start_children(port: int) -> None:
    """``VLLM_DOUBLE_CHILDREN``: the engine-core stand-ins (see the module docstring)."""
    for index in range(int(os.environ.get("VLLM_DOUBLE_CHILDREN", "0") or 0)):
        argv = [sys.executable, str(Path(__file__).resolve()), "engine-core", "--port", str(port)]
        read, write = os.pipe()
        env = {**os.environ, "VLLM_DOUBLE_READY_FD": str(write)}
        argv += ["--index", str(index)]
        CHILDREN.append(subprocess.Popen(argv, env=env, pass_fds=(write,)))
        os.close(write)
        # like vLLM's engine-core handshake: the API server serves only once its engine
        # cores are set up (detached, SIGTERM handling in place); bounded at 60 s
        if select.select([read], [], [], 60)[0]:
            os.read(read, 1)
        os.close(read)


def stop_children() -> None:
    """A clean shutdown ends the engine cores first (SIGTERM, up to 5 s for them)."""
    for child in CHILDREN:
        with contextlib.suppress(OSError):
            child.terminate()
    deadline = time.monotonic() + 5
    for child in CHILDREN:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=max(0.0, deadline - time.monotonic()))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    mode = os.environ.get("VLLM_DOUBLE_MODE", "healthy")
    if mode not in MODES:
        print(f"vllm-double: unknown VLLM_DOUBLE_MODE {mode!r} (one of {MODES})", file=sys.stderr)
        return 2
    load_s = float(os.environ.get("VLLM_DOUBLE_LOAD_S", "1.5"))
    late_bind = os.environ.get("VLLM_DOUBLE_BIND", "early") == "late"

    def on_term(signum: int, frame: object) -> None:
        # PID 1 in a container has no default SIGTERM action: exit as vLLM does.
        stop_children()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    print(
        f"{BANNER}; mode={mode} model={args.model} port={args.port} "
        f"enforce_eager={args.enforce_eager} argv={json.dumps(argv)}",
        flush=True,
    )
    start_children(args.port)

    if args.nnodes > 1 and args.node_rank > 0:
        return headless_main(args, load_s)
    if args.nnodes > 1:
        head_rendezvous(args)

    state = State(args, mode)
    server: ThreadingHTTPServer | None = None
    if not late_bind:
        server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
        serve(server)

    lines = healthy_startup()
    hang_eager = os.environ.get("VLLM_DOUBLE_HANG_EAGER") == "1"
    if mode == "die":
        name = os.environ.get("VLLM_DOUBLE_REPLAY", DEFAULT_REPLAY)
        replay(lines[: _index(lines, "Starting to load model")], load_s / 2)
        replay(real_lines(name), load_s / 2)
        while os.environ.get("VLLM_DOUBLE_STAY_UP") == "1":  # never healthy, never gone
            time.sleep(3600)
        return int(os.environ.get("VLLM_DOUBLE_EXIT_CODE", "1"))
    if mode == "oom_graph_capture" and not args.enforce_eager:
        replay(lines[: _index(lines, "Capturing CUDA graph shapes:  11%")], load_s)
        replay(real_lines(OOM_LOG), 0.1)
        return 1
    if mode == "hang_in_graph_capture" and (not args.enforce_eager or hang_eager):
        replay(lines[: _index(lines, "Capturing CUDA graph shapes:  40%") + 1], load_s)
        while True:  # silent, never healthy: the stall serve must detect
            time.sleep(3600)
    if args.enforce_eager:
        lines = [s for s in lines if not _is_capture(s) and "Graph capturing finished" not in s]
    compile_s = float(os.environ.get("VLLM_DOUBLE_COMPILE_S", "0"))
    if compile_s > 0 and not args.enforce_eager:  # after the weights, before profiling
        at = _index(lines, "Model loading took") + 1
        replay(lines[:at], load_s * at / len(lines))
        simulate_compile(args, compile_s)
        replay(lines[at:], load_s * (len(lines) - at) / len(lines))
    else:
        replay(lines, load_s)

    if server is None:
        server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
        serve(server)
    for line in api_server_lines(args):
        emit(line)
    state.healthy_at = time.monotonic()
    state.ready.set()
    print(f"vllm-double: healthy at {time.time():.6f} (TEST DOUBLE)", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        server.shutdown()


def install_fake_vllm(bin_dir: Path, python: str | None = None, script: Path | None = None) -> Path:
    """Write a ``vllm`` executable into ``bin_dir`` that runs this double (native route tests),
    or ``script`` (``llama_vllm.py``, the real engine of the slow test) with the same argv."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "vllm"
    interpreter = python or sys.executable
    target = (script or Path(__file__)).resolve()
    exe.write_text(
        f"#!/bin/sh\n# TEST stand-in for vLLM: {target.name}\nexec {_sh_quote(interpreter)} "
        f'{_sh_quote(str(target))} "$@"\n',
        encoding="utf-8",
    )
    exe.chmod(0o755)
    return exe


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _exit_now(code: int) -> None:
    """Flush and leave without interpreter finalization.

    The HTTP server's daemon threads may be mid-request when ``die``/``oom`` modes return;
    finalizing CPython under them ends them with ``pthread_exit``, which on a stripped image
    without ``libgcc_s`` turned exit 3 into 139. A crashed engine process exits at once.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        if sys.argv[1:2] == ["engine-core"]:
            _exit_now(engine_core(sys.argv[-1]))
        _exit_now(main(sys.argv[1:]))
    except KeyboardInterrupt:
        _exit_now(130)
    except SystemExit as stop:
        _exit_now(0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1)
