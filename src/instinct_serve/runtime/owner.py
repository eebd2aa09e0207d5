"""Who started an endpoint: ``user@host`` of the caller, recorded at launch.

A container carries it as the ``instinct-serve.owner`` label, a native process in its
launcher record (``meta["owner"]``). It is set by the backends at launch (never in the
plan: the plan hash and the plans users approved stay the same whoever serves them).
``ps`` and ``stop --all`` default to the caller's own endpoints, so that on a shared GPU
host one user's ``stop --all`` does not end another's work; ``--everyone`` widens both.
This is courtesy, not access control: whoever may talk to the Docker daemon may stop any
container. An endpoint without the mark (started by an older version) is nobody's: it is
listed and stopped with ``--everyone`` only.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Mapping
from typing import Any

from instinct_serve.plan.labels import label_text

LABEL_OWNER = "instinct-serve.owner"
META_OWNER = "owner"


def caller() -> str:
    """``user@host`` of this process: the local user name (``LOGNAME``/``USER`` first, as
    ``getpass`` reads it) and this machine's hostname, also when acting on a ``--host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no variable: a bare container
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def of_labels(labels: Mapping[str, str]) -> str | None:
    """The owner a container's labels name, or None (nobody's)."""
    return label_text(labels, LABEL_OWNER) or None


def of_meta(meta: Mapping[str, Any]) -> str | None:
    """The owner a native process's launcher record names, or None (nobody's)."""
    value = meta.get(META_OWNER)
    return value[:512] if isinstance(value, str) and value else None


def is_mine(owner: str | None, me: str) -> bool:
    """An endpoint without an owner is nobody's, so never the caller's."""
    return owner is not None and owner == me
