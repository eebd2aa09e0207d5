"""SGLang as a ``ServerKind``: AMD's server of choice for DeepSeek-R1, Qwen3.5 and GLM on
Instinct GPUs (InferenceX's AMD configs), planned from those configs (``plan.sglang``).

- The command: the ``lmsysorg/sglang`` ROCm images have no server entrypoint; AMD's launch
  scripts run ``python3 -m sglang.launch_server --model-path MODEL ...``, and so does the
  container. SGLang listens on 127.0.0.1 by default: a container binds ``0.0.0.0`` (its port
  is published on the host's loopback unless public), a native launch the plan's address.
- Routes: ``/health`` (200 with an empty body once ready), ``/health_generate`` (a real
  generation), the OpenAI routes, ``/metrics`` with ``--enable-metrics``.
- Its start-up log: ``diagnose.sglang_phases`` (ready at "The server is fired up and ready
  to roll!"); its failures: ``SGLANG_FAILURE_SIGNALS`` there.
- Metrics: the ``sglang:`` families (``observe.sglang``).
- The fingerprint: ``/v1/completions`` with ``echo`` and ``logprobs`` gives the prompt's
  log-probabilities (``Routes.scoring``; measured on sglang 0.5.23, which logs that echo and
  logprobs are "not compatible" and answers them all the same).
- Native: an interpreter whose environment holds sglang (``INSTINCT_SGLANG_PYTHON``, the
  managed environment, ``python3`` on PATH: ``engine.discovery``) runs the module; a CPU-only
  one (``INSTINCT_ALLOW_CPU_ENGINE``) is planned for SGLang's CPU backend (``plan.sglang``).
- Memory: SGLang's own model (``fit.sglang``: the static fraction, the graph reserve, the KV
  pool and its cell; ``fit.sglang_answer``: the verdict, TP and context from that pool), on
  fit's weights and KV layers (one weight model for both servers).
- Bench: SGLang's own client, ``python3 -m sglang.bench_serving`` (``observe.sglang_bench``):
  its images have no vLLM. AMD benchmarks SGLang with (a copy of) vLLM's client; ``bench
  --vllm PATH`` runs that one instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from instinct_serve import vllm_args
from instinct_serve.observe.sglang_bench import SGLANG_CLIENT
from instinct_serve.servers.kind import Routes

if TYPE_CHECKING:
    from instinct_serve.diagnose.failure_signals import FailureSignal
    from instinct_serve.diagnose.phases import PhaseTracker
    from instinct_serve.fit.estimate import FitReport
    from instinct_serve.fit.estimated import EstimatedFit
    from instinct_serve.fit.served import ServerLaunch
    from instinct_serve.fit.sglang_answer import SglangFit
    from instinct_serve.observe.vllm import Name
    from instinct_serve.plan.model import LaunchPlan

__all__ = ["MODULE", "SGLANG", "SglangServer"]

MODULE = ("python3", "-m", "sglang.launch_server")  # as AMD's launch scripts run it
CONTAINER_HOST = "0.0.0.0"  # inside the container; docker publishes the port


class SglangServer:
    """SGLang's OpenAI-compatible server (``sglang.launch_server``)."""

    name = "sglang"
    title = "SGLang"
    executable = "python3"
    image_repository = "lmsysorg/sglang"
    api_key_env = "SGLANG_API_KEY"  # not read by SGLang: plan.sglang refuses --public
    vocabulary = "sglang"  # its flags are written by plan.sglang
    # the prompt's log-probabilities: `echo` with `logprobs` of at least 1 (serving_completions.py
    # asks for them from the first token only when `request.echo and request.logprobs`)
    routes = Routes(scoring=(("echo", True), ("logprobs", 1)))
    # its native install (engine.discovery): an interpreter whose environment holds sglang,
    # which runs the server as a module (no console script: the interpreter is the command)
    package = "sglang"
    script = None
    command_vars: tuple[str, ...] = ()
    python_vars = ("INSTINCT_SGLANG_PYTHON",)
    install_fix = (
        "install sglang (a ROCm build) into a Python environment and set "
        "INSTINCT_SGLANG_PYTHON=/path/to/that/venv/bin/python, or serve it with --engine "
        "docker (AMD's lmsysorg/sglang ROCm images)"
    )
    cpu_backend = (
        "serve plans for SGLang's CPU backend (no GPU settings, SGLANG_USE_CPU_ENGINE=1, "
        "--device cpu --attention-backend torch_native)"
    )

    @property
    def failure_signals(self) -> tuple[FailureSignal, ...]:
        from instinct_serve.diagnose.failure_signals import FAILURE_SIGNALS

        return FAILURE_SIGNALS  # the one table: vLLM's, the kernels', and SGLang's own

    @property
    def metric_names(self) -> Mapping[str, tuple[Name, ...]]:
        from instinct_serve.observe.sglang import NAMES

        return NAMES

    def _command(self, plan: LaunchPlan, host: str) -> list[str]:
        argv = [*MODULE, "--model-path", plan.model]
        if not vllm_args.has(plan.vllm_args, "--host"):
            argv += ["--host", host]
        return [*argv, *plan.vllm_args]

    def container_args(self, plan: LaunchPlan) -> list[str]:
        """``python3 -m sglang.launch_server --model-path MODEL --host 0.0.0.0 ...``."""
        return self._command(plan, CONTAINER_HOST)

    def native_argv(self, plan: LaunchPlan) -> list[str]:
        """The same command on the host, listening on the plan's bind address."""
        return self._command(plan, plan.bind_address)

    def environment(self, plan: LaunchPlan) -> dict[str, str]:
        """None of its own: AMD's variables are in the plan's ``env``."""
        return {}

    def tracker(self) -> PhaseTracker:
        from instinct_serve.diagnose.sglang_phases import SglangTracker

        return SglangTracker()

    def memory_model(
        self, base: FitReport | EstimatedFit, launch: ServerLaunch
    ) -> SglangFit | EstimatedFit:
        """SGLang's pool, context and verdict (``fit.sglang_answer``), loaded when asked."""
        from instinct_serve.fit.sglang_answer import sglang_answer

        return sglang_answer(base, launch)

    bench_client = SGLANG_CLIENT  # `python3 -m sglang.bench_serving`, in its image


SGLANG = SglangServer()
