"""The arm windows come from the real `requests` table (chDB): per-arm windows, failures, client
disconnects left out, per-request p99 gaps and attainment against the SLO."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from evertune.deployer.telemetry import Telemetry
from evertune.domain.slo import Slo
from evertune.infra.store import Store, migrate
from tests.deployer.helpers import insert_requests, request_row


async def test_windows_per_arm(store: Store) -> None:
    await migrate(store)
    now = datetime.now(UTC)
    early = now - timedelta(seconds=30)
    rows = [
        # the canary: two good, one slow, one failed, one client disconnect (left out), one early
        request_row("ep", "canary", ts=now, ttft_ms=50, itl_ms=[5, 6, 7]),
        request_row("ep", "canary", ts=now, ttft_ms=60, itl_ms=[5] * 99 + [80]),
        request_row("ep", "canary", ts=now, ttft_ms=900, itl_ms=[5]),
        request_row("ep", "canary", ts=now, ttft_ms=0, status_code=502, error_class="upstream_5xx"),
        request_row("ep", "canary", ts=now, ttft_ms=0, error_class="client_disconnect", status_code=0),
        request_row("ep", "canary", ts=early, ttft_ms=40, itl_ms=[5]),
        # the stable: one early (inside its longer window), one now with a large gap
        request_row("ep", "stable", ts=early, ttft_ms=30, itl_ms=[4]),
        request_row("ep", "stable", ts=now, ttft_ms=35, itl_ms=[4, 200]),
        # another endpoint and another deployment: not counted
        request_row("other", "canary", ts=now, ttft_ms=1, itl_ms=[1]),
        request_row("ep", "third", ts=now, ttft_ms=1, itl_ms=[1]),
    ]
    await insert_requests(store, rows)
    windows = await Telemetry(store).windows(
        endpoint="ep",
        canary="canary",
        stable="stable",
        canary_since=now - timedelta(seconds=5),
        stable_since=early - timedelta(seconds=1),
        until=now + timedelta(seconds=1),
        slo=Slo(ttft_ms=500, itl_ms=100),
    )
    canary, stable = windows.canary, windows.stable
    assert canary.requests == 4 and canary.errors == 1
    assert sorted(canary.ttft_ms) == [50, 60, 900]
    # nearest-rank p99 of each request's gaps: 7, 5 (99 of 100 gaps are 5), 5
    assert sorted(canary.itl_p99_ms) == [5, 5, 7]
    assert canary.attainment == 2 / 4
    assert stable.requests == 2 and stable.errors == 0
    assert sorted(stable.ttft_ms) == [30, 35] and sorted(stable.itl_p99_ms) == [4, 200]
    assert stable.attainment == 1 / 2  # the 200 ms gap misses the 100 ms target


async def test_an_arm_without_rows_is_empty(store: Store) -> None:
    await migrate(store)
    now = datetime.now(UTC)
    windows = await Telemetry(store).windows(
        endpoint="nothing",
        canary="a",
        stable="b",
        canary_since=now,
        stable_since=now,
        until=now,
        slo=Slo(ttft_ms=500),
    )
    assert windows.canary.requests == 0 and windows.canary.attainment is None
    assert windows.stable.ttft_ms == []
