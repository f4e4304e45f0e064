"""The batching consumer against the session's nats-server: flush by size, by deadline, after a
failed flush a rest and naks, at stop. The handler is a real one that keeps what it is given."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, ConsumerInfo, DeliverPolicy

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import BatchingConsumer, BatchSpec, PoisonMessage, publish
from evertune.infra.bus.batching import fetch_wait_s
from evertune.v1 import events_pb2


@dataclass
class Keeper:
    """A `BatchHandler` whose group is the messages' payloads (its size: their count). Its flushes
    fail while `failures_left` > 0; a payload "poison" cannot be taken."""

    failures_left: int = 0  #: flushes still to fail
    group: list[str] = field(default_factory=list)  #: payloads taken since the last flush
    flushed: list[list[str]] = field(default_factory=list)  #: groups written, in order
    failed: list[list[str]] = field(default_factory=list)  #: groups whose flush failed, in order
    taken: list[tuple[str, int, float]] = field(default_factory=list)  #: (payload, deliveries, when)
    flush_at: list[float] = field(default_factory=list)  #: monotonic time of each flush, either outcome

    def take(self, msg: Msg) -> int:
        payload = msg.data.decode()
        if payload == "poison":
            raise PoisonMessage("cannot decode the payload")
        self.taken.append((payload, msg.metadata.num_delivered or 0, time.monotonic()))
        self.group.append(payload)
        return len(self.group)

    async def flush(self) -> None:
        group, self.group = self.group, []
        self.flush_at.append(time.monotonic())
        if self.failures_left > 0:
            self.failures_left -= 1
            self.failed.append(group)
            raise RuntimeError("the store is away")
        self.flushed.append(group)


def spec(name: str, **overrides: object) -> BatchSpec:
    values: dict[str, object] = {
        "stream": "TELEMETRY",
        "durable": f"batch-{name}",
        "filter_subject": f"evertune.telemetry.batch-{name}",
        "group_size": 1000,
        "flush_s": 60.0,
        "fetch_timeout_s": 30.0,  # longer than any test: a flush never waits on an idle fetch
        "ack_wait_s": 5.0,
        "backoff_s": (0.2,),
    }
    values.update(overrides)
    return BatchSpec(**values)  # type: ignore[arg-type]


async def send(js: JetStreamContext, s: BatchSpec, *payloads: str) -> None:
    for payload in payloads:
        await publish(js, s.filter_subject, payload.encode(), msg_id=uuid.uuid4().hex)


@asynccontextmanager
async def running(consumer: BatchingConsumer) -> AsyncIterator[asyncio.Event]:
    """`consumer` running for the block; stopped (and returned) after it. Yields the stop event."""
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def settled(js: JetStreamContext, s: BatchSpec) -> ConsumerInfo:
    """The consumer's info once no ack is pending (acks are not awaited by the server), or after 5 s."""
    deadline = time.monotonic() + 5
    while True:
        info: ConsumerInfo = await js.consumer_info(s.stream, s.durable)
        if info.num_ack_pending == 0 or time.monotonic() > deadline:
            return info
        await asyncio.sleep(0.05)


async def test_a_group_is_flushed_as_soon_as_it_reaches_group_size(js: JetStreamContext) -> None:
    s = spec(uuid.uuid4().hex[:10], group_size=3)
    keeper = Keeper()
    consumer = BatchingConsumer(js, s, keeper, source="test")
    await send(js, s, *[f"m{i}" for i in range(7)])
    async with running(consumer):
        await eventually(lambda: consumer.stats.acked == 6, timeout_s=10, what="two groups acked")
        await asyncio.sleep(0.3)  # nothing more comes: the 7th waits in hand for its deadline
        assert keeper.flushed == [["m0", "m1", "m2"], ["m3", "m4", "m5"]]
        assert keeper.group == ["m6"] and consumer.stats.in_flight == 1
        info = await settled(js, s)
        assert info.num_ack_pending == 1 and info.num_pending == 0  # only the 7th is unacked
    assert consumer.stats.retried == 0 and consumer.stats.failed_flushes == 0


async def test_a_group_is_flushed_flush_s_after_its_first_message(js: JetStreamContext) -> None:
    """The fetch waits 30 s when idle; with a group in hand it waits only until the deadline."""
    s = spec(uuid.uuid4().hex[:10], flush_s=0.4)
    keeper = Keeper()
    consumer = BatchingConsumer(js, s, keeper, source="test")
    async with running(consumer):
        await asyncio.sleep(0.2)  # the consumer sits in its 30 s fetch
        await send(js, s, "a")
        await asyncio.sleep(0.1)
        await send(js, s, "b")
        await eventually(lambda: consumer.stats.acked == 2, timeout_s=10, what="the group acked")
    assert keeper.flushed == [["a", "b"]]
    waited = keeper.flush_at[0] - keeper.taken[0][2]
    assert 0.4 <= waited < 1.4, waited
    assert (await settled(js, s)).num_ack_pending == 0


async def test_a_failed_flush_naks_the_group_and_the_rest_of_the_fetch_and_rests(
    js: JetStreamContext,
) -> None:
    """Group size 2, four messages in one fetch, the first flush fails: all four are nak'ed with the
    first backoff step; the consumer takes nothing, not even a message newly published, until that
    step has passed. The second failure in a row rests for the second step. Then all is stored."""
    s = spec(uuid.uuid4().hex[:10], group_size=2, flush_s=0.3, backoff_s=(0.5, 1.0))
    keeper = Keeper(failures_left=2)
    consumer = BatchingConsumer(js, s, keeper, source="test")
    await send(js, s, "m0", "m1", "m2", "m3")
    async with running(consumer):
        await eventually(lambda: consumer.stats.failed_flushes == 1, timeout_s=10, what="a failed flush")
        failed_at = keeper.flush_at[0]
        assert consumer.stats.retried == 4  # the group and the rest of its fetch
        assert "the store is away" in consumer.stats.last_error
        await send(js, s, "late")  # available at once: only the rest holds it back
        await eventually(lambda: consumer.stats.acked == 5, timeout_s=15, what="everything stored")

    assert keeper.failed[0] == ["m0", "m1"]  # the first group, by size
    assert keeper.failed[1] and set(keeper.failed[1]) <= {"m0", "m1", "m2", "m3", "late"}
    assert sorted(p for group in keeper.flushed for p in group) == ["late", "m0", "m1", "m2", "m3"]
    first_after = min(when for payload, _, when in keeper.taken if when > failed_at)
    assert first_after - failed_at >= 0.5 - 0.02  # rested for the first step
    second_failed_at = keeper.flush_at[1]
    after_second = min(when for _, _, when in keeper.taken if when > second_failed_at)
    assert after_second - second_failed_at >= 1.0 - 0.02  # the second failure in a row: the second step
    redelivered = {payload: n for payload, n, when in keeper.taken if when > failed_at and payload != "late"}
    assert set(redelivered) == {"m0", "m1", "m2", "m3"} and min(redelivered.values()) >= 2
    assert consumer.stats.failed_flushes == 2 and consumer.stats.poisoned == 0
    assert (await settled(js, s)).num_ack_pending == 0


async def test_stop_flushes_the_group_in_hand(js: JetStreamContext) -> None:
    s = spec(uuid.uuid4().hex[:10])
    keeper = Keeper()
    consumer = BatchingConsumer(js, s, keeper, source="test")
    await send(js, s, "x", "y", "z")
    async with running(consumer):
        await eventually(lambda: consumer.stats.in_flight == 3, timeout_s=10, what="three in hand")
        assert keeper.flushed == []  # neither size (1000) nor deadline (60 s) reached
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 2.0  # the fetch in progress did not hold the stop back
    assert keeper.flushed == [["x", "y", "z"]] and consumer.stats.acked == 3
    info = await settled(js, s)
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_a_poison_message_is_terminated_and_left_out_of_the_group(js: JetStreamContext) -> None:
    s = spec(uuid.uuid4().hex[:10], group_size=2)
    keeper = Keeper()
    consumer = BatchingConsumer(js, s, keeper, source="poison-test")
    await send(js, s, "a", "poison", "b")
    async with running(consumer):
        await eventually(lambda: consumer.stats.acked == 2, timeout_s=10, what="the group acked")
    assert keeper.flushed == [["a", "b"]] and consumer.stats.poisoned == 1
    assert "cannot decode" in consumer.stats.last_error
    sub = await js.subscribe(
        "evertune.events.service.poison_message.>",
        stream="EVENTS",
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    try:
        while True:
            event = events_pb2.Event.FromString((await sub.next_msg(timeout=10)).data)
            if event.service_poison_message.consumer == s.durable:
                break
    finally:
        await sub.unsubscribe()
    assert event.source == "poison-test" and "cannot decode" in event.service_poison_message.error
    info = await settled(js, s)
    assert info.num_ack_pending == 0 and info.num_pending == 0


def test_the_fetch_waits_for_the_group_deadline_at_most() -> None:
    assert fetch_wait_s(started=None, now=5.0, flush_s=0.2, idle_s=30.0) == 30.0  # nothing in hand
    assert fetch_wait_s(started=5.0, now=5.05, flush_s=0.2, idle_s=30.0) == pytest.approx(0.15)
    assert fetch_wait_s(started=5.0, now=5.2, flush_s=0.2, idle_s=30.0) is None  # due: flush first
    assert fetch_wait_s(started=5.0, now=5.1999999, flush_s=0.2, idle_s=30.0) == 0.001  # at least 1 ms
