"""How Prometheus finds an endpoint's ``/metrics``: the bits the renderings carry.

vLLM serves its metrics on the API port at ``/metrics``, never behind ``--api-key``.

- Kubernetes: the ``prometheus.io/scrape|port|path|scheme`` pod annotations that the
  common ``kubernetes-pods`` scrape job (and the Prometheus community Helm chart) honours;
- Compose / plain Docker: the same keys as container labels, for a ``docker_sd_configs``
  job (``docker_sd_scrape_config``, which keeps only containers labelled
  ``prometheus.io/scrape=true`` and takes port and path from the labels);
- anything else: a ``static_configs`` job (``static_scrape_config``).

``scrape_configs_yaml`` renders jobs as the ``scrape_configs:`` block of prometheus.yml.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

METRICS_PATH = "/metrics"
SCRAPE = "prometheus.io/scrape"
PORT = "prometheus.io/port"
PATH = "prometheus.io/path"
SCHEME = "prometheus.io/scheme"
DEFAULT_INTERVAL_S = 15


def k8s_pod_annotations(
    port: int, path: str = METRICS_PATH, scheme: str = "http"
) -> dict[str, str]:
    """Annotations for the pod template (``spec.template.metadata.annotations``)."""
    _check_port(port)
    return {SCRAPE: "true", PORT: str(port), PATH: path, SCHEME: scheme}


def compose_labels(port: int, path: str = METRICS_PATH) -> dict[str, str]:
    """Container labels (compose ``labels:``, ``docker run --label``) that
    ``docker_sd_scrape_config`` discovers."""
    _check_port(port)
    return {SCRAPE: "true", PORT: str(port), PATH: path}


def _meta(label: str) -> str:
    """The discovery meta label Prometheus derives from a container label."""
    return "__meta_docker_container_label_" + "".join(
        c if c.isalnum() or c == "_" else "_" for c in label
    )


def docker_sd_scrape_config(
    job: str = "instinct-serve",
    docker_host: str = "unix:///var/run/docker.sock",
    interval_s: int = DEFAULT_INTERVAL_S,
) -> dict[str, Any]:
    """A ``scrape_configs`` job that finds every container labelled by ``compose_labels``."""
    return {
        "job_name": job,
        "scrape_interval": f"{interval_s}s",
        "docker_sd_configs": [{"host": docker_host, "refresh_interval": "30s"}],
        "relabel_configs": [
            {"source_labels": [_meta(SCRAPE)], "regex": "true", "action": "keep"},
            # docker SD makes one target per exposed port: point them all at the labelled
            # port (identical targets are merged; RE2 has no backreference to filter with)
            {
                "source_labels": ["__meta_docker_network_ip", _meta(PORT)],
                "regex": "(.+);(.+)",
                "target_label": "__address__",
                "replacement": "$1:$2",
            },
            {
                "source_labels": [_meta(PATH)],
                "regex": "(.+)",
                "target_label": "__metrics_path__",
            },
            {
                "source_labels": ["__meta_docker_container_name"],
                "regex": "/?(.*)",
                "target_label": "container",
            },
        ],
    }


def static_scrape_config(
    job: str,
    targets: Sequence[str],
    path: str = METRICS_PATH,
    interval_s: int = DEFAULT_INTERVAL_S,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ``scrape_configs`` job for fixed ``host:port`` targets."""
    group: dict[str, Any] = {"targets": list(targets)}
    if labels:
        group["labels"] = dict(labels)
    return {
        "job_name": job,
        "scrape_interval": f"{interval_s}s",
        "metrics_path": path,
        "static_configs": [group],
    }


def scrape_configs_yaml(jobs: Sequence[Mapping[str, Any]]) -> str:
    """``scrape_configs:`` with these jobs, as prometheus.yml expects it."""
    import yaml

    return yaml.safe_dump({"scrape_configs": [dict(j) for j in jobs]}, sort_keys=False, width=1000)


def _check_port(port: int) -> None:
    if not 0 < port < 65536:
        raise ValueError(f"invalid port {port}")
