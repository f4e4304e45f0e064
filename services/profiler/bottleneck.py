"""The bottleneck report (pure): where an endpoint's TTFT goes, a verdict, and the evidence for it.

TTFT is split into four parts:

- proxy: client TTFT minus the TTFT seen from the gateway's upstream call;
- prefill: what the request would cost the engine alone: a line `a + b * uncached prompt tokens`
  fitted on the quiet requests (those that arrived with the fewest requests in flight, the lowest
  quarter);
- decode (interference): the prefill slowed down by the decode steps it shares the engine with.
  Telemetry shows it in the inter-token gaps: a line `itl = i0 + i1 * in flight` says how much
  slower a step is at a request's concurrency than at the quiet requests'; the prefill is slowed by
  the same factor;
- queueing: what is left of the excess over the prefill line: waiting for a place in the batch
  (max_num_seqs, the token budget or the KV cache), which slows nobody's steps.

From telemetry alone the parts are per request and reported over the slow requests (TTFT at or
above the 90th percentile): their share of those requests' summed TTFT. When the engine's
/metrics are given (`EngineFigures`, from `evertune.domain.engines.metrics.delta`), vLLM's own queue and
prefill times replace the inference: queueing = mean queue time; the measured prefill time is split
into prefill and decode interference by the telemetry's step slowdown; shares are of the mean TTFT
(the engine's histograms give means per part, not per request).

The verdict is the largest part; "none" when there are fewer than `min_requests` requests with a
first token and no engine figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evertune.domain.engines.metrics import MetricsDelta
from evertune.profiler.profile import (
    NO_BOTTLENECK,
    BottleneckReport,
    BottleneckShare,
    RequestSample,
    in_flight_at_arrival,
)

#: Requests with a first token needed for a telemetry-only report.
MIN_REQUESTS = 20
#: TTFT quantile from which a request counts as slow.
TAIL_QUANTILE = 0.9
#: Quantile of in-flight counts at or below which a request counts as quiet.
QUIET_QUANTILE = 0.25


@dataclass(frozen=True)
class EngineFigures:
    """vLLM's own figures over an interval, combined over an endpoint's deployments."""

    deployments: int  #: deployments scraped
    requests: float  #: requests that got a first token in the interval
    mean_queue_ms: float  #: mean time waiting before first scheduled, ms
    mean_prefill_ms: float  #: mean prefill phase (scheduled to first token), ms
    mean_decode_ms: float  #: mean decode phase, ms
    mean_ttft_ms: float  #: mean TTFT as the engine sees it, ms
    prefix_hit_rate: float | None  #: share of looked-up prompt tokens found in the prefix cache
    preemptions: float  #: preemptions in the interval
    kv_cache_usage: float  #: fullest deployment's KV cache usage (0..1) at the end
    requests_waiting: float  #: requests waiting at the end, summed


def engine_figures(deltas: Sequence[MetricsDelta]) -> EngineFigures | None:
    """The deltas of an endpoint's deployments combined (means weighted by requests); None when no
    deployment saw a request in its interval."""
    useful = [d for d in deltas if d.requests > 0 and d.mean_ttft_ms is not None]
    total = sum(d.requests for d in useful)
    if total <= 0:
        return None

    def mean(values: list[tuple[float | None, float]]) -> float:
        return sum((v or 0.0) * w for v, w in values) / total

    hits = [(d.prefix_hit_rate, d.prompt_tokens) for d in useful if d.prefix_hit_rate is not None]
    hit_weight = sum(w for _, w in hits)
    return EngineFigures(
        deployments=len(deltas),
        requests=total,
        mean_queue_ms=mean([(d.mean_queue_ms, d.requests) for d in useful]),
        mean_prefill_ms=mean([(d.mean_prefill_ms, d.requests) for d in useful]),
        mean_decode_ms=mean([(d.mean_decode_ms, d.requests) for d in useful]),
        mean_ttft_ms=mean([(d.mean_ttft_ms, d.requests) for d in useful]),
        prefix_hit_rate=(
            sum((r or 0.0) * w for r, w in hits) / hit_weight if hits and hit_weight > 0 else None
        ),
        preemptions=sum(d.preemptions for d in deltas),
        kv_cache_usage=max((d.kv_cache_usage for d in deltas), default=0.0),
        requests_waiting=sum(d.requests_waiting for d in deltas),
    )


@dataclass(frozen=True)
class _Fit:
    """The telemetry model of one endpoint."""

    a_ms: float  #: fixed part of the prefill line, ms
    b_ms_per_token: float  #: prefill cost per uncached prompt token, ms
    quiet_in_flight: float  #: in-flight count at or below which requests are quiet
    quiet_n: int  #: quiet requests the line was fitted on
    itl0_ms: float  #: inter-token gap with nothing in flight, ms
    itl1_ms: float  #: added per request in flight, ms
    itl_ref_ms: float  #: gap at the quiet requests' mean concurrency, ms

    def slowdown(self, in_flight: float) -> float:
        """How much slower than at the quiet requests' concurrency a step is (0 = not at all)."""
        if self.itl_ref_ms <= 0:
            return 0.0
        return max(0.0, (self.itl0_ms + self.itl1_ms * in_flight) / self.itl_ref_ms - 1.0)


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares `y = a + b x` with a, b >= 0."""
    if len(x) == 0:
        return 0.0, 0.0
    if len(x) < 2 or float(np.ptp(x)) == 0.0:
        return max(0.0, float(np.mean(y))), 0.0
    b, a = (float(v) for v in np.polyfit(x, y, 1))
    if b < 0:
        return max(0.0, float(np.mean(y))), 0.0
    if a < 0:
        denominator = float(np.dot(x, x))
        return 0.0, max(0.0, float(np.dot(x, y)) / denominator) if denominator > 0 else 0.0
    return a, b


def _fit(uncached: np.ndarray, engine_ttft: np.ndarray, flight: np.ndarray, itl: np.ndarray) -> _Fit:
    quiet_level = float(np.quantile(flight, QUIET_QUANTILE, method="lower"))
    quiet = flight <= quiet_level
    a, b = _line(uncached[quiet], engine_ttft[quiet])
    streamed = itl > 0
    itl0, itl1 = _line(flight[streamed], itl[streamed])
    quiet_mean = float(np.mean(flight[quiet])) if quiet.any() else 0.0
    return _Fit(
        a_ms=a,
        b_ms_per_token=b,
        quiet_in_flight=quiet_level,
        quiet_n=int(quiet.sum()),
        itl0_ms=itl0,
        itl1_ms=itl1,
        itl_ref_ms=itl0 + itl1 * quiet_mean,
    )


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3 or float(np.std(x)) == 0.0 or float(np.std(y)) == 0.0:
        return 0.0
    return float(np.corrcoef(x, y)[0, 1])


def bottleneck_report(
    samples: Sequence[RequestSample],
    *,
    engine: EngineFigures | None = None,
    in_flight: Sequence[int] | None = None,
    min_requests: int = MIN_REQUESTS,
) -> BottleneckReport:
    """Where TTFT goes for `samples` (in any order), from telemetry and, when given, the engine.

    `in_flight` (same order as `samples`) is each request's count of others in flight at arrival;
    computed from the samples when not given.
    """
    flights = list(in_flight) if in_flight is not None else in_flight_at_arrival(samples)
    chosen = [i for i, s in enumerate(samples) if s.ttft_ms > 0 and not s.failed]
    if len(chosen) < min_requests and engine is None:
        return BottleneckReport(
            verdict="none",
            source="telemetry",
            shares=(),
            evidence=(f"{len(chosen)} requests with a first token; {min_requests} needed",),
        )
    if not chosen:  # engine figures only
        return _engine_only(engine) if engine is not None else NO_BOTTLENECK
    ttft = np.array([samples[i].ttft_ms for i in chosen], dtype=float)
    upstream = np.array([samples[i].upstream_ttft_ms for i in chosen], dtype=float)
    proxy = np.where(upstream > 0, np.clip(ttft - upstream, 0.0, None), 0.0)
    engine_ttft = ttft - proxy
    uncached = np.array(
        [max(0, samples[i].prompt_tokens - samples[i].cached_tokens) for i in chosen], dtype=float
    )
    flight = np.array([flights[i] for i in chosen], dtype=float)
    itl = np.array([samples[i].itl_mean_ms for i in chosen], dtype=float)
    fit = _fit(uncached, engine_ttft, flight, itl)
    alone = np.minimum(engine_ttft, fit.a_ms + fit.b_ms_per_token * uncached)
    excess = engine_ttft - alone
    slow = np.array([fit.slowdown(c) for c in flight])
    decode = np.minimum(excess, alone * slow)
    queueing = excess - decode

    evidence = [
        f"prefill line from {fit.quiet_n} quiet requests (<= {fit.quiet_in_flight:g} others in flight): "
        f"{fit.a_ms:.1f} ms + {1000 * fit.b_ms_per_token:.1f} ms per 1k uncached prompt tokens",
        f"inter-token gap {fit.itl0_ms:.2f} ms + {fit.itl1_ms:.3f} ms per request in flight "
        f"(x{1 + float(np.mean(slow)):.2f} on average against the quiet requests)",
        f"TTFT correlation: with uncached prompt tokens {_corr(uncached, engine_ttft):.2f}, "
        f"with requests in flight {_corr(flight, engine_ttft):.2f}",
    ]
    if engine is not None:
        return _with_engine(engine, proxy=proxy, slow=slow, evidence=evidence)

    threshold = float(np.quantile(ttft, TAIL_QUANTILE))
    tail = ttft >= threshold
    total = float(ttft[tail].sum())
    n_tail = int(tail.sum())
    parts = {
        "prefill": float(alone[tail].sum()),
        "decode": float(decode[tail].sum()),
        "queueing": float(queueing[tail].sum()),
        "proxy": float(proxy[tail].sum()),
    }
    details = {
        "prefill": f"prompt {np.mean(uncached[tail]):.0f} uncached tokens on the quiet line",
        "decode": f"steps x{1 + float(np.mean(slow[tail])):.2f} slower at "
        f"{np.mean(flight[tail]):.1f} in flight",
        "queueing": "TTFT above the prefill line that slower steps do not explain",
        "proxy": "client TTFT minus upstream TTFT",
    }
    evidence.insert(
        0,
        f"{n_tail} slow requests (TTFT >= p90 {threshold:.1f} ms): mean TTFT {total / n_tail:.1f} ms at "
        f"{np.mean(flight[tail]):.1f} in flight; all {len(chosen)}: mean {np.mean(ttft):.1f} ms at "
        f"{np.mean(flight):.1f} in flight",
    )
    return _report(parts, total=total, count=n_tail, details=details, source="telemetry", evidence=evidence)


def _with_engine(
    engine: EngineFigures, *, proxy: np.ndarray, slow: np.ndarray, evidence: list[str]
) -> BottleneckReport:
    mean_slow = float(np.mean(slow)) if len(slow) else 0.0
    prefill = engine.mean_prefill_ms / (1.0 + mean_slow)
    parts = {
        "queueing": engine.mean_queue_ms,
        "prefill": prefill,
        "decode": engine.mean_prefill_ms - prefill,
        "proxy": float(np.mean(proxy)) if len(proxy) else 0.0,
    }
    total = sum(parts.values())
    details = {
        "queueing": "vLLM request_queue_time mean",
        "prefill": f"vLLM request_prefill_time mean / step slowdown x{1 + mean_slow:.2f}",
        "decode": "the rest of vLLM's prefill time: slowed by co-scheduled decode steps",
        "proxy": "client TTFT minus upstream TTFT (telemetry)",
    }
    return _report(
        parts,
        total=total,
        count=1,
        details=details,
        source="engine",
        evidence=[_engine_line(engine), *evidence],
    )


def _engine_only(engine: EngineFigures) -> BottleneckReport:
    parts = {"queueing": engine.mean_queue_ms, "prefill": engine.mean_prefill_ms}
    details = {"queueing": "vLLM request_queue_time mean", "prefill": "vLLM request_prefill_time mean"}
    return _report(
        parts,
        total=sum(parts.values()),
        count=1,
        details=details,
        source="engine",
        evidence=[_engine_line(engine), "no telemetry with a first token: decode interference unknown"],
    )


def _engine_line(engine: EngineFigures) -> str:
    hit = "n/a" if engine.prefix_hit_rate is None else f"{100 * engine.prefix_hit_rate:.1f}%"
    return (
        f"vLLM over {engine.requests:.0f} requests on {engine.deployments} deployment(s): mean queue "
        f"{engine.mean_queue_ms:.1f} ms, prefill {engine.mean_prefill_ms:.1f} ms, decode "
        f"{engine.mean_decode_ms:.1f} ms, TTFT {engine.mean_ttft_ms:.1f} ms; {engine.preemptions:.0f} "
        f"preemptions; KV cache {100 * engine.kv_cache_usage:.0f}% used; {engine.requests_waiting:.0f} "
        f"waiting; prefix cache hit rate {hit}"
    )


def _report(
    parts: dict[str, float],
    *,
    total: float,
    count: int,
    details: dict[str, str],
    source: str,
    evidence: list[str],
) -> BottleneckReport:
    if not total > 0 or not math.isfinite(total):
        return BottleneckReport(verdict="none", source=source, shares=(), evidence=tuple(evidence))
    shares = sorted(
        (
            BottleneckShare(kind=k, share=v / total, mean_ms=v / count, detail=details[k])
            for k, v in parts.items()
        ),
        key=lambda s: -s.share,
    )
    return BottleneckReport(
        verdict=shares[0].kind, source=source, shares=tuple(shares), evidence=tuple(evidence)
    )
