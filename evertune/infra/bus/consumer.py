"""Durable pull consumers: ack after the side effect, nak with backoff, terminate poison messages.

A handler is an async function of one message. Its contract:
- return normally once its side effect is done: the message is acked;
- raise `PoisonMessage` when the message can never succeed (it cannot be decoded, say): it is
  terminated at once and reported as a `service.poison_message` event;
- raise anything else for a failure that may pass: the message is nak'ed with a growing delay and
  redelivered, up to `max_deliver` deliveries, after which it is terminated and reported too.
Redelivery means handlers must be idempotent (key their side effects on the message id).
A handler that runs long is kept alive with in-progress acks (three per ack wait; one that fails
is logged and the next tried), so it is not redelivered meanwhile. On stop, the batch in hand is
finished, or, with `nak_on_stop` (a handler that runs for minutes, such as a trial), the handler
is cancelled and its message nak'ed at once, for another instance to take.

For messages written in groups (one store insert for many), `batching.BatchingConsumer` runs the
same fetch, nak and poison steps over a group at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError

from evertune.errors import EvertuneError
from evertune.infra.bus.publish import MSG_ID_HEADER, publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.logging import get_logger
from evertune.infra.retry import StepBackoff
from evertune.v1 import events_pb2

log = get_logger("evertune.infra.bus.consumer")

#: What a fetch raises while its stream or consumer has no leader for a moment (a cluster electing
#: one after a node went away, a server restarting): the loop rests and fetches again.
LEADERLESS = (ServiceUnavailableError, NoStreamResponseError, NoRespondersError)
#: Seconds that rest lasts (cut short by stop).
LEADERLESS_REST_S = 0.5

Handler = Callable[[Msg], Coroutine[Any, Any, None]]


class PoisonMessage(EvertuneError):
    """Raised by a handler for a message that can never be handled: terminated, not retried."""


@dataclass(frozen=True)
class ConsumerSpec:
    """Where a durable consumer reads and how it retries."""

    stream: str  #: JetStream stream name, e.g. "TELEMETRY"
    durable: str  #: durable consumer name; instances sharing it share the work
    filter_subject: str  #: subjects to read, e.g. "evertune.telemetry.>"
    max_deliver: int = 5  #: deliveries before a failing message is terminated as poison
    ack_wait_s: float = 30.0  #: seconds before an unacked message is redelivered
    backoff_s: tuple[float, ...] = (0.5, 2.0, 10.0, 30.0)  #: nak delay after the 1st, 2nd, ... failure
    batch: int = 64  #: messages per fetch
    fetch_timeout_s: float = 5.0  #: how long one fetch waits on the server for messages
    nak_on_stop: bool = False  #: on stop, cancel the handler and give its message back at once


@dataclass
class ConsumerStats:
    """Counters a service reports in its status (of a `DurableConsumer` or a `BatchingConsumer`)."""

    acked: int = 0  #: messages handled and acked
    retried: int = 0  #: messages nak'ed for redelivery
    poisoned: int = 0  #: messages terminated and reported
    abandoned: int = 0  #: messages given back unfinished at stop (`nak_on_stop`)
    in_flight: int = 0  #: messages being handled now (batching: the messages of the group in hand)
    failed_flushes: int = 0  #: batching only: group writes that failed (each followed by a rest)
    last_error: str = field(default="")  #: the most recent handler (or flush, or poison) error


class DurableConsumer:
    """Runs `handler` over a durable pull consumer until a stop event is set."""

    def __init__(self, js: JetStreamContext, spec: ConsumerSpec, handler: Handler, *, source: str) -> None:
        self._js = js
        self._spec = spec
        self._handler = handler
        self._source = source
        self._backoff = StepBackoff(spec.backoff_s)
        self.stats = ConsumerStats()

    def _config(self) -> ConsumerConfig:
        spec = self._spec
        return ConsumerConfig(
            durable_name=spec.durable,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=spec.ack_wait_s,
            max_deliver=spec.max_deliver,
            filter_subject=spec.filter_subject,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Fetch and handle until `stop` is set; the batch in hand is finished before returning
        (or, with `nak_on_stop`, the message in hand given back and the rest left unacked).

        Stopping never waits for a fetch: the fetch is cancelled, and anything it would have
        delivered stays unacked on the server and goes to the next fetch or another instance.
        """
        spec = self._spec
        sub = await self._js.pull_subscribe(
            spec.filter_subject, durable=spec.durable, stream=spec.stream, config=self._config()
        )
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                msgs = await fetch_unless_stopped(
                    sub, batch=spec.batch, timeout_s=spec.fetch_timeout_s, stopping=stopping
                )
                if msgs is None:
                    break
                for msg in msgs:
                    if stop.is_set() and self._spec.nak_on_stop:
                        break  # left unacked: redelivered after the ack wait, or to another instance
                    await self._handle(msg, stopping)
        finally:
            stopping.cancel()
            with contextlib.suppress(NatsError):  # stopping: the fetches end either way
                await sub.unsubscribe()

    async def _handle(self, msg: Msg, stopping: asyncio.Task[Any]) -> None:
        self.stats.in_flight += 1
        keepalive = asyncio.create_task(self._keep_alive(msg))
        try:
            if self._spec.nak_on_stop:
                if not await self._unless_stopped(msg, stopping):
                    return
            else:
                await self._handler(msg)
        except PoisonMessage as err:
            await self._poison(msg, str(err))
        except Exception as err:  # a handler failure of any kind must not stop the consumer
            await self._retry_or_poison(msg, err)
        else:
            await msg.ack()
            self.stats.acked += 1
        finally:
            keepalive.cancel()
            self.stats.in_flight -= 1

    async def _unless_stopped(self, msg: Msg, stopping: asyncio.Task[Any]) -> bool:
        """The handler raced against stop: True once it finished (raising what it raised); False
        when stop came first: it is cancelled and the message given back at once."""
        work = asyncio.create_task(self._handler(msg))
        try:
            await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # stop came first, or this consumer itself is cancelled: the handler goes too
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):  # raised below, by result()
                    await work
        if not work.cancelled():
            work.result()
            return True
        self.stats.abandoned += 1
        with contextlib.suppress(NatsError):  # not given back: redelivered after the ack wait
            await msg.nak()
        log.warning("handler stopped; message given back", subject=msg.subject, consumer=self._spec.durable)
        return False

    async def _keep_alive(self, msg: Msg) -> None:
        """Tell the server the message is still being worked on, three times per ack wait; a
        failed in-progress ack is logged and the next one tried (redelivery is the fallback)."""
        while True:
            await asyncio.sleep(self._spec.ack_wait_s / 3)
            try:
                await msg.in_progress()
            except Exception as err:
                log.warning("in-progress ack failed", subject=msg.subject, error=str(err))

    async def _retry_or_poison(self, msg: Msg, err: Exception) -> None:
        text = f"{type(err).__name__}: {err}"
        self.stats.last_error = text
        deliveries = msg.metadata.num_delivered or 1
        if deliveries >= self._spec.max_deliver:
            await self._poison(msg, text)
            return
        delay = self._backoff.delay(deliveries)
        log.warning("handler failed; redelivering", subject=msg.subject, deliveries=deliveries, error=text)
        await msg.nak(delay=delay)
        self.stats.retried += 1

    async def _poison(self, msg: Msg, error: str) -> None:
        self.stats.poisoned += 1
        await terminate_poison(
            self._js,
            msg,
            stream=self._spec.stream,
            consumer=self._spec.durable,
            source=self._source,
            error=error,
        )


async def fetch_unless_stopped(
    sub: JetStreamContext.PullSubscription, *, batch: int, timeout_s: float, stopping: asyncio.Task[Any]
) -> list[Msg] | None:
    """One fetch raced against `stopping`: the messages ([] when the fetch timed out empty, or when
    JetStream had no leader to answer it: then after a rest of `LEADERLESS_REST_S`), or None when
    stop came first. A fetch cut short leaves its messages unacked on the server, for the next
    fetch or another instance."""
    fetching = asyncio.create_task(sub.fetch(batch, timeout=timeout_s))
    done, _ = await asyncio.wait({fetching, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if fetching not in done:
        fetching.cancel()
        with contextlib.suppress(asyncio.CancelledError, NatsError, TimeoutError):  # not wanted any more
            await fetching
        return None
    try:
        return fetching.result()
    except (NatsTimeoutError, TimeoutError):
        return []
    except LEADERLESS as err:
        log.warning("fetch found no leader; fetching again", error=type(err).__name__)
        rested, _ = await asyncio.wait({stopping}, timeout=LEADERLESS_REST_S)
        return None if stopping in rested else []


async def terminate_poison(
    js: JetStreamContext, msg: Msg, *, stream: str, consumer: str, source: str, error: str
) -> None:
    """Terminate `msg` (no redelivery) and report it as a `service.poison_message` event.

    The report failing to publish is logged, not raised: the message is already terminated.
    """
    await msg.term()
    meta = msg.metadata
    log.error("poison message terminated", subject=msg.subject, consumer=consumer, error=error)
    report = events_pb2.ServicePoisonMessage(
        stream=stream,
        consumer=consumer,
        subject=msg.subject,
        msg_id=(msg.headers or {}).get(MSG_ID_HEADER, ""),
        stream_sequence=meta.sequence.stream if meta.sequence else 0,
        deliveries=meta.num_delivered or 0,
        error=error[:1000],
        payload_bytes=len(msg.data),
    )
    event = new_event(EventKind.SERVICE_POISON_MESSAGE, endpoint="", source=source, payload_message=report)
    try:
        await publish_event(js, event)
    except Exception as err:
        log.error("could not report poison message", error=str(err))
