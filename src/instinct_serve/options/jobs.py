"""The options of ``fit``, ``plan`` and ``serve``: one dataclass per job.

The shared fields live in the base classes, so ``--gpu``, ``--vram-gb``, ``--tp``,
``--max-model-len`` and ``--kv-cache-dtype`` mean the same thing in every command.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from instinct_serve.errors import UsageError
from instinct_serve.hardware.profiles import GFX_TARGETS, gpu_choices
from instinct_serve.names import PLATFORMS
from instinct_serve.options.spec import (
    MAX_TEXT,
    JobOptions,
    _container_name,
    _ifname,
    _power_of_two,
    declared,
    opt,
)
from instinct_serve.units import KV_CACHE_DTYPE_BYTES

# How a server is launched: ``docker`` (a container of the plan's image) or ``native`` (a
# process of a server installed on the host, ``engine/``). The server is what is launched
# (``servers``: vLLM today). Users type ``--engine`` and plan documents keep the key
# ``engine``; in the code the concept is the launcher (``LaunchPlan.launcher``).
Launcher = Literal["docker", "native"]
LAUNCHERS: tuple[Launcher, ...] = ("docker", "native")


def launcher(value: str) -> Launcher:
    """``value`` as a ``Launcher``; ``bad_engine`` for anything else."""
    if value not in LAUNCHERS:
        raise UsageError(
            f"unknown engine {value!r}", fix="use " + " or ".join(LAUNCHERS), id="bad_engine"
        )
    return value


SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _server_name(value: str) -> str | None:
    """A name the server registry could hold (``servers.get`` says whether it does, when
    the plan is made: listing the registered ones reads every installed distribution)."""
    if not SERVER_NAME.fullmatch(value):
        return "is not a server name (letters, digits, '_', '.', '-')"
    return None


def _server_option(help_text: str) -> Any:
    """The ``--server`` option of plan (and serve) and fit: one declaration."""
    return opt(
        "vllm", kind="text", metavar="NAME", help=help_text, check=_server_name, max_length=64
    )


DEFAULT_MODEL = "Qwen/Qwen3.5-9B"
DEFAULT_PORT = 8000

# ----------------------------------------------------------------------------- the jobs


@dataclass
class TargetOptions(JobOptions):
    """Which GPUs: a named GPU, VRAM and count by hand, else what ``detect`` finds."""

    gpu: str | None = opt(
        kind="gpu",
        metavar="GPU",
        help=f"Plan for a GPU without detecting it: {gpu_choices()}.",
        max_length=64,
        error_id="unknown_gpu_profile",
    )
    gfx: str | None = opt(
        kind="gpu",
        metavar="GFX",
        help=f"GPU architecture when no profile fits ({', '.join(GFX_TARGETS)}); "
        "same as --gpu GFX.",
        max_length=64,
        error_id="unknown_gpu_profile",
    )
    vram_gb: float | None = opt(
        kind="float",
        metavar="GB",
        help="VRAM per GPU in GB (10^9 bytes), instead of the profile's or the detected.",
        error_id="bad_vram",
        low=0.0,
        high=100_000.0,
        low_open=True,
    )
    vram_gib: float | None = opt(
        kind="float",
        metavar="GIB",
        help="VRAM per GPU in GiB (2^30 bytes; an MI300X has 192).",
        error_id="bad_vram",
        low=0.0,
        high=100_000.0,
        low_open=True,
    )
    gpu_count: int | None = opt(
        kind="int",
        metavar="N",
        help="Number of GPUs (default: the profile's node, or all detected).",
        low=1,
        high=1024,
    )
    gpus: list[int] | None = opt(
        kind="indices",
        metavar="0,1",
        help="Use only these GPUs (device indices; sets HIP_VISIBLE_DEVICES).",
        low=0,
        high=1023,
        fix="use device indices such as 0,1 (as `instinct detect` lists them)",
    )

    def check(self) -> None:
        super().check()
        if self.gpu and self.gfx:
            from instinct_serve.hardware.profiles import get_profile

            if get_profile(self.gpu).gfx_version != get_profile(self.gfx).gfx_version:
                raise UsageError(
                    f"--gpu {self.gpu} is not a {self.gfx}",
                    fix="give one of --gpu or --gfx",
                    id="bad_gfx",
                )
        if self.vram_gb is not None and self.vram_gib is not None:
            raise UsageError(
                "give --vram-gb or --vram-gib, not both",
                fix="--vram-gb is 10^9 bytes, --vram-gib 2^30 bytes",
                id="bad_vram",
            )

    @property
    def gpu_spec(self) -> str | None:
        """The GPU named by ``--gpu`` or ``--gfx`` (a profile or a gfx target)."""
        return self.gpu or self.gfx

    @property
    def vram_bytes(self) -> int | None:
        """VRAM per GPU given by hand, in bytes."""
        if self.vram_gb is not None:
            return int(self.vram_gb * 10**9)
        if self.vram_gib is not None:
            return int(self.vram_gib * 2**30)
        return None


@dataclass
class SizingOptions(TargetOptions):
    """What sizes a launch: parallelism, context, KV cache dtype and memory share."""

    tp: int | None = opt(
        kind="int",
        metavar="N",
        help="Tensor-parallel size (default: chosen for the model and GPUs).",
        low=1,
        high=1024,
        check=_power_of_two,
        fix="use 1, 2, 4 or 8 (a power of two no larger than the GPU count)",
    )
    max_model_len: int | None = opt(
        kind="tokens",
        metavar="TOKENS",
        help="Context length, e.g. 32768, 32k or 32K (default: the model's, capped by KV room).",
        low=1,
        high=2**26,
    )
    kv_cache_dtype: str | None = opt(
        kind="choice",
        metavar="DTYPE",
        help="KV cache dtype (fp8 halves bf16 KV memory).",
        choices=tuple(KV_CACHE_DTYPE_BYTES),
    )
    gpu_memory_utilization: float | None = opt(
        kind="float",
        metavar="FRACTION",
        help="Fraction of each GPU's memory vLLM may use, in (0, 1].",
        low=0.0,
        high=1.0,
        low_open=True,
        fix="use a fraction such as 0.9",
    )
    speculative_mtp: int = opt(
        0,
        kind="int",
        metavar="N",
        help="MTP speculative decoding with N draft tokens (loads the MTP layers; a plan "
        "follows AMD's MTP reference config where there is one).",
        low=0,
        high=64,
    )


@dataclass
class FitRequest(SizingOptions):
    """``instinct fit MODEL``: will it fit, with how much context, on how many GPUs."""

    job: ClassVar[str] = "fit"

    model: str = opt(
        "",
        kind="text",
        positional=True,
        help="Hugging Face id (org/name) or a local model directory.",
    )
    vllm_version: str | None = opt(
        kind="text",
        metavar="X.Y.Z",
        help="vLLM release to reproduce (default: the image's).",
        max_length=64,
    )
    vllm_engine: str | None = opt(
        kind="choice",
        choices=("v0", "v1"),
        help="vLLM engine (VLLM_USE_V1); default: the version's on the platform.",
    )
    pipeline_parallel_size: int = opt(
        1,
        kind="int",
        flag="--pipeline-parallel-size",
        metavar="N",
        help="Pipeline stages.",
        low=1,
        high=64,
    )
    kv_cache_memory: int | None = opt(
        kind="int",
        metavar="BYTES",
        help="KV bytes per GPU, vLLM's --kv-cache-memory-bytes (no memory profile).",
        low=0,
        high=1 << 50,
    )
    device_name: str | None = opt(
        kind="text",
        agent_help="Device name as vLLM reads it (its batch defaults).",
        metavar="NAME",
        help="Device name as vLLM reads it, with --vram-gb: batch defaults ('A100' is small) "
        "and, before vLLM 0.11, NCCL buffers at TP > 1 (an SXM name: NVSwitch).",
        max_length=128,
    )
    server: str = _server_option(
        "Whose memory model answers: vllm (default) or sglang (its static fraction and KV "
        "pool give the verdict, TP and context; --gpu-memory-utilization is its "
        "--mem-fraction-static, --max-model-len its --context-length)."
    )
    platform: str | None = opt(
        kind="choice",
        choices=PLATFORMS,
        metavar="PLATFORM",
        help="The overhead table's row (sampler, graphs, buffers, load accounting); "
        "default: the GPU's.",
    )
    max_num_seqs: int | None = opt(
        kind="int", metavar="N", help="Sampler rows profiled.", low=1, high=1 << 20
    )
    max_num_batched_tokens: int | None = opt(
        kind="tokens", metavar="N", help="Tokens of the profile pass.", low=1, high=1 << 26
    )
    block_size: int | None = opt(
        kind="int", metavar="N", help="KV block size in tokens.", low=1, high=1 << 16
    )
    enforce_eager: bool = opt(False, kind="bool", help="No graphs: no graph memory.")
    language_model_only: bool = opt(False, kind="bool", help="Skip the vision/audio tower.")
    enable_prefix_caching: bool = opt(False, kind="bool", help="Hybrid models: 2 state blocks/seq.")
    compilation_config: str | None = opt(
        kind="text",
        metavar="JSON",
        help="vLLM's --compilation-config: cudagraph_capture_sizes/_mode change graph memory.",
        max_length=4096,
    )
    revision: str | None = opt(
        kind="text", metavar="REV", help="Hub revision (branch, tag or commit).", max_length=256
    )
    no_alternatives: bool = opt(False, kind="bool", help="Do not look for smaller checkpoints.")
    sysfs_root: str = opt(
        "/",
        kind="text",
        metavar="DIR",
        help="Detection reads /sys and /opt/rocm under this directory (tests, chroots).",
        max_length=MAX_TEXT,
        hidden=True,
    )

    def check(self) -> None:
        super().check()
        if not self.model:
            raise UsageError(
                "fit needs a MODEL", fix="instinct fit Qwen/Qwen3.5-9B", id="bad_model"
            )
        if self.server not in ("vllm", "sglang"):
            raise UsageError(
                f"fit sizes a launch of vllm or sglang, not {self.server!r}",
                fix="use --server vllm or --server sglang",
                id="bad_server",
                details={"option": "server"},
            )

    def estimate_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``fit.fit_options`` (vLLM's memory-shaping flags)."""
        return {
            "tp": self.tp,
            "max_model_len": self.max_model_len,
            "kv_cache_dtype": self.kv_cache_dtype,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "vllm_version": self.vllm_version,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "block_size": self.block_size,
            "enforce_eager": self.enforce_eager,
            "language_model_only": self.language_model_only,
            "speculative_mtp": self.speculative_mtp,
            "enable_prefix_caching": self.enable_prefix_caching,
            "engine": self.vllm_engine,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "kv_cache_memory": self.kv_cache_memory,
            "compilation_config": self.compilation_config,
        }


@dataclass
class PlanOptions(SizingOptions):
    """``instinct plan``: everything a user can ask of a plan (also the start of serve)."""

    job: ClassVar[str] = "plan"

    model: str = opt(
        DEFAULT_MODEL,
        kind="text",
        positional=True,
        help="Hugging Face id (org/name), a catalog name, or a local model directory.",
    )
    port: int = opt(
        DEFAULT_PORT, kind="int", metavar="PORT", help="Port of the endpoint.", low=1, high=65535
    )
    image: str | None = opt(
        kind="text",
        metavar="IMAGE",
        help="Container image (default: newest vllm/vllm-openai-rocm).",
        max_length=512,
    )
    server: str = _server_option(
        "The inference server: vllm (default), sglang, auto (AMD's reference config's "
        "server for this model and GPU, else vllm), or one a package registers "
        "(entry points `instinct_serve.servers`)."
    )
    precision: str | None = opt(
        kind="text",
        metavar="PRECISION",
        help="Force a variant's precision (bf16, fp8, mxfp4, ...).",
        max_length=64,
    )
    features: list[str] = opt(
        [],
        kind="texts",
        flag="--feature",
        metavar="NAME",
        help="Enable an opt-in recipe feature (repeatable).",
        max_length=128,
    )
    hf_cache: str | None = opt(
        kind="text",
        metavar="DIR",
        help="Hugging Face cache to mount (default: HF_HUB_CACHE, HF_HOME, else "
        "$XDG_CACHE_HOME/huggingface or ~/.cache/huggingface).",
        max_length=MAX_TEXT,
    )
    compile_cache: str | None = opt(
        kind="text",
        agent_help="Host directory of the persistent compile caches; 'off' keeps them in the "
        "container.",
        metavar="DIR|off",
        help="Host directory of the persistent compile caches (vLLM torch.compile, Triton, "
        "AITER JIT, MIOpen), one subdirectory per image digest and gfx, kept across stop, "
        "relaunch and upgrade (default: compile-cache/ in the tool's cache directory on the "
        "host); `off` leaves them in the container.",
        max_length=MAX_TEXT,
    )
    extra_env: dict[str, str] = opt(
        {},
        agent_help="Environment of the launch, never written in the plan: {NAME: VALUE}, or "
        "[NAME] for the server's own variable (a credential's value is refused: give its NAME).",
        kind="env",
        flag="--env",
        metavar="NAME[=VALUE]",
        help="Extra environment variable (repeatable), always passed by name: NAME takes "
        "your variable, NAME=VALUE this value, placed in the environment of the launching "
        "process for this run only (docker's --env NAME copies it; over ssh it travels on "
        "stdin). The value is never written in the plan, an argument, a label or the "
        "printed command (how tokens and keys go: --env VLLM_API_KEY). A credential's "
        "name or value on the command line is refused: export it and give the NAME.",
        names_into="env_by_name",
    )
    env_by_name: list[str] = opt(
        [],
        kind="names",
        help="Environment variables passed by name (the bare NAMEs of --env).",
        cli=False,
        mcp=False,
    )
    env_literal: dict[str, str] = opt(
        {},
        agent_help="Settings that are not secret, part of the plan: {NAME: VALUE}.",
        kind="env",
        flag="--env-literal",
        metavar="NAME=VALUE",
        help="A setting that is not secret, written as it is in the plan, the docker "
        "command and the renderings (repeatable): --env-literal VLLM_USE_V1=0. Part of the "
        "plan (its hash changes with it); a credential's name or value is refused.",
    )
    public: bool = opt(
        False,
        agent_help="Listen on every interface and require an API key (extra_env "
        '["VLLM_API_KEY"], else one generated).',
        kind="bool",
        help="Listen on every interface instead of 127.0.0.1 only, and require an API key: "
        "yours with --env VLLM_API_KEY (by name), else one generated and kept in a file only "
        "you can read (the connection details say where).",
    )
    name: str | None = opt(
        kind="text",
        metavar="NAME",
        help="Container name (default: vllm-<model>).",
        check=_container_name,
        max_length=128,
    )
    objective: str = opt(
        "latency",
        kind="choice",
        choices=("latency", "throughput"),
        help="What the TP serves: latency (the recipe's TP, else the smallest holding the "
        "full context with safe headroom) or throughput (the smallest TP with safe "
        "headroom, GPUs left for replicas).",
    )
    workload: str = opt(
        "general",
        agent_help="general, or agentic: AMD's reference config of that scenario.",
        kind="choice",
        choices=("general", "agentic"),
        help="What the endpoint serves: general, or agentic (coding agents: long multi-turn "
        "contexts sharing prefixes, tool calls); picks AMD's reference config of that "
        "scenario where there is one.",
    )
    speculative_eagle3: int = opt(
        0,
        agent_help="EAGLE3 speculative decoding with N draft tokens (AMD's draft model).",
        kind="int",
        metavar="N",
        help="EAGLE3 speculative decoding with N draft tokens, with the draft model of AMD's "
        "EAGLE3 reference config for this model and GPU.",
        low=0,
        high=64,
    )
    replicas: int | None = opt(
        kind="int",
        agent_help="Copies of the endpoint behind one address (a router, or vLLM data "
        "parallelism for a mixture-of-experts model).",
        metavar="N",
        help="Copies of the endpoint behind one address: on this host, N copies on disjoint "
        "GPUs behind a router (HAProxy), or vLLM's own data parallelism for a "
        "mixture-of-experts model (default: 1, or as many as fit with --objective "
        "throughput); in Kubernetes manifests, the Deployment's pods.",
        low=1,
        high=1024,
    )
    router: bool = opt(
        False,
        agent_help="Put the router in front even of one replica (an upgrade then swaps behind "
        "it without downtime).",
        kind="bool",
        help="Put the router (HAProxy) in front even of a single replica (--replicas 1), so "
        "that `serve --upgrade` swaps it behind the router without downtime.",
    )
    router_image: str | None = opt(
        kind="text",
        metavar="IMAGE",
        help="The HAProxy image that routes to the replicas (default: haproxy:3.0).",
        max_length=512,
    )
    force: bool = opt(
        False,
        agent_help="Plan and launch what would be refused (memory too tight, an unsupported "
        "GPU, weights or image).",
        kind="bool",
        help="Plan and launch what would be refused: memory too tight, weights or a GPU the "
        "recipe does not support, a release image for a nightly-only recipe.",
    )
    hosts: str | None = opt(
        kind="text",
        metavar="H1,H2",
        help="Plan (and serve) one model across these nodes ([user@]host each, rank 0 "
        "first) when one node cannot hold it (or with --multi-node); a container per node.",
        max_length=MAX_TEXT,
        mcp=False,
    )
    multi_node: bool = opt(
        False,
        kind="bool",
        help="With --hosts: span the nodes even when the model fits one.",
        mcp=False,
    )
    backend: str = opt(
        "mp",
        kind="choice",
        choices=("mp", "ray"),
        help="With --hosts: mp (vLLM's own rendezvous: --nnodes/--node-rank/--master-addr) "
        "or ray (a Ray cluster on the nodes).",
        mcp=False,
    )
    strategy: str | None = opt(
        kind="choice",
        choices=("multi_node_tp_pp", "multi_node_tp", "multi_node_tep", "multi_node_dep"),
        help="With --hosts: the recipe strategy to split by (default: the recipe's, "
        "TP inside a node and PP across first).",
        mcp=False,
    )
    ifname: str = opt(
        "eth0",
        kind="text",
        metavar="IFACE",
        help="With --hosts: the interface Gloo and RCCL bootstrap over "
        "(GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME).",
        check=_ifname,
        max_length=256,
        mcp=False,
    )
    network: str | None = opt(
        kind="text",
        metavar="NAME",
        help="With --hosts: a docker network the ranks share (default: host networking).",
        check=_container_name,
        max_length=128,
        mcp=False,
    )
    master_addr: str | None = opt(
        kind="text",
        metavar="ADDR",
        help="With --hosts: the address the other nodes reach rank 0 at (default: the "
        "first host's, or rank 0's container on --network).",
        max_length=253,
        mcp=False,
    )
    extra_args: list[str] = opt(
        [],
        kind="args",
        positional=True,
        help="Passed to `vllm serve` as they are (after --).",
    )
    engine: str = "docker"  # docker | native: set by the command (serve --engine, --format)
    default_gpu: str | None = None  # profile used when detection finds no GPU (plan only)
    # copies planned on this host (``plan.replicas``); False where the cluster makes them
    # (``plan --format k8s``: --replicas is the Deployment's)
    local_group: bool = True
    # nodes the plan spans (``plan --format k8s --nodes``, ``--hosts``): with 1, a named
    # GPU's count may not pass what one node of it holds (``gather.plan.one_node``)
    nodes: int = 1

    def check(self) -> None:
        super().check()
        _check_env_options(self)
        for flag in _secret_flags(self.extra_args):
            raise UsageError(
                f"{flag} takes a secret, and arguments are visible to every user of the host "
                "(ps, docker inspect) and written in plans",
                fix="pass it by name instead: export VLLM_API_KEY=... and add --env "
                "VLLM_API_KEY (or --public, which generates a key)"
                if flag == "--api-key"
                else "pass it by name instead: export HF_TOKEN=... (the plan passes HF_TOKEN "
                "by name)",
                id="secret_in_args",
                details={"option": "extra_args", "flag": flag},
            )
        launcher(self.engine)
        if self.model.startswith("-"):
            raise UsageError(
                f"{self.model!r} is not a model",
                fix="put vLLM arguments after `--`: instinct plan MODEL -- --max-num-seqs 64",
                id="bad_model",
            )

    def validate(self) -> None:
        """Check a ``PlanOptions`` built in code (``parse`` checks what users give)."""
        values = {name: getattr(self, name) for name, _spec, _default in declared(type(self))}
        checked = type(self).parse(values)
        checked.engine, checked.default_gpu = self.engine, self.default_gpu
        checked.local_group, checked.nodes = self.local_group, self.nodes
        checked.check()


def _check_env_options(opts: PlanOptions) -> None:
    """``--env`` and ``--env-literal``: no credential typed on the command line (every user
    of the host sees an argv), no value that cannot travel by name, no name given twice."""
    from instinct_serve.credentials import is_secret_name, looks_like_token

    for key, value in opts.extra_env.items():
        if is_secret_name(key) or looks_like_token(value):
            raise UsageError(
                f"{key} must not be given a value on the command line",
                fix=f"export {key} in your environment and pass it by name: --env {key}",
                id="secret_in_args",
                details={"option": "extra_env", "name": key},
            )
        if "\n" in value or "\r" in value:
            raise UsageError(
                f"the value of --env {key} has a line break: a value passed by name is one line",
                fix=f"give it with --env-literal {key}=... if it is not secret",
                id="bad_env",
                details={"option": "extra_env", "name": key},
            )
    for key, value in opts.env_literal.items():
        if is_secret_name(key) or looks_like_token(value):
            raise UsageError(
                f"--env-literal {key} would write a credential in the plan, the docker "
                "command and every rendering",
                fix=f"pass it by name instead: export {key}=... and add --env {key}",
                id="secret_in_args",
                details={"option": "env_literal", "name": key},
            )
    twice = sorted(set(opts.env_literal) & {*opts.extra_env, *opts.env_by_name})
    if twice:
        raise UsageError(
            f"{', '.join(twice)} given with both --env and --env-literal",
            fix="give each variable once: --env (by name) or --env-literal (written in the plan)",
            id="bad_env",
            details={"option": "env_literal", "names": twice},
        )


def _secret_flags(args: Iterable[str]) -> list[str]:
    """The ``vllm serve`` options in ``args`` whose value is a credential (``--api-key``,
    ``--hf-token``)."""
    from instinct_serve import vllm_args
    from instinct_serve.credentials import is_secret_name

    found = []
    for unit in vllm_args.units(args):
        name = unit.name or ""
        secret = name.startswith("--") and is_secret_name(name[2:].replace("-", "_"))
        if secret and name not in found:
            found.append(name)
    return found


@dataclass
class ServeOptions(PlanOptions):
    """``instinct serve``: the plan's options, and how patient and forceful to be."""

    job: ClassVar[str] = "serve"

    yes: bool = opt(
        False,
        kind="bool",
        short="-y",
        help="Launch without showing the plan for approval.",
        mcp=False,
    )
    detach: bool | None = opt(
        kind="tristate",
        flag="--detach/--wait",
        help="Return once loading is confirmed (default for models of 100 GB or more), or "
        "wait until the endpoint is warmed up (default otherwise).",
    )
    replace: bool = opt(
        False,
        kind="bool",
        help="Stop and remove an instinct-serve endpoint that holds the port or name.",
    )
    upgrade: bool = opt(
        False,
        agent_help="Replace the running endpoint of this name once the new plan is proven "
        "beside it; the rollback tool returns to the old plan.",
        kind="bool",
        help="Replace the running endpoint of this name only once the new plan is proven "
        "beside it on a spare port (health, warm-up, coherence); a bad one leaves the old "
        "untouched; `instinct rollback NAME` returns to the old plan.",
    )
    prefetch: bool = opt(
        False,
        agent_help="Download the weights while the image is pulled, before the launch.",
        kind="bool",
        help="Download the weights into the mounted HF cache while the image is pulled, "
        "before the launch (`instinct pull`), instead of leaving them to vLLM after it.",
    )
    timeout_s: float | None = opt(
        kind="float",
        flag="--timeout",
        metavar="SECONDS",
        help="Seconds to wait for /health (default: scaled to the weight size).",
        low=1.0,
        high=7 * 86400.0,
    )
    stall_timeout_s: float | None = opt(
        kind="float",
        flag="--stall-timeout",
        metavar="SECONDS",
        help="Seconds without a log line while capturing graphs that count as a hang "
        "(default 300).",
        low=1.0,
        high=86400.0,
    )
    warmup_timeout_s: float | None = opt(
        kind="float",
        flag="--warmup-timeout",
        metavar="SECONDS",
        help="Seconds the first request may take (kernel compilation; default 900).",
        low=1.0,
        high=86400.0,
    )
    skip_coherence: bool = opt(
        False,
        kind="bool",
        flag="--no-coherence",
        help="Skip the known-answer coherence probe after the warm-up.",
    )
    skip_fingerprint: bool = opt(
        False,
        kind="bool",
        flag="--no-fingerprint",
        help="Skip the fingerprint (log-probabilities of fixed prompts) after the probe.",
    )
    engine: str = opt(
        "docker",
        kind="choice",
        choices=LAUNCHERS,
        help="docker: the vLLM ROCm image; native: a vLLM installed on the host "
        "(`instinct engine detect`).",
    )
    root: str = opt(
        "",
        kind="text",
        flag="--root",
        metavar="DIR",
        help="Check prefix of /dev, /proc, /sys (tests, chroots).",
        max_length=MAX_TEXT,
        hidden=True,
    )

    def plan_options(self) -> PlanOptions:
        """The plan part (what ``make_plan`` takes)."""
        values = {name: getattr(self, name) for name, _s, _d in declared(PlanOptions)}
        plan = PlanOptions(**values)
        plan.engine = self.engine
        return plan
