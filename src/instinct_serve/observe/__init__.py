"""Observing running endpoints: pure code, text in, numbers out (no I/O).

- ``prom``: the Prometheus text exposition format (families, labels, counters, histograms);
- ``histogram``: cumulative bucket histograms, their difference between two scrapes and
  ``histogram_quantile``-style percentiles;
- ``vllm``: one vLLM ``/metrics`` scrape as a version-agnostic snapshot (the metric names
  vLLM used across versions, in ``NAMES``) and the rates between two snapshots;
- ``gpu``: GPU power, activity and memory from ``amd-smi metric --json`` (every shape);
- ``top``: the ``instinct top`` document (endpoints, GPUs, tokens per watt);
- ``bench``: ``vllm bench serve`` argv, its ``--save-result`` JSON, stored runs and their
  comparison; ``sglang_bench``: SGLang's client (``sglang.bench_serving``), the same step;
- ``scrape``: the Prometheus scrape configuration of compose and Kubernetes renderings.

The adapter that reaches endpoints and hosts is ``runtime.observe``.
"""
