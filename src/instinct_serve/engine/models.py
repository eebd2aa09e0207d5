"""``engine resolve-model``: where the weights of MODEL come from on the host.

A local directory (``config.json`` inside), a snapshot already in the Hugging Face cache
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub`` on the host),
or the Hub itself (downloaded by vLLM at start-up). Everything is looked up on the host,
so ``--host`` answers for the machine that will serve.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from instinct_serve.errors import UsageError
from instinct_serve.hosts import Host

Kind = Literal["local_path", "hf_cache", "hub"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_HOME_SCRIPT = 'printf %s "$HOME"'


@dataclass
class ModelSource:
    requested: str
    kind: Kind
    hub_id: str | None
    path: str | None
    revision: str | None = None
    cache_dir: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "requested": self.requested,
            "kind": self.kind,
            "hub_id": self.hub_id,
            "path": self.path,
            "revision": self.revision,
            "cache_dir": self.cache_dir,
            "serve_as": self.path or self.hub_id,
            "notes": list(self.notes),
        }


def hub_cache_dir(host: Host) -> str:
    """The host's hub cache, by huggingface_hub's rules (``paths.hf_locations``)."""
    from instinct_serve.paths import HF_ENV_NAMES, hf_locations

    env = host.env(HF_ENV_NAMES)
    if not env.get("HOME"):
        env["HOME"] = host.run(["sh", "-c", _HOME_SCRIPT], timeout=30).stdout.strip() or "/root"
    return hf_locations(env).hub_cache


def cache_repo_dir(cache: str, hub_id: str) -> str:
    """``org/name`` -> ``<cache>/models--org--name`` (huggingface_hub's layout)."""
    return posixpath.join(cache, "models--" + hub_id.replace("/", "--"))


def _looks_like_path(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~")) or model.count("/") != 1


def resolve_model(host: Host, model: str) -> ModelSource:
    text = model.strip()
    if not text:
        raise UsageError(
            "no model given", fix="pass a Hub id (org/name) or a directory", id="bad_model"
        )
    if text.startswith("~"):
        home = host.run(["sh", "-c", _HOME_SCRIPT], timeout=30).stdout.strip()
        text = home + text[1:]
    if text.startswith(("./", "../")) and host.is_local:
        import os

        text = os.path.abspath(text)
    if _looks_like_path(text) or host.exists(text):
        if not text.startswith("/"):
            raise UsageError(
                f"{model!r} is neither an org/name Hub id nor an absolute path",
                fix="give the model directory as an absolute path",
                id="bad_model",
            )
        if not host.exists(posixpath.join(text, "config.json")):
            raise UsageError(
                f"{text} is not a model directory on {host.name} (no config.json there)",
                fix="point at the directory holding config.json and the weights",
                id="bad_model",
            )
        return ModelSource(model, "local_path", None, text)
    if not _HUB_ID.match(text):
        raise UsageError(
            f"{model!r} is not a Hugging Face model id",
            fix="use the org/name form, e.g. Qwen/Qwen3-8B",
            id="bad_model",
        )
    cache = hub_cache_dir(host)
    repo = cache_repo_dir(cache, text)
    ref = (host.read_text(posixpath.join(repo, "refs", "main")) or "").strip()
    if ref and host.exists(posixpath.join(repo, "snapshots", ref, "config.json")):
        return ModelSource(
            model,
            "hf_cache",
            text,
            posixpath.join(repo, "snapshots", ref),
            revision=ref,
            cache_dir=cache,
        )
    source = ModelSource(model, "hub", text, None, cache_dir=cache)
    source.notes.append(
        f"not in {cache}: vLLM downloads it at start-up (gated models need HF_TOKEN)"
    )
    return source
