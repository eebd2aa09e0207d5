"""SGLang's Prometheus metric names (``--enable-metrics``), for the concepts ``top`` reads.

SGLang exposes about 84 families, all ``sglang:``-prefixed and labelled ``model_name``
(``sglang/srt/metrics/collector.py``; measured on sglang 0.5.23, the real tier). Each concept
maps to SGLang's name, in ``observe.vllm.NAMES``'s shape; a concept SGLang has no family for
(``swapped``, vLLM V0's average throughputs) is absent. Pure: a table.
"""

from __future__ import annotations

from instinct_serve.observe.vllm import Name

__all__ = ["NAMES"]

NAMES: dict[str, tuple[Name, ...]] = {
    "running": (Name("sglang:num_running_reqs", "all"),),
    "waiting": (Name("sglang:num_queue_reqs", "all"),),
    "kv_cache_usage": (Name("sglang:token_usage", "all (the KV pool's used fraction, 0..1)"),),
    "prefix_cache_hit_rate": (Name("sglang:cache_hit_rate", "all (the radix cache, 0..1)"),),
    "prompt_tokens": (Name("sglang:prompt_tokens_total", "all"),),
    "generation_tokens": (Name("sglang:generation_tokens_total", "all"),),
    "requests_finished": (Name("sglang:num_requests_total", "all"),),
    "ttft": (Name("sglang:time_to_first_token_seconds", "all"),),
    # no inter-token histogram in 0.5.23: its per-request time per output token
    "itl": (Name("sglang:request_time_per_output_token_seconds", "0.5.23 (per request)"),),
    "e2e": (Name("sglang:e2e_request_latency_seconds", "all"),),
}
