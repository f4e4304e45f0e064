"""A telemetry record ClickHouse cannot hold (a status code over 65535) is set aside, and the records
with it and after it are stored (hole 9 of the security issue). Before the fix the group's insert
failed on every redelivery, without end, and no later telemetry reached the table."""

from __future__ import annotations

import asyncio
import uuid

from nats.js import JetStreamContext

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import publish
from evertune.infra.store import Store, migrate
from evertune.profiler.sink import COLUMNS, TABLE, SinkConfig, TelemetrySink, rows_of, unfit
from evertune.v1 import telemetry_pb2
from tests.profiler.helpers import batch


def test_unfit_names_what_the_table_cannot_hold() -> None:
    assert unfit(telemetry_pb2.RequestRecord(status_code=200, start_time_unix_ns=1)) == ""
    assert "status_code 70000" in unfit(telemetry_pb2.RequestRecord(status_code=70_000))
    assert "1900-2299" in unfit(telemetry_pb2.RequestRecord(start_time_unix_ns=-(2**62)))
    mixed = batch(0, 3)
    mixed.records[1].status_code = 70_000
    request_id = COLUMNS.index("request_id")
    assert [row[request_id] for row in rows_of(mixed)] == ["r-0", "r-2"]


async def test_an_unfit_record_is_set_aside_and_the_rest_stored(js: JetStreamContext, store: Store) -> None:
    await migrate(store)
    name = uuid.uuid4().hex[:12]
    cfg = SinkConfig(
        durable=f"t-{name}", filter_subject=f"evertune.telemetry.t-{name}", flush_ms=50.0, backoff_s=(0.2,)
    )
    sink = TelemetrySink(js, store, cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(sink.run(stop))
    try:
        forged = batch(0, 3)
        forged.records[1].status_code = 70_000  # a client or a forged publisher chose it
        after = batch(3, 2)
        for b in (forged, after):
            await publish(js, cfg.filter_subject, b, msg_id=b.batch_id)
        await eventually(lambda: sink.stats.rows_inserted == 4)
        assert sink.stats.records_set_aside == 1 and sink.stats.failed_inserts == 0
        stored = await store.query(f"SELECT request_id FROM {TABLE} ORDER BY request_id")
        assert [row[0] for row in stored] == ["r-0", "r-2", "r-3", "r-4"]
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
