"""Sliding latency windows: percentiles within the sketch's accuracy, counts, slot expiry."""

from __future__ import annotations

import numpy as np
import pytest

from evertune.domain.slo import Slo
from evertune.sla_monitor.window import (
    SKETCH_RELATIVE_ACCURACY,
    LatencyWindow,
    Observation,
    p99_gap,
)

ACCURACY = SKETCH_RELATIVE_ACCURACY * 1.01  # the sketch guarantee, with float slack
TARGETS = Slo(ttft_ms=300.0, itl_ms=50.0, share=0.9)


def _obs(time_s: float, ttft_ms: float, *, itl_ms: float = 10.0, failed: bool = False) -> Observation:
    return Observation(
        endpoint="ep", deployment="dep", time_s=time_s, ttft_ms=ttft_ms, itl_p99_ms=itl_ms, failed=failed
    )


def _lower_rank(values: np.ndarray, q: float) -> float:
    """The sample at DDSketch's rank: floor(q * (n - 1)) of the sorted values."""
    ordered = np.sort(values)
    return float(ordered[int(np.floor(q * (len(ordered) - 1)))])


def test_percentiles_are_within_sketch_accuracy_of_exact_values() -> None:
    rng = np.random.default_rng(7)
    ttft = rng.lognormal(mean=5.0, sigma=0.6, size=20_000)  # ~150 ms median, long tail
    itl = rng.gamma(shape=2.0, scale=8.0, size=20_000)
    times = 1_000_000.0 + rng.uniform(0, 60, size=20_000)
    window = LatencyWindow(slot_s=10, history_s=120)
    for t, a, b in zip(times, ttft, itl, strict=True):
        window.add(_obs(float(t), float(a), itl_ms=float(b)), good=True)

    stats = window.stats(now=1_000_060.0, window_s=70)
    assert stats.requests == 20_000
    for q, got in ((0.5, stats.ttft_p50_ms), (0.9, stats.ttft_p90_ms), (0.99, stats.ttft_p99_ms)):
        exact = _lower_rank(ttft, q)
        assert got is not None and abs(got - exact) <= SKETCH_RELATIVE_ACCURACY * exact * 1.01, (
            q,
            got,
            exact,
        )
    for q, got in ((0.5, stats.itl_p50_ms), (0.99, stats.itl_p99_ms)):
        exact = _lower_rank(itl, q)
        assert got is not None and abs(got - exact) <= SKETCH_RELATIVE_ACCURACY * exact * 1.01, (
            q,
            got,
            exact,
        )
    # also close to numpy's interpolated percentile (within accuracy plus one sample's spacing)
    assert stats.ttft_p99_ms == pytest.approx(np.percentile(ttft, 99), rel=0.03)


def test_window_covers_only_recent_slots_and_old_slots_expire() -> None:
    window = LatencyWindow(slot_s=10, history_s=30)
    for t in range(0, 100):  # one request per second for 100 s, TTFT = the second
        window.add(_obs(1000.0 + t, ttft_ms=float(t + 1)), good=t >= 50)
    recent = window.stats(now=1099.5, window_s=20)  # slots [1080, 1090) and [1090, 1100)
    assert recent.requests == 20 and recent.good == 20
    assert recent.ttft_p50_ms == pytest.approx(90, rel=0.02)
    everything = window.stats(now=1099.5, window_s=10_000)  # capped by what is kept: 3-4 slots
    assert everything.requests <= 40
    # a request older than the history is dropped, a recent late one is kept
    assert window.add(_obs(1010.0, 5.0), good=True) is False
    assert window.add(_obs(1085.0, 5.0), good=True) is True
    # the future moves the window: nothing in it yet
    empty = window.stats(now=2000.0, window_s=20)
    assert empty.requests == 0 and empty.ttft_p99_ms is None and empty.attainment is None


def test_good_needs_both_targets_and_errors_are_bad() -> None:
    assert _obs(0, 200, itl_ms=40).is_good(TARGETS)
    assert not _obs(0, 301, itl_ms=40).is_good(TARGETS)
    assert not _obs(0, 200, itl_ms=51).is_good(TARGETS)
    assert not _obs(0, 100, itl_ms=1, failed=True).is_good(TARGETS)
    no_itl_target = Slo(ttft_ms=300.0, share=0.9)
    assert _obs(0, 200, itl_ms=10_000).is_good(no_itl_target)

    window = LatencyWindow(slot_s=1, history_s=10)
    window.add(_obs(5.0, 0.0, failed=True), good=False)  # no token: counted, not in the TTFT sketch
    window.add(_obs(5.0, 100.0), good=True)
    stats = window.stats(now=5.5, window_s=1)
    assert (stats.requests, stats.good, stats.errors) == (2, 1, 1)
    assert stats.ttft_p50_ms == pytest.approx(100, rel=0.01)


def test_p99_gap_is_nearest_rank() -> None:
    assert p99_gap([]) == 0.0
    assert p99_gap([3.0, 9.0, 1.0]) == 9.0  # under 101 gaps: the largest
    gaps = [float(i) for i in range(1, 1001)]  # 1..1000: nearest rank ceil(990) -> 990
    assert p99_gap(gaps) == 990.0
    rng = np.random.default_rng(1)
    sample = rng.exponential(10, size=537).tolist()
    assert p99_gap(sample) == sorted(sample)[int(np.ceil(0.99 * 537)) - 1]
