"""AMD's reference serving configs (InferenceX's ``amd-master.yaml`` and its launch scripts)
as a second catalog source beside the recipes.

Pure: ``parse_master`` reads one parsed master YAML document, ``parse_launch`` one launch
script's text, ``script_candidates`` names the scripts a config may use; ``gather.reference``
reads the files and the shipped snapshot (``data/reference_snapshot.json``), and
``plan.reference`` makes a plan follow a config.

Snapshot format (``schema`` 1)::

    {"schema": 1, "source": "snapshot|git", "source_commit": sha, "fetched_at": date,
     "source_url": str,
     "configs": [{"name", "file", "model", "gpu", "runner", "precision", "framework",
                  "image", "multinode", "script", "rows": [{"tp", "ep", "dp_attn", "spec",
                  "scenario", "isl", "osl", "conc"}], "env": {...}, "args": [...],
                  "varies": [...], "conditional_env": {...}}]}
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from instinct_serve import vllm_args

REFERENCE_SCHEMA = 1
UPSTREAM_URL = "https://github.com/SemiAnalysisAI/InferenceX"
MASTER_FILE = "configs/amd-master.yaml"
GPUS = ("mi300x", "mi325x", "mi355x")
VLLM = "vllm"
SGLANG = "sglang"
# The server commands a launch script runs, each with how many words name it (the flags
# follow): vLLM's CLI, SGLang's module (``python3 -m sglang.launch_server``) and its CLI.
SERVER_COMMANDS = (
    (("vllm", "serve"), VLLM),
    (("python3", "-m", "sglang.launch_server"), SGLANG),
    (("python", "-m", "sglang.launch_server"), SGLANG),
    (("sglang", "serve"), SGLANG),
)
# Set by the search space's row, not by the script's flags (compared as TP/EP/DP).
PARALLEL_FLAGS = frozenset(
    {
        "--tensor-parallel-size",
        "--data-parallel-size",
        "--enable-expert-parallel",
        "--port",
        "--host",
        # SGLang's (``server_args.py``): the model, TP/EP/DP and DP-attention
        "--model-path",
        "--tp",
        "--tp-size",
        "--ep",
        "--ep-size",
        "--expert-parallel-size",
        "--dp",
        "--dp-size",
        "--enable-dp-attention",
    }
)
# Flags of the benchmark harness, not of a served endpoint: not followed, each with why.
BENCHMARK_ONLY = {
    "--no-enable-prefix-caching": "InferenceX benchmarks random prompts that share no prefix; "
    "a served endpoint keeps vLLM's prefix cache (add -- --no-enable-prefix-caching to follow "
    "AMD exactly)",
}
# Per-launch environment of the benchmark harness, not of the server.
HARNESS_ENV = frozenset({"HIP_VISIBLE_DEVICES", "PYTHONNOUSERSITE"})
HARNESS_ENV_PREFIXES = ("AIPERF_", "EVAL_")
DEFAULT_SCENARIO = "fixed-seq-len"
SCRIPT_DIRS = {
    "fixed-seq-len": (
        "benchmarks/single_node/fixed_seq_len",
        "benchmarks/single_node/fixed_seq_len/deprecated",
    ),
    "agentic-coding": ("benchmarks/single_node/agentic",),
}
_GPU = re.compile(r"mi3\d\dx")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:\[@\])?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_ASSIGN = re.compile(r"^(export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
# The method of a speculative config the script writes, escaped in a shell string or not.
_SPEC_METHOD = re.compile(r'\\?"method\\?"\s*:\s*\\?"([A-Za-z0-9_]+)')
_SPEC_TOKENS = re.compile(r"^\s*NUM_SPEC_TOKENS=(\d+)\s*$", re.MULTILINE)
_DRAFT = re.compile(r'^\s*DRAFT_MODEL="(?:\$\{DRAFT_MODEL:-)?([\w.\-]+/[\w.\-]+)', re.MULTILINE)


@dataclass(frozen=True)
class ParallelRow:
    """One search-space entry: how AMD ran the config at some sequence lengths."""

    tp: int
    ep: int = 1
    dp_attn: bool = False
    spec: str | None = None  # "mtp": speculative decoding
    scenario: str = "fixed-seq-len"
    isl: int | None = None
    osl: int | None = None
    conc: tuple[int, ...] = ()

    def label(self) -> str:
        text = f"TP {self.tp}"
        if self.ep > 1:
            text += f" EP {self.ep}"
        if self.dp_attn:
            text += " DP-attention"
        return text


@dataclass
class ReferenceConfig:
    """One AMD reference config: what InferenceX launches for a model on one GPU."""

    name: str
    file: str
    model: str
    prefix: str
    gpu: str | None
    runner: str
    precision: str
    framework: str
    image: str
    multinode: bool = False
    script: str | None = None
    rows: list[ParallelRow] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    varies: list[str] = field(default_factory=list)  # flags set per run ($MAX_MODEL_LEN...)
    spec_method: str | None = None  # the script's speculative method, also where set per run
    spec_draft: str | None = None  # the script's draft model (EAGLE3), also where set per run
    spec_tokens: int | None = None  # the script's draft tokens (NUM_SPEC_TOKENS), likewise
    # exported only under a condition (HSA_NO_SCRATCH_RECLAIM=1 on MEC firmware < 177)
    conditional_env: dict[str, str] = field(default_factory=dict)

    @property
    def speculative(self) -> bool:
        return self.name.endswith("-mtp") or any(r.spec for r in self.rows)

    @property
    def speculative_method(self) -> str | None:
        """``mtp`` or ``eagle3``: the literal ``--speculative-config``'s method, else the one
        the script writes per run (None: not speculative, or not stated)."""
        from instinct_serve.vllm_args import speculative_config

        doc = speculative_config(self.args)
        method = str(doc.get("method") or "") if doc else ""
        found = method.lower() or self.spec_method or self._sglang_mtp
        return found if self.speculative and found else None

    @property
    def _sglang_mtp(self) -> str | None:
        """SGLang runs a model's own MTP heads as ``--speculative-algorithm EAGLE`` without a
        draft model (``--speculative-draft-model-path``): ``mtp``."""
        algorithm = vllm_args.value(self.args, "--speculative-algorithm")
        if self.framework != SGLANG or algorithm is None:
            return None
        return None if vllm_args.has(self.args, "--speculative-draft-model-path") else "mtp"

    @property
    def speculative_tokens(self) -> int:
        """The draft tokens a speculative config runs (0: not speculative or not stated)."""
        from instinct_serve.vllm_args import speculative_config

        doc = speculative_config(self.args) or {}
        steps = vllm_args.value(self.args, "--speculative-num-steps")  # SGLang's draft steps
        default = int(steps) if self.framework == SGLANG and steps and steps.isdigit() else None
        tokens = doc.get("num_speculative_tokens", self.spec_tokens or default)
        if not self.speculative_method or not isinstance(tokens, int) or isinstance(tokens, bool):
            return 0
        return tokens

    @property
    def speculative_draft(self) -> str | None:
        """The draft model of an EAGLE3 config: the literal config's ``model``, else the one
        the script names (``DRAFT_MODEL=...``)."""
        from instinct_serve.vllm_args import speculative_config

        doc = speculative_config(self.args)
        model = doc.get("model") if doc else None
        return model if isinstance(model, str) and model else self.spec_draft

    @property
    def scenario(self) -> str:
        """AMD's benchmark scenario: ``fixed-seq-len`` or ``agentic-coding``."""
        return self.rows[0].scenario if self.rows else DEFAULT_SCENARIO

    @property
    def mtp_tokens(self) -> int:
        """The MTP draft tokens its launch asks for (0: none, or another method: EAGLE3)."""
        from instinct_serve.vllm_args import mtp_tokens, speculative_config

        tokens = mtp_tokens(speculative_config(self.args))
        return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0

    @property
    def vllm_single_node(self) -> bool:
        return self.framework == VLLM and not self.multinode and self.gpu in GPUS

    @property
    def sglang_single_node(self) -> bool:
        return self.framework == SGLANG and not self.multinode and self.gpu in GPUS

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rows"] = [{**asdict(r), "conc": list(r.conc)} for r in self.rows]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReferenceConfig:
        rows = [ParallelRow(**{**r, "conc": tuple(r.get("conc") or ())}) for r in data["rows"]]
        return cls(**{**data, "rows": rows})


# ---------------------------------------------------------------- the master YAML


def gpu_of(runner: str) -> str | None:
    """``mi300x`` of ``mi300x``, ``cluster:mi325x-tw``, ``mi355x-disagg``; None otherwise."""
    found = _GPU.search(runner or "")
    return found.group(0) if found else None


def _rows(scenarios: dict[str, Any]) -> list[ParallelRow]:
    rows: list[ParallelRow] = []
    for scenario, items in (scenarios or {}).items():
        for item in items or []:
            for space in item.get("search-space") or []:
                if "tp" not in space:  # disaggregated: prefill/decode pools
                    continue
                conc = space.get("conc-list") or [
                    c for c in (space.get("conc-start"), space.get("conc-end")) if c is not None
                ]
                rows.append(
                    ParallelRow(
                        tp=int(space["tp"]),
                        ep=int(space.get("ep") or 1),
                        dp_attn=bool(space.get("dp-attn")),
                        spec=space.get("spec-decoding") or None,
                        scenario=scenario,
                        isl=item.get("isl"),
                        osl=item.get("osl"),
                        conc=tuple(int(c) for c in conc),
                    )
                )
    return rows


def parse_master(doc: Any, file: str) -> list[ReferenceConfig]:
    """Every config of one master YAML document (already parsed), in its order."""
    if not isinstance(doc, dict):
        raise ValueError(f"{file}: not a mapping of configs")
    out = []
    for name, entry in doc.items():
        if not isinstance(entry, dict) or "model" not in entry:
            continue
        runner = str(entry.get("runner") or "")
        out.append(
            ReferenceConfig(
                name=str(name),
                file=file,
                model=str(entry["model"]),
                prefix=str(entry.get("model-prefix") or ""),
                gpu=gpu_of(runner),
                runner=runner,
                precision=str(entry.get("precision") or ""),
                framework=str(entry.get("framework") or ""),
                image=str(entry.get("image") or ""),
                multinode=bool(entry.get("multinode")),
                rows=_rows(entry.get("scenarios") or {}),
            )
        )
    return out


def script_candidates(cfg: ReferenceConfig) -> list[str]:
    """The launch scripts a single-node config may use, most specific first
    (``<prefix>_<precision>_<gpu>[_<framework>][_mtp].sh``)."""
    if cfg.multinode or cfg.gpu is None:
        return []
    mtp = "_mtp" if cfg.speculative else ""
    # a script without the server's suffix is vLLM's or SGLang's (``parse_launch`` says which)
    suffixes = [f"_{cfg.framework}"] + ([""] if cfg.framework in (VLLM, SGLANG) else [])
    scenarios = dict.fromkeys(r.scenario for r in cfg.rows) or {"fixed-seq-len": None}
    out = []
    for scenario in scenarios:
        for directory in SCRIPT_DIRS.get(scenario, ()):
            for suffix in suffixes:
                out.append(f"{directory}/{cfg.prefix}_{cfg.precision}_{cfg.gpu}{suffix}{mtp}.sh")
    return out


# ---------------------------------------------------------------- the launch script


@dataclass
class Launch:
    """What a launch script gives the server: top-level exports and the flags it always
    passes (a flag whose value is set per run, ``$MAX_MODEL_LEN``, is in ``varies``)."""

    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    varies: list[str] = field(default_factory=list)
    spec_method: str | None = None
    spec_draft: str | None = None
    spec_tokens: int | None = None
    server: str | None = None  # the server the script launches (``SERVER_COMMANDS``), if any
    conditional_env: dict[str, str] = field(default_factory=dict)  # exported inside an ``if``


def _unquote(text: str) -> str | None:
    try:
        parts = shlex.split(text, comments=True)
    except ValueError:
        return None
    return " ".join(parts) if parts else ""


def _opens_block(line: str) -> bool:
    first = line.split(" ", 1)[0]
    if first not in ("if", "for", "while", "case"):
        return False
    return not re.search(r"\b(fi|done|esac)\s*;?\s*$", line)  # a one-line block


@dataclass
class _Assignments:
    """The script's variables: literal values set outside any block (``top``), names set
    inside one (``conditional``), names that hold flags (``-x``, an array or empty)."""

    env: dict[str, str] = field(default_factory=dict)
    top: dict[str, str] = field(default_factory=dict)
    conditional: set[str] = field(default_factory=set)
    conditional_env: dict[str, str] = field(default_factory=dict)  # exported inside a block
    flag_groups: set[str] = field(default_factory=set)


def _server_env(name: str) -> bool:
    """A variable of the server, not of the benchmark harness."""
    return name not in HARNESS_ENV and not name.startswith(HARNESS_ENV_PREFIXES)


def _assignments(lines: list[str]) -> _Assignments:
    out = _Assignments()
    depth = 0
    for raw in lines:
        line = raw.strip()
        if _opens_block(line):
            depth += 1
        elif line.split(" ", 1)[0] in ("fi", "done", "esac"):
            depth = max(0, depth - 1)
        found = _ASSIGN.match(line)
        if not found or _command(line) is not None:
            continue
        exported, name, text = found.groups()
        value = None if text.startswith("(") else _unquote(text)
        if value is None or value.strip() == "" or value.strip().startswith("-"):
            out.flag_groups.add(name)
        if depth:
            out.conditional.add(name)
            if exported and value is not None and "$" not in value and _server_env(name):
                out.conditional_env.setdefault(name, value)
            continue
        if value is None or "$" in value:
            continue
        out.top[name] = value
        if exported and _server_env(name):
            out.env[name] = value
    return out


def _command(line: str) -> tuple[int, str] | None:
    """How many words name the server command ``line`` starts with, and its server."""
    words = line.strip().split()
    for command, server in SERVER_COMMANDS:
        if tuple(words[: len(command)]) == command:
            return len(command), server
    return None


def _serve_text(lines: list[str]) -> tuple[str, int, str] | None:
    """The server command (``vllm serve``, ``python3 -m sglang.launch_server``): its
    backslash-continued lines, or the body of the bash array it opens (``VLLM_CMD=(`` ...
    ``)``); with the number of words that name it and its server."""
    for i, raw in enumerate(lines):
        found = _command(raw)
        if found is None:
            continue
        if i and lines[i - 1].rstrip().endswith("=("):
            body = []
            for line in lines[i:]:
                if line.strip() == ")":
                    break
                body.append(line.strip())
            return " ".join(body), *found
        parts = []
        for line in lines[i:]:
            stripped = line.rstrip()
            parts.append(stripped.rstrip("\\"))
            if not stripped.endswith("\\"):
                break
        return " ".join(parts), *found
    return None


def parse_launch(text: str) -> Launch:
    """The env and vLLM flags of a launch script (``vllm serve ...``): exports outside any
    block; flags with their literal values. A flag whose value is set per run or inside a
    condition is named in ``varies`` (``--max-model-len``, ``$EP``), not guessed."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    names = _assignments(lines)
    found = _serve_text(lines)
    body = "\n".join(lines)
    method, draft = _SPEC_METHOD.search(body), _DRAFT.search(body)
    count = _SPEC_TOKENS.search(body)
    out = Launch(
        env=names.env,
        conditional_env=names.conditional_env,
        spec_method=method.group(1).lower() if method else None,
        spec_draft=draft.group(1) if draft else None,
        spec_tokens=int(count.group(1)) if count else None,
    )
    if found is None:
        return out
    serve, words, out.server = found
    varies: list[str] = []

    def expand(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name in names.top and name not in names.conditional:
            return names.top[name]
        if name in names.flag_groups:
            varies.append(f"${name}")
            return ""
        return match.group(0)

    tokens = []
    for token in shlex.split(_VAR.sub(expand, serve))[words:]:  # after the command
        if token.startswith("-") and token.endswith(">"):  # ``--flag> log``: no space
            tokens += [token[:-1], ">"]
        elif token:
            tokens.append(token)
    for stop in (">", "2>&1", "&"):
        if stop in tokens:
            tokens = tokens[: tokens.index(stop)]
    args: list[str] = []
    for unit in vllm_args.units(tokens):
        if unit.name is None:
            continue  # the model ($MODEL)
        if any("$" in tok for tok in unit.tokens):
            varies.append(unit.name)
        elif unit.name not in PARALLEL_FLAGS:
            args.extend(unit.tokens)
    out.args, out.varies = args, varies
    return out


# ---------------------------------------------------------------- the catalog

_TAG = re.compile(r"v?(\d+(?:\.\d+)*(?:\.post\d+)?)(?:-rocm(\d+))?.*?(?:-(\d{8}))?$")


def image_order(image: str) -> tuple[tuple[int, ...], int, int, int]:
    """An image tag's release order: ``lmsysorg/sglang-rocm:v0.5.16-rocm720-mi35x-20260730``
    sorts by the server's release (0.5.16, ``.postN`` after it), then the ROCm build (720),
    then the build date; a tag it cannot read sorts first."""
    tag = image.rpartition(":")[2]
    match = _TAG.match(tag)
    if match is None:
        return ((), 0, 0, 0)
    release, _, post = match.group(1).partition(".post")
    numbers = tuple(int(part) for part in release.split("."))
    return numbers, int(post or 0), int(match.group(2) or 0), int(match.group(3) or 0)


@dataclass
class References:
    """The reference configs known (the snapshot, or a synced copy) and where from."""

    configs: list[ReferenceConfig] = field(default_factory=list)
    source: str = "snapshot"
    source_commit: str | None = None
    fetched_at: str | None = None

    def for_gpu(self, model: str, gpu: str) -> list[ReferenceConfig]:
        """Single-node configs for this checkpoint on this GPU, first file first."""
        want = model.strip().lower()
        return [
            c
            for c in self.configs
            if c.gpu == gpu and not c.multinode and c.model.lower() == want and c.rows
        ]

    def followed(
        self,
        model: str,
        gpu: str,
        speculative: str | None = None,
        scenario: str = "",
        framework: str = VLLM,
    ) -> ReferenceConfig | None:
        """The vLLM config a plan follows: of ``scenario`` (AMD's benchmark scenario, e.g.
        ``agentic-coding``) where it has one, else of the fixed-length scenario; the first
        without speculative decoding, else the first (each name once: ``amd-master.yaml``
        before the deprecated files). With ``speculative`` (``mtp`` or ``eagle3``, an opt-in),
        the first config of that method comes first. ``framework``: the server's configs
        (``sglang`` for an SGLang plan)."""
        vllm = [c for c in self.for_gpu(model, gpu) if c.framework == framework]
        wanted = scenario or DEFAULT_SCENARIO
        vllm = [c for c in vllm if c.scenario == wanted] or [
            c for c in vllm if c.scenario == DEFAULT_SCENARIO
        ]
        plain = [c for c in vllm if not c.speculative]
        same = [c for c in vllm if speculative and c.speculative_method == speculative]
        found = same or plain or vllm
        return found[0] if found else None

    def newest_image(self, gpu: str, framework: str = SGLANG) -> ReferenceConfig | None:
        """The single-node config of ``framework`` on ``gpu`` whose image is the newest
        release (``image_order``): where a plan of that server for a model AMD runs no config
        of takes its image (the ROCm build of the GPU's family, as AMD runs it)."""
        found = [
            c for c in self.configs if c.gpu == gpu and not c.multinode and c.framework == framework
        ]
        return max(found, key=lambda c: image_order(c.image), default=None)

    def gpus(self, framework: str = SGLANG) -> tuple[str, ...]:
        """The GPUs AMD runs ``framework`` on in a single-node config."""
        found = {c.gpu for c in self.configs if c.framework == framework and not c.multinode}
        return tuple(sorted(g for g in found if g))

    def other_servers(self, model: str, gpu: str, framework: str = VLLM) -> list[ReferenceConfig]:
        """AMD's configs for this model and GPU on another server than ``framework``
        (SGLang, ATOM beside vLLM)."""
        seen: dict[str, ReferenceConfig] = {}
        for c in self.for_gpu(model, gpu):
            if c.framework != framework and c.name not in seen:
                seen[c.name] = c
        return list(seen.values())


def references_from_doc(doc: Any, origin: str) -> References:
    if not isinstance(doc, dict) or doc.get("schema") != REFERENCE_SCHEMA:
        raise ValueError(f"{origin}: not a reference configs document (schema {REFERENCE_SCHEMA})")
    return References(
        configs=[ReferenceConfig.from_dict(c) for c in doc.get("configs") or []],
        source=str(doc.get("source") or "snapshot"),
        source_commit=doc.get("source_commit"),
        fetched_at=doc.get("fetched_at"),
    )


def reference_document(
    configs: list[ReferenceConfig], *, source: str, commit: str | None, fetched_at: str | None
) -> dict[str, Any]:
    return {
        "schema": REFERENCE_SCHEMA,
        "source": source,
        "source_commit": commit,
        "fetched_at": fetched_at,
        "source_url": UPSTREAM_URL,
        "configs": [c.to_dict() for c in configs],
    }
