"""llama.cpp's /metrics read into `EngineMetrics`: what maps, and what stays empty rather than made up."""

from __future__ import annotations

import pytest

from evertune.domain.engines import MetricsUnavailable, delta
from evertune.domain.engines.llama_cpp_metrics import parse_llama_cpp_metrics

#: As llama-server (llama-cpp-python 0.3.36's llama.cpp) renders it: counters, then gauges.
TEXT = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 300
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 900
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 0.45
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 40
# HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 0.8
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 44
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""


def test_tokens_cache_and_load_map_and_per_request_figures_stay_empty() -> None:
    metrics = parse_llama_cpp_metrics(TEXT, scraped_at=10.0)
    assert metrics.prompt_tokens == 1200  # computed + cached, as vLLM counts prompt tokens
    assert (metrics.prefix_cache_hits, metrics.prefix_cache_queries) == (900, 1200)
    assert metrics.generation_tokens == 40
    assert (metrics.requests_running, metrics.requests_waiting) == (2, 1)
    assert metrics.prefill_time.sum == pytest.approx(0.45) and metrics.prefill_time.count == 0
    assert metrics.decode_time.sum == pytest.approx(0.8)
    assert metrics.ttft.count == 0 and metrics.queue_time.count == 0  # no histograms in llama.cpp


def test_a_delta_gives_the_hit_rate_and_no_invented_means() -> None:
    before = parse_llama_cpp_metrics(TEXT, scraped_at=10.0)
    later = (
        TEXT.replace("_total 300", "_total 400")
        .replace("cached_total 900", "cached_total 1200")
        .replace("prompt_seconds_total 0.45", "prompt_seconds_total 0.55")
        .replace("predicted_total 40", "predicted_total 50")
        .replace("predicted_seconds_total 0.8", "predicted_seconds_total 1.0")
    )
    after = parse_llama_cpp_metrics(later, scraped_at=20.0)
    figures = delta(before, after)
    assert figures.prefix_hit_rate == pytest.approx(300 / 400)
    # 0.1 s for the 100 prompt tokens computed; 0.2 s for 10 generated tokens
    assert figures.prefill_ms_per_1k_tokens == pytest.approx(1000.0)
    assert figures.decode_ms_per_token == pytest.approx(20.0)
    assert figures.prompt_tokens == 400 and figures.interval_s == 10.0
    assert figures.mean_ttft_ms is None and figures.mean_prefill_ms is None and figures.requests == 0


def test_text_that_is_not_prometheus_is_refused() -> None:
    with pytest.raises(MetricsUnavailable, match="not Prometheus text"):
        parse_llama_cpp_metrics("llamacpp:prompt_tokens_total one two three\n")
