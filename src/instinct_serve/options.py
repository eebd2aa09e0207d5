"""The options of ``fit``, ``plan`` and ``serve``: declared once, validated once.

Each job has one options type (``FitRequest``, ``PlanOptions``, ``ServeOptions``), a dataclass
whose fields carry their flag, kind, bounds, unit and help, the way vLLM's ``EngineArgs``
owns its CLI. The click options (``cli.options``) and the MCP input models
(``agents.inputs``) are generated from these fields, and ``parse`` turns what a person typed
or an agent sent into the typed options with the same conversions, bounds and error ids
(``{"error": {"id": "bad_<option>", ...}}``, exit 2) whoever the caller is. The shared
fields live in the base classes, so ``--gpu``, ``--vram-gb``, ``--tp``, ``--max-model-len``
and ``--kv-cache-dtype`` mean the same thing in every command.

Every number is bounded here, before any arithmetic sees it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Literal, NamedTuple, TypeVar

from instinct_serve.errors import UsageError
from instinct_serve.hardware.profiles import gpu_choices
from instinct_serve.names import CONTAINER_NAME, ENV_NAME_RULE, is_env_name
from instinct_serve.units import KV_CACHE_DTYPE_BYTES, token_count

DEFAULT_MODEL = "Qwen/Qwen3.5-9B"
DEFAULT_PORT = 8000

Kind = Literal[
    "text",  # a string (stripped, bounded)
    "int",  # a whole number
    "float",  # a finite number
    "tokens",  # a context length: 32768, 32k, 32K
    "bool",  # a flag
    "tristate",  # --x/--no-x with "unset" meaning the default
    "choice",  # one of ``choices``
    "gpu",  # a GPU profile or a gfx target (hardware.profiles)
    "indices",  # device indices: "0,1" or [0, 1]
    "env",  # NAME=VALUE items or a mapping (a bare NAME goes to ``names_into``)
    "names",  # environment variable names (passed by name: the value stays outside)
    "texts",  # a repeatable string option
    "args",  # arguments passed to `vllm serve` as they are
]

MAX_TEXT = 4096
MAX_ITEMS = 64


class Opt(NamedTuple):
    """How one option is spelled, converted, bounded and explained."""

    kind: Kind
    help: str
    flag: str = ""  # the CLI spelling; "" means --<name with dashes>
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # (low, high] instead of [low, high]
    check: Callable[[Any], str | None] | None = None  # extra rule: the problem, or None
    max_length: int = 512
    fix: str = ""
    cli: bool = True  # offered on the command line
    mcp: bool = True  # offered to agents
    hidden: bool = False  # on the command line but not in --help (tests, chroots)
    error_id: str = ""  # "" means bad_<name>
    short: str | None = None  # a one-letter alias, e.g. -y
    positional: bool = False
    names_into: str = ""  # kind "env": the field that takes the bare NAME items

    def spelling(self, name: str) -> str:
        return self.flag or "--" + name.replace("_", "-")


def opt(default: Any = None, **spec: Any) -> Any:
    """A dataclass field carrying its ``Opt`` (``field(default=..., metadata=...)``)."""
    meta = {"opt": Opt(**spec)}
    if isinstance(default, (list, dict)):
        factory: Callable[[], Any] = list if isinstance(default, list) else dict
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def option_of(cls: type, name: str) -> Opt:
    for f in fields(cls):
        if f.name == name:
            return f.metadata["opt"]  # type: ignore[no-any-return]
    raise KeyError(name)


def declared(cls: type) -> list[tuple[str, Opt, Any]]:
    """(name, Opt, default) of every option field of ``cls``, in declaration order."""
    out = []
    for f in fields(cls):
        spec = f.metadata.get("opt")
        if spec is None:
            continue
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
        out.append((f.name, spec, default))
    return out


# ----------------------------------------------------------------------------- checks


def _power_of_two(value: int) -> str | None:
    if value & (value - 1):
        return "is not a power of two (use 1, 2, 4, 8, ...)"
    return None


def _server(value: str) -> str | None:
    """A server the registry knows (``servers``: the built-in ones and the registered)."""
    from instinct_serve import servers

    known = servers.names()
    return None if value in known else "is not one of " + ", ".join(known)


def _container_name(value: str) -> str | None:
    if not CONTAINER_NAME.fullmatch(value):
        return "is not a container name (letters, digits, '_', '.', '-'; 128 at most)"
    return None


# ----------------------------------------------------------------------------- conversion

T = TypeVar("T")


def _fail(name: str, spec: Opt, value: Any, problem: str, fix: str | None = None) -> UsageError:
    shown = value if isinstance(value, str) else repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    flag = spec.spelling(name).split("/")[0]
    return UsageError(
        f"{flag} {shown}: {problem}",
        fix=fix or spec.fix or _default_fix(flag, spec),
        id=spec.error_id or f"bad_{name}",
        details={"option": name},
    )


def _default_fix(flag: str, spec: Opt) -> str:
    if spec.choices:
        return f"use {flag} with one of: " + ", ".join(spec.choices)
    if spec.low is not None or spec.high is not None:
        left = "(" if spec.low_open else "["
        return f"use {flag} with a value in {left}{_fmt(spec.low)}, {_fmt(spec.high)}]"
    return f"see `instinct --help` for {flag}"


def _number(name: str, spec: Opt, value: Any, integral: bool) -> int | float:
    if isinstance(value, bool):
        raise _fail(name, spec, value, "is not a number")
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 40:
            raise _fail(name, spec, value, "is not a number")
        try:
            number: int | float = int(text) if integral else float(text)
        except ValueError:
            raise _fail(
                name, spec, value, "is not a whole number" if integral else "is not a number"
            ) from None
    elif isinstance(value, (int, float)):
        number = value
    else:
        raise _fail(name, spec, value, "is not a number")
    if isinstance(number, float):
        if not math.isfinite(number):
            raise _fail(name, spec, value, "is not a finite number")
        if integral:
            if not number.is_integer():
                raise _fail(name, spec, value, "is not a whole number")
            number = int(number)
    _bounds(name, spec, value, number)
    return number


def _bounds(name: str, spec: Opt, value: Any, number: float) -> None:
    low, high = spec.low, spec.high
    too_low = low is not None and (number <= low if spec.low_open else number < low)
    too_high = high is not None and number > high
    if too_low or too_high:
        left = "(" if spec.low_open else "["
        span = f"{left}{_fmt(low)}, {_fmt(high)}]"
        raise _fail(name, spec, value, f"is outside {span}")


def _fmt(bound: float | None) -> str:
    if bound is None:
        return "..."
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _text(name: str, spec: Opt, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(name, spec, value, "is not text")
    text = value.strip()
    if not text:
        raise _fail(name, spec, value, "is empty")
    if len(text) > spec.max_length:
        raise _fail(name, spec, value, f"is longer than {spec.max_length} characters")
    if any(ord(c) < 32 for c in text):
        raise _fail(name, spec, value, "contains control characters")
    return text


def _items(name: str, spec: Opt, value: Any) -> list[Any]:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) > MAX_ITEMS:
        raise _fail(name, spec, f"({len(items)} items)", f"takes at most {MAX_ITEMS}")
    return items


_NOT_ENV_NAME = f"is not an environment variable name ({ENV_NAME_RULE})"


def _env_items(name: str, spec: Opt, value: Any) -> tuple[dict[str, str], list[str]]:
    """``NAME=VALUE`` items (or a mapping) and the bare ``NAME`` items (passed by name: the
    value is taken from the caller's environment at launch, never written down)."""
    pairs: list[tuple[Any, Any]] = []
    bare: list[str] = []
    if isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        for item in _items(name, spec, value):
            key, sep, val = str(item).partition("=")
            if sep:
                pairs.append((key, val))
            elif spec.names_into:
                if not is_env_name(key):
                    raise _fail(name, spec, key, _NOT_ENV_NAME)
                bare.append(key)
            else:
                raise _fail(name, spec, item, "use NAME=VALUE")
    env: dict[str, str] = {}
    for key, val in pairs:
        if not is_env_name(key):
            raise _fail(name, spec, key, _NOT_ENV_NAME)
        if not isinstance(val, str) or len(val) > MAX_TEXT or "\0" in val:
            raise _fail(name, spec, key, "has a value that is not text (or is too long)")
        env[key] = val
    if len(env) + len(bare) > MAX_ITEMS:
        raise _fail(name, spec, "", f"takes at most {MAX_ITEMS} variables")
    return env, list(dict.fromkeys(bare))


def _convert(name: str, spec: Opt, value: Any) -> Any:
    kind = spec.kind
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise _fail(name, spec, value, "is a flag: true or false")
    if kind == "tristate":
        if value is None or isinstance(value, bool):
            return value
        raise _fail(name, spec, value, "is true, false or unset")
    if kind == "int":
        number = _number(name, spec, value, integral=True)
        problem = spec.check(number) if spec.check else None
        if problem:
            raise _fail(name, spec, value, problem)
        return number
    if kind == "float":
        return float(_number(name, spec, value, integral=False))
    if kind == "tokens":
        if isinstance(value, bool):
            raise _fail(name, spec, value, "is not a number of tokens")
        count = value if isinstance(value, int) else token_count(str(value))
        if count is None:
            raise _fail(name, spec, value, "use a number of tokens such as 32768, 32k or 32K")
        _bounds(name, spec, value, count)
        return count
    if kind == "choice":
        text = _text(name, spec, value)
        if text not in spec.choices:
            raise _fail(name, spec, value, "is not one of " + ", ".join(spec.choices))
        return text
    if kind == "indices":
        raw = value.split(",") if isinstance(value, str) else _items(name, spec, value)
        raw = [r.strip() if isinstance(r, str) else r for r in raw]
        raw = [r for r in raw if r != ""]
        if not raw:
            raise _fail(name, spec, value, "needs device indices such as 0,1")
        indices = [_number(name, spec, r, integral=True) for r in raw]
        if len(indices) > MAX_ITEMS:
            raise _fail(name, spec, value, f"lists more than {MAX_ITEMS} devices")
        if len(set(indices)) != len(indices):
            raise _fail(name, spec, value, "lists a device twice")
        return [int(i) for i in indices]
    if kind == "env":
        return _env_items(name, spec, value)[0]
    if kind == "names":
        names: list[str] = []
        for item in _items(name, spec, value):
            if not is_env_name(item):
                raise _fail(name, spec, item, _NOT_ENV_NAME)
            if item not in names:
                names.append(item)
        return names
    if kind == "texts":
        return [_text(name, spec, item) for item in _items(name, spec, value)]
    if kind == "args":
        args = []
        for item in _items(name, spec, value) if not isinstance(value, (list, tuple)) else value:
            if not isinstance(item, str) or len(item) > MAX_TEXT or "\0" in item:
                raise _fail(name, spec, item, "is not an argument")
            args.append(item)
        if len(args) > 4 * MAX_ITEMS:
            raise _fail(name, spec, "", f"takes at most {4 * MAX_ITEMS} arguments")
        return args
    text = _text(name, spec, value)
    if kind == "gpu":
        from instinct_serve.hardware.profiles import get_profile

        try:
            get_profile(text)
        except UsageError as exc:
            if exc.id == "not_amd_gpu":  # an NVIDIA name: say so, with its own id
                raise UsageError(
                    f"{spec.spelling(name)} {text}: {exc.message}",
                    fix=exc.fix,
                    id=exc.id,
                    details={"option": name},
                ) from None
            raise _fail(name, spec, value, "is not a GPU this tool plans for", exc.fix) from None
        return text
    problem = spec.check(text) if spec.check else None
    if problem:
        raise _fail(name, spec, value, problem)
    return text


OptionsT = TypeVar("OptionsT", bound="JobOptions")


@dataclass
class JobOptions:
    """Base of the per-job options types: ``parse`` and the cross-field rules."""

    job: ClassVar[str] = ""

    @classmethod
    def parse(cls: type[OptionsT], raw: Mapping[str, Any]) -> OptionsT:
        """The typed options from raw values (CLI strings or JSON values), validated.

        ``None`` (or a missing key) means the default. Unknown keys are refused.
        """
        known = {name: (spec, default) for name, spec, default in declared(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise UsageError(
                f"unknown option(s) for {cls.job}: {', '.join(unknown)}",
                fix=f"see `instinct {cls.job} --help`",
                id="unknown_option",
            )
        values: dict[str, Any] = {}
        for name, (spec, _default) in known.items():
            value = raw.get(name)
            if value is None or (
                spec.kind in ("text", "texts", "args", "env", "names") and not value
            ):
                continue  # unset (an empty text or list is unset too): the default
            if spec.kind == "env" and spec.names_into:
                values[name], bare = _env_items(name, spec, value)
                if bare:
                    merged = [*values.get(spec.names_into, []), *bare]
                    values[spec.names_into] = list(dict.fromkeys(merged))
            elif spec.kind == "names":
                merged = [*values.get(name, []), *_convert(name, spec, value)]
                values[name] = list(dict.fromkeys(merged))
            else:
                values[name] = _convert(name, spec, value)
        options = cls(**values)
        options.check()
        return options

    def check(self) -> None:
        """Rules across fields (subclasses extend)."""

    def argv(self) -> list[str]:
        """The command-line flags that give these options again (the ones set away from
        their default), for a command the tool writes for later (a systemd unit)."""
        out: list[str] = []
        for name, spec, default in declared(type(self)):
            value = getattr(self, name)
            if not spec.cli or spec.positional or value == default:
                continue
            if spec.kind not in ("int", "float", "text", "tokens", "choice", "bool"):
                raise NotImplementedError(f"{name}: {spec.kind} options are not re-rendered")
            flag = spec.spelling(name).split("/")[0]
            out += (
                [flag]
                if spec.kind == "bool"
                else [flag, f"{value:g}" if isinstance(value, float) else str(value)]
            )
        return out

    @classmethod
    def error_for(cls, name: str, value: Any, problem: str) -> UsageError:
        """The error of option ``name`` (for callers that convert values themselves, such
        as the MCP server's input models): the same id and fix as ``parse`` gives."""
        for field_name, spec, _default in declared(cls):
            if field_name == name:
                return _fail(name, spec, value, problem)
        return UsageError(f"{name}: {problem}", id="bad_input")


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
        help="GPU architecture when no profile fits (gfx942, gfx950, gfx90a); same as --gpu GFX.",
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
        metavar="NAME",
        help="Device name as vLLM reads it, with --vram-gb: batch defaults ('A100' is small) "
        "and, before vLLM 0.11, NCCL buffers at TP > 1 (an SXM name: NVSwitch).",
        max_length=128,
    )
    platform: str | None = opt(
        kind="choice", choices=("rocm", "cuda"), help="With --vram-gb: the GPU's platform."
    )
    max_num_seqs: int | None = opt(
        kind="int", metavar="N", help="Sampler rows profiled.", low=1, high=1 << 20
    )
    max_num_batched_tokens: int | None = opt(
        kind="int", metavar="N", help="Tokens of the profile pass.", low=1, high=1 << 26
    )
    block_size: int | None = opt(
        kind="int", metavar="N", help="KV block size in tokens.", low=1, high=1 << 16
    )
    enforce_eager: bool = opt(False, kind="bool", help="No graphs: no graph memory.")
    language_model_only: bool = opt(False, kind="bool", help="Skip the vision/audio tower.")
    speculative_mtp: int = opt(
        0, kind="int", metavar="N", help="MTP draft tokens (loads MTP).", low=0, high=64
    )
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
    server: str = opt(
        "vllm",
        kind="text",
        metavar="NAME",
        help="The inference server to plan for: vllm, or one an installed package registers "
        "(entry points `instinct_serve.servers`).",
        check=_server,
        max_length=64,
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
        metavar="DIR|off",
        help="Host directory of the persistent compile caches (vLLM torch.compile, Triton, "
        "AITER JIT, MIOpen), one subdirectory per image digest and gfx, kept across stop, "
        "relaunch and upgrade (default: compile-cache/ in the tool's cache directory on the "
        "host); `off` leaves them in the container.",
        max_length=MAX_TEXT,
    )
    extra_env: dict[str, str] = opt(
        {},
        kind="env",
        flag="--env",
        metavar="NAME[=VALUE]",
        help="Extra environment variable (repeatable). A bare NAME passes the variable by "
        "name: its value is taken from your environment at launch and never written in the "
        "plan, an argument or a label (how tokens and keys go: --env VLLM_API_KEY).",
        names_into="env_by_name",
    )
    env_by_name: list[str] = opt(
        [],
        kind="names",
        help="Environment variables passed by name (the bare NAMEs of --env).",
        cli=False,
        mcp=False,
    )
    public: bool = opt(
        False,
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
    replicas: int | None = opt(
        kind="int",
        metavar="N",
        help="Copies of the endpoint behind one address: on this host, N copies on disjoint "
        "GPUs behind a router (HAProxy), or vLLM's own data parallelism for a "
        "mixture-of-experts model (default: 1, or as many as fit with --objective "
        "throughput); with --format k8s, the Deployment's pods.",
        low=1,
        high=1024,
    )
    router: bool = opt(
        False,
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
        check=lambda value: _ifname(value),  # defined with the Kubernetes options below
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

    def check(self) -> None:
        super().check()
        from instinct_serve.credentials import is_secret_name, looks_like_token

        for key, value in self.extra_env.items():
            if is_secret_name(key) or looks_like_token(value):
                raise UsageError(
                    f"{key} must not be given a value on the command line",
                    fix=f"export {key} in your environment and pass it by name: --env {key}",
                    id="secret_in_args",
                )
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
        if self.engine not in ("docker", "native"):
            raise UsageError(
                f"unknown engine {self.engine!r}", fix="use docker or native", id="bad_engine"
            )
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
        checked.local_group = self.local_group
        checked.check()


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
        kind="bool",
        help="Replace the running endpoint of this name only once the new plan is proven "
        "beside it on a spare port (health, warm-up, coherence); a bad one leaves the old "
        "untouched; `instinct rollback NAME` returns to the old plan.",
    )
    prefetch: bool = opt(
        False,
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
    engine: str = opt(
        "docker",
        kind="choice",
        choices=("docker", "native"),
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


# ----------------------------------------------------------------------------- kubernetes

# A Kubernetes object name (RFC 1123 label) and a StorageClass name (RFC 1123 subdomain).
K8S_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
K8S_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")
# NCCL_SOCKET_IFNAME syntax: comma-separated prefixes, "^" to exclude, "=" for an exact name.
IFNAME_LIST = re.compile(r"\^?=?[A-Za-z0-9_.:-]{1,15}(?:,=?[A-Za-z0-9_.:-]{1,15}){0,15}")
# The Prometheus Operator's own Service in front of every Prometheus it runs
# (prometheus-operated), in the namespace kube-prometheus-stack installs to by convention.
DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"


def _k8s_label(value: str) -> str | None:
    if not K8S_LABEL.fullmatch(value):
        return "is not a Kubernetes name (lowercase letters, digits and '-', 63 at most)"
    return None


def _k8s_subdomain(value: str) -> str | None:
    if not K8S_SUBDOMAIN.fullmatch(value):
        return "is not a StorageClass name (lowercase letters, digits, '-' and '.')"
    return None


def _ifname(value: str) -> str | None:
    if not IFNAME_LIST.fullmatch(value):
        return "is not an interface name or NCCL_SOCKET_IFNAME list (eth0, ib0, ^lo,docker)"
    return None


def _http_url(value: str) -> str | None:
    if not re.fullmatch(r"https?://[^\s\"'{}]+", value):
        return "is not an http(s) URL"
    return None


@dataclass
class KubernetesOptions(JobOptions):
    """``instinct plan --format k8s``: how the manifests run the plan on a cluster.

    A separate type from ``PlanOptions`` because they shape the manifests, not the plan: the
    same plan (and plan hash) serves one pod or an autoscaled fleet. Command line only: the
    MCP ``plan`` tool answers with the plan document, which has no manifests.
    """

    job: ClassVar[str] = "plan"

    namespace: str | None = opt(
        kind="text",
        metavar="NS",
        help="With --format k8s: the namespace of every object (default: kubectl's current).",
        check=_k8s_label,
        max_length=63,
        mcp=False,
    )
    autoscale: bool = opt(
        False,
        kind="bool",
        help="With --format k8s: add a KEDA ScaledObject that scales on vLLM's queue "
        "(vllm:num_requests_waiting from Prometheus).",
        mcp=False,
    )
    max_replicas: int | None = opt(
        kind="int",
        metavar="N",
        help="With --autoscale: the most copies (default: twice --replicas).",
        low=1,
        high=1024,
        mcp=False,
    )
    nodes: int = opt(
        1,
        kind="int",
        metavar="N",
        help="With --format k8s: nodes one copy spans; more than 1 renders a LeaderWorkerSet "
        "(give --gpu-count as the GPUs of all nodes together).",
        low=1,
        high=64,
        mcp=False,
    )
    storage_class: str | None = opt(
        kind="text",
        metavar="CLASS",
        help="With --format k8s: StorageClass of the model and compile cache volume "
        "(default: the cluster's; several pods share it ReadWriteMany).",
        check=_k8s_subdomain,
        max_length=253,
        mcp=False,
    )
    socket_ifname: str = opt(
        "eth0",
        kind="text",
        metavar="IFACE",
        help="With --nodes: the pod interface RCCL and Gloo bootstrap over "
        "(NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME).",
        check=_ifname,
        max_length=256,
        mcp=False,
    )
    prometheus_url: str = opt(
        DEFAULT_PROMETHEUS_URL,
        kind="text",
        metavar="URL",
        help="With --autoscale: the Prometheus KEDA queries for vLLM's metrics.",
        check=_http_url,
        mcp=False,
    )
    # Set by a multi-node planner that knows the node size; by default the plan's TP x PP
    # split evenly over ``nodes``.
    gpus_per_node: int | None = None
    # copies of the endpoint (with --autoscale, the fewest): the plan's --replicas
    # (``PlanOptions.replicas``), which on this host means replicas behind a router
    replicas: int = 1

    def check(self) -> None:
        super().check()
        if self.max_replicas is not None and not self.autoscale:
            raise UsageError(
                "--max-replicas only bounds --autoscale",
                fix="add --autoscale, or set the fixed count with --replicas",
                id="bad_max_replicas",
                details={"option": "max_replicas"},
            )
        if self.max_replicas is not None and self.max_replicas < self.replicas:
            raise UsageError(
                f"--max-replicas {self.max_replicas} is below --replicas {self.replicas}",
                fix="--replicas is the fewest copies, --max-replicas the most",
                id="bad_max_replicas",
                details={"option": "max_replicas"},
            )

    @property
    def most_replicas(self) -> int:
        """The autoscaler's ceiling."""
        return self.max_replicas if self.max_replicas is not None else 2 * self.replicas

    @property
    def shared_cache(self) -> bool:
        """More than one pod mounts the cache (a ReadWriteMany volume)."""
        return self.replicas > 1 or self.autoscale or self.nodes > 1


def _relaunch_timeout() -> Any:
    """Serve's own ``--timeout`` (same bounds), for the relaunches watch and rollback make."""
    spec = option_of(ServeOptions, "timeout_s")._replace(
        help="Seconds a relaunch may take to /health (default: scaled to the weights).",
    )
    return field(default=None, metadata={"opt": spec})


@dataclass
class WatchOptions(JobOptions):
    """``instinct watch``: how often to look and how patiently to restart. Command line
    only (supervision runs beside the endpoint, not through an agent's MCP call)."""

    job: ClassVar[str] = "watch"

    interval_s: float = opt(
        10.0,
        kind="float",
        flag="--interval",
        metavar="SECONDS",
        help="Seconds between checks.",
        low=0.1,
        high=3600.0,
        mcp=False,
    )
    backoff_s: float = opt(
        5.0,
        kind="float",
        flag="--backoff",
        metavar="SECONDS",
        help="Seconds before the first restart of a series; doubles each time (at most 300).",
        low=0.0,
        high=300.0,
        mcp=False,
    )
    unhealthy_after: int = opt(
        3,
        kind="int",
        metavar="N",
        help="Failed /health checks in a row of a loaded server that count as a hang.",
        low=1,
        high=100,
        mcp=False,
    )
    max_restarts: int = opt(
        5,
        kind="int",
        metavar="N",
        help="Restarts in a row that did not bring it back before giving up (exit 1).",
        low=1,
        high=1000,
        mcp=False,
    )
    max_checks: int | None = opt(
        kind="int",
        flag="--checks",
        metavar="N",
        help="Stop after this many checks.",
        low=1,
        high=10**9,
        mcp=False,
    )
    duration_s: float | None = opt(
        kind="float",
        flag="--for",
        metavar="SECONDS",
        help="Stop after this many seconds.",
        low=0.0,
        low_open=True,
        mcp=False,
    )
    timeout_s: float | None = _relaunch_timeout()


@dataclass
class RollbackOptions(JobOptions):
    """``instinct rollback``: how long the relaunch of the last good plan may take."""

    job: ClassVar[str] = "rollback"

    timeout_s: float | None = _relaunch_timeout()
