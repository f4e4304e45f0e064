"""llama.cpp's Prometheus /metrics (`llama-server --metrics`) read into evertune's `EngineMetrics`.

The llama.cpp evertune builds (the one vendored in llama-cpp-python 0.3.36, `server-task.cpp`)
exposes plain counters and gauges, no histograms and no request count:

- counters `llamacpp:prompt_tokens_total` (prompt tokens computed, cached ones excluded),
  `llamacpp:prompt_tokens_cached_total` (prompt tokens reused from a slot's cache),
  `llamacpp:prompt_seconds_total`, `llamacpp:tokens_predicted_total`,
  `llamacpp:tokens_predicted_seconds_total`, `llamacpp:n_decode_total`;
- gauges `llamacpp:requests_processing` (busy slots), `llamacpp:requests_deferred` (waiting).

So the mapping is partial, and says so rather than inventing figures: prompt tokens are computed +
cached (as vLLM counts them), the prefix cache's hits are the cached tokens and its queries all
prompt tokens; the prefill and decode histograms carry only their `sum` (seconds spent) with no
observations, so per-request means (`delta`) stay None and TTFT and queue time come from the
client's telemetry, as they do for every engine's p50/p99. KV cache usage and preemptions have
no llama.cpp counterpart and read 0.
"""

from __future__ import annotations

from evertune.domain.engines.metrics import (
    EMPTY_HISTOGRAM,
    EngineMetrics,
    Histogram,
    read_samples,
    sample_total,
)

PROMPT_TOKENS = "llamacpp:prompt_tokens_total"
PROMPT_TOKENS_CACHED = "llamacpp:prompt_tokens_cached_total"
PROMPT_SECONDS = "llamacpp:prompt_seconds_total"
TOKENS_PREDICTED = "llamacpp:tokens_predicted_total"
TOKENS_PREDICTED_SECONDS = "llamacpp:tokens_predicted_seconds_total"
REQUESTS_PROCESSING = "llamacpp:requests_processing"
REQUESTS_DEFERRED = "llamacpp:requests_deferred"


def parse_llama_cpp_metrics(text: str, *, scraped_at: float = 0.0) -> EngineMetrics:
    """Parse llama-server's /metrics text (see the module doc); missing metrics read as zero.

    Raises `MetricsUnavailable` when the text is not Prometheus exposition.
    """
    samples = read_samples(text)

    def total(name: str) -> float:
        return sample_total(samples, name)

    computed, cached = total(PROMPT_TOKENS), total(PROMPT_TOKENS_CACHED)
    return EngineMetrics(
        scraped_at=scraped_at,
        queue_time=EMPTY_HISTOGRAM,
        prefill_time=Histogram(count=0.0, sum=total(PROMPT_SECONDS)),
        decode_time=Histogram(count=0.0, sum=total(TOKENS_PREDICTED_SECONDS)),
        ttft=EMPTY_HISTOGRAM,
        inter_token_latency=EMPTY_HISTOGRAM,
        preemptions=0.0,
        prefix_cache_hits=cached,
        prefix_cache_queries=computed + cached,
        prompt_tokens=computed + cached,
        generation_tokens=total(TOKENS_PREDICTED),
        requests_succeeded=0.0,
        kv_cache_usage=0.0,
        requests_running=total(REQUESTS_PROCESSING),
        requests_waiting=total(REQUESTS_DEFERRED),
    )
