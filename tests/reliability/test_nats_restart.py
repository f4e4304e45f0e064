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

import pytest

from evertune.apps.harness.waiting import eventually
from evertune.domain.replay import replay
from evertune.infra.bus import connect
from evertune.infra.nats_server import EmbeddedNats
from tests.domain.replay.conftest import fake_url
from tests.domain.replay.helpers import chat_plan
from tests.gateway.conftest import put_routes
from tests.reliability.helpers import ROWS_SETTLE_S, telemetry_path, upstream_ids, wait_rows

__all__ = ["fake_url"]

pytestmark = pytest.mark.reliability

REQUESTS = 200  #: requests in the replay
EVERY_S = 0.025  #: 40 requests/s, open loop: about 5 s of traffic
KILL_AT_S = 1.0  #: NATS is killed this long after the replay starts ...
DOWN_S = 2.0  #: ... and restarted this long after


async def test_nats_killed_during_a_replay_leaves_exactly_one_row_per_request(
    store_url: str, fake_url: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    endpoint = f"rel-{uuid.uuid4().hex[:8]}"
    try:
        async with telemetry_path(
            nats_url=server.url,
            store_url=store_url,
            tokenizer_dir=tokenizer_dir,
            data_dir=tmp_path / "data",
            endpoint=endpoint,
        ) as path:
            gateway = path.gateway
            admin = await connect(server.url, name="reliability-routes")
            try:
                await put_routes(admin.jetstream(), gateway, endpoint, [("dep-r", fake_url, 1)])
            finally:
                await admin.close()
            before = await upstream_ids(fake_url)

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
            served = await upstream_ids(fake_url) - before
            assert [r.error_class for r in run.results if not r.ok] == []  # the client never noticed
            assert len(served) == REQUESTS

            publisher = gateway.publisher
            assert publisher is not None
            # The outage really was seen: records went to the spool and came back out of it.
            assert publisher.stats.spooled_records > 0
            await eventually(lambda: not publisher.spool.has_data(), timeout_s=20, what="spool drained")

            waited = time.monotonic()
            counts = await wait_rows(path.store, endpoint, REQUESTS, timeout_s=30)
            caught_up_s = time.monotonic() - waited - ROWS_SETTLE_S
            assert set(counts) == served  # every request the upstream served, and nothing else
            assert sorted(set(counts.values())) == [1]  # exactly one row each
            assert publisher.stats.drained_records > 0
            sink = path.profiler.sink
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
        await server.stop()
