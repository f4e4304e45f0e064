from __future__ import annotations

import math
import random

import pytest

from evertune.domain.percentiles import Percentiles, percentile
from evertune.domain.replay.lag import assess_lag
from evertune.domain.replay.summary import meets_slo, request_itl_p99, summarize
from evertune.domain.slo import Slo
from evertune.errors import InvalidArgument

from .results import result


def test_percentile_linear_interpolation_by_hand() -> None:
    values = [40.0, 10.0, 30.0, 20.0]  # sorted: 10 20 30 40, ranks 0..3
    assert percentile(values, 0) == 10.0
    assert percentile(values, 100) == 40.0
    assert percentile(values, 50) == 25.0  # rank 1.5
    assert percentile(values, 90) == pytest.approx(37.0)  # rank 2.7
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_percentile_matches_numpy_linear() -> None:
    numpy = pytest.importorskip("numpy")
    rng = random.Random(7)
    for n in (1, 2, 3, 10, 101, 1000):
        values = [rng.expovariate(0.01) for _ in range(n)]
        for q in (0, 1, 50, 90, 99, 99.9, 100):
            assert percentile(values, q) == pytest.approx(float(numpy.percentile(values, q, method="linear")))


def test_percentiles_of() -> None:
    spread = Percentiles.of(float(v) for v in range(1, 101))
    assert (spread.p50, spread.p90, spread.p99) == pytest.approx((50.5, 90.1, 99.01))
    assert spread.count == 100
    empty = Percentiles.of([])
    assert math.isnan(empty.p50) and empty.count == 0


def test_slo_checks_its_values() -> None:
    with pytest.raises(InvalidArgument):
        Slo(ttft_ms=0, itl_ms=50)
    with pytest.raises(InvalidArgument):
        Slo(ttft_ms=200, itl_ms=50, share=1.5)


def test_request_meets_slo_on_ttft_and_its_own_p99_gap() -> None:
    slo = Slo(ttft_ms=200, itl_ms=50)
    assert meets_slo(result(ttft_ms=200, itl_ms=(10.0, 50.0)), slo)
    assert not meets_slo(result(ttft_ms=200.1), slo)
    assert not meets_slo(result(ttft_ms=100, itl_ms=(10.0, 80.0)), slo)  # p99 of (10, 80) = 79.3
    assert meets_slo(result(ttft_ms=100), slo)  # one chunk, no gap: ITL passes
    assert not meets_slo(result(ttft_ms=100, error_class="http_5xx"), slo)
    assert not meets_slo(result(ttft_ms=None), slo)  # completed without any text
    # p99 forgives one hiccup among many gaps: 199 gaps of 10 ms and one of 500 ms -> p99 = 10 ms.
    long = result(ttft_ms=100, itl_ms=(10.0,) * 199 + (500.0,))
    assert request_itl_p99(long) == pytest.approx(10.0)
    assert meets_slo(long, slo)


def test_summary_on_hand_made_results() -> None:
    results = [
        result(scheduled_s=0.0, ttft_ms=100.0, itl_ms=(20.0, 20.0), completion_tokens=3),  # meets
        result(scheduled_s=0.5, ttft_ms=300.0, itl_ms=(20.0,)),  # TTFT miss
        result(scheduled_s=1.0, ttft_ms=150.0, itl_ms=(20.0, 90.0)),  # ITL miss
        result(scheduled_s=1.5, ttft_ms=None, error_class="http_5xx", e2e_ms=5.0),
        result(scheduled_s=1.5, ttft_ms=None, error_class="timeout", e2e_ms=500.0),
        result(scheduled_s=2.0, ttft_ms=50.0),  # meets, no gap
    ]
    summary = summarize(results, slo=Slo(ttft_ms=200, itl_ms=50, share=0.5), duration_s=4.0)
    assert (summary.requests, summary.completed, summary.errors) == (6, 4, 2)
    assert summary.error_classes == {"http_5xx": 1, "timeout": 1}
    assert summary.attainment == pytest.approx(2 / 6)
    assert summary.meets_slo is False
    assert summary.throughput_rps == 1.0
    assert summary.output_tokens_per_s == (3 + 2 + 3 + 1) / 4.0  # usage where given, else chunks
    assert summary.ttft_ms.p50 == 125.0  # 50 100 150 300
    assert summary.ttft_ms.count == 4
    assert summary.itl_ms.count == 5 and summary.itl_ms.p50 == 20.0  # all gaps pooled
    assert summary.itl_request_p99_ms.count == 3
    assert summary.e2e_ms.p50 == pytest.approx(200.0)  # 50 140 260 320


def test_summary_without_slo_or_duration() -> None:
    results = [result(scheduled_s=0.0, ttft_ms=100.0), result(scheduled_s=1.0, ttft_ms=100.0, lag_ms=1.0)]
    summary = summarize(results)
    assert summary.attainment is None and summary.meets_slo is None
    assert summary.duration_s == pytest.approx(1.101)  # first due -> last end
    assert summary.lag.p99_ms == pytest.approx(0.995)
    assert not summary.lag.fell_behind
    empty = summarize([], slo=Slo(ttft_ms=1, itl_ms=1))
    assert empty.requests == 0 and empty.throughput_rps == 0.0 and empty.attainment == 0.0


def test_lag_verdict() -> None:
    calm = assess_lag([0.5] * 100, loop_stalls_ms=[1.0] * 50)
    assert not calm.fell_behind and calm.reason == ""
    late = assess_lag([0.5] * 95 + [40.0] * 5)
    assert late.fell_behind and "send lag p99" in late.reason and late.max_ms == 40.0
    stalled = assess_lag([0.5] * 10, loop_stalls_ms=[0.2] * 90 + [30.0] * 10)
    assert stalled.fell_behind and "event loop stalled" in stalled.reason
    capped = assess_lag([0.5], cap_hits=3, max_in_flight=2)
    assert capped.fell_behind and capped.reason == "in-flight cap 2 full for 3 request(s)"
    assert assess_lag([5.0], threshold_ms=1.0).fell_behind
