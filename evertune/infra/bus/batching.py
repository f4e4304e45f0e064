"""Batching durable pull consumers: messages taken into a group, the group written at once, then
acked together; a failed write naks the group and rests the consumer.

A `BatchHandler` holds what is specific to its data; `BatchingConsumer` owns everything else:
fetching, the group's messages and flush deadline, acks, naks with backoff, the rest after a
failure, poison termination, stop. The handler's contract:
- `take(msg)` adds a message to the group in hand and returns the group's size now (rows, say;
  what `BatchSpec.group_size` is compared with); it raises `PoisonMessage` for a message that can
  never be written (it cannot be decoded): that message is terminated at once and reported as a
  `service.poison_message` event, and is not part of the group;
- `flush()` writes the group taken since the last flush and starts a new one, whether or not the
  write succeeds; it returns once the write is done (the group's messages are then acked) and
  raises when it failed (they are nak'ed, and redelivered after the backoff delay).
Redelivery means the write must be idempotent (a dedup token derived from the message ids, say).
Unlike `DurableConsumer`, a batching consumer never gives up on a message (`max_deliver` is
unlimited): a failed write is the store's fault, not the message's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from evertune.infra.bus.consumer import ConsumerStats, PoisonMessage, fetch_unless_stopped, terminate_poison
from evertune.infra.logging import get_logger
from evertune.infra.retry import StepBackoff, rest

log = get_logger("evertune.infra.bus.batching")

#: Longest error text kept in the stats and logs (a store error can quote a whole statement).
MAX_ERROR = 500
#: Shortest server wait of a fetch while a group waits for its deadline, in seconds.
_MIN_FETCH_WAIT_S = 0.001


class BatchHandler(Protocol):
    """What a `BatchingConsumer` feeds (the contract is in the module docstring)."""

    def take(self, msg: Msg) -> int:
        """Add `msg` to the group in hand; the group's size now. `PoisonMessage`: never writable."""
        ...

    async def flush(self) -> None:
        """Write the group in hand and start a new one; raise when the write failed."""
        ...


@dataclass(frozen=True)
class BatchSpec:
    """Where a batching consumer reads, how it groups messages, and how it backs off."""

    stream: str  #: JetStream stream name, e.g. "TELEMETRY"
    durable: str  #: durable consumer name; instances sharing it share the work
    filter_subject: str  #: subjects to read, e.g. "evertune.telemetry.>"
    group_size: int  #: group size (as `take` counts it) that flushes the group at once
    flush_s: float  #: longest wait, in seconds, from a group's first message to its flush
    fetch_batch: int = 64  #: messages asked for per fetch
    fetch_timeout_s: float = 5.0  #: longest server wait of one fetch while no group is in hand
    ack_wait_s: float = 30.0  #: seconds before an unacked message is redelivered
    backoff_s: tuple[float, ...] = (0.5, 2.0, 5.0, 10.0)  #: nak delay and rest after 1st, 2nd, ... failure


def fetch_wait_s(*, started: float | None, now: float, flush_s: float, idle_s: float) -> float | None:
    """How long the next fetch may wait on the server: `idle_s` with no group in hand (`started`
    None), else what is left of the group's `flush_s` since it `started` (at least 1 ms); None when
    the group in hand is due for its flush now."""
    if started is None:
        return idle_s
    left = flush_s - (now - started)
    if left <= 0:
        return None
    return max(left, _MIN_FETCH_WAIT_S)


class BatchingConsumer:
    """Runs a `BatchHandler` over a durable pull consumer until a stop event is set.

    The loop's invariant: between two fetches, and when `run` returns, every message fetched is in
    exactly one of four states: in the group in hand (taken, not flushed yet), acked (its group
    written), nak'ed (its group's write failed, or it came in the same fetch after that failure),
    or terminated (poison). Nothing is acked before its group is written, and nothing handed over
    is left unaccounted for (a fetch cut short by stop hands nothing over: its messages stay
    unacked on the server). The group in hand is flushed as soon as `take` reports `group_size`,
    `flush_s` after its first message (the fetch in progress waits no longer than that), and at
    stop. After a failed flush the consumer fetches nothing for the delay it nak'ed the group with
    (the `backoff_s` step of the failures in a row, or of the most deliveries a message of the
    group has had, whichever is later; a success resets it), so a store that is down costs one
    write per backoff step, not one per arriving message.

    `stats`: `acked`, `retried` (messages nak'ed), `failed_flushes`, `poisoned`, `in_flight` (the
    messages of the group in hand) and `last_error` (of a flush or a poison message).
    """

    def __init__(self, js: JetStreamContext, spec: BatchSpec, handler: BatchHandler, *, source: str) -> None:
        self._js = js
        self._spec = spec
        self._handler = handler
        self._source = source
        self._backoff = StepBackoff(spec.backoff_s)
        self._group: list[Msg] = []  #: messages of the group in hand, in fetch order
        self._started = 0.0  #: monotonic time the group's first message was taken
        self._failures = 0  #: flushes failed in a row (reset by a success)
        self.stats = ConsumerStats()

    def consumer_config(self) -> ConsumerConfig:
        """The durable consumer's configuration (created by `run` when missing): explicit acks, no
        delivery limit, room for four fetches' worth of unacked messages at least."""
        spec = self._spec
        return ConsumerConfig(
            durable_name=spec.durable,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=spec.ack_wait_s,
            max_deliver=-1,
            filter_subject=spec.filter_subject,
            max_ack_pending=max(1000, 4 * spec.fetch_batch),
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Fetch, take and flush until `stop` is set; the group in hand is flushed (acked, or nak'ed
        when the write fails) before returning.

        Stopping never waits on a fetch: it is cancelled, and what it would have delivered stays
        unacked on the server for the next fetch or another instance. A rest after a failed flush
        is cut short too.
        """
        spec = self._spec
        sub = await self._js.pull_subscribe(
            spec.filter_subject, durable=spec.durable, stream=spec.stream, config=self.consumer_config()
        )
        stopping = asyncio.create_task(stop.wait())
        pause = 0.0  #: after a failed flush: how long the consumer rests before it fetches again
        try:
            while not stop.is_set():
                if pause > 0:
                    await rest(stop, pause)
                    pause = 0.0
                    continue
                wait_s = fetch_wait_s(
                    started=self._started if self._group else None,
                    now=time.monotonic(),
                    flush_s=spec.flush_s,
                    idle_s=spec.fetch_timeout_s,
                )
                if wait_s is None:
                    pause = await self._flush()
                    continue
                msgs = await fetch_unless_stopped(
                    sub, batch=spec.fetch_batch, timeout_s=wait_s, stopping=stopping
                )
                if msgs is None:
                    break
                pause = await self._take_all(msgs)
            if self._group:
                await self._flush()
        finally:
            stopping.cancel()
            with contextlib.suppress(NatsError):  # stopping: the fetches end either way
                await sub.unsubscribe()

    async def _take_all(self, msgs: Sequence[Msg]) -> float:
        """Take a fetch's messages, flushing each time the group is full; after a failed flush the
        rest of the fetch is nak'ed with its delay, which is returned (0 otherwise)."""
        for i, msg in enumerate(msgs):
            try:
                size = self._handler.take(msg)
            except PoisonMessage as err:
                await self._poison(msg, str(err))
                continue
            if not self._group:
                self._started = time.monotonic()
            self._group.append(msg)
            self.stats.in_flight = len(self._group)
            if size >= self._spec.group_size:
                pause = await self._flush()
                if pause > 0:  # the rest of this fetch waits out the pause on the server
                    await self._nak(msgs[i + 1 :], pause)
                    return pause
        return 0.0

    async def _flush(self) -> float:
        """Flush the group in hand and ack its messages: 0. When the write fails, nak them with the
        next backoff step and return that delay (the consumer rests meanwhile)."""
        msgs, self._group = self._group, []
        self.stats.in_flight = 0
        try:
            await self._handler.flush()
        except Exception as err:  # the write failing in any way must not lose or stop anything
            return await self._failed(msgs, err)
        self._failures = 0
        for msg in msgs:
            await msg.ack()
        self.stats.acked += len(msgs)
        return 0.0

    async def _failed(self, msgs: Sequence[Msg], err: Exception) -> float:
        text = f"{type(err).__name__}: {err}"[:MAX_ERROR]
        self.stats.last_error = text
        self.stats.failed_flushes += 1
        self._failures += 1
        deliveries = max((m.metadata.num_delivered or 1) for m in msgs) if msgs else 1
        delay = self._backoff.delay(max(deliveries, self._failures))
        log.warning(
            "batch flush failed; resting, then redelivering",
            consumer=self._spec.durable,
            messages=len(msgs),
            failures=self._failures,
            delay_s=delay,
            error=text,
        )
        await self._nak(msgs, delay)
        return delay

    async def _nak(self, msgs: Sequence[Msg], delay: float) -> None:
        for msg in msgs:
            with contextlib.suppress(NatsError):  # not given back: redelivered after the ack wait
                await msg.nak(delay=delay)
        self.stats.retried += len(msgs)

    async def _poison(self, msg: Msg, error: str) -> None:
        self.stats.poisoned += 1
        self.stats.last_error = error[:MAX_ERROR]
        await terminate_poison(
            self._js,
            msg,
            stream=self._spec.stream,
            consumer=self._spec.durable,
            source=self._source,
            error=error,
        )
