"""vLLM as a ``ServerKind``: the built-in server, and the one every plan names by default.

Each answer is held here where it is small (the command line, the API-key variable, the
routes) and delegated where a whole module knows it: the start-up log to
``diagnose.phases`` and ``diagnose.failure_signals``, the metric names to
``observe.vllm``, the memory model to ``fit`` (its report is vLLM's answer:
``fit.served.as_reported``; ``fit.vllm`` holds vLLM's releases), the benchmark client to
``observe.bench``. The log reader and the metric names are imported when asked, so that
reading a plan's server does not load them.

The official ``vllm/vllm-openai-rocm`` image's entrypoint is ``vllm serve``
(docker/Dockerfile.rocm): the container's arguments are ``vllm serve``'s positional model
(``--model`` is deprecated there) and the plan's arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from instinct_serve import vllm_args
from instinct_serve.fit.served import as_reported
from instinct_serve.observe.bench import VLLM_CLIENT
from instinct_serve.servers.kind import Routes

if TYPE_CHECKING:
    from instinct_serve.diagnose.failure_signals import FailureSignal
    from instinct_serve.diagnose.phases import PhaseTracker
    from instinct_serve.observe.vllm import Name
    from instinct_serve.plan.model import LaunchPlan

__all__ = ["API_KEY_ENV", "VLLM", "VllmServer"]

API_KEY_ENV = "VLLM_API_KEY"  # vLLM reads its API key from here (as --api-key's default)


class VllmServer:
    """vLLM's OpenAI-compatible server (``vllm serve``). A server that speaks vLLM's command
    line but differs elsewhere (routes, log) may subclass it and override what differs."""

    name = "vllm"
    title = "vLLM"
    executable = "vllm"
    image_repository = "vllm/vllm-openai-rocm"
    api_key_env = API_KEY_ENV
    vocabulary = "vllm"  # its flags are written by plan.planner's vLLM steps
    routes = Routes()
    # its native install (engine.discovery): the `vllm` script beside an interpreter
    package = "vllm"
    script = "vllm"
    command_vars = ("INSTINCT_VLLM_COMMAND", "ROCM_CLI_VLLM_COMMAND")
    python_vars = ("INSTINCT_VLLM_PYTHON", "ROCM_CLI_VLLM_PYTHON")
    install_fix = (
        "run `instinct engine install vllm`, or set INSTINCT_VLLM_PYTHON to an interpreter "
        "whose environment has a ROCm build of vLLM"
    )
    cpu_backend = (
        "serve plans for vLLM's CPU backend (no GPU settings, the KV cache in RAM: "
        "VLLM_CPU_KVCACHE_SPACE)"
    )

    @property
    def failure_signals(self) -> tuple[FailureSignal, ...]:
        from instinct_serve.diagnose.failure_signals import FAILURE_SIGNALS

        return FAILURE_SIGNALS

    @property
    def metric_names(self) -> Mapping[str, tuple[Name, ...]]:
        from instinct_serve.observe.vllm import NAMES

        return NAMES

    def container_args(self, plan: LaunchPlan) -> list[str]:
        """``vllm serve``'s positional model, then the plan's arguments."""
        return [plan.model, *plan.vllm_args]

    def native_argv(self, plan: LaunchPlan) -> list[str]:
        """``vllm serve MODEL --host ADDRESS ...`` for hosts without Docker (the port is the
        server's own). vLLM listens on every interface by default: the plan's bind address
        (127.0.0.1 unless public) is given unless the plan's arguments name a ``--host``."""
        argv = [self.executable, "serve", plan.model]
        if not vllm_args.has(plan.vllm_args, "--host"):
            argv += ["--host", plan.bind_address]
        return [*argv, *plan.vllm_args]

    def environment(self, plan: LaunchPlan) -> dict[str, str]:
        """None of its own: everything vLLM is told by variable is in the plan's ``env``."""
        return {}

    def tracker(self) -> PhaseTracker:
        from instinct_serve.diagnose.phases import PhaseTracker

        return PhaseTracker()

    memory_model = staticmethod(as_reported)  # fit's report is vLLM's answer
    bench_client = VLLM_CLIENT  # `vllm bench serve ...`


VLLM = VllmServer()
