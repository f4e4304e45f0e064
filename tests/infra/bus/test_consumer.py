from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from evertune.infra.bus import (
    MSG_ID_HEADER,
    ConsumerSpec,
    DurableConsumer,
    PoisonMessage,
    publish,
)
from evertune.infra.store import Store
from evertune.v1 import events_pb2


def _spec(name: str, **kwargs: object) -> ConsumerSpec:
    base: dict[str, object] = {
        "stream": "TELEMETRY",
        "durable": f"test-{name}",
        "filter_subject": f"evertune.telemetry.{name}",
        "backoff_s": (0.05,),
        "fetch_timeout_s": 1.0,
        "ack_wait_s": 5.0,
    }
    return ConsumerSpec(**{**base, **kwargs})  # type: ignore[arg-type]


async def _run_until(consumer: DurableConsumer, done: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Run `consumer` until `done()` holds, then stop it and wait for it to return."""
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        while True:
            if done():
                break
            assert loop.time() < deadline, f"condition not reached in {timeout_s} s: {consumer.stats}"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)


async def test_failed_handler_is_redelivered_and_idempotent_handler_leaves_one_effect(
    js: JetStreamContext, store: Store
) -> None:
    """The handler writes its effect, then fails before the ack (a crash between side effect and
    ack). The message comes back; the retried write is deduplicated on the message id."""
    await store.command(
        "CREATE TABLE effects (id String) ENGINE = MergeTree ORDER BY id "
        "SETTINGS non_replicated_deduplication_window = 100"
    )
    name = uuid.uuid4().hex[:10]
    deliveries: dict[str, int] = {}

    async def handler(msg: Msg) -> None:
        msg_id = (msg.headers or {})[MSG_ID_HEADER]
        await store.insert("effects", [[msg_id]], ["id"], dedup_token=msg_id)
        deliveries[msg_id] = deliveries.get(msg_id, 0) + 1
        if deliveries[msg_id] == 1:
            raise RuntimeError("crashed after the side effect, before the ack")

    ids = [uuid.uuid4().hex for _ in range(3)]
    for msg_id in ids:
        await publish(js, f"evertune.telemetry.{name}", b"r", msg_id=msg_id)
    consumer = DurableConsumer(js, _spec(name), handler, source="test")
    await _run_until(consumer, lambda: consumer.stats.acked == 3)

    assert deliveries == dict.fromkeys(ids, 2)
    assert consumer.stats.retried == 3 and consumer.stats.poisoned == 0
    rows = await store.query("SELECT id, count() FROM effects GROUP BY id ORDER BY id")
    assert list(rows) == [(i, 1) for i in sorted(ids)]


async def _poison_events(js: JetStreamContext, consumer_name: str, expect: int) -> list[events_pb2.Event]:
    sub = await js.subscribe(
        "evertune.events.service.poison_message.>",
        stream="EVENTS",
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    found: list[events_pb2.Event] = []
    try:
        async with asyncio.timeout(10):
            while len(found) < expect:
                msg = await sub.next_msg(timeout=10)
                event = events_pb2.Event.FromString(msg.data)
                if event.service_poison_message.consumer == consumer_name:
                    found.append(event)
    finally:
        await sub.unsubscribe()
    return found


async def test_message_failing_every_time_is_terminated_after_max_deliver_and_reported(
    js: JetStreamContext,
) -> None:
    name = uuid.uuid4().hex[:10]
    calls = 0

    async def handler(msg: Msg) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("upstream said no")

    msg_id = uuid.uuid4().hex
    await publish(js, f"evertune.telemetry.{name}", b"r", msg_id=msg_id)
    spec = _spec(name, max_deliver=3)
    consumer = DurableConsumer(js, spec, handler, source="test")
    await _run_until(consumer, lambda: consumer.stats.poisoned == 1)

    assert calls == 3 and consumer.stats.retried == 2 and consumer.stats.acked == 0
    (event,) = await _poison_events(js, spec.durable, 1)
    assert event.kind == "service.poison_message" and event.source == "test"
    report = event.service_poison_message
    assert report.msg_id == msg_id and report.deliveries == 3
    assert report.subject == f"evertune.telemetry.{name}"
    assert "upstream said no" in report.error
    info = await js.consumer_info("TELEMETRY", spec.durable)
    assert info.num_pending == 0 and info.num_ack_pending == 0


async def test_poison_message_is_terminated_at_once(js: JetStreamContext) -> None:
    name = uuid.uuid4().hex[:10]
    calls = 0

    async def handler(msg: Msg) -> None:
        nonlocal calls
        calls += 1
        if msg.data == b"garbage":
            raise PoisonMessage("cannot decode record batch")

    await publish(js, f"evertune.telemetry.{name}", b"garbage", msg_id=uuid.uuid4().hex)
    await publish(js, f"evertune.telemetry.{name}", b"fine", msg_id=uuid.uuid4().hex)
    spec = _spec(name)
    consumer = DurableConsumer(js, spec, handler, source="test")
    await _run_until(consumer, lambda: consumer.stats.poisoned == 1 and consumer.stats.acked == 1)
    assert calls == 2
    (event,) = await _poison_events(js, spec.durable, 1)
    assert event.service_poison_message.deliveries == 1


async def test_stop_returns_without_waiting_for_the_fetch_and_finishes_in_flight_work(
    js: JetStreamContext,
) -> None:
    """A fetch waits 30 s for messages; stopping must not wait for it. A message being handled
    when stop is set is finished and acked, not abandoned."""
    name = uuid.uuid4().hex[:10]
    started = asyncio.Event()
    finished: list[str] = []

    async def slow_handler(msg: Msg) -> None:
        started.set()
        await asyncio.sleep(0.5)
        finished.append(msg.data.decode())

    spec = _spec(name, fetch_timeout_s=30.0)
    consumer = DurableConsumer(js, spec, slow_handler, source="test")
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    await publish(js, f"evertune.telemetry.{name}", b"one", msg_id=uuid.uuid4().hex)
    await asyncio.wait_for(started.wait(), 10)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert finished == ["one"] and consumer.stats.acked == 1

    idle = DurableConsumer(js, _spec(f"{name}-idle", fetch_timeout_s=30.0), slow_handler, source="test")
    stop_idle = asyncio.Event()
    idle_run = asyncio.create_task(idle.run(stop_idle))
    await asyncio.sleep(0.3)  # let it sit in its 30 s fetch
    stop_idle.set()
    await asyncio.wait_for(idle_run, 5)


async def test_long_handler_is_kept_alive_past_ack_wait(js: JetStreamContext) -> None:
    name = uuid.uuid4().hex[:10]
    calls = 0

    async def long_handler(msg: Msg) -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(2.5)  # longer than ack_wait below

    await publish(js, f"evertune.telemetry.{name}", b"trial", msg_id=uuid.uuid4().hex)
    consumer = DurableConsumer(js, _spec(name, ack_wait_s=1.0), long_handler, source="test")
    await _run_until(consumer, lambda: consumer.stats.acked == 1)
    assert calls == 1


async def test_with_nak_on_stop_a_long_handler_is_cancelled_and_its_message_given_back_at_once(
    js: JetStreamContext,
) -> None:
    """A trial-like handler (minutes long) stopped mid-way: cancelled, the message nak'ed, and a
    second instance of the same durable takes it well before the ack wait (60 s) would pass."""
    name = uuid.uuid4().hex[:10]
    started = asyncio.Event()
    cancelled: list[str] = []
    taken_over: list[str] = []

    async def endless(msg: Msg) -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(msg.data.decode())
            raise

    async def quick(msg: Msg) -> None:
        taken_over.append(msg.data.decode())

    spec = _spec(name, ack_wait_s=60.0, batch=1, nak_on_stop=True)
    first = DurableConsumer(js, spec, endless, source="test")
    stop = asyncio.Event()
    running = asyncio.create_task(first.run(stop))
    await publish(js, f"evertune.telemetry.{name}", b"job", msg_id=uuid.uuid4().hex)
    await asyncio.wait_for(started.wait(), 10)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert cancelled == ["job"] and first.stats.abandoned == 1 and first.stats.acked == 0

    second = DurableConsumer(js, spec, quick, source="test")
    await _run_until(second, lambda: second.stats.acked == 1, timeout_s=15)
    assert taken_over == ["job"]
