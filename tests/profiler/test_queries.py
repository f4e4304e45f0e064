"""Queries over inserted rows give the expected minutes, percentiles, rates and counts."""

from __future__ import annotations

from dataclasses import astuple
from datetime import UTC, datetime, timedelta

import pytest

from evertune.infra.store import Store, migrate
from evertune.profiler.queries import (
    ErrorCount,
    Percentiles,
    error_counts,
    latency_per_minute,
    length_distribution,
    rate_per_minute,
)
from evertune.profiler.sink import COLUMNS, TABLE, rows_of
from evertune.v1 import telemetry_pb2
from tests.profiler.helpers import BASE_NS, record

T0 = datetime.fromtimestamp(BASE_NS // 1_000_000_000, UTC)  #: minute 0 of the fixture
MINUTE_NS = 60 * 1_000_000_000


@pytest.fixture
async def filled(store: Store) -> Store:
    """Minute 0: 100 requests on d-a with TTFT 1..100 ms and ITL gaps 1..100 ms (one each), prompt
    1..100 tokens; 10 on d-b, two of them failed. Minute 1: 30 on d-a. Another endpoint: 5."""
    await migrate(store)
    records = [
        record(
            i,
            start_time_unix_ns=BASE_NS + i * 100_000_000,
            ttft_ms=float(i + 1),
            itl_ms=[float(i + 1)],
            prompt_tokens=i + 1,
            completion_tokens=2,
        )
        for i in range(100)
    ]
    records += [
        record(
            1000 + i,
            deployment="d-b",
            start_time_unix_ns=BASE_NS + i * 1_000_000_000,
            error_class="upstream_timeout" if i < 2 else "",
            ttft_ms=0.0 if i < 2 else 50.0,
        )
        for i in range(10)
    ]
    records += [record(2000 + i, start_time_unix_ns=BASE_NS + MINUTE_NS + i) for i in range(30)]
    records += [record(3000 + i, endpoint="other", error_class="bad_request") for i in range(5)]
    rows = rows_of(telemetry_pb2.RequestRecordBatch(records=records))
    await store.insert(TABLE, rows, COLUMNS, dedup_token="queries-fixture")
    return store


async def test_latency_per_minute(filled: Store) -> None:
    result = await latency_per_minute(filled, T0, T0 + timedelta(minutes=5), endpoint="voice")
    assert [(m.minute, m.deployment, m.requests) for m in result] == [
        (T0, "d-a", 100),
        (T0, "d-b", 10),
        (T0 + timedelta(minutes=1), "d-a", 30),
    ]
    first = result[0]
    assert first.endpoint == "voice"
    # Linear interpolation between the sorted values 1..100.
    assert astuple(first.ttft_ms) == pytest.approx((50.5, 90.1, 99.01))
    assert astuple(first.itl_ms) == pytest.approx((50.5, 90.1, 99.01))
    # Requests without a first token (TTFT 0) do not count in TTFT percentiles.
    assert result[1].ttft_ms == Percentiles(50.0, 50.0, 50.0)


async def test_window_and_endpoint_filter(filled: Store) -> None:
    later = await latency_per_minute(filled, T0 + timedelta(minutes=1), T0 + timedelta(minutes=2))
    assert [(m.minute, m.requests) for m in later] == [(T0 + timedelta(minutes=1), 30)]
    everything = await latency_per_minute(filled, T0, T0 + timedelta(minutes=5))
    assert {m.endpoint for m in everything} == {"voice", "other"}
    assert await latency_per_minute(filled, T0 - timedelta(hours=1), T0) == []


async def test_rate_per_minute(filled: Store) -> None:
    result = await rate_per_minute(filled, T0, T0 + timedelta(minutes=5), endpoint="voice")
    assert [(r.deployment, r.requests, r.errors) for r in result] == [
        ("d-a", 100, 0),
        ("d-b", 10, 2),
        ("d-a", 30, 0),
    ]
    assert result[0].rate_per_s == pytest.approx(100 / 60)


async def test_length_distribution(filled: Store) -> None:
    [voice] = await length_distribution(filled, T0, T0 + timedelta(minutes=1), endpoint="voice")
    assert voice.requests == 110
    # 1..100 plus ten requests of 500+ tokens (records 1000..1009 keep their default length).
    assert voice.prompt_tokens.p50 == pytest.approx(55.5)
    assert voice.completion_tokens == Percentiles(2.0, 2.0, 3.0)
    assert voice.cached_tokens == Percentiles(100.0, 100.0, 100.0)
    assert voice.completion_mean == pytest.approx((100 * 2 + 10 * 3) / 110)


async def test_error_counts(filled: Store) -> None:
    result = await error_counts(filled, T0, T0 + timedelta(minutes=5))
    assert result == [
        ErrorCount("other", "d-a", "bad_request", 5),
        ErrorCount("voice", "d-b", "upstream_timeout", 2),
    ]
