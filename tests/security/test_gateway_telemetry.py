"""Telemetry a client can swell or NATS can refuse never holds the rest back or grows without bound
(hole 8 of the security issue): batches are cut to fit the server's max payload, a spooled batch
written under a larger limit is split when drained, and the spool keeps under its byte cap by
dropping its oldest records, counted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.apps.harness.waiting import eventually
from evertune.gateway.publisher import (
    HEADER_ROOM,
    Pending,
    Publisher,
    Spool,
    group_batches,
    read_spool,
    split_batch,
)
from evertune.infra.bus import publish
from evertune.v1 import telemetry_pb2

#: Prefix hashes of one swollen record: 2,000 x 8 bytes (a 256k-token prompt at 128-token blocks).
HASHES = 2_000


def _swollen(i: int, endpoint: str) -> telemetry_pb2.RequestRecord:
    return telemetry_pb2.RequestRecord(request_id=f"r{i}", endpoint=endpoint, prefix_hashes=range(HASHES))


def _publisher(js: JetStreamContext, nc: Client, spool: Spool) -> Publisher:
    async def send(subject: str, batch: telemetry_pb2.RequestRecordBatch) -> None:
        await publish(js, subject, batch, msg_id=batch.batch_id, timeout_s=2.0)

    return Publisher(
        send,
        spool,
        formats=None,
        secret=b"s",
        block_tokens=128,
        queue_records=1_000,
        batch_records=500,
        batch_ms=20.0,
        retry_s=0.2,
        max_batch_bytes=lambda: nc.max_payload - HEADER_ROOM,
        source="security-test",
    )


async def _stored_ids(js: JetStreamContext, subject: str) -> list[str]:
    sub = await js.subscribe(subject, ordered_consumer=True)
    ids: list[str] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except TimeoutError:
                return ids
            ids.extend(r.request_id for r in telemetry_pb2.RequestRecordBatch.FromString(msg.data).records)
    finally:
        await sub.unsubscribe()


async def test_records_more_than_a_message_are_published_in_pieces(
    js: JetStreamContext, nc: Client, tmp_path: Path
) -> None:
    """~1.6 MB of records for one endpoint, against a 1 MiB max payload: before the fix the one
    batch failed as if NATS were down, was spooled, and blocked the spool's drain for good."""
    publisher = _publisher(js, nc, Spool(tmp_path / "spool.bin", max_bytes=64 << 20))
    closed = asyncio.Event()
    task = asyncio.create_task(publisher.run(closed))
    for i in range(100):
        publisher.offer(Pending(record=_swollen(i, "swollen-ep")))
    await eventually(lambda: publisher.stats.published_records == 100)
    publisher.offer(Pending(record=telemetry_pb2.RequestRecord(request_id="after", endpoint="swollen-ep")))
    await eventually(lambda: publisher.stats.published_records == 101)
    closed.set()
    await asyncio.wait_for(task, 10.0)
    assert publisher.stats.spooled_records == 0 and publisher.stats.dropped_records == 0
    assert publisher.stats.published_batches >= 2
    assert sorted(await _stored_ids(js, "evertune.telemetry.swollen-ep")) == sorted(
        [*(f"r{i}" for i in range(100)), "after"]
    )


async def test_a_spooled_batch_too_large_for_a_message_is_drained_in_pieces(
    js: JetStreamContext, nc: Client, tmp_path: Path
) -> None:
    """A spool written under a larger max payload (or by an older gateway) drains, and the records
    spooled behind it are not held back."""
    spool = Spool(tmp_path / "spool.bin", max_bytes=64 << 20)
    big = telemetry_pb2.RequestRecordBatch(
        records=[_swollen(i, "old-spool-ep") for i in range(100)], batch_id="old", source="before"
    )
    assert big.ByteSize() > nc.max_payload
    behind = group_batches(
        [telemetry_pb2.RequestRecord(request_id="behind", endpoint="old-spool-ep")],
        "before",
        max_bytes=1 << 20,
    )
    spool.append([big, *behind])
    publisher = _publisher(js, nc, spool)
    await publisher.drain()
    assert not spool.has_data() and publisher.stats.drained_records == 101
    assert len(await _stored_ids(js, "evertune.telemetry.old-spool-ep")) == 101
    pieces = split_batch(big, nc.max_payload - HEADER_ROOM)
    assert len(pieces) >= 2 and all(p.ByteSize() <= nc.max_payload - HEADER_ROOM for p in pieces)
    assert [p.batch_id for p in pieces] == [f"old-{n}" for n in range(len(pieces))]  # stable: stored once


def test_the_spool_stays_under_its_cap_dropping_the_oldest(tmp_path: Path) -> None:
    """NATS away for long: the spool file never passes its cap; the newest records are kept and
    every dropped one is counted (before the fix it grew without bound and was read whole)."""
    cap = 256 * 1024
    spool = Spool(tmp_path / "spool.bin", max_bytes=cap)
    dropped = 0
    for n in range(200):
        records = [_swollen(n * 10 + i, "away-ep") for i in range(2)]  # ~32 KB an append
        dropped += spool.append(group_batches(records, "test", max_bytes=1 << 20))
        assert spool.path.stat().st_size <= cap
    kept = [r.request_id for b in read_spool(spool.path.read_bytes()) for r in b.records]
    assert dropped > 0 and dropped + len(kept) == 400
    assert kept[-1] == "r1991" and kept == sorted(kept, key=lambda x: int(x[1:]))  # the newest, in order
