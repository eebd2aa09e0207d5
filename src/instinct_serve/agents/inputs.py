"""Pydantic input models of the MCP tools: the CLI's options, validated before any work.

The ``fit``, ``plan`` and ``serve`` inputs are generated from the job's options type
(``options.FitRequest``, ``PlanOptions``, ``ServeOptions``), the same declarations the CLI's
options come from, and ``JobInput.options()`` validates them with the same ``parse``. Unknown
keys are rejected (a typo is an error, not a silently ignored option), and every string
and list is bounded: the arguments come from a model, not a person.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from instinct_serve.errors import UsageError
from instinct_serve.names import CONTAINER_NAME, ENV_NAME, MAX_ENV_NAME
from instinct_serve.observe.bench import (
    DEFAULT_CONCURRENCY,
    DEFAULT_INPUT_LEN,
    DEFAULT_OUTPUT_LEN,
    DEFAULT_STEP_TIMEOUT_S,
    MAX_CONCURRENCY,
    MAX_REQUESTS,
    MAX_STEPS,
)
from instinct_serve.options import (
    FitRequest,
    JobOptions,
    Opt,
    PlanOptions,
    RollbackOptions,
    ServeOptions,
    declared,
)

MAX_LOG_TEXT = 4_000_000  # characters of pasted log kept (the end: failures are there)
MAX_LOG_LINES = 500  # `logs` tail, at most
DEFAULT_LOG_LINES = 200
ROOT_HELP = "Tests and chroots only (the CLI's hidden --root): prefix of /dev, /proc, /sys."
# Inputs for tests and chroots (the CLI's hidden options): accepted, not in the public schema
# an agent loads.
TestOnly = SkipJsonSchema[str]


def _keep_end(value: str | None) -> str | None:
    if value is not None and len(value) > MAX_LOG_TEXT:
        return value[-MAX_LOG_TEXT:]
    return value


Model = Annotated[str, Field(min_length=1, max_length=512, description="Hugging Face id or path")]
Text = Annotated[str, Field(min_length=1, max_length=512)]
# Docker container names and ids; never starting with '-' (no option smuggling).
ContainerName = Annotated[
    str, Field(pattern=f"^{CONTAINER_NAME.pattern}$", description="Container name or id")
]
EnvName = Annotated[str, Field(pattern=f"^{ENV_NAME.pattern}$", max_length=MAX_ENV_NAME)]


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

    sysfs_root: TestOnly = Field(
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
    root: TestOnly = Field(default="", max_length=4096, description=ROOT_HELP)


class RecipesShowInput(ToolInput):
    """``instinct recipes show`` (the catalog is local: ``host`` is accepted and unused)."""

    model: Model
    gpu: Text | None = Field(
        default=None, description="Also the merged AMD view: mi300x, gfx942, ..."
    )
    variant: Text | None = Field(default=None, description="Recipe variant for the AMD view.")


class RecipesSearchInput(ToolInput):
    """``instinct recipes search``: which recipes a few words mean, ranked for the GPUs."""

    query: Text = Field(description='A few words: "qwen3", "deepseek r1", "gpt-oss".')
    gpu: Text | None = Field(
        default=None, description="Rank for this GPU (mi300x, gfx942, ...); default: detect."
    )
    gpu_count: int | None = Field(default=None, ge=1, le=1024)
    limit: int = Field(default=10, ge=1, le=100)


class JobInput(ToolInput):
    """An input generated from a job's options type (``options.FitRequest``, ...): same
    names, help and bounds as the CLI. ``options()`` runs the type's own ``parse``, so a
    bad value gets the same error id as on the command line."""

    options_type: ClassVar[type[JobOptions]]
    mcp_only: ClassVar[frozenset[str]] = frozenset({"host"})

    def options(self) -> Any:
        raw = self.model_dump(exclude=set(self.mcp_only))
        return self.options_type.parse(raw)

    @classmethod
    def option_error(cls, exc: ValidationError) -> UsageError | None:
        """A pydantic type error on one option (``port: "http"``) as that option's own
        error, so agents get the id the CLI gives; None for other argument errors."""
        errors = exc.errors()
        loc = errors[0]["loc"] if errors else ()
        name = str(loc[0]) if loc else ""
        if not hasattr(cls, "options_type") or name in cls.mcp_only:
            return None
        if name not in {n for n, _s, _d in declared(cls.options_type)}:
            return None
        return cls.options_type.error_for(name, errors[0].get("input"), errors[0]["msg"].lower())


HASH_PATTERN = r"^[0-9a-f]{6,64}$"
CHANGE_HASH_HELP = "From the summary the user approved."


class Approval(BaseModel):
    """The confirmation a destructive tool takes (``runtime.confirm``): without ``confirm``
    it returns what it would touch and keep, and its ``change_hash``."""

    confirm: bool = Field(
        default=False,
        description="Do it (else: only the summary of what it would do).",
    )
    change_hash: str | None = Field(
        default=None, pattern=HASH_PATTERN, description=CHANGE_HASH_HELP
    )


class ServeExtras(JobInput):
    """What only the MCP ``serve`` takes: the explicit confirmation (and with replace=true,
    the approved summary of what the replacement removes)."""

    mcp_only: ClassVar[frozenset[str]] = frozenset({"host", "confirm", "plan_hash", "change_hash"})

    confirm: bool = Field(
        default=False,
        description="Launch (else: only the summary).",
    )
    plan_hash: str | None = Field(
        default=None,
        pattern=HASH_PATTERN,
        description="From the summary the user approved (with confirm=true).",
    )
    change_hash: str | None = Field(
        default=None,
        pattern=HASH_PATTERN,
        description="With replace=true: " + CHANGE_HASH_HELP,
    )


_JSON_TYPES: dict[str, Any] = {
    "text": str,
    "gpu": str,
    "choice": str,
    "int": int,
    "float": float,
    "tokens": int | str,
    "bool": bool,
    "tristate": bool,
    "indices": list[int] | str,  # [0, 1] or "0,1", as on the command line
    "env": dict[EnvName, Annotated[str, Field(max_length=4096)]] | list[Text],
    "texts": list[Text],
    "args": list[Annotated[str, Field(max_length=4096)]],
}


def _schema(spec: Opt) -> dict[str, Any]:
    """The option's bounds and choices, for the agent to read (``parse`` enforces them)."""
    extra: dict[str, Any] = {}
    if spec.low is not None:
        extra["exclusiveMinimum" if spec.low_open else "minimum"] = spec.low
    if spec.high is not None:
        extra["maximum"] = spec.high
    if spec.choices:
        extra["enum"] = list(spec.choices)
    if spec.kind == "gpu":
        from instinct_serve.hardware.profiles import GFX_TARGETS, PROFILES

        extra["examples"] = [*PROFILES, *GFX_TARGETS]
    return extra


def job_input(
    name: str, options_type: type[JobOptions], base: type[JobInput] = JobInput
) -> type[JobInput]:
    """The MCP input model of a job, generated from its options type's fields."""
    fields: dict[str, Any] = {}
    for field_name, spec, default in declared(options_type):
        if not spec.mcp:
            continue
        annotation: Any = _JSON_TYPES[spec.kind] | None
        if spec.hidden:  # tests and chroots: accepted, not in the public schema
            annotation = Annotated[annotation, SkipJsonSchema()]  # type: ignore[type-arg]
        empty = default in ([], {}) or default is None
        fields[field_name] = (
            annotation,
            Field(
                default=None if empty else default,
                description=spec.described(agent=True),
                json_schema_extra=_schema(spec) or None,
            ),
        )
    model: type[JobInput] = create_model(
        name,
        __base__=base,
        __doc__=f"``instinct {options_type.job}``: {options_type.__doc__ or ''}",
        **fields,
    )
    model.options_type = options_type
    return model


FitInput = job_input("FitInput", FitRequest)
ServeInput = job_input("ServeInput", ServeOptions, base=ServeExtras)


class RollbackExtras(JobInput, Approval):
    """What the MCP ``rollback`` takes besides its options: the endpoint, and the approval
    of what it replaces."""

    mcp_only: ClassVar[frozenset[str]] = frozenset(
        {"host", "name", "root", "confirm", "change_hash"}
    )

    name: ContainerName = Field(description="The endpoint whose last good plan to serve again.")
    root: TestOnly = Field(default="", max_length=4096, description=ROOT_HELP)


RollbackInput = job_input("RollbackInput", RollbackOptions, base=RollbackExtras)


EVERYONE_HELP = (
    "Every user's endpoints, not only the caller's (user@host of whoever started it; older "
    "endpoints name no owner and are listed only with this)."
)


class StatusInput(ToolInput):
    """``instinct ps``."""

    no_health: bool = Field(default=False, description="Do not probe /health of each endpoint.")
    everyone: bool = Field(default=False, description=EVERYONE_HELP)


class LogsInput(ToolInput):
    """``instinct logs NAME --tail N`` (bounded, never a follow)."""

    name: ContainerName
    tail: int = Field(default=DEFAULT_LOG_LINES, ge=1, le=MAX_LOG_LINES)


class StopInput(ToolInput, Approval):
    """``instinct stop NAME... | --all [--everyone]``: endpoints this tool started, and
    nothing else; the caller's own with all=true unless everyone=true."""

    names: list[ContainerName] = Field(default_factory=list, max_length=32)
    all: bool = Field(default=False, description="Stop every endpoint the caller started.")
    everyone: bool = Field(default=False, description="With all=true: " + EVERYONE_HELP)

    @model_validator(mode="after")
    def _one_target(self) -> StopInput:
        if bool(self.names) == self.all:
            raise ValueError("give names or all=true (one of them)")
        if self.everyone and not self.all:
            raise ValueError("everyone=true goes with all=true")
        return self


class MetricsInput(ToolInput):
    """``instinct top --once --json``: one reading of endpoints' vLLM metrics and GPUs."""

    names: list[ContainerName] = Field(
        default_factory=list, max_length=32, description="Endpoints to read; default: all."
    )
    window_s: float = Field(
        default=2.0,
        ge=0,
        le=10,
        description="Seconds between the two scrapes rates and latencies cover (0: one "
        "scrape, latencies since the server started).",
    )
    gpu: bool = Field(default=True, description="Read GPU power and memory with amd-smi.")


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
    server: Literal["vllm", "sglang"] | None = Field(
        default=None,
        description="The server that wrote the log (read from the log when it shows): fixes "
        "name its flags.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> DiagnoseInput:
        given = [s for s in (self.log_text, self.container, self.symptom) if s]
        if len(given) != 1:
            raise ValueError("give exactly one of log_text, container or symptom")
        return self


class PlanExtras(JobInput):
    """What only the MCP ``plan`` takes: the CLI's ``--format`` and ``--list``."""

    mcp_only: ClassVar[frozenset[str]] = frozenset({"host", "format", "list"})

    format: Literal["docker", "shell", "native", "compose", "k8s"] | None = Field(
        default=None, description="Also the launch as this text (rendered.text)."
    )
    list: bool = Field(
        default=False, description="Every precision x TP this target could run, ranked."
    )


PlanInput = job_input("PlanInput", PlanOptions, base=PlanExtras)


class BenchInput(ToolInput):
    """``instinct bench NAME``: one step of the server's benchmark client per concurrency."""

    name: ContainerName | None = Field(default=None, description="Default: the only endpoint.")
    concurrency: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]] = Field(
        default_factory=lambda: list(DEFAULT_CONCURRENCY), min_length=1, max_length=MAX_STEPS
    )
    requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    input_len: int = Field(default=DEFAULT_INPUT_LEN, ge=1, le=1_000_000)
    output_len: int = Field(default=DEFAULT_OUTPUT_LEN, ge=1, le=1_000_000)
    step_timeout_s: float = Field(default=DEFAULT_STEP_TIMEOUT_S, ge=5, le=86_400)
    vllm: str | None = Field(
        default=None, max_length=4096, description="vllm executable on the host to run it with."
    )
    gpu: Text | None = Field(default=None, description="GPU of AMD's points to compare with.")
    save: bool = Field(default=True, description="Store the run.")


class CacheInput(ToolInput):
    """``instinct cache ls``: the compile caches kept per image and gfx."""

    compile_cache: str | None = Field(
        default=None, max_length=4096, description="The directory serve was given, if any."
    )


class PartitionInput(ToolInput):
    """``instinct partition show``: the GPUs' compute and memory partition modes."""

    sysfs_root: TestOnly = Field(default="/", max_length=4096)


class RecipesSyncInput(ToolInput):
    """``instinct recipes sync``: refresh the recipes and AMD's reference configs."""

    source: Literal["git", "api"] = "git"
    repo_url: TestOnly | None = Field(default=None, max_length=4096)
    api_url: TestOnly | None = Field(default=None, max_length=4096)
    hub_url: TestOnly | None = Field(default=None, max_length=4096)
    reference_url: TestOnly | None = Field(default=None, max_length=4096)
