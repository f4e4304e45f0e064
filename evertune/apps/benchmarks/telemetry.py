"""`evertune bench telemetry`: records through JetStream and the profiler's sink into chDB.

An embedded nats-server and a chDB store in a temp dir; the real sink (`TelemetrySink`) consumes
TELEMETRY while N records are published as `RequestRecordBatch` messages of 500 records.

Proving exactly-once on the way:
- some publishes are repeated with the same `Nats-Msg-Id` (JetStream drops them: `retried_publishes`);
- before the clock starts, a "crashed instance" takes a few messages from the sink's durable,
  inserts their rows and dies without acking: they are redelivered to the sink after its ack wait,
  which must store nothing new (`forced_redeliveries`).

Figures: `records_per_s` (first publish -> last row stored), `sent`, `lost` (sent - distinct
request ids stored), `duplicated` (rows - distinct ids).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable

from nats.js import JetStreamContext

from evertune.apps.benchmarks import Figures
from evertune.apps.benchmarks.scratch import scratch_bus
from evertune.infra.bus import publish
from evertune.infra.store import Store, migrate, open_store
from evertune.profiler.sink import COLUMNS, TABLE, SinkConfig, TelemetrySink, decode, group_token, rows_of
from evertune.v1 import telemetry_pb2

#: Records per published message.
BATCH_RECORDS = 500
#: Messages the crashed instance takes, inserts and never acks.
CRASHED_MESSAGES = 4
#: Publishes in flight at once.
IN_FLIGHT = 32


def make_batches(n_records: int, run_id: str, seed: int = 7) -> list[telemetry_pb2.RequestRecordBatch]:
    """`n_records` voice-like records in batches of `BATCH_RECORDS`, one endpoint, two deployments."""
    rng = random.Random(seed)
    start_ns = time.time_ns()
    batches = []
    for b in range(0, n_records, BATCH_RECORDS):
        batch = telemetry_pb2.RequestRecordBatch(batch_id=f"{run_id}-b{b // BATCH_RECORDS}", source="bench")
        for i in range(b, min(b + BATCH_RECORDS, n_records)):
            tokens = rng.randint(5, 40)
            ttft = rng.lognormvariate(4.5, 0.5)
            batch.records.append(
                telemetry_pb2.RequestRecord(
                    request_id=f"{run_id}-{i}",
                    endpoint="voice-bench",
                    deployment=("d-stable", "d-canary")[i % 2],
                    start_time_unix_ns=start_ns + i * 1_000_000,
                    api=telemetry_pb2.API_CHAT,
                    model="evertune-tiny",
                    stream=True,
                    status_code=200,
                    ttft_ms=ttft,
                    e2e_ms=ttft + tokens * 12.0,
                    upstream_ttft_ms=ttft - 0.8,
                    itl_ms=[rng.uniform(8, 20) for _ in range(tokens - 1)],
                    prompt_tokens=rng.randint(400, 3000),
                    cached_tokens=rng.randint(0, 400),
                    completion_tokens=tokens,
                    prefix_hashes=[rng.getrandbits(64) for _ in range(rng.randint(5, 30))],
                    prefix_block_tokens=16,
                )
            )
        batches.append(batch)
    return batches


async def _until(condition: Callable[[], bool], deadline: float) -> None:
    """Wait until `condition()` holds or the monotonic clock passes `deadline`."""
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.01)


async def _crash_after_insert(js: JetStreamContext, store: Store, sink: TelemetrySink) -> int:
    """Take messages from the sink's durable, insert their rows, and never ack them."""
    config = sink.config
    sub = await js.pull_subscribe(
        config.filter_subject, durable=config.durable, stream=config.stream, config=sink.consumer_config()
    )
    msgs = await sub.fetch(CRASHED_MESSAGES, timeout=5)
    rows = [row for msg in msgs for row in rows_of(decode(msg.data))]
    ids = [(msg.headers or {}).get("Nats-Msg-Id", "") for msg in msgs]
    await store.insert(TABLE, rows, COLUMNS, dedup_token=group_token(ids))
    await sub.unsubscribe()
    return len(msgs)


async def _measure(js: JetStreamContext, store: Store, quick: bool) -> Figures:
    n_records = 100_000 if quick else 500_000
    run_id = uuid.uuid4().hex[:8]
    subject = "evertune.telemetry.voice-bench"
    batches = make_batches(n_records, run_id)
    payloads = [(b.batch_id, b.SerializeToString()) for b in batches]
    config = SinkConfig(durable=f"bench-{run_id}", filter_subject=subject, ack_wait_s=2.0)

    # The crashed instance: its messages are published first, before the clock.
    for msg_id, data in payloads[:CRASHED_MESSAGES]:
        await publish(js, subject, data, msg_id=msg_id)
    sink = TelemetrySink(js, store, config)
    crashed = await _crash_after_insert(js, store, sink)
    crashed_rows = crashed * BATCH_RECORDS

    stop = asyncio.Event()
    running = asyncio.create_task(sink.run(stop))
    retried = 0
    try:
        t0 = time.perf_counter()
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def send(msg_id: str, data: bytes, repeat: bool) -> None:
            nonlocal retried
            async with gate:
                await publish(js, subject, data, msg_id=msg_id)
                if repeat:  # a publisher retry after a lost ack: JetStream stores it once
                    ack = await publish(js, subject, data, msg_id=msg_id)
                    retried += 1 if ack.duplicate else 0

        await asyncio.gather(
            *(send(mid, data, i % 20 == 0) for i, (mid, data) in enumerate(payloads[CRASHED_MESSAGES:]))
        )
        publish_s = time.perf_counter() - t0
        expected = n_records - crashed_rows
        deadline = time.monotonic() + 120
        await _until(lambda: sink.stats.rows_inserted >= expected or running.done(), deadline)
        elapsed = time.perf_counter() - t0
        # The crashed instance's messages come back after the ack wait and must add nothing.
        await _until(lambda: sink.stats.messages_acked >= len(payloads), deadline)
    finally:
        stop.set()
        ended = (await asyncio.gather(running, return_exceptions=True))[0]
    if isinstance(ended, BaseException):  # a sink that failed: its figures would mislead
        raise RuntimeError(f"the sink failed during the benchmark: {ended!r}") from ended
    rows, distinct = (await store.query(f"SELECT count(), uniqExact(request_id) FROM {TABLE}"))[0]
    return {
        "benchmark": "telemetry",
        "sent": n_records,
        "records_per_s": round(n_records / elapsed),
        "publish_records_per_s": round(n_records / publish_s),
        "lost": n_records - int(distinct),
        "duplicated": int(rows) - int(distinct),
        "retried_publishes": retried,
        "forced_redeliveries": crashed,
        "redelivered_rows_skipped": sink.stats.redelivered_rows_skipped,
        "inserts": sink.stats.batches,
        "batch_rows": config.batch_rows,
        "records_per_message": BATCH_RECORDS,
    }


async def run(quick: bool) -> Figures:
    async with scratch_bus("evertune-bench-telemetry") as bus:
        store = await open_store(f"chdb://{bus.folder}/clickhouse", database="bench")
        try:
            await migrate(store)
            return await _measure(bus.js, store, quick)
        finally:
            await store.close()
