"""What the reliability tests share: the telemetry path (the gateway and the profiler's sink) hosted
as `evertune up` hosts it, the fake upstream's truth, and the rows the store ends up with."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from evertune.apps.harness.waiting import eventually
from evertune.gateway import GatewayService, GatewaySettings
from evertune.infra.runtime.host import host_services
from evertune.infra.settings import SharedSettings, load_settings
from evertune.infra.store import Store, open_store
from evertune.profiler import ProfilerService, ProfilerSettings

#: The sink's ack wait, seconds, of the hosted telemetry path.
SINK_ACK_WAIT_S = 2.0
#: How long `wait_rows` waits once every request has rows: past the ack wait (2 s) of the sinks the
#: tests host (here and in `loop.py`), a redelivered batch would have landed.
ROWS_SETTLE_S = 3.0


@dataclass(frozen=True)
class TelemetryPath:
    """The hosted gateway and profiler, and the database of this test's own they write to."""

    gateway: GatewayService  #: proxies and records; spools while NATS is away
    profiler: ProfilerService  #: its sink consumes `evertune.telemetry.<endpoint>` into the store
    store: Store  #: the database of this path (on the session's chDB engine), dropped after it


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
    store: Store | None = None
    try:
        await asyncio.wait_for(ready.wait(), 60)
        store = await open_store(store_url, database=database)
        yield TelemetryPath(gateway=gateway, profiler=profiler, store=store)
    finally:
        stop.set()
        try:
            await asyncio.wait_for(hosting, 30)
        finally:
            store = store or await open_store(store_url, database=database)
            try:
                await store.command(f"DROP DATABASE IF EXISTS `{database}`")
            finally:
                await store.close()


async def upstream_ids(url: str) -> set[str]:
    """Request ids (the gateway's) the fake upstream at `url` has served so far."""
    async with aiohttp.ClientSession() as session, session.get(url + "/fixture/truth") as response:
        return set(await response.json())


async def rows_per_request(store: Store, endpoint: str) -> dict[str, int]:
    """Telemetry rows per request id of `endpoint`."""
    rows = await store.query(
        "SELECT request_id, count() FROM requests WHERE endpoint = {e:String} GROUP BY request_id",
        {"e": endpoint},
    )
    return {str(r): int(n) for r, n in rows}


async def wait_rows(store: Store, endpoint: str, expected: int, *, timeout_s: float) -> dict[str, int]:
    """Wait until `expected` distinct requests of `endpoint` have rows, then `ROWS_SETTLE_S` more (past
    the sink's ack wait: a redelivered batch would have landed), and return the rows per request."""

    async def enough() -> bool:
        return len(await rows_per_request(store, endpoint)) >= expected

    await eventually(enough, timeout_s=timeout_s, what=f"telemetry rows of {expected} requests")
    await asyncio.sleep(ROWS_SETTLE_S)
    return await rows_per_request(store, endpoint)
