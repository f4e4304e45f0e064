"""Sliding time windows of TTFT and per-request inter-token latency (pure: no I/O, time is an argument).

Requests fall into time slots (`slot_s`, e.g. 10 s) by the time they ended. Each slot keeps a
DDSketch (relative accuracy ~1%) of TTFT and of each request's p99 inter-token gap, plus request,
good and error counts. A window over the last N seconds merges the slots it covers, so a query
costs one merge per slot and memory is bounded by the number of slots kept, not by the traffic.

A request is *good* when it did not fail, its TTFT is within the TTFT target and its p99
inter-token gap is within the ITL target (no ITL target: only TTFT counts).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ddsketch import DDSketch

from evertune.domain.slo import Slo

#: Relative accuracy of every sketch: a reported quantile is within 1% of a true sample value.
SKETCH_RELATIVE_ACCURACY = 0.01


@dataclass(frozen=True)
class Observation:
    """One finished request, reduced to what the windows need (converted from a RequestRecord)."""

    endpoint: str  #: endpoint name
    deployment: str  #: deployment id; empty when the request never reached one
    time_s: float  #: when the request ended, in seconds since the Unix epoch
    ttft_ms: float  #: client-observed time to first token, in milliseconds (0 = no token sent)
    itl_p99_ms: float  #: the request's p99 inter-token gap, in milliseconds (0 = fewer than 2 tokens)
    failed: bool  #: the request failed (error class or HTTP status >= 400)

    def is_good(self, slo: Slo) -> bool:
        """Whether the request met both targets (a failed request never does)."""
        return not self.failed and self.ttft_ms <= slo.ttft_ms and self.itl_p99_ms <= slo.itl_ms


def p99_gap(gaps: Sequence[float]) -> float:
    """Nearest-rank 99th percentile of a request's inter-token gaps (0 for no gaps).

    Below 101 gaps that is the largest gap; the cost is one pass, not a sort.
    """
    n = len(gaps)
    if n == 0:
        return 0.0
    above = n - math.ceil(0.99 * n) + 1  # rank from the top of the nearest-rank p99
    if above == 1:
        return float(max(gaps))
    return float(heapq.nlargest(above, gaps)[-1])


def _sketch() -> DDSketch:
    return DDSketch(relative_accuracy=SKETCH_RELATIVE_ACCURACY)


@dataclass
class Slot:
    """What one time slot holds."""

    index: int  #: slot number: floor(time / slot length)
    ttft: DDSketch = field(default_factory=_sketch)  #: TTFT of requests that sent a token, ms
    itl: DDSketch = field(default_factory=_sketch)  #: per-request p99 inter-token gap, ms
    requests: int = 0  #: requests that ended in the slot
    good: int = 0  #: of which met both targets
    errors: int = 0  #: of which failed


@dataclass(frozen=True)
class WindowStats:
    """Figures of one window (percentiles are None when the window holds no sample)."""

    window_s: float  #: window length, in seconds
    requests: int  #: requests that ended in the window
    good: int  #: of which met both targets
    errors: int  #: of which failed
    ttft_p50_ms: float | None  #: median TTFT, ms
    ttft_p90_ms: float | None  #: 90th-percentile TTFT, ms
    ttft_p99_ms: float | None  #: 99th-percentile TTFT, ms
    itl_p50_ms: float | None  #: median of per-request p99 inter-token gaps, ms
    itl_p90_ms: float | None  #: 90th percentile of them, ms
    itl_p99_ms: float | None  #: 99th percentile of them, ms

    @property
    def attainment(self) -> float | None:
        """Share of good requests; None for an empty window."""
        return self.good / self.requests if self.requests else None


def _quantile(sketch: DDSketch, q: float) -> float | None:
    if sketch.count == 0:
        return None
    value = sketch.get_quantile_value(q)
    return None if value is None else float(value)


class LatencyWindow:
    """Time-slotted sketches of one (endpoint, deployment); keeps `history_s` of slots."""

    def __init__(self, *, slot_s: float, history_s: float) -> None:
        if slot_s <= 0 or history_s < slot_s:
            raise ValueError(f"need 0 < slot_s <= history_s, got slot_s={slot_s} history_s={history_s}")
        self.slot_s = slot_s
        self.max_slots = math.ceil(history_s / slot_s)
        self._slots: dict[int, Slot] = {}
        self._newest = -(2**62)  # highest slot index seen

    def add(self, obs: Observation, *, good: bool) -> bool:
        """Record one request; returns False when it is older than the history kept (dropped)."""
        index = math.floor(obs.time_s / self.slot_s)
        if index <= self._newest - self.max_slots:
            return False
        slot = self._slots.get(index)
        if slot is None:
            slot = self._slots[index] = Slot(index)
            if index > self._newest:
                self._newest = index
                self._expire()
        slot.requests += 1
        slot.good += good
        if obs.failed:
            slot.errors += 1
        if obs.ttft_ms > 0:
            slot.ttft.add(obs.ttft_ms)
        if obs.itl_p99_ms > 0:
            slot.itl.add(obs.itl_p99_ms)
        return True

    def _expire(self) -> None:
        oldest = self._newest - self.max_slots
        for index in [i for i in self._slots if i <= oldest]:
            del self._slots[index]

    def _covered(self, now: float, window_s: float) -> list[Slot]:
        last = math.floor(now / self.slot_s)
        first = last - max(1, math.ceil(window_s / self.slot_s)) + 1
        return [s for i, s in self._slots.items() if first <= i <= last]

    def stats(self, *, now: float, window_s: float) -> WindowStats:
        """Figures over the slots covering the last `window_s` seconds before `now`.

        The window is rounded up to whole slots (the current, partial slot included) and capped at
        the history kept.
        """
        slots = self._covered(now, window_s)
        ttft, itl = _sketch(), _sketch()
        for slot in slots:
            if slot.ttft.count:
                ttft.merge(slot.ttft)
            if slot.itl.count:
                itl.merge(slot.itl)
        return WindowStats(
            window_s=window_s,
            requests=sum(s.requests for s in slots),
            good=sum(s.good for s in slots),
            errors=sum(s.errors for s in slots),
            ttft_p50_ms=_quantile(ttft, 0.50),
            ttft_p90_ms=_quantile(ttft, 0.90),
            ttft_p99_ms=_quantile(ttft, 0.99),
            itl_p50_ms=_quantile(itl, 0.50),
            itl_p90_ms=_quantile(itl, 0.90),
            itl_p99_ms=_quantile(itl, 0.99),
        )

    @property
    def newest_time_s(self) -> float | None:
        """Start of the newest slot holding data, in seconds since the epoch; None when empty."""
        return self._newest * self.slot_s if self._slots else None
