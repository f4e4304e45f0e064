"""vLLM's Prometheus /metrics: a pure parser into `EngineMetrics`, interval figures, and a tiny fetch.

vLLM 0.32 exposes (CPU backend, checked on a real server) among others:

- histograms `vllm:request_queue_time_seconds`, `vllm:request_prefill_time_seconds`,
  `vllm:request_decode_time_seconds`, `vllm:time_to_first_token_seconds`,
  `vllm:inter_token_latency_seconds` (`_bucket{le=...}`, `_sum`, `_count`);
- counters `vllm:num_preemptions_total`, `vllm:prefix_cache_hits_total`,
  `vllm:prefix_cache_queries_total` (in tokens), `vllm:prompt_tokens_total`,
  `vllm:generation_tokens_total`, `vllm:request_success_total`;
- gauges `vllm:kv_cache_usage_perc` (0..1), `vllm:num_requests_running`, `vllm:num_requests_waiting`.

Every series carries `engine` and `model_name` labels; series of several engines (data parallel) are
summed, except KV cache usage which takes the fullest engine.

Counters and histograms are cumulative since the engine started: `delta(before, after)` turns two
scrapes into figures over the interval between them (means, bucket-estimated percentiles, prefix
hit rate, preemptions). A value that went down means the engine restarted; the later scrape then
counts from zero.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from evertune.domain.engines.errors import MetricsUnavailable

QUEUE_TIME = "vllm:request_queue_time_seconds"
PREFILL_TIME = "vllm:request_prefill_time_seconds"
DECODE_TIME = "vllm:request_decode_time_seconds"
TTFT = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
PREEMPTIONS = "vllm:num_preemptions_total"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
REQUESTS_SUCCEEDED = "vllm:request_success_total"
REQUESTS_RUNNING = "vllm:num_requests_running"
REQUESTS_WAITING = "vllm:num_requests_waiting"


@dataclass(frozen=True)
class Histogram:
    """A cumulative Prometheus histogram (summed over series)."""

    count: float  #: observations
    sum: float  #: sum of the observed values, in the metric's unit (seconds here)
    #: (upper bound `le`, cumulative count), ascending, +Inf last
    buckets: tuple[tuple[float, float], ...] = ()

    @property
    def mean(self) -> float | None:
        """Mean observed value; None without observations."""
        return self.sum / self.count if self.count > 0 else None

    def minus(self, before: Histogram) -> Histogram:
        """The observations made since `before` (this histogram alone if the engine restarted)."""
        if self.count < before.count or len(self.buckets) != len(before.buckets):
            return self
        earlier = dict(before.buckets)
        buckets = tuple((le, count - earlier.get(le, 0.0)) for le, count in self.buckets)
        return Histogram(count=self.count - before.count, sum=self.sum - before.sum, buckets=buckets)

    def quantile(self, q: float) -> float | None:
        """Estimate of the q-quantile (0..1), as Prometheus' histogram_quantile does.

        Linear interpolation inside the bucket that holds the rank (the first bucket from 0); a
        rank in the +Inf bucket returns the highest finite bound. None without observations.
        """
        if not self.buckets or self.count <= 0:
            return None
        total = self.buckets[-1][1]
        if total <= 0:
            return None
        rank = q * total
        lower_bound, lower_count = 0.0, 0.0
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(le):
                    return lower_bound
                inside = cumulative - lower_count
                if inside <= 0:
                    return le
                return lower_bound + (le - lower_bound) * (rank - lower_count) / inside
            lower_bound, lower_count = le, cumulative
        return lower_bound


EMPTY_HISTOGRAM = Histogram(count=0.0, sum=0.0)


@dataclass(frozen=True)
class EngineMetrics:
    """One scrape of an engine's /metrics: cumulative counters and histograms, current gauges."""

    scraped_at: float  #: when it was taken (wall clock, seconds since the epoch; 0 = unknown)
    queue_time: Histogram  #: seconds a request waited before it was first scheduled
    prefill_time: Histogram  #: seconds of a request's prefill phase
    decode_time: Histogram  #: seconds of a request's decode phase
    ttft: Histogram  #: time to first token, seconds, as the engine sees it
    inter_token_latency: Histogram  #: seconds between consecutive output tokens
    preemptions: float  #: requests preempted (KV cache ran out), cumulative
    prefix_cache_hits: float  #: prompt tokens served from the prefix cache, cumulative
    prefix_cache_queries: float  #: prompt tokens looked up in the prefix cache, cumulative
    prompt_tokens: float  #: prompt tokens processed, cumulative
    generation_tokens: float  #: tokens generated, cumulative
    requests_succeeded: float  #: requests finished, cumulative (all finish reasons)
    kv_cache_usage: float  #: share (0..1) of KV cache blocks in use now (fullest engine)
    requests_running: float  #: requests in the running batch now
    requests_waiting: float  #: requests queued now


@dataclass(frozen=True)
class MetricsDelta:
    """What happened between two scrapes of one engine: the profiler's bottleneck material."""

    interval_s: float  #: seconds between the scrapes (0 when a scrape time is unknown)
    requests: float  #: requests that got their first token in the interval
    mean_queue_ms: float | None  #: mean queue time, ms (None: no request)
    mean_prefill_ms: float | None  #: mean prefill time, ms
    mean_decode_ms: float | None  #: mean decode time, ms
    mean_ttft_ms: float | None  #: mean time to first token, ms
    mean_itl_ms: float | None  #: mean inter-token latency, ms
    ttft_p50_ms: float | None  #: TTFT median estimated from the buckets, ms
    ttft_p90_ms: float | None  #: TTFT 90th percentile estimated from the buckets, ms
    ttft_p99_ms: float | None  #: TTFT 99th percentile estimated from the buckets, ms
    prefix_hit_rate: float | None  #: share of looked-up prompt tokens found in the prefix cache
    preemptions: float  #: preemptions in the interval
    prompt_tokens: float  #: prompt tokens processed in the interval
    generation_tokens: float  #: tokens generated in the interval
    kv_cache_usage: float  #: KV cache usage at the later scrape (0..1)
    requests_running: float  #: running requests at the later scrape
    requests_waiting: float  #: waiting requests at the later scrape
    ttft: Histogram  #: the interval's TTFT histogram, for other percentiles
    queue_time: Histogram  #: the interval's queue-time histogram
    #: engine seconds of prefill per 1,000 prompt tokens computed (not served from the prefix
    #: cache), as ms; the requests' prefill times summed, so batching shows (None: none computed)
    prefill_ms_per_1k_tokens: float | None = None
    #: engine seconds of decode per generated token, as ms (None: no token generated)
    decode_ms_per_token: float | None = None


#: Samples by name: each series' labels and value.
Samples = dict[str, list[tuple[dict[str, str], float]]]


def read_samples(text: str) -> Samples:
    """The samples of Prometheus text exposition by sample name (a counter's `_total` kept);
    raises `MetricsUnavailable` when the text is not Prometheus exposition."""
    samples: Samples = defaultdict(list)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[sample.name].append((sample.labels, float(sample.value)))
    except (ValueError, TypeError, IndexError) as err:
        raise MetricsUnavailable(f"engine /metrics is not Prometheus text: {err}") from None
    return samples


def sample_total(samples: Samples, name: str) -> float:
    """The sum of a sample name's series (0 when there is none)."""
    return sum(value for _, value in samples.get(name, []))


def parse_metrics(text: str, *, scraped_at: float = 0.0) -> EngineMetrics:
    """Parse Prometheus text exposition from vLLM's /metrics; missing metrics read as zero.

    Raises `MetricsUnavailable` when the text is not Prometheus exposition.
    """
    samples = read_samples(text)

    def total(name: str) -> float:
        return sample_total(samples, name)

    def histogram(name: str) -> Histogram:
        by_le: dict[float, float] = defaultdict(float)
        for labels, value in samples.get(f"{name}_bucket", []):
            by_le[float(labels["le"])] += value
        return Histogram(
            count=total(f"{name}_count"),
            sum=total(f"{name}_sum"),
            buckets=tuple(sorted(by_le.items())),
        )

    kv_usage = [value for _, value in samples.get(KV_CACHE_USAGE, [])]
    return EngineMetrics(
        scraped_at=scraped_at,
        queue_time=histogram(QUEUE_TIME),
        prefill_time=histogram(PREFILL_TIME),
        decode_time=histogram(DECODE_TIME),
        ttft=histogram(TTFT),
        inter_token_latency=histogram(INTER_TOKEN_LATENCY),
        preemptions=total(PREEMPTIONS),
        prefix_cache_hits=total(PREFIX_CACHE_HITS),
        prefix_cache_queries=total(PREFIX_CACHE_QUERIES),
        prompt_tokens=total(PROMPT_TOKENS),
        generation_tokens=total(GENERATION_TOKENS),
        requests_succeeded=total(REQUESTS_SUCCEEDED),
        kv_cache_usage=max(kv_usage, default=0.0),
        requests_running=total(REQUESTS_RUNNING),
        requests_waiting=total(REQUESTS_WAITING),
    )


def delta(before: EngineMetrics, after: EngineMetrics) -> MetricsDelta:
    """Figures over the interval between two scrapes of the same engine."""
    restarted = after.ttft.count < before.ttft.count or after.prompt_tokens < before.prompt_tokens
    queue = after.queue_time.minus(before.queue_time)
    prefill = after.prefill_time.minus(before.prefill_time)
    decode = after.decode_time.minus(before.decode_time)
    ttft = after.ttft.minus(before.ttft)
    itl = after.inter_token_latency.minus(before.inter_token_latency)

    def increase(earlier: float, later: float) -> float:
        return later if restarted or later < earlier else later - earlier

    hits = increase(before.prefix_cache_hits, after.prefix_cache_hits)
    queries = increase(before.prefix_cache_queries, after.prefix_cache_queries)
    interval = after.scraped_at - before.scraped_at if before.scraped_at and after.scraped_at else 0.0
    prompt_tokens = increase(before.prompt_tokens, after.prompt_tokens)
    generation_tokens = increase(before.generation_tokens, after.generation_tokens)
    computed = prompt_tokens - hits
    return MetricsDelta(
        interval_s=max(interval, 0.0),
        requests=ttft.count,
        mean_queue_ms=_ms(queue.mean),
        mean_prefill_ms=_ms(prefill.mean),
        mean_decode_ms=_ms(decode.mean),
        mean_ttft_ms=_ms(ttft.mean),
        mean_itl_ms=_ms(itl.mean),
        ttft_p50_ms=_ms(ttft.quantile(0.5)),
        ttft_p90_ms=_ms(ttft.quantile(0.9)),
        ttft_p99_ms=_ms(ttft.quantile(0.99)),
        prefix_hit_rate=hits / queries if queries > 0 else None,
        preemptions=increase(before.preemptions, after.preemptions),
        prompt_tokens=prompt_tokens,
        generation_tokens=generation_tokens,
        kv_cache_usage=after.kv_cache_usage,
        requests_running=after.requests_running,
        requests_waiting=after.requests_waiting,
        ttft=ttft,
        queue_time=queue,
        prefill_ms_per_1k_tokens=prefill.sum * 1e6 / computed if computed > 0 else None,
        decode_ms_per_token=decode.sum * 1e3 / generation_tokens if generation_tokens > 0 else None,
    )


#: Reads an engine's /metrics text (`parse_metrics` for vLLM's): `parse(text, scraped_at=...)`.
MetricsParser = Callable[..., EngineMetrics]


async def fetch_metrics(
    session: aiohttp.ClientSession,
    base_url: str,
    *,
    parse: MetricsParser | None = None,
    timeout_s: float = 5.0,
    scraped_at: float = 0.0,
) -> EngineMetrics:
    """GET `<base_url>/metrics` and parse it (`parse`, vLLM's form by default); raises
    `MetricsUnavailable` with one line on failure."""
    url = f"{base_url.rstrip('/')}/metrics"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            if response.status != 200:
                raise MetricsUnavailable(f"engine metrics {url}: HTTP {response.status}")
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError) as err:
        raise MetricsUnavailable(f"engine metrics {url} unreachable: {err or type(err).__name__}") from None
    return (parse or parse_metrics)(text, scraped_at=scraped_at)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0
