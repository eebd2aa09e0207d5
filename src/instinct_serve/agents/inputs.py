"""Pydantic input models of the MCP tools: the CLI's options, validated before any work.

Each model mirrors one command's options (``fit`` the fit flags, ``plan``/``serve`` the
shared ``plan_options`` of ``cli/plan.py``) with the same names as the click parameters,
so ``PlanInput.plan_kwargs()`` feeds ``plan_options_from_kwargs`` unchanged. Unknown keys
are rejected (a typo is an error, not a silently ignored option), and every string and list
is bounded: the arguments come from a model, not a person.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

DEFAULT_MODEL = "Qwen/Qwen3.5-9B"  # same as plan.planner.DEFAULT_MODEL
MAX_LOG_TEXT = 4_000_000  # characters of pasted log kept (the end: failures are there)
MAX_LOG_LINES = 500  # `logs` tail, at most
DEFAULT_LOG_LINES = 200
ROOT_HELP = "Tests and chroots only (the CLI's hidden --root): prefix of /dev, /proc, /sys."


def _power_of_two(value: int | None) -> int | None:
    if value is not None and value & (value - 1):
        raise ValueError("must be a power of two (1, 2, 4, 8, ...)")
    return value


def _keep_end(value: str | None) -> str | None:
    if value is not None and len(value) > MAX_LOG_TEXT:
        return value[-MAX_LOG_TEXT:]
    return value


Model = Annotated[str, Field(min_length=1, max_length=512, description="Hugging Face id or path")]
Text = Annotated[str, Field(min_length=1, max_length=512)]
Tp = Annotated[int | None, Field(ge=1, le=64), AfterValidator(_power_of_two)]
# Docker container names and ids; never starting with '-' (no option smuggling).
ContainerName = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", description="Container name or id")
]
FitKvDtype = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


class ToolInput(BaseModel):
    """What every tool takes: the host to act on."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    host: str | None = Field(
        default=None,
        max_length=255,
        description="[user@]host[:port] to act on over ssh; default $ROCM_SSH_HOST, else this "
        "machine; 'local' forces this machine.",
    )


class DetectInput(ToolInput):
    """``instinct detect``."""

    sysfs_root: str = Field(
        default="/", max_length=4096, description="Read /sys and /opt/rocm under this directory."
    )


class CheckInput(ToolInput):
    """``instinct check``."""

    model: Model | None = Field(
        default=None, description="Model to serve: gated needs an HF token."
    )
    port: int | None = Field(
        default=None, ge=1, le=65535, description="Check this TCP port is free."
    )
    hf_cache: str | None = Field(
        default=None, max_length=4096, description="HF hub cache on the host."
    )
    need_gb: float | None = Field(default=None, ge=0, description="Free GB the download needs.")
    auto_fix: bool = Field(default=False, description="Apply the safe, reversible fixes.")
    yes: bool = Field(
        default=False,
        description="With auto_fix: also run fixes needing root (ask the user first).",
    )
    root: str = Field(default="", max_length=4096, description=ROOT_HELP)


class RecipesShowInput(ToolInput):
    """``instinct recipes show`` (the catalog is local: ``host`` is accepted and unused)."""

    model: Model
    gpu: Text | None = Field(
        default=None, description="Also the merged AMD view: mi300x, gfx942, ..."
    )
    variant: Text | None = Field(default=None, description="Recipe variant for the AMD view.")


class FitInput(ToolInput):
    """``instinct fit``: the fit command's options."""

    model: Model
    gpu: Text | None = Field(default=None, description="GPU profile: mi300x, mi325x, mi355x, ...")
    vram_gb: float | None = Field(
        default=None, gt=0, description="VRAM per GPU in GB (10^9 bytes)."
    )
    vram_gib: float | None = Field(
        default=None, gt=0, description="VRAM per GPU in GiB (2^30 bytes)."
    )
    gpu_count: int | None = Field(default=None, ge=1, le=1024)
    tp: Tp = Field(default=None, description="Tensor-parallel size (default: smallest that fits).")
    max_model_len: int | None = Field(default=None, ge=1)
    kv_cache_dtype: FitKvDtype | None = None
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    vllm_version: Text | None = Field(default=None, description="vLLM release to reproduce.")
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    block_size: int | None = Field(default=None, ge=1)
    enforce_eager: bool = False
    language_model_only: bool = False
    speculative_mtp: int = Field(default=0, ge=0, le=64)
    enable_prefix_caching: bool = False
    revision: Text | None = None
    no_alternatives: bool = False
    sysfs_root: str = Field(default="/", max_length=4096)

    @model_validator(mode="after")
    def _one_vram_unit(self) -> FitInput:
        if self.vram_gb is not None and self.vram_gib is not None:
            raise ValueError("give vram_gb or vram_gib, not both")
        return self


class PlanInput(ToolInput):
    """``instinct plan``: the shared plan options (``cli.plan.plan_options``)."""

    model: Model = DEFAULT_MODEL
    extra_args: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list, max_length=64, description="Passed to `vllm serve` as they are."
    )
    gpu: Text | None = Field(
        default=None,
        description="Plan for a GPU without detecting it: mi300x, mi325x, ... or gfx942.",
    )
    gfx: Text | None = Field(default=None, description="GPU architecture (gfx942, gfx950, gfx90a).")
    vram_gb: float | None = Field(
        default=None, gt=0, description="VRAM per GPU in GB (10^9 bytes)."
    )
    gpu_count: int | None = Field(default=None, ge=1, le=1024)
    gpus: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None, max_length=64, description="Use only these GPU indices."
    )
    tp: Tp = None
    port: int = Field(default=8000, ge=1, le=65535)
    image: Text | None = None
    precision: Text | None = Field(default=None, description="bf16, fp8, mxfp4, ...")
    features: list[Text] = Field(default_factory=list, max_length=32)
    max_model_len: int | None = Field(default=None, ge=1)
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"] | None = None
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    hf_cache: str | None = Field(default=None, max_length=4096)
    extra_env: dict[EnvName, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=64, description="Extra environment (never a token)."
    )
    name: ContainerName | None = None
    force: bool = Field(default=False, description="Launch even when memory is too tight.")

    def plan_kwargs(self) -> dict[str, Any]:
        """The click keyword arguments ``plan_options_from_kwargs`` expects."""
        kwargs = self.model_dump(exclude={"host"})
        kwargs["host_spec"] = self.host
        return kwargs


class ServeInput(PlanInput):
    """``instinct serve``: the plan options, plus the explicit confirmation."""

    confirm: bool = Field(
        default=False,
        description="Launch. Without it, only the confirmation summary comes back: show it "
        "to the user and call again with confirm=true once they agree.",
    )
    plan_hash: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{6,64}$",
        description="The plan_hash of the summary the user approved: refuse (plan_changed) "
        "if the plan made at launch differs.",
    )
    replace: bool = Field(
        default=False, description="Stop and replace a running instinct-serve endpoint on the port."
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=6 * 3600,
        description="Startup timeout (default: scaled to the weights).",
    )
    detach: bool | None = Field(
        default=None,
        description="Return once loading is confirmed (default: for models >= 100 GB).",
    )
    stall_timeout_s: float | None = Field(
        default=None, gt=0, le=6 * 3600, description="Log silence while capturing graphs = a hang."
    )
    warmup_timeout_s: float | None = Field(
        default=None, gt=0, le=6 * 3600, description="Seconds the first request may take."
    )
    skip_coherence: bool = Field(
        default=False, description="Skip the known-answer coherence probe."
    )
    engine: Literal["docker", "native"] = Field(
        default="docker",
        description="docker: the vLLM ROCm image; native: a vLLM installed on the host "
        "(see `instinct engine detect`), for hosts without Docker.",
    )
    root: str = Field(default="", max_length=4096, description=ROOT_HELP)


class StatusInput(ToolInput):
    """``instinct ps``."""

    no_health: bool = Field(default=False, description="Do not probe /health of each endpoint.")


class LogsInput(ToolInput):
    """``instinct logs NAME --tail N`` (bounded, never a follow)."""

    name: ContainerName
    tail: int = Field(default=DEFAULT_LOG_LINES, ge=1, le=MAX_LOG_LINES)


class StopInput(ToolInput):
    """``instinct stop NAME... | --all``: endpoints this tool started, and nothing else."""

    names: list[ContainerName] = Field(default_factory=list, max_length=32)
    all: bool = Field(default=False, description="Stop every endpoint instinct-serve started.")

    @model_validator(mode="after")
    def _one_target(self) -> StopInput:
        if bool(self.names) == self.all:
            raise ValueError("give names or all=true (one of them)")
        return self


class DiagnoseInput(ToolInput):
    """``instinct diagnose``: exactly one of a log's text, a container, a symptom."""

    log_text: Annotated[str | None, AfterValidator(_keep_end)] = Field(
        default=None, description="The log text (its end is what counts)."
    )
    container: ContainerName | None = Field(
        default=None, description="An instinct-serve container: its recent log is read."
    )
    symptom: str | None = Field(default=None, max_length=4096, description="One line or sentence.")
    gfx: Text | None = None
    model: Model | None = None
    vllm_version: Text | None = None

    @model_validator(mode="after")
    def _one_source(self) -> DiagnoseInput:
        given = [s for s in (self.log_text, self.container, self.symptom) if s]
        if len(given) != 1:
            raise ValueError("give exactly one of log_text, container or symptom")
        return self
