"""Telemetry survives NATS going away: spooled while it is down, drained when it is back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nats.js import JetStreamContext

from evertune.apps.harness.waiting import eventually
from evertune.gateway.publisher import HEADER_ROOM, Pending, Publisher, Spool
from evertune.infra.bus import connect, declare, load_definitions, publish
from evertune.infra.nats_server import EmbeddedNats
from evertune.v1 import telemetry_pb2


async def test_records_are_spooled_while_nats_is_down_then_drained(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    nc = await connect(server.url, name="gateway-spool-test")
    try:
        js: JetStreamContext = nc.jetstream()
        await declare(js, load_definitions())

        async def send(subject: str, batch: telemetry_pb2.RequestRecordBatch) -> None:
            await publish(js, subject, batch, msg_id=batch.batch_id, timeout_s=0.5)

        publisher = Publisher(
            send,
            Spool(tmp_path / "spool.bin", max_bytes=1 << 20),
            formats=None,
            secret=b"s",
            block_tokens=4,
            queue_records=20,
            batch_records=10,
            batch_ms=5.0,
            retry_s=0.2,
            max_batch_bytes=lambda: nc.max_payload - HEADER_ROOM,
            source="test",
        )
        closed = asyncio.Event()
        task = asyncio.create_task(publisher.run(closed))

        def offer(i: int) -> None:
            record = telemetry_pb2.RequestRecord(request_id=f"r{i}", endpoint="spool-ep")
            publisher.offer(Pending(record=record, prompt=[1, 2, 3, 4, 5, 6, 7, 8]))

        for i in range(10):
            offer(i)
        await eventually(lambda: publisher.stats.published_records == 10)

        await server.stop()  # NATS goes away (same port and store when it comes back)
        for i in range(10, 110):  # more than the queue holds: some spill to the spool at once
            offer(i)
            if i % 10 == 0:
                await asyncio.sleep(0.01)
        await eventually(lambda: publisher.stats.spooled_records == 100)
        assert publisher.spool.has_data()

        server = EmbeddedNats(tmp_path / "nats", port=server.port)
        await server.start()
        await eventually(
            lambda: publisher.stats.published_records >= 110 and not publisher.spool.has_data(),
            timeout_s=30.0,
        )
        closed.set()
        await asyncio.wait_for(task, 10.0)

        sub = await js.subscribe("evertune.telemetry.spool-ep", ordered_consumer=True)
        ids: list[str] = []
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except Exception:
                break
            batch = telemetry_pb2.RequestRecordBatch()
            batch.ParseFromString(msg.data)
            ids.extend(r.request_id for r in batch.records)
            assert all(len(r.prefix_hashes) == 2 for r in batch.records)
        await sub.unsubscribe()
        assert sorted(ids) == sorted(f"r{i}" for i in range(110))  # none lost, none twice
    finally:
        await nc.close()
        await server.stop()
