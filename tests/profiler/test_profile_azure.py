"""The shared Azure trace, stored as telemetry, profiles to its own rate and length statistics."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from evertune.domain.workloads import parse_azure_csv
from evertune.domain.workloads.shared_traces import AZURE_CODE_2023, shared_trace
from evertune.infra.store import Store, migrate
from evertune.profiler.builder import build_from_store
from evertune.profiler.profile import ProfileConfig, RequestSample
from tests.profiler.test_profiler_service import insert

TRACE = shared_trace(AZURE_CODE_2023)


@pytest.mark.skipif(not TRACE.exists(), reason="the shared Azure trace is not on this machine")
async def test_azure_trace_profile_matches_the_csv(store: Store) -> None:
    await migrate(store)
    with TRACE.open(encoding="utf-8", newline="") as lines:
        rows, _ = parse_azure_csv(lines, source=TRACE.name)
    start = float(int(time.time()) - 2 * 3600)
    samples = [
        RequestSample(
            request_id=f"L{row.line}",
            start_s=start + row.t_s,
            e2e_ms=1000.0,
            ttft_ms=100.0,
            upstream_ttft_ms=99.0,
            prompt_tokens=row.context_tokens,
            cached_tokens=0,
            completion_tokens=row.generated_tokens,
            itl_mean_ms=10.0,
            api="completions",
        )
        for row in rows
    ]
    await insert(store, "azure", samples)
    since = datetime.fromtimestamp(start, UTC) - timedelta(minutes=5)
    built = await build_from_store(
        store,
        endpoint="azure",
        since=since,
        until=since + timedelta(hours=2),
        config=ProfileConfig(),
        max_samples=200_000,
    )
    profile = built.profile
    times = np.array([row.t_s for row in rows])
    context = np.array([row.context_tokens for row in rows])
    generated = np.array([row.generated_tokens for row in rows])
    assert profile.requests == len(rows) == 8819
    assert profile.rate.mean_rps == pytest.approx(len(rows) / (times.max() - times.min()), rel=0.05)
    gaps = np.diff(np.sort(times))
    assert profile.rate.gap_cv == pytest.approx(np.std(gaps) / np.mean(gaps), rel=0.05)
    # 60 s windows from the first request, as the trace itself counts them.
    counts = np.bincount(((times - times.min()) // 60).astype(int))[: int((times.max() - times.min()) // 60)]
    assert profile.rate.peak_p95_rps == pytest.approx(np.percentile(counts / 60, 95), rel=0.05)
    for dist, values in ((profile.prompt_tokens, context), (profile.completion_tokens, generated)):
        assert dist.mean == pytest.approx(values.mean(), rel=1e-6)
        assert dist.p50 == pytest.approx(np.percentile(values, 50), rel=0.05)
        assert dist.p90 == pytest.approx(np.percentile(values, 90), rel=0.05)
        assert dist.p99 == pytest.approx(np.percentile(values, 99), rel=0.05)
        assert dist.max == values.max()
