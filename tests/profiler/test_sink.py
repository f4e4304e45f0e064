"""The sink end to end: the session's nats-server, a database of its own per test, no mocks."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ConsumerInfo

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import publish
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings
from evertune.infra.store import Store, migrate
from evertune.profiler import ProfilerService, ProfilerSettings
from evertune.profiler.sink import COLUMNS, TABLE, SinkConfig, TelemetrySink, decode, group_token, rows_of
from evertune.v1 import events_pb2
from tests.profiler.helpers import batch


@dataclass
class Running:
    """A sink running on a subject and durable of its own."""

    sink: TelemetrySink  #: the sink under test
    subject: str  #: where the test publishes
    stop: asyncio.Event  #: set to stop the sink
    task: asyncio.Task[None]  #: the sink's run()


def config(**overrides: object) -> SinkConfig:
    name = uuid.uuid4().hex[:12]
    values: dict[str, object] = {
        "durable": f"t-{name}",
        "filter_subject": f"evertune.telemetry.t-{name}",
        "flush_ms": 50.0,
        "batch_rows": 1000,
        "backoff_s": (0.2,),
        "ack_wait_s": 1.0,
    }
    values.update(overrides)
    return SinkConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
async def db(store: Store) -> Store:
    await migrate(store)
    return store


async def start(js: JetStreamContext, store: Store, cfg: SinkConfig | None = None) -> Running:
    cfg = cfg or config()
    sink = TelemetrySink(js, store, cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(sink.run(stop))
    return Running(sink, cfg.filter_subject, stop, task)


@pytest.fixture
async def running(js: JetStreamContext, db: Store) -> AsyncIterator[Running]:
    run = await start(js, db)
    try:
        yield run
    finally:
        run.stop.set()
        await asyncio.wait_for(run.task, 10)


async def counts(store: Store) -> tuple[int, int]:
    rows, distinct = (await store.query(f"SELECT count(), uniqExact(request_id) FROM {TABLE}"))[0]
    return int(rows), int(distinct)


async def test_batches_land_once_each(js: JetStreamContext, db: Store, running: Running) -> None:
    batches = [batch(i * 100, 100) for i in range(12)]
    for b in batches:
        await publish(js, running.subject, b, msg_id=b.batch_id)
    # A publisher retry of the same batch is dropped by JetStream.
    ack = await publish(js, running.subject, batches[0], msg_id=batches[0].batch_id)
    assert ack.duplicate
    await eventually(lambda: running.sink.stats.rows_inserted == 1200)
    assert await counts(db) == (1200, 1200)
    stats = running.sink.stats
    assert stats.messages_acked == 12
    assert 2 <= stats.batches <= 12  # grouped: 1000 rows or 50 ms, whichever first
    assert stats.last_error == ""
    stored = (await db.query(f"SELECT {', '.join(COLUMNS)} FROM {TABLE} WHERE request_id = 'r-5'"))[0]
    assert list(stored) == [pytest.approx(v) if isinstance(v, float) else v for v in rows_of(batches[0])[5]]


async def test_failed_insert_is_redelivered_and_stored_once(js: JetStreamContext, db: Store) -> None:
    await db.command(f"RENAME TABLE {TABLE} TO requests_away")
    run = await start(js, db)
    try:
        b = batch(0, 50)
        await publish(js, run.subject, b, msg_id=b.batch_id)
        await eventually(lambda: run.sink.stats.retried >= 2)  # nak'ed, redelivered, failed again
        assert "unknown table" in run.sink.stats.last_error.lower()
        assert run.sink.stats.rows_inserted == 0
        await db.command(f"RENAME TABLE requests_away TO {TABLE}")
        await eventually(lambda: run.sink.stats.messages_acked == 1)
        assert await counts(db) == (50, 50)
    finally:
        run.stop.set()
        await asyncio.wait_for(run.task, 10)


async def test_redelivery_after_insert_without_ack_adds_nothing(js: JetStreamContext, db: Store) -> None:
    cfg = config()
    sink = TelemetrySink(js, db, cfg)
    batches = [batch(i * 10, 10) for i in range(3)]
    for b in batches:
        await publish(js, cfg.filter_subject, b, msg_id=b.batch_id)
    # A crashed instance: takes two messages, inserts their rows, dies before acking.
    sub = await js.pull_subscribe(
        cfg.filter_subject, durable=cfg.durable, stream=cfg.stream, config=sink.consumer_config()
    )
    taken = await sub.fetch(2, timeout=5)
    rows = [row for m in taken for row in rows_of(decode(m.data))]
    await db.insert(TABLE, rows, COLUMNS, dedup_token=group_token([b.batch_id for b in batches[:2]]))
    await sub.unsubscribe()
    stop = asyncio.Event()
    task = asyncio.create_task(sink.run(stop))
    try:
        # The third arrives at once; the two come back after the ack wait, in another group.
        await eventually(lambda: sink.stats.messages_acked == 3)
        assert sink.stats.redelivered_rows_skipped == 20
        assert await counts(db) == (30, 30)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def settled_info(js: JetStreamContext, stream: str, durable: str) -> ConsumerInfo:
    """The consumer's info once no ack is pending (or after 5 s). The sink does not await its acks
    and JetStream applies them asynchronously, so an immediate consumer_info can lag behind."""
    deadline = time.monotonic() + 5
    while True:
        info: ConsumerInfo = await js.consumer_info(stream, durable)
        if info.num_ack_pending == 0 or time.monotonic() > deadline:
            return info
        await asyncio.sleep(0.05)


async def test_poison_message_is_terminated_and_reported(
    nc: Client, js: JetStreamContext, db: Store, running: Running
) -> None:
    reports = await nc.subscribe("evertune.events.service.poison_message.>")
    try:
        await publish(js, running.subject, b"\xff\xff\xff garbage", msg_id="poison-" + uuid.uuid4().hex)
        good = batch(0, 5)
        await publish(js, running.subject, good, msg_id=good.batch_id)
        await eventually(lambda: running.sink.stats.messages_acked == 1 and running.sink.stats.poisoned == 1)
        msg = await reports.next_msg(timeout=5)
        event = events_pb2.Event.FromString(msg.data)
        assert event.service_poison_message.consumer == running.sink.config.durable
        assert "undecodable" in event.service_poison_message.error
        assert await counts(db) == (5, 5)
        info = await settled_info(js, running.sink.config.stream, running.sink.config.durable)
        assert info.num_ack_pending == 0 and info.num_redelivered == 0
    finally:
        await reports.unsubscribe()


async def test_stop_while_idle_is_immediate(running: Running) -> None:
    await asyncio.sleep(0.2)  # the sink is waiting in a fetch (5 s server wait)
    t0 = time.monotonic()
    running.stop.set()
    await asyncio.wait_for(running.task, 2)
    assert time.monotonic() - t0 < 1.0


async def test_stop_inserts_the_group_in_hand(js: JetStreamContext, db: Store) -> None:
    cfg = config(flush_ms=60_000.0, batch_rows=1_000_000)
    run = await start(js, db, cfg)
    b = batch(0, 40)
    await publish(js, run.subject, b, msg_id=b.batch_id)
    await eventually(lambda: run.sink.stats.rows_pending == 40)
    assert await counts(db) == (0, 0)
    run.stop.set()
    await asyncio.wait_for(run.task, 5)
    assert await counts(db) == (40, 40)
    info = await settled_info(js, cfg.stream, cfg.durable)
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_profiler_service_runs_the_sink(nc: Client, js: JetStreamContext, db: Store) -> None:
    name = uuid.uuid4().hex[:12]
    settings = ProfilerSettings(sink_subject=f"evertune.telemetry.t-{name}", sink_durable=f"t-{name}")
    service = ProfilerService(settings)
    await service.start(ServiceContext(shared=SharedSettings(), nc=nc, js=js, store=db))
    try:
        b = batch(0, 25)
        await publish(js, settings.sink_subject, b, msg_id=b.batch_id)
        await eventually(lambda: service.details()["sink"]["rows_inserted"] == 25)
        details = service.details()
        assert details["sink"]["batches"] == 1 and details["sink"]["last_error"] == ""
    finally:
        await service.stop(5)
    assert service.state == "stopped"
    assert await counts(db) == (25, 25)
