"""NATS killed (SIGKILL) and restarted during a replay through the gateway: every request the
upstream served has exactly one row in ClickHouse afterwards.

Real parts: a private nats-server (so it can be killed without touching the session's), the gateway
and the profiler's sink hosted as `evertune up` hosts them, the fake engine upstream in its own
process, the open-loop replay client, the session's chDB engine (a database of this test's own).
While NATS is away the gateway keeps answering and spools its records to its local file; when NATS
is back (same port, same store dir) the spool drains, and the sink carries on from its durable
consumer. The fake upstream's own log of request ids is the truth the rows are checked against.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import aiohttp
import pytest
from evertune.gateway import GatewayService, GatewaySettings
from evertune.profiler import ProfilerService, ProfilerSettings

from evertune.apps.harness.waiting import eventually
from evertune.domain.replay import replay
from evertune.infra.bus import connect
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime.host import host_services
from evertune.infra.settings import SharedSettings, load_settings
from evertune.infra.store import Store, open_store
from tests.domain.replay.conftest import fake_url
from tests.domain.replay.helpers import chat_plan
from tests.gateway.conftest import put_routes

__all__ = ["fake_url"]

pytestmark = pytest.mark.reliability

REQUESTS = 200  #: requests in the replay
EVERY_S = 0.025  #: 40 requests/s, open loop: about 5 s of traffic
KILL_AT_S = 1.0  #: NATS is killed this long after the replay starts ...
DOWN_S = 2.0  #: ... and restarted this long after


async def _upstream_ids(url: str) -> set[str]:
    """Request ids (the gateway's) the fake upstream has served so far."""
    async with aiohttp.ClientSession() as session, session.get(url + "/fixture/truth") as response:
        return set(await response.json())


async def test_nats_killed_during_a_replay_leaves_exactly_one_row_per_request(
    store_url: str, fake_url: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    endpoint = f"rel-{uuid.uuid4().hex[:8]}"
    database = f"rel_{uuid.uuid4().hex[:8]}"
    shared = load_settings(
        SharedSettings, data_dir=tmp_path / "data", clickhouse_url=store_url, clickhouse_database=database
    )
    gateway = GatewayService(
        GatewaySettings(
            port=0,
            tokenizer_dir=tokenizer_dir,
            batch_ms=20.0,
            publish_timeout_s=0.5,
            spool_retry_s=0.2,
        )
    )
    profiler = ProfilerService(
        ProfilerSettings(
            sink_subject=f"evertune.telemetry.{endpoint}",
            sink_durable=f"sink-{endpoint}",
            sink_flush_ms=50.0,
            sink_ack_wait_s=2.0,
        )
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    hosting = asyncio.create_task(
        host_services(
            [profiler, gateway],
            shared=shared,
            nats_url=server.url,
            stop=stop,
            on_ready=lambda _: ready.set(),
        )
    )
    store: Store | None = None
    try:
        await asyncio.wait_for(ready.wait(), 60)
        admin = await connect(server.url, name="reliability-routes")
        try:
            await put_routes(admin.jetstream(), gateway, endpoint, [("dep-r", fake_url, 1)])
        finally:
            await admin.close()
        before = await _upstream_ids(fake_url)

        async def chaos() -> tuple[float, float]:
            await asyncio.sleep(KILL_AT_S)
            killed = time.monotonic()
            await server.kill()
            await asyncio.sleep(DOWN_S)
            await server.restart()
            return killed, time.monotonic()

        chaos_task = asyncio.create_task(chaos())
        run = await replay(
            chat_plan(REQUESTS, every_s=EVERY_S, prefix=endpoint, max_tokens=4),
            target=f"http://127.0.0.1:{gateway.port}",
            model=endpoint,
            headers={"X-Fake": "ttft_ms=10,itl_ms=2"},
            timeout_s=10.0,
        )
        killed_at, back_at = await chaos_task
        replay_end = time.monotonic()
        served = await _upstream_ids(fake_url) - before
        assert [r.error_class for r in run.results if not r.ok] == []  # the client never noticed
        assert len(served) == REQUESTS

        publisher = gateway.publisher
        assert publisher is not None
        # The outage really was seen: records went to the spool and came back out of it.
        assert publisher.stats.spooled_records > 0
        await eventually(lambda: not publisher.spool.has_data(), timeout_s=20, what="spool drained")

        store = await open_store(store_url, database=database)

        async def all_rows() -> bool:
            n = await store.query(
                "SELECT uniqExact(request_id) FROM requests WHERE endpoint = {e:String}", {"e": endpoint}
            )
            return int(n.scalar()) >= REQUESTS

        waited = time.monotonic()
        await eventually(all_rows, timeout_s=20, what="rows of every request")
        caught_up_s = time.monotonic() - waited
        await asyncio.sleep(3.0)  # past the sink's ack wait: any redelivery would have landed by now
        rows = await store.query(
            "SELECT request_id, count() FROM requests WHERE endpoint = {e:String} GROUP BY request_id",
            {"e": endpoint},
        )
        counts: dict[str, int] = {str(r): int(n) for r, n in rows}
        assert set(counts) == served  # every request the upstream served, and nothing else
        assert sorted(set(counts.values())) == [1]  # exactly one row each
        assert publisher.stats.drained_records > 0
        sink = profiler.sink
        assert sink is not None
        print(
            f"\nnats-restart: requests={REQUESTS} rows={sum(counts.values())} distinct={len(counts)}"
            f" spooled={publisher.stats.spooled_records} drained={publisher.stats.drained_records}"
            f" published={publisher.stats.published_records} sink_batches={sink.stats.batches}"
            f" sink_retried={sink.stats.retried}"
            f" redelivered_rows_skipped={sink.stats.redelivered_rows_skipped}"
            f" known_messages_skipped={sink.stats.known_messages_skipped}"
            f" down_s={back_at - killed_at:.2f} rows_complete_after_replay_s={caught_up_s:.2f}"
            f" replay_end_after_restart_s={replay_end - back_at:.2f}"
        )
    finally:
        stop.set()
        try:
            await asyncio.wait_for(hosting, 30)
        finally:
            if store is not None:
                await store.command(f"DROP DATABASE IF EXISTS `{database}`")
                await store.close()
            await server.stop()
