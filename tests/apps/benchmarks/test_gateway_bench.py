"""`bench gateway`'s arithmetic, and its load client against its upstream (real processes)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator

import pytest

from evertune.apps.benchmarks.gateway import (
    DIRECT,
    RoundResult,
    cpu_ms,
    lagged,
    overheads,
    record_overheads,
    split_cores,
)
from evertune.infra.nats_server import free_port
from evertune.v1 import telemetry_pb2


def _round(
    path: str, repeat: int, ttfts: list[float], *, gap_p99: float = 20.0, cpu: float = 0.0
) -> RoundResult:
    client = {"requests": len(ttfts), "failed": 0, "ttft_ms": ttfts, "lag_p99_ms": 0.5, "gap_p99_ms": gap_p99}
    return RoundResult(path=path, rate_rps=100.0, repeat=repeat, client=client, cpu_ms=cpu)


def test_split_cores_gives_the_gateway_one_core_alone() -> None:
    assert split_cores([3, 1, 2, 0]) == ([0], [1, 2, 3])
    assert split_cores([5]) == ([5], [5])


def test_overheads_are_medians_of_paired_differences() -> None:
    base = [50.0 + i * 0.1 for i in range(100)]
    rounds = [
        _round(DIRECT, 0, base),
        _round("uvloop", 0, [t + 1.0 for t in base], gap_p99=21.0, cpu=200.0),
        _round(DIRECT, 1, [t + 10.0 for t in base]),  # a slow repeat for both paths
        _round("uvloop", 1, [t + 12.0 for t in base], gap_p99=20.5, cpu=300.0),
        _round(DIRECT, 2, base),
        _round("uvloop", 2, [t + 1.5 for t in base], gap_p99=22.0, cpu=100.0),
    ]
    got = overheads(rounds, "uvloop")
    assert got["overhead_p50_ms"] == pytest.approx(1.5)  # of 1.0, 2.0, 1.5
    assert got["overhead_p99_ms"] == pytest.approx(1.5)
    assert got["itl_overhead_p99_ms"] == pytest.approx(1.0)  # of 1.0, 0.5, 2.0
    assert got["cpu_ms_per_1k_requests"] == pytest.approx(2000.0)  # 200 ms per 100 requests


def test_lag_or_failures_mean_the_client_fell_behind() -> None:
    calm = _round(DIRECT, 0, [50.0])
    assert not lagged([calm])
    late = RoundResult(DIRECT, 100.0, 0, {**calm.client, "lag_p99_ms": 12.0}, 0.0)
    lost = RoundResult(DIRECT, 100.0, 0, {**calm.client, "failed": 1}, 0.0)
    assert lagged([calm, late]) and lagged([lost])


def test_record_overheads_use_the_gateways_own_timing() -> None:
    records = [telemetry_pb2.RequestRecord(ttft_ms=50.0 + i, upstream_ttft_ms=49.0 + i) for i in range(10)]
    records.append(telemetry_pb2.RequestRecord(ttft_ms=0.0, upstream_ttft_ms=0.0, status_code=404))
    got = record_overheads(records)
    assert got["records"] == 10 and got["record_overhead_p50_ms"] == pytest.approx(1.0)


def test_cpu_ms_grows_with_work() -> None:
    before = cpu_ms(os.getpid())
    sum(i * i for i in range(2_000_000))
    assert cpu_ms(os.getpid()) > before


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "evertune.apps.benchmarks.gateway_load", "upstream", str(port), "30", "5", "10"
    )
    try:
        for _ in range(100):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        process.terminate()
        await process.wait()


async def test_the_open_loop_client_measures_the_upstreams_known_delays(upstream: str) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "evertune.apps.benchmarks.gateway_load",
        "client",
        upstream,
        "m",
        "20",
        "1.0",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    result = json.loads(out.decode().splitlines()[-1])
    assert (result["requests"], result["failed"]) == (20, 0)
    assert len(result["ttft_ms"]) == 20 and min(result["ttft_ms"]) >= 30.0  # the upstream's TTFT
    assert result["gap_p50_ms"] == pytest.approx(10.0, abs=5.0)  # its gap between chunks
    assert result["lag_p99_ms"] >= 0.0
