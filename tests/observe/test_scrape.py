"""The Prometheus scrape configuration the compose and Kubernetes renderings carry."""

from __future__ import annotations

import pytest
import yaml

from instinct_serve.observe.scrape import (
    compose_labels,
    docker_sd_scrape_config,
    k8s_pod_annotations,
    scrape_configs_yaml,
    static_scrape_config,
)


def test_kubernetes_pod_annotations() -> None:
    assert k8s_pod_annotations(8000) == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8000",
        "prometheus.io/path": "/metrics",
        "prometheus.io/scheme": "http",
    }
    with pytest.raises(ValueError):
        k8s_pod_annotations(0)


def test_compose_labels_are_what_the_docker_sd_job_reads() -> None:
    labels = compose_labels(8001)
    assert labels == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8001",
        "prometheus.io/path": "/metrics",
    }
    job = docker_sd_scrape_config()
    keep = job["relabel_configs"][0]
    assert keep["source_labels"] == ["__meta_docker_container_label_prometheus_io_scrape"]
    assert keep["regex"] == "true" and keep["action"] == "keep"
    address = job["relabel_configs"][1]
    assert address["source_labels"][1] == "__meta_docker_container_label_prometheus_io_port"
    assert address["target_label"] == "__address__" and address["replacement"] == "$1:$2"
    assert job["relabel_configs"][2]["target_label"] == "__metrics_path__"
    for rule in job["relabel_configs"]:  # Prometheus regexes are RE2: no backreferences
        assert "\\1" not in rule.get("regex", "")


def test_a_static_job_and_the_yaml_block() -> None:
    job = static_scrape_config("vllm-qwen3-8b", ["gpu-box:8000"], labels={"model": "Qwen/Qwen3-8B"})
    text = scrape_configs_yaml([job, docker_sd_scrape_config()])
    doc = yaml.safe_load(text)
    assert doc["scrape_configs"][0] == {
        "job_name": "vllm-qwen3-8b",
        "scrape_interval": "15s",
        "metrics_path": "/metrics",
        "static_configs": [{"targets": ["gpu-box:8000"], "labels": {"model": "Qwen/Qwen3-8B"}}],
    }
    assert doc["scrape_configs"][1]["docker_sd_configs"][0]["host"] == (
        "unix:///var/run/docker.sock"
    )
