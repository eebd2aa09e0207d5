"""What the rest of the tool asks of an inference server: the ``ServerKind`` interface.

The planner, the renderers, serve, ``top`` and ``bench`` launch and prove one kind of
server (vLLM today). Whatever they need to know about it that another server would answer
differently is asked here, of the plan's kind (``servers.of(plan)``), never assumed:

- the command: what follows the image (the image's entrypoint is the server's command),
  the native argv, the variable that carries the API key, and variables of its own;
- the routes of its HTTP API: health, model list, completions, metrics;
- how its start-up log reads (a phase tracker) and which lines mean it failed;
- the names of its metrics, the memory model ``fit`` answers for it by, and its benchmark
  client.

Pure: data and functions of a plan, no I/O. The types of the answers live with the code
that uses them (``diagnose``, ``fit``, ``observe``); they are imported here for type
checking only, so that this module stays a leaf every layer may import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from instinct_serve.diagnose.failure_signals import FailureSignal
    from instinct_serve.diagnose.phases import PhaseTracker
    from instinct_serve.fit.estimate import FitReport
    from instinct_serve.fit.estimated import EstimatedFit
    from instinct_serve.fit.served import ServerFit, ServerLaunch
    from instinct_serve.observe.bench import BenchClient
    from instinct_serve.observe.vllm import Name
    from instinct_serve.plan.model import LaunchPlan

__all__ = ["CpuFigures", "Routes", "ServerKind"]


@dataclass(frozen=True)
class CpuFigures:
    """What a CPU plan is sized by (``plan.cpu.on_cpu``): the model's KV bytes per token,
    its native context, its weights, and the host's RAM (None: unknown)."""

    kv_bytes_per_token: int | None = None
    native_max_model_len: int | None = None
    weight_bytes: int | None = None
    memory_bytes: int | None = None


@dataclass(frozen=True)
class Routes:
    """The paths of a server's HTTP API, from its root (``http://host:port``).

    ``health`` answers 200 once the server takes requests (503 or no answer while it
    loads); ``models`` lists the served model names (OpenAI's ``/v1/models`` shape);
    ``chat`` and ``completions`` are the OpenAI-compatible completion routes serve warms
    up and probes with; ``metrics`` is the Prometheus exposition ``top`` reads.

    ``scoring``: the parameters that make ``completions`` answer the log-probability of each
    prompt token (the fingerprint's teacher-forced probes, ``runtime.fingerprint``). vLLM's
    are its own ``prompt_logprobs`` (with ``return_token_ids``); a server that follows the
    OpenAI API gives them with ``echo`` and ``logprobs``."""

    health: str = "/health"
    models: str = "/v1/models"
    chat: str = "/v1/chat/completions"
    completions: str = "/v1/completions"
    metrics: str = "/metrics"
    scoring: tuple[tuple[str, object], ...] = (("prompt_logprobs", 0), ("return_token_ids", True))


class ServerKind(Protocol):
    """One kind of inference server. ``servers.vllm.VLLM`` is the built-in one; a second
    one is one module that defines an object with these members, registered under the
    entry-point group ``instinct_serve.servers`` (``servers.get``)."""

    @property
    def name(self) -> str:
        """The registry key and ``LaunchPlan.server`` (``"vllm"``)."""
        ...

    @property
    def title(self) -> str:
        """How messages name it (``"vLLM"``)."""
        ...

    @property
    def executable(self) -> str:
        """The command a native install runs (``vllm``), ``native_argv``'s first word."""
        ...

    @property
    def package(self) -> str:
        """The distribution a native environment must hold (``vllm``): what the engine probe
        reads the version of (``engine.probe``)."""
        ...

    @property
    def script(self) -> str | None:
        """The console script beside the interpreter that a native launch runs (``vllm``);
        None when the interpreter runs the server as a module (SGLang's
        ``python3 -m sglang.launch_server``): then the discovered interpreter is the command."""
        ...

    @property
    def command_vars(self) -> tuple[str, ...]:
        """Variables naming the server's executable by its absolute path, first hit wins
        (``engine.discovery``); none for a server run as a module."""
        ...

    @property
    def python_vars(self) -> tuple[str, ...]:
        """Variables naming an interpreter whose environment holds the server."""
        ...

    @property
    def install_fix(self) -> str:
        """What to do when no usable native install is found (the error's fix)."""
        ...

    @property
    def cpu_backend(self) -> str:
        """How serve plans for a CPU-only install (allowed by ``INSTINCT_ALLOW_CPU_ENGINE``),
        in words, for the warning that says so (the plan: ``plan.cpu.on_cpu``, by the
        kind's ``vocabulary``)."""
        ...

    @property
    def image_repository(self) -> str:
        """The container image repository of its releases (``vllm/vllm-openai-rocm``)."""
        ...

    @property
    def api_key_env(self) -> str:
        """The variable the server reads its API key from, passed by name only."""
        ...

    @property
    def vocabulary(self) -> str:
        """The planner vocabulary its flags are written in: ``vllm`` (``plan.planner``'s
        steps; a server that speaks vLLM's command line) or ``sglang`` (``plan.sglang``)."""
        ...

    @property
    def routes(self) -> Routes: ...

    @property
    def failure_signals(self) -> tuple[FailureSignal, ...]:
        """The log lines that mean its start-up failed, whatever came before them."""
        ...

    @property
    def metric_names(self) -> Mapping[str, tuple[Name, ...]]:
        """Each metric concept ``top`` reads, with every name it had (newest first)."""
        ...

    def container_args(self, plan: LaunchPlan) -> list[str]:
        """What follows the image in ``docker run`` (its entrypoint is the server)."""
        ...

    def native_argv(self, plan: LaunchPlan) -> list[str]:
        """The whole command of a native launch, ``executable`` first."""
        ...

    def environment(self, plan: LaunchPlan) -> dict[str, str]:
        """Variables the server itself needs beside the plan's ``env`` (vLLM: none)."""
        ...

    def tracker(self) -> PhaseTracker:
        """A fresh reader of its start-up log (phases, figures, failure)."""
        ...

    @property
    def memory_model(self) -> Callable[[FitReport | EstimatedFit, ServerLaunch], ServerFit]:
        """``fit``'s answer for a launch of this server (``fit.served``): called with fit's
        sizing of the model (weights and KV layers per TP; vLLM's answer), or its estimate
        without metadata, and the launch; returns the verdict, TP, context and KV tokens as
        this server sizes them."""
        ...

    @property
    def bench_client(self) -> BenchClient:
        """The serving benchmark client ``bench`` runs against it, from its own image or
        install (``observe.bench.VLLM_CLIENT``: ``vllm bench serve``): its executable, its
        argv for one step and the reader of its result."""
        ...
