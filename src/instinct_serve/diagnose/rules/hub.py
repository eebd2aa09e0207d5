"""The Hugging Face Hub and the network to it: a gated repository (token, license, pending
access), a repository or model path that does not exist, and a Hub that cannot be reached
(network, or offline mode without the files)."""

from __future__ import annotations

import re
from typing import Any

from instinct_serve.diagnose.logline import LogLine
from instinct_serve.diagnose.model import DiagnoseContext, Finding
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules.common import at_hit, message_block
from instinct_serve.diagnose.scan import Scan, exc

_GATED = (
    exc(r"You are trying to access a gated repo"),
    re.compile(r"^\s*(?:[\w.]+\.)?GatedRepoError\b"),
    re.compile(r"^\s*Cannot access gated repo for url"),
    re.compile(r"^\s*Access to model \S+ is restricted"),
    re.compile(r"^\s*Repo model \S+ is gated"),
    re.compile(r"^\s*Your request to access model \S+ is awaiting a review"),
)
_GATED_REPO = (
    re.compile(r"Access to model (\S+?) is restricted"),
    re.compile(r"Repo model (\S+?) is gated"),
    re.compile(r"request to access model (\S+?) is awaiting"),
    re.compile(r"have access to it at https://huggingface\.co/([\w.\-]+/[\w.\-]+?)\.?$"),
    re.compile(r"huggingface\.co/(?!api/)([\w.\-]+/[\w.\-]+)/resolve/"),
)


def _gated_variant(lines: list[LogLine]) -> str:
    text = "\n".join(line.text for line in lines)
    if "awaiting a review" in text:
        return "access_pending"
    if "fine-grained" in text or "gated repositories" in text:
        return "token_lacks_permission"
    if re.search(r"not in the authorized list|ask for access|\b403\b", text):
        return "license_not_accepted"
    return "token_missing"


def build_gated_repo(
    ctx: DiagnoseContext, variant: str = "token_missing", repo: str | None = None, **at: Any
) -> Finding:
    repo = repo or ctx.model
    page = f"https://huggingface.co/{repo}" if repo else "the model's page on huggingface.co"
    if variant == "license_not_accepted":
        title = "Gated model: access not granted (license not accepted)"
        cause = (
            "The Hub knows your token but this account has not been granted access to the "
            "gated model (403): its license was not accepted, or the request was refused."
        )
        fix = (
            f"Open {page} with the account that owns HF_TOKEN, accept the license or request "
            "access, wait for the approval e-mail, then serve again."
        )
        commands: tuple[str, ...] = ()
    elif variant == "access_pending":
        title = "Gated model: access request pending"
        cause = "Access to the gated model was requested but the authors have not approved it yet."
        fix = f"Wait for approval (see {page}), or use an ungated copy of the model."
        commands = ()
    elif variant == "token_lacks_permission":
        title = "Gated model: the fine-grained token lacks the gated-repo permission"
        cause = "HF_TOKEN is a fine-grained token without access to public gated repositories."
        fix = (
            "In your Hugging Face token settings enable 'Read access to contents of all public "
            "gated repos you can access' (or use a read token), then serve again."
        )
        commands = ()
    else:
        title = "Gated model: no valid Hugging Face token"
        if ctx.hf_token_set:
            cause = (
                "The model is gated and the Hub rejected the request as unauthenticated (401) "
                "although HF_TOKEN was set: the token is invalid or expired, or it did not "
                "reach the process that downloads."
            )
        else:
            cause = "The model is gated and the request carried no Hugging Face token (401)."
        fix = (
            f"Accept the license on {page}, create a read token, `export HF_TOKEN=...` in the "
            "shell that runs instinct serve (the container gets it as --env HF_TOKEN), and "
            "serve again."
        )
        commands = ("hf auth login",)
    return Finding(
        id="gated_repo",
        title=title,
        cause=cause,
        fix=fix,
        commands=commands,
        details={"variant": variant, "repo": repo},
        **at,
    )


def _gated(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_GATED)
    if hit is None:
        return None
    window = message_block(scan, hit.index)
    repo = None
    for line in window:
        for pattern in _GATED_REPO:
            m = pattern.search(line.text)
            if m:
                repo = m.group(1)
                break
        if repo:
            break
    return build_gated_repo(ctx, _gated_variant(window), repo, **at_hit(hit, count))


_REPO_NOT_FOUND = (
    re.compile(r"^\s*(?:[\w.]+\.)?RepositoryNotFoundError\b"),
    re.compile(r"^\s*Repository Not Found for url"),
    exc(r"\S+ is not a local folder and is not a valid model identifier"),
)
# vLLM 0.32 takes a model path that does not exist for a Hub id, and huggingface_hub refuses
# it: "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or
# 'namespace/repo_name': '/tmp/x/no-such-model-dir'. Use `repo_type` argument if needed."
_PATH_AS_REPO_ID = exc(r"Repo id must be in the form .{0,80}: '((?:/|\./|\.\./|~/)[^']*)'")


def _model_path_missing(ctx: DiagnoseContext, path: str, **at: Any) -> Finding:
    where = path or ctx.model or "the model path"
    return Finding(
        id="repo_not_found",
        title="Model directory not found",
        cause=f"{where} is not a directory vLLM can read where it runs, so vLLM took it for "
        "a Hugging Face id, which a path cannot be.",
        fix="Check the path (a directory with config.json and the weights); on the docker "
        "route the directory must be mounted into the container at the same path "
        "(instinct serve DIR does that for a local directory).",
        details={"variant": "missing_path", "path": path or None},
        **at,
    )


def build_repo_not_found(ctx: DiagnoseContext, path: str | None = None, **at: Any) -> Finding:
    """``path``: vLLM took this model path, which does not exist, for a Hub id."""
    if path is not None:
        return _model_path_missing(ctx, path, **at)
    return Finding(
        id="repo_not_found",
        title="Model repository not found",
        cause=f"The Hub has no repository {ctx.model or 'by that name'} (ids are case-sensitive "
        "org/name), or it is private and the token cannot see it.",
        fix="Check the model id on huggingface.co; for a private repository export an HF_TOKEN "
        "that can read it; for a local directory, mount it into the container and pass its path.",
        **at,
    )


def _repo_not_found(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_PATH_AS_REPO_ID)
    if hit is not None:
        return build_repo_not_found(ctx, hit.match.group(1), **at_hit(hit, count))
    hit, count = scan.first(*_REPO_NOT_FOUND)
    return build_repo_not_found(ctx, **at_hit(hit, count)) if hit else None


_HUB_OFFLINE = (
    re.compile(r"^\s*(?:[\w.]+\.)?(?:OfflineModeIsEnabled|LocalEntryNotFoundError)\b"),
    exc(r".{0,300}(?:outgoing traffic has been disabled|offline mode is enabled)"),
)
_HUB_NETWORK = (
    exc(r"We couldn't connect to '?https://huggingface\.co"),
    exc(
        r".{0,200}(?:host=\\?'(?:[\w.\-]*\.)?(?:huggingface\.co|hf\.co)\\?'|"
        r"resolve \\?'(?:[\w.\-]*\.)?(?:huggingface\.co|hf\.co)\\?')"
    ),
)


def build_hf_hub_unreachable(ctx: DiagnoseContext, variant: str = "network", **at: Any) -> Finding:
    if variant == "offline":
        cause = (
            "Offline mode (HF_HUB_OFFLINE=1) is on but the model's files are not in the "
            "Hugging Face cache mounted into the container."
        )
        fix = (
            "Download the model first (hf download MODEL) into the cache that is mounted into "
            "the container (~/.cache/huggingface), or unset HF_HUB_OFFLINE."
        )
    else:
        cause = "The container could not reach huggingface.co (DNS, proxy or firewall)."
        fix = (
            "Check the network from a container (docker run --rm IMAGE curl -sI "
            "https://huggingface.co), pass HTTPS_PROXY if you need one, or download the model "
            "beforehand and serve with HF_HUB_OFFLINE=1."
        )
    return Finding(
        id="hf_hub_unreachable",
        title="Hugging Face Hub unreachable"
        if variant == "network"
        else "Model not in the offline cache",
        cause=cause,
        fix=fix,
        details={"variant": variant},
        **at,
    )


def _hub_unreachable(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_HUB_OFFLINE)
    if hit is not None:
        return build_hf_hub_unreachable(ctx, "offline", **at_hit(hit, count))
    hit, count = scan.first(*_HUB_NETWORK)
    return build_hf_hub_unreachable(ctx, "network", **at_hit(hit, count)) if hit else None


RULES = (
    Rule(
        "gated_repo",
        97,
        build_gated_repo,
        _gated,
        words(r"gated|\b40[13]\b|licen[cs]e|authorized list|awaiting a review"),
    ),
    Rule(
        "repo_not_found",
        90,
        build_repo_not_found,
        _repo_not_found,
        words(r"repository not found|not a valid model identifier|\b404\b"),
    ),
    Rule(
        "hf_hub_unreachable",
        85,
        build_hf_hub_unreachable,
        _hub_unreachable,
        words(
            r"hugging ?face|hf.?hub|\bhub\b",
            r"connect|offline|unreachable|timed? ?out|resolve|network",
        ),
    ),
)
