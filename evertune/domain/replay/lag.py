"""The replay client's own lateness, so no figure is silently the client's (pure).

Two measures, both in milliseconds:
- send lag: per request, when it actually left minus when it was scheduled;
- loop stall: how late a ticker on the client's event loop woke up; a busy or blocked loop also
  reads chunks late, which inflates TTFT and ITL even for requests that left on time.
A run `fell_behind` when the p99 of either exceeds the threshold (10 ms by default) or when requests
had to wait for a free slot under the in-flight cap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evertune.domain.percentiles import percentile

DEFAULT_LAG_THRESHOLD_MS = 10.0  #: p99 lag above which a run's figures are the client's, not the target's


@dataclass(frozen=True)
class LagReport:
    """How late the client was, and whether that makes the run's figures untrustworthy."""

    p50_ms: float  #: median send lag (NaN with no request sent)
    p99_ms: float  #: p99 send lag (linear interpolation)
    max_ms: float  #: worst send lag
    loop_stall_p99_ms: float  #: p99 of how late the loop ticker woke (NaN when not measured)
    loop_stall_max_ms: float  #: worst ticker lateness (NaN when not measured)
    cap_hits: int  #: requests that found the in-flight cap full when their time came
    threshold_ms: float  #: the p99 bound used for `fell_behind`
    fell_behind: bool  #: the client, not the target, shaped some of the figures
    reason: str  #: one line saying why when `fell_behind`, else ""


def assess_lag(
    lags_ms: Sequence[float],
    *,
    loop_stalls_ms: Sequence[float] = (),
    cap_hits: int = 0,
    max_in_flight: int = 0,
    threshold_ms: float = DEFAULT_LAG_THRESHOLD_MS,
) -> LagReport:
    """Lag figures of one run and the verdict: `fell_behind` with the reasons, joined by `; `."""
    p50, p99 = percentile(lags_ms, 50), percentile(lags_ms, 99)
    worst = max(lags_ms) if lags_ms else float("nan")
    stall_p99 = percentile(loop_stalls_ms, 99)
    stall_max = max(loop_stalls_ms) if loop_stalls_ms else float("nan")
    reasons: list[str] = []
    if p99 > threshold_ms:
        reasons.append(f"send lag p99 {p99:.1f} ms > {threshold_ms:g} ms (max {worst:.1f} ms)")
    if stall_p99 > threshold_ms:
        reasons.append(
            f"event loop stalled: p99 {stall_p99:.1f} ms > {threshold_ms:g} ms (max {stall_max:.1f} ms)"
        )
    if cap_hits:
        cap = f" {max_in_flight}" if max_in_flight else ""
        reasons.append(f"in-flight cap{cap} full for {cap_hits} request(s)")
    return LagReport(
        p50_ms=p50,
        p99_ms=p99,
        max_ms=worst,
        loop_stall_p99_ms=stall_p99,
        loop_stall_max_ms=stall_max,
        cap_hits=cap_hits,
        threshold_ms=threshold_ms,
        fell_behind=bool(reasons),
        reason="; ".join(reasons),
    )
