"""The store unavailable for a while: the sink backs off (a bounded number of insert attempts, not
one per arriving message), catches up when it returns, and loses nothing.

The outage is real: the test DETACHes the `requests` table of its database on the session's chDB
engine, so every insert (and every check of redelivered rows) fails inside ClickHouse, then
ATTACHes it again. Telemetry keeps arriving on the session's nats-server all along.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid

import pytest
from nats.js import JetStreamContext

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import publish
from evertune.infra.store import Store, migrate
from evertune.profiler.sink import TABLE, SinkConfig, TelemetrySink
from tests.profiler.helpers import batch

pytestmark = pytest.mark.reliability

BACKOFF_S = (0.2, 0.5, 1.0)  #: the sink's rest after the 1st, 2nd, 3rd and later failures in a row
OUTAGE_S = 4.0  #: how long the table is away
EVERY_S = 0.05  #: a batch arrives this often, outage or not
RECORDS = 20  #: records per batch


def attempts_allowed(outage_s: float, backoff_s: tuple[float, ...]) -> int:
    """Failed inserts a backing-off consumer can make in `outage_s`: one, then one per rest that
    ends inside the outage (plus one for a rest that straddles its start)."""
    attempts, spent = 1, 0.0
    for step in itertools.count(1):
        spent += backoff_s[min(step, len(backoff_s)) - 1]
        if spent > outage_s:
            break
        attempts += 1
    return attempts + 1


async def test_store_outage_backs_off_then_catches_up_with_nothing_lost(
    js: JetStreamContext, store: Store
) -> None:
    await migrate(store)
    name = uuid.uuid4().hex[:10]
    config = SinkConfig(
        durable=f"outage-{name}",
        filter_subject=f"evertune.telemetry.outage-{name}",
        flush_ms=50.0,
        batch_rows=10_000,
        ack_wait_s=5.0,
        backoff_s=BACKOFF_S,
    )
    sink = TelemetrySink(js, store, config)
    stop, traffic_stop = asyncio.Event(), asyncio.Event()
    sent = 0

    async def traffic() -> None:
        nonlocal sent
        while not traffic_stop.is_set():
            await publish(js, config.filter_subject, batch(sent, RECORDS), msg_id=uuid.uuid4().hex)
            sent += RECORDS
            await asyncio.sleep(EVERY_S)

    async def stored() -> int:
        return int((await store.query(f"SELECT count() FROM {TABLE}")).scalar())

    running = asyncio.create_task(sink.run(stop))
    sending = asyncio.create_task(traffic())
    try:
        await eventually(
            lambda: sink.stats.rows_inserted >= 10 * RECORDS, timeout_s=10, what="healthy traffic"
        )

        await store.command(f"DETACH TABLE {TABLE}")
        await asyncio.sleep(OUTAGE_S)
        failed, nak_ed = sink.stats.failed_inserts, sink.stats.retried
        assert "UNKNOWN_TABLE" in sink.stats.last_error or "Unknown table" in sink.stats.last_error
        await store.command(f"ATTACH TABLE {TABLE}")
        back = time.monotonic()

        sent_at_restore = sent

        async def caught_up() -> bool:
            return await stored() >= sent_at_restore

        async def all_stored() -> bool:
            return await stored() >= sent

        outage_ended = time.monotonic()
        await eventually(caught_up, timeout_s=15, what="caught up after the outage")
        catch_up_s = time.monotonic() - outage_ended
        traffic_stop.set()
        await sending
        await eventually(all_stored, timeout_s=10, what="every record stored")
        rows, distinct = (await store.query(f"SELECT count(), uniqExact(request_id) FROM {TABLE}"))[0]
        print(
            f"\nstore-outage: records={sent} rows={rows} outage_s={OUTAGE_S}"
            f" failed_inserts={failed} (allowed {attempts_allowed(OUTAGE_S, BACKOFF_S)})"
            f" messages_nak_ed={nak_ed} catch_up_s={catch_up_s:.2f}"
            f" since_restore_s={time.monotonic() - back:.2f} batches={sink.stats.batches}"
        )
        assert rows == distinct == sent  # nothing lost, nothing twice
        assert 2 <= failed <= attempts_allowed(OUTAGE_S, BACKOFF_S)  # it retried, and backed off
        assert catch_up_s <= max(BACKOFF_S) + 3.0  # the next try after the store returns succeeds
    finally:
        traffic_stop.set()
        stop.set()
        await asyncio.wait_for(running, 10)
        if not sending.done():
            await sending
        await js.delete_consumer(config.stream, config.durable)
