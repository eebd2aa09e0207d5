#!/usr/bin/env python3
"""TEST DOUBLE of SGLang's server (``python3 -m sglang.launch_server``). Not an inference engine.

The SGLang counterpart of ``vllm_double.py``: it lets serve's docker and native paths, the
start-up tracker, the coherence probe and ``top`` run against something that behaves as the
real SGLang 0.5.23 does, on machines without a GPU. Standard library only (it runs in the
stripped test image); it reuses the vLLM double's text helpers (``vllm_double.py`` beside it).

Held to the real SGLang by ``tests/servers/test_sglang_double_matches_real.py``, against
``tests/fixtures/sglang/`` (``tests/infra/capture_real_sglang.py``: sglang 0.5.23 on a CPU
torch serving SmolLM2-135M-Instruct):

- **Start-up:** the real start-up log (``real_cpu_start_2.log``) up to "Engine startup
  timings", with this run's time, model path and port filled in; then uvicorn's lines (it
  listens only now: connection refused before, as the real server), SGLang's own warm-up
  (``/model_info``, ``/generate``, ``/freeze_gc``; ``/health`` answers 503 meanwhile), and
  "The server is fired up and ready to roll!", at the moment ``/health`` turns 200.
- **Routes:** ``/health`` and ``/health_generate`` (200, empty body, no content type, once
  ready; 503 before), ``/v1/models`` (``owned_by`` ``sglang``, ``max_model_len``),
  ``/v1/completions`` and ``/v1/chat/completions`` (streaming too, with SGLang's extra fields
  ``matched_stop``, ``reasoning_content``, ``metadata.weight_version``; ``logprobs`` (0 too)
  gives the generated tokens' log-probabilities, with ``echo`` and ``logprobs`` >= 1 the
  prompt's first, in the real shape, with the vLLM double's deterministic values, so the
  fingerprint can be taken; ``ignore_eos`` fills the answer to ``max_tokens``), the native
  ``/generate``, and ``/metrics`` (with ``--enable-metrics``): the real exposition's 80-odd
  ``sglang:`` families, with the double's own counts in those ``top`` reads and the other
  counters and histograms at zero. ``/version`` and unknown routes: 404 ``{"detail": ...}``.
- **Where SGLang differs from vLLM:** a request naming an unknown ``model`` is served anyway
  (200, the requested name echoed); an over-long prompt or a completion that does not fit
  the context is 400 with SGLang's wording (``{"object": "error", ...}``); request validation
  errors are 400 ``"Bad Request"`` with a pydantic dump.

Command line: ``--model-path``, ``--served-model-name``, ``--host`` (default 127.0.0.1, as
SGLang), ``--port`` (default 30000), ``--context-length`` (default 131072),
``--enable-metrics``; anything else is accepted and ignored (the planner's AMD flags).

The vLLM double's faults (``VLLM_DOUBLE_GARBAGE_PAST``, ``_DRIFT_AFTER_S``, ``_NAN_AFTER``)
apply to its scores too; ``VLLM_DOUBLE_FAULT_FIX`` clears them with SGLang's switches:
``aiter`` is ``SGLANG_USE_AITER=0``, ``eager`` is ``--disable-cuda-graph``.

Environment: ``SGLANG_DOUBLE_MODE`` ``healthy`` (default), ``incoherent`` (word salad) or
``die`` (replays ``SGLANG_DOUBLE_REPLAY``, a real log under the fixtures, and exits 1 before
it listens); ``SGLANG_DOUBLE_LOAD_S`` seconds spent replaying the start-up (default 1.5);
``SGLANG_DOUBLE_FIXTURES`` where the captures are (default: ``sglang/`` next to this file
in the test image, else ``tests/fixtures/sglang``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

try:  # imported by the tests
    from tests.infra import vllm_double as vd
except ImportError:  # run as a script (the test image): vllm_double.py is beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import vllm_double as vd  # type: ignore[no-redef]

BANNER = "sglang-double: TEST DOUBLE of SGLang (tests/infra/sglang_double.py), not a real engine"
MODES = ("healthy", "incoherent", "die")
START_LOG = "real_cpu_start_2.log"
METRICS = "real_cpu_metrics_2.txt"
READY_LINE = "The server is fired up and ready to roll!"
CAPTURED_MODEL_DIR = "/root/.cache/instinct-serve-tests/real-vllm/models/SmolLM2-135M-Instruct"
CAPTURED_SERVED = "HuggingFaceTB/SmolLM2-135M-Instruct"
DEFAULT_CONTEXT = 131072
EOS_ID = 2  # SmolLM2's <|im_end|>: what `matched_stop` names when a reply stops by itself
BAD = "Bad Request"


class Args:
    def __init__(self) -> None:
        self.model_path = "unknown-model"
        self.served: str | None = None
        self.host = "127.0.0.1"
        self.port = 30000
        self.context = DEFAULT_CONTEXT
        self.metrics = False
        # what the vLLM double's faults read (``VLLM_DOUBLE_FAULT_FIX``): SGLang's own AITER
        # switch, and ``--disable-cuda-graph`` where the vLLM double reads --enforce-eager
        self.aiter_env = "SGLANG_USE_AITER"
        self.enforce_eager = False

    @property
    def name(self) -> str:
        return self.served or self.model_path


def parse_args(argv: list[str]) -> Args:
    """``--flag value`` pairs and bare flags, leniently: unknown ones are ignored."""
    args = Args()
    i = 0
    while i < len(argv):
        key, _, inline = argv[i].partition("=")
        has_value = bool(inline) or (i + 1 < len(argv) and not argv[i + 1].startswith("--"))
        value = inline or (argv[i + 1] if has_value else "")
        i += 1 if inline or not has_value else 2
        if key == "--model-path":
            args.model_path = value
        elif key == "--served-model-name":
            args.served = value
        elif key == "--host":
            args.host = value
        elif key == "--port" and value.isdigit():
            args.port = int(value)
        elif key == "--context-length" and value.isdigit():
            args.context = int(value)
        elif key == "--enable-metrics":  # a bare flag: SGLang takes no positionals
            args.metrics = True
        elif key == "--disable-cuda-graph":
            args.enforce_eager = True
    return args


# --------------------------------------------------------------------------- captures


def fixtures() -> Path:
    env = os.environ.get("SGLANG_DOUBLE_FIXTURES")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for candidate in (here / "sglang", here.parent / "fixtures" / "sglang"):
        if (candidate / START_LOG).is_file():
            return candidate
    raise SystemExit(f"sglang-double: cannot find the captured SGLang files next to {here}")


_STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")
_CAPTURED_PORT = re.compile(r"127\.0\.0\.1:\d+|'port': \d+")


def stamp() -> str:
    return time.strftime("[%Y-%m-%d %H:%M:%S] ")


def real_log() -> list[str]:
    return (fixtures() / START_LOG).read_text(encoding="utf-8").splitlines()


def startup_lines(args: Args) -> list[str]:
    """The real start-up up to "Engine startup timings", this run's time, path and port."""
    lines = real_log()
    end = next(i for i, s in enumerate(lines) if "Engine startup timings" in s)
    out = []
    for line in lines[: end + 1]:
        line = _STAMP.sub(stamp(), line).replace(CAPTURED_MODEL_DIR, args.model_path)
        out.append(line.replace(f"'port': {_captured_port()}", f"'port': {args.port}"))
    return out


def _captured_port() -> str:
    for line in real_log():
        found = re.search(r"Uvicorn running on http://[\d.]+:(\d+)", line)
        if found:
            return found.group(1)
    return "30000"


def uvicorn_lines(args: Args) -> list[str]:
    """uvicorn's lines as SGLang logs them (its own time prefix), this run's pid and address."""
    head = stamp() + "INFO:     "
    return [
        f"{head}Started server process [{os.getpid()}]",
        f"{head}Waiting for application startup.",
        f"{head}Application startup complete.",
        f"{head}Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)",
    ]


def warmup_lines() -> list[str]:
    """SGLang's own warm-up between listening and ready: the real lines, this run's time."""
    lines = real_log()
    start = next(i for i, s in enumerate(lines) if "Uvicorn running on" in s) + 1
    end = next(i for i, s in enumerate(lines) if READY_LINE in s)
    return [_STAMP.sub(stamp(), line) for line in lines[start:end]]


# --------------------------------------------------------------------------- /metrics

# families the double counts itself (observe.sglang.NAMES reads them)
COUNTED = {
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:cache_hit_rate",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:num_requests_total",
    "sglang:time_to_first_token_seconds",
    "sglang:request_time_per_output_token_seconds",
    "sglang:e2e_request_latency_seconds",
}
_SAMPLE = re.compile(r"^(?P<name>[\w:]+)(?P<labels>\{.*\})? (?P<value>\S+)$")


class Family:
    def __init__(self, name: str) -> None:
        self.name = name
        self.head: list[str] = []  # HELP and TYPE
        self.type = "untyped"
        self.samples: list[tuple[str, str, str]] = []  # (sample name, labels, value)


def template() -> list[Family]:
    """The real exposition, family by family, in its order."""
    families: list[Family] = []
    for line in (fixtures() / METRICS).read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            parts = line.split(" ", 3)
            if not families or families[-1].name != parts[2]:
                families.append(Family(parts[2]))
            families[-1].head.append(line)
            if parts[1] == "TYPE":
                families[-1].type = parts[3]
        elif (m := _SAMPLE.match(line)) and families:
            families[-1].samples.append((m["name"], m["labels"] or "", m["value"]))
    return families


class Metrics:
    """The double's requests, by ``is_streaming``, rendered into the real exposition."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.counts: dict[str, dict[str, float]] = {}  # is_streaming -> counter -> value
        self.seen: dict[str, dict[str, list[float]]] = {}  # is_streaming -> histogram -> obs
        self.families = template()

    def finished(self, streaming: bool, prompt: int, times: list[float], start: float) -> None:
        key = "true" if streaming else "false"
        end = time.monotonic()
        with self.lock:
            counts = self.counts.setdefault(key, {})
            for name, add in (
                ("sglang:prompt_tokens_total", prompt),
                ("sglang:generation_tokens_total", len(times)),
                ("sglang:num_requests_total", 1),
            ):
                counts[name] = counts.get(name, 0.0) + add
            seen = self.seen.setdefault(key, {})
            if times:
                seen.setdefault("sglang:time_to_first_token_seconds", []).append(times[0] - start)
            if len(times) > 1:
                tpot = (times[-1] - times[0]) / (len(times) - 1)
                seen.setdefault("sglang:request_time_per_output_token_seconds", []).append(tpot)
            seen.setdefault("sglang:e2e_request_latency_seconds", []).append(end - start)

    def render(self, model: str) -> str:
        out: list[str] = []
        with self.lock:
            for family in self.families:
                out += family.head
                out += self._samples(family, model)
        return "\n".join(out) + "\n"

    def _samples(self, family: Family, model: str) -> list[str]:
        def relabel(labels: str, **change: str) -> str:
            labels = labels.replace(f'model_name="{CAPTURED_SERVED}"', f'model_name="{model}"')
            for key, value in change.items():
                labels = re.sub(rf'{key}="[^"]*"', f'{key}="{value}"', labels)
            return labels

        if family.name not in COUNTED:  # as captured: gauges kept, counts at zero
            keep = family.type == "gauge"
            return [f"{n}{relabel(lb)} {v if keep else '0.0'}" for n, lb, v in family.samples]
        if family.type == "gauge":
            value = {"sglang:num_running_reqs": float(self.running)}.get(family.name, 0.0)
            return [f"{n}{relabel(lb)} {value!r}" for n, lb, _ in family.samples]
        if not family.samples:
            return []
        lines = []
        series = [x for x in family.samples if _streaming(x[1]) == _streaming(family.samples[0][1])]
        for streaming in sorted(set(self.counts) | set(self.seen)):
            if family.type == "counter":
                value = self.counts.get(streaming, {}).get(family.name, 0.0)
                for n, lb, _ in series[:1]:
                    lines.append(f"{n}{relabel(lb, is_streaming=streaming)} {value!r}")
                continue
            obs = self.seen.get(streaming, {}).get(family.name, [])
            for n, lb, _ in series:
                kind = n.rsplit("_", 1)[1]
                labels = relabel(lb, is_streaming=streaming)
                if kind == "sum":
                    lines.append(f"{n}{labels} {float(sum(obs))!r}")
                elif kind == "count":
                    lines.append(f"{n}{labels} {float(len(obs))!r}")
                else:
                    le = re.search(r'le="([^"]+)"', lb)
                    bound = float("inf") if le is None else float(le.group(1))
                    lines.append(f"{n}{labels} {float(sum(1 for v in obs if v <= bound))!r}")
        return lines


def _streaming(labels: str) -> str | None:
    found = re.search(r'is_streaming="([^"]*)"', labels)
    return found.group(1) if found else None


# --------------------------------------------------------------------------- answers


def answer(
    prompt: str, max_tokens: int, incoherent: bool, fill: bool = False
) -> tuple[list[str], str]:
    """(tokens, finish_reason): the vLLM double's Paris, or a line of its own; exactly
    ``max_tokens`` long with ``fill`` (``ignore_eos``: the reply repeats to the limit)."""
    text, finish = vd.answer(prompt, max_tokens, incoherent)
    if text.startswith("This is a reply from the vLLM test double"):
        text = "This is a reply from the SGLang test double."
        finish = "stop" if len(vd._tokens(text)) <= max_tokens else "length"
    tokens = vd._tokens(text)
    if fill and tokens and len(tokens) < max_tokens:
        again = vd._tokens(" " + text.strip())
        while len(tokens) < max_tokens:
            tokens += again[: max_tokens - len(tokens)]
        finish = "length"
    return tokens[:max_tokens], finish


def usage(prompt: int, completion: int, full: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }
    if full:
        body.update(prompt_tokens_details=None, reasoning_tokens=0, completion_tokens_details=None)
        return {
            k: body[k]
            for k in (
                "prompt_tokens",
                "total_tokens",
                "completion_tokens",
                "prompt_tokens_details",
                "reasoning_tokens",
                "completion_tokens_details",
            )
        }
    return {**body, "reasoning_tokens": 0}


def metadata(completion: int) -> dict[str, Any]:
    weights = [{"version": "default", "start": 0, "end": completion}]
    return {"weight_version": "default", "weight_versions": weights}


def logprobs(
    body: dict[str, Any], prompt: str, tokens: list[str], state: Any
) -> tuple[str, dict[str, Any] | None]:
    """The answer's text and its ``logprobs``, as SGLang 0.5.23 gives them: the generated
    tokens' with ``logprobs`` (0 too), the prompt's first with ``echo`` and ``logprobs`` of at
    least 1 (``serving_completions.py``: ``request.echo and request.logprobs``). The values
    are the vLLM double's deterministic ones (a repeated pair scores -0.3, and so on)."""
    text = "".join(tokens)
    echo = body.get("echo") is True
    if body.get("logprobs") is None:
        return (prompt + text if echo else text), None
    listed, values = vd.generated(text, state)
    numbers: list[float | None] = list(values)
    if echo and body.get("logprobs"):
        prompt_tokens = vd._tokens(prompt)
        listed = prompt_tokens + listed
        numbers = [None, *vd.prompt_scores(prompt_tokens, state), *numbers]
    fields = {
        "text_offset": [-1] * len(listed),
        "token_logprobs": numbers,
        "tokens": listed,
        "top_logprobs": [
            None if v is None else {t: v} for t, v in zip(listed, numbers, strict=True)
        ],
    }
    return (prompt + text if echo else text), fields


def validation(kind: str, loc: str, msg: str, body: Any) -> str:
    """SGLang 0.5.23's request-validation message: a pydantic dump, where, and the route."""
    detail = {"type": kind, "loc": loc, "msg": msg, "input": body}
    where = '  File "sglang_double.py", in openai_v1_chat_completions'
    return f"1 validation error:\n  {detail}\n\n{where}\n    POST /v1/chat/completions [{detail}]"


def _compact(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


# --------------------------------------------------------------------------- server


class State:
    def __init__(self, args: Args, mode: str) -> None:
        self.args = args
        self.mode = mode
        self.ready = threading.Event()
        self.created = int(time.time())
        self.metrics = Metrics()
        self.healthy_at: float | None = None  # what the vLLM double's scoring reads


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def version_string(self) -> str:
            return "uvicorn"

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            host, port = self.client_address[:2]
            phrase = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}
            text = phrase.get(int(code), "") if str(code).isdigit() else ""
            line = f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {code} {text}'
            vd.emit(stamp() + line.rstrip())

        def log_message(self, format: str, *fargs: Any) -> None:
            sys.stderr.write("sglang-double: " + (format % fargs) + "\n")

        def _send(self, code: int, body: Any = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(code)
            if body is not None:
                self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, message: str, typ: str = "BadRequestError") -> None:
            body = {"object": "error", "message": message, "type": typ, "param": None}
            self._send(400, {**body, "code": 400})

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                self._send(200 if state.ready.is_set() else 503)
            elif path == "/metrics" and state.args.metrics:
                body = state.metrics.render(state.args.name).encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif path == "/v1/models":
                card = {
                    "id": state.args.name,
                    "object": "model",
                    "created": state.created,
                    "owned_by": "sglang",
                    "root": state.args.name,
                    "parent": None,
                    "max_model_len": state.args.context,
                }
                self._send(200, {"object": "list", "data": [card]})
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            routes = ("/v1/completions", "/v1/chat/completions", "/generate")
            if path not in routes:
                self._send(404, {"detail": "Not Found"})
                return
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw or b"null")
            except ValueError as exc:
                where = ("body", getattr(exc, "pos", 0))
                self._error(validation("json_invalid", where, "JSON decode error", {}), BAD)
                return
            if not isinstance(body, dict):
                self._error(validation("model_attributes_type", ("body",), "bad", body), BAD)
                return
            if path == "/generate":
                self._generate(body)
            elif path == "/v1/chat/completions":
                self._chat(body)
            else:
                self._completion(body)

        def _generate(self, body: dict[str, Any]) -> None:
            """SGLang's native route: text, output ids, and ``meta_info`` (log-probabilities of
            the prompt from ``logprob_start_len`` with ``return_logprob``)."""
            prompt = str(body.get("text") or "")
            params = body.get("sampling_params") or {}
            tokens, finish = answer(prompt, int(params.get("max_new_tokens") or 16), False)
            start = time.monotonic()
            state.metrics.finished(False, len(vd._tokens(prompt)), [time.monotonic()], start)
            meta: dict[str, Any] = {
                "id": uuid.uuid4().hex,
                "finish_reason": {"type": finish, "length": len(tokens)},
                "prompt_tokens": len(vd._tokens(prompt)),
                "weight_version": "default",
                "completion_tokens": len(tokens),
                "cached_tokens": 0,
            }
            if body.get("return_logprob"):
                first = int(body.get("logprob_start_len") or 0)
                ids = range(len(vd._tokens(prompt)))
                meta["input_token_logprobs"] = [
                    [None if i == 0 else -1.0, 100 + i, None] for i in ids if i >= first
                ]
                meta["output_token_logprobs"] = [[-1.0, 1000 + i, None] for i in range(len(tokens))]
            ids_out = [1000 + i for i in range(len(tokens))]
            self._send(200, {"text": "".join(tokens), "output_ids": ids_out, "meta_info": meta})

        def _fits(self, prompt: int, max_tokens: int | None, chat: bool) -> bool:
            limit = state.args.context
            if prompt > limit:
                self._error(
                    f"The input ({prompt} tokens) is longer than the model's context length "
                    f"({limit} tokens)."
                )
                return False
            if chat and max_tokens is not None and prompt + max_tokens > limit:
                self._error(
                    "Requested token count exceeds the model's maximum context length of "
                    f"{limit} tokens. You requested a total of {prompt + max_tokens} tokens: "
                    f"{prompt} tokens from the input messages and {max_tokens} tokens for the "
                    "completion. Please reduce the number of tokens in the input messages or "
                    "the completion to fit within the limit."
                )
                return False
            return True

        def _completion(self, body: dict[str, Any]) -> None:
            prompt = body.get("prompt")
            prompt = prompt if isinstance(prompt, str) else json.dumps(prompt)
            max_tokens = int(body.get("max_tokens") or 16)
            if not self._fits(len(vd._tokens(prompt)), max_tokens, False):
                return
            fill = body.get("ignore_eos") is True
            tokens, finish = answer(prompt, max_tokens, state.mode == "incoherent", fill)
            model = str(body.get("model") or state.args.name)  # any name is served
            n_prompt = len(vd._tokens(prompt))
            if body.get("stream") is True:
                self._stream(body, model, tokens, finish, n_prompt, chat=False)
                return
            start = time.monotonic()
            state.metrics.finished(False, n_prompt, [time.monotonic()] * len(tokens), start)
            text, probs = logprobs(body, prompt, tokens, state)
            choice = {"index": 0, "text": text, "logprobs": probs, "finish_reason": finish}
            choice["matched_stop"] = EOS_ID if finish == "stop" else None
            self._send(200, self._head("text_completion", model, choice, n_prompt, len(tokens)))

        def _head(
            self, obj: str, model: str, choice: dict[str, Any], prompt: int, completion: int
        ) -> dict[str, Any]:
            return {
                "id": uuid.uuid4().hex,
                "object": obj,
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
                "usage": usage(prompt, completion),
                "metadata": metadata(completion),
            }

        def _chat(self, body: dict[str, Any]) -> None:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                shown = {**body, "tool_choice": "none"}
                missing = validation("missing", ("body", "messages"), "Field required", shown)
                self._error(missing, BAD)
                return
            text = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            n_prompt = len(vd._tokens(text)) + 30  # the chat template's own tokens
            raw_max = body.get("max_tokens") or body.get("max_completion_tokens")
            if not self._fits(n_prompt, int(raw_max) if raw_max else None, True):
                return
            last = messages[-1].get("content") if isinstance(messages[-1], dict) else ""
            tokens, finish = answer(str(last), int(raw_max or 128), state.mode == "incoherent")
            model = str(body.get("model") or state.args.name)
            if body.get("stream") is True:
                self._stream(body, model, tokens, finish, n_prompt, chat=True)
                return
            start = time.monotonic()
            state.metrics.finished(False, n_prompt, [time.monotonic()] * len(tokens), start)
            message = {"role": "assistant", "content": "".join(tokens), "reasoning_content": None}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            choice["matched_stop"] = EOS_ID if finish == "stop" else None
            self._send(200, self._head("chat.completion", model, choice, n_prompt, len(tokens)))

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _stream(
            self,
            body: dict[str, Any],
            model: str,
            tokens: list[str],
            finish: str,
            prompt: int,
            chat: bool,
        ) -> None:
            """SGLang 0.5.23's event stream (``responses.json``: completion_stream, chat_stream)."""
            start = time.monotonic()
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            head = {
                "id": uuid.uuid4().hex,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()),
                "model": model,
            }
            stop = EOS_ID if finish == "stop" else None

            def send(choice: dict[str, Any] | None, extra: dict[str, Any]) -> None:
                doc = {**head, "choices": [choice] if choice else [], **extra}
                self._chunk(b"data: " + _compact(doc) + b"\n\n")

            times: list[float] = []
            if chat:
                delta = {"reasoning_content": None, "role": "assistant", "content": ""}
                send(self._chunk_choice(delta, None, None), {})
            for i, token in enumerate(tokens):
                last = i == len(tokens) - 1 and not chat
                if chat:
                    delta = {"reasoning_content": None, "content": token}
                    send(self._chunk_choice(delta, None, None), {})
                else:
                    choice = {"index": 0, "text": token, "logprobs": None}
                    choice.update(finish_reason=finish if last else None)
                    choice["matched_stop"] = stop if last else None
                    send(choice, {"usage": None})
                times.append(time.monotonic())
            if chat:
                send(self._chunk_choice({"reasoning_content": None}, finish, stop), {})
            options = body.get("stream_options")
            if isinstance(options, dict) and options.get("include_usage") is True:
                send(None, {"usage": usage(prompt, len(tokens), full=chat)})
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
            state.metrics.finished(True, prompt, times, start)

        @staticmethod
        def _chunk_choice(delta: dict[str, Any], finish: str | None, stop: int | None) -> Any:
            return {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish,
                "matched_stop": stop,
            }

    return Handler


# --------------------------------------------------------------------------- main


def _on_term(signum: int, frame: object) -> None:
    # PID 1 in a container has no default SIGTERM action: exit as SGLang does
    vd.emit(
        stamp() + "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."
    )
    raise SystemExit(0)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    mode = os.environ.get("SGLANG_DOUBLE_MODE", "healthy")
    if mode not in MODES:
        print(f"sglang-double: unknown SGLANG_DOUBLE_MODE {mode!r} (one of {MODES})", flush=True)
        return 2
    load_s = float(os.environ.get("SGLANG_DOUBLE_LOAD_S", "1.5"))
    signal.signal(signal.SIGTERM, _on_term)
    print(f"{BANNER}; mode={mode} model={args.model_path} argv={json.dumps(argv)}", flush=True)
    lines = startup_lines(args)
    if mode == "die":
        at = next(i for i, s in enumerate(lines) if "Load weight begin" in s)
        vd.replay(lines[: at + 1], load_s / 2)
        replay = os.environ.get("SGLANG_DOUBLE_REPLAY", "")
        if replay:
            vd.replay((fixtures() / replay).read_text(encoding="utf-8").splitlines(), load_s / 2)
        return 1
    vd.replay(lines, load_s)
    state = State(args, mode)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    for line in uvicorn_lines(args):
        vd.emit(line)
    vd.replay([_STAMP.sub(stamp(), s) for s in warmup_lines()], min(0.5, load_s / 3))
    state.healthy_at = time.monotonic()
    state.ready.set()
    vd.emit(stamp() + READY_LINE)
    try:
        while True:
            time.sleep(3600)
    finally:
        with contextlib.suppress(Exception):
            server.shutdown()


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except KeyboardInterrupt:
        code = 130
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0
    vd._exit_now(code)
