"""A run's figures and its SLO attainment, from its `RequestResult`s (pure).

- TTFT, e2e: percentiles over completed requests.
- ITL: percentiles over every gap of every completed request pooled (`itl`), and over each
  request's own p99 gap (`itl_request_p99`: "how bad is a typical request's worst stretch").
- Attainment: the share of ALL requests (errors count as misses) that completed with
  TTFT <= `Slo.ttft_ms` AND their own p99 gap <= `Slo.itl_ms` (a request with fewer than two text
  chunks has no gap and passes the ITL check). The p99 of a short answer's gaps is close to its
  maximum; for long answers it forgives one rare hiccup.
- Throughput: completed requests and output tokens (usage figures, else text chunks) per second of
  the run's duration.
Percentiles: linear interpolation (see `evertune.domain.percentiles`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from evertune.domain.percentiles import Percentiles, percentile, percentile_sorted
from evertune.domain.replay.lag import LagReport, assess_lag
from evertune.domain.replay.results import ReplayRun, RequestResult
from evertune.domain.slo import Slo

__all__ = [
    "Percentiles",
    "Summary",
    "meets_slo",
    "percentile",
    "request_itl_p99",
    "summarize",
    "summarize_run",
]


@dataclass(frozen=True)
class Summary:
    """The figures of one run. Percentiles are NaN where nothing was measured."""

    requests: int  #: requests planned (sent or not)
    completed: int  #: requests that completed without error
    errors: int  #: requests with an error class
    error_classes: dict[str, int]  #: error class -> count (only classes that occurred)
    duration_s: float  #: first scheduled send -> last request finished
    throughput_rps: float  #: completed requests per second of duration
    output_tokens_per_s: float  #: output tokens of completed requests per second of duration
    ttft_ms: Percentiles  #: time to first text chunk, completed requests
    itl_ms: Percentiles  #: every gap between text chunks, all completed requests pooled
    itl_request_p99_ms: Percentiles  #: each completed request's own p99 gap (requests with >= 1 gap)
    e2e_ms: Percentiles  #: send -> end of stream, completed requests
    slo: Slo | None  #: the targets attainment was computed against (None: not computed)
    attainment: float | None  #: share of all requests meeting both targets (None without an SLO)
    meets_slo: bool | None  #: attainment >= slo.share (None without an SLO)
    lag: LagReport  #: the client's own lag; `lag.fell_behind` says the figures are partly the client's


def request_itl_p99(result: RequestResult) -> float | None:
    """The request's own p99 gap between text chunks; None when it had no gap."""
    if not result.itl_ms:
        return None
    return percentile(result.itl_ms, 99)


def meets_slo(result: RequestResult, slo: Slo) -> bool:
    """Completed, TTFT within target, and its own p99 gap within target."""
    if not result.ok or result.ttft_ms is None or result.ttft_ms > slo.ttft_ms:
        return False
    worst = request_itl_p99(result)
    return worst is None or worst <= slo.itl_ms


def _duration(results: Sequence[RequestResult]) -> float:
    starts = [r.scheduled_s for r in results]
    ends = [r.sent_s + r.e2e_ms / 1000.0 for r in results if r.e2e_ms is not None]
    if not starts or not ends:
        return 0.0
    return max(0.0, max(ends) - min(starts))


def summarize(
    results: Sequence[RequestResult],
    *,
    slo: Slo | None = None,
    lag: LagReport | None = None,
    duration_s: float | None = None,
) -> Summary:
    """Figures of a run. Without `lag`, it is assessed from the results' send lags alone; without
    `duration_s`, the duration runs from the first scheduled send to the last end seen."""
    done = [r for r in results if r.ok]
    failed = Counter(r.error_class for r in results if not r.ok)
    duration = _duration(results) if duration_s is None else duration_s
    per_request = [p for p in (request_itl_p99(r) for r in done) if p is not None]
    attainment: float | None = None
    if slo is not None:
        attainment = sum(meets_slo(r, slo) for r in results) / len(results) if results else 0.0
    if lag is None:
        lag = assess_lag([r.lag_ms for r in results if r.lag_ms == r.lag_ms])  # NaN: never sent
    gaps = sorted(gap for r in done for gap in r.itl_ms)
    return Summary(
        requests=len(results),
        completed=len(done),
        errors=len(results) - len(done),
        error_classes=dict(sorted(failed.items())),
        duration_s=duration,
        throughput_rps=len(done) / duration if duration > 0 else 0.0,
        output_tokens_per_s=sum(r.output_tokens for r in done) / duration if duration > 0 else 0.0,
        ttft_ms=Percentiles.of(r.ttft_ms for r in done if r.ttft_ms is not None),
        itl_ms=Percentiles(
            p50=percentile_sorted(gaps, 50),
            p90=percentile_sorted(gaps, 90),
            p99=percentile_sorted(gaps, 99),
            count=len(gaps),
        ),
        itl_request_p99_ms=Percentiles.of(per_request),
        e2e_ms=Percentiles.of(r.e2e_ms for r in done if r.e2e_ms is not None),
        slo=slo,
        attainment=attainment,
        meets_slo=None if slo is None or attainment is None else attainment >= slo.share,
        lag=lag,
    )


def summarize_run(run: ReplayRun, *, slo: Slo | None = None) -> Summary:
    """A `ReplayRun`'s figures: its results, its lag report, its measured duration."""
    return summarize(run.results, slo=slo, lag=run.lag, duration_s=run.duration_s)
