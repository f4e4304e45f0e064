"""What the reliability tests that take NATS away share: the telemetry path (the gateway and the
profiler's sink) hosted as `evertune up` hosts it, the fake upstream's truth, and the rows the
store ends up with."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from evertune.gateway import GatewayService, GatewaySettings
from evertune.profiler import ProfilerService, ProfilerSettings

from evertune.apps.harness.waiting import eventually
from evertune.infra.runtime.host import host_services
from evertune.infra.settings import SharedSettings, load_settings
from evertune.infra.store import open_store

#: The sink's ack wait, seconds: past it, a redelivered batch would have landed.
SINK_ACK_WAIT_S = 2.0


@dataclass(frozen=True)
class TelemetryPath:
    """The hosted gateway and profiler, and the database of this test's own they write to."""

    gateway: GatewayService  #: proxies and records; spools while NATS is away
    profiler: ProfilerService  #: its sink consumes `evertune.telemetry.<endpoint>` into the store
    store_url: str  #: the session's chDB engine
    database: str  #: created for this path, dropped after it


@contextlib.asynccontextmanager
async def telemetry_path(
    *, nats_url: str, store_url: str, tokenizer_dir: Path, data_dir: Path, endpoint: str, replicas: int = 1
) -> AsyncIterator[TelemetryPath]:
    """Host the gateway and the profiler on `nats_url` (streams with `replicas`) until the block ends."""
    database = f"rel_{uuid.uuid4().hex[:8]}"
    shared = load_settings(
        SharedSettings,
        data_dir=data_dir,
        clickhouse_url=store_url,
        clickhouse_database=database,
        nats_replicas=replicas,
    )
    gateway = GatewayService(
        GatewaySettings(
            port=0, tokenizer_dir=tokenizer_dir, batch_ms=20.0, publish_timeout_s=0.5, spool_retry_s=0.2
        )
    )
    profiler = ProfilerService(
        ProfilerSettings(
            sink_subject=f"evertune.telemetry.{endpoint}",
            sink_durable=f"sink-{endpoint}",
            sink_flush_ms=50.0,
            sink_ack_wait_s=SINK_ACK_WAIT_S,
        )
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    hosting = asyncio.create_task(
        host_services(
            [profiler, gateway], shared=shared, nats_url=nats_url, stop=stop, on_ready=lambda _: ready.set()
        )
    )
    try:
        await asyncio.wait_for(ready.wait(), 60)
        yield TelemetryPath(gateway=gateway, profiler=profiler, store_url=store_url, database=database)
    finally:
        stop.set()
        try:
            await asyncio.wait_for(hosting, 30)
        finally:
            store = await open_store(store_url, database=database)
            try:
                await store.command(f"DROP DATABASE IF EXISTS `{database}`")
            finally:
                await store.close()


async def upstream_ids(url: str) -> set[str]:
    """Request ids (the gateway's) the fake upstream at `url` has served so far."""
    async with aiohttp.ClientSession() as session, session.get(url + "/fixture/truth") as response:
        return set(await response.json())


async def rows_per_request(
    path: TelemetryPath, endpoint: str, *, expected: int
) -> tuple[dict[str, int], float]:
    """Wait until `expected` requests of `endpoint` have rows, then past the sink's ack wait (a
    redelivered batch would have landed); returns the rows per request id and the seconds waited
    for the last row."""
    store = await open_store(path.store_url, database=path.database)
    try:

        async def all_rows() -> bool:
            n = await store.query(
                "SELECT uniqExact(request_id) FROM requests WHERE endpoint = {e:String}", {"e": endpoint}
            )
            return int(n.scalar()) >= expected

        loop = asyncio.get_running_loop()
        waited = loop.time()
        await eventually(all_rows, timeout_s=30, what=f"rows of {expected} requests")
        caught_up_s = loop.time() - waited
        await asyncio.sleep(SINK_ACK_WAIT_S + 1.0)
        rows = await store.query(
            "SELECT request_id, count() FROM requests WHERE endpoint = {e:String} GROUP BY request_id",
            {"e": endpoint},
        )
        return {str(r): int(n) for r, n in rows}, caught_up_s
    finally:
        await store.close()
