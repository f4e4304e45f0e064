"""WatchEvents: events from the EVENTS stream, filtered, until the client cancels or the deployer stops.

One ordered (ephemeral) consumer per call, on `evertune.events.<kind|*.*>.<endpoint|*>`; kinds
beyond one and the severity floor are filtered here. A caller scoped to a tenant watching every
endpoint sees only its tenant's endpoints' events (no system events).

Names are reused: tenant B deletes "foo", tenant A creates "foo". So an event belongs to the
endpoint it is about, by its immutable id (`Event.endpoint_uid`): a scoped caller sees it only when
the endpoint of that name now is its tenant's AND has that id (A never reads B's history). An event
without an id (written before endpoints had ids) belongs to the endpoint of its name that existed
when it happened: created no later than the event. The endpoint is read again whenever an event is
newer than the last look (B's open watch stops at A's first event, whatever kinds it filters).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from evertune.deployer.commands import WatchFilter
from evertune.infra.events import EventKind, decode_event, event_filter_subject
from evertune.infra.runtime.auth import Principal
from evertune.v1 import events_pb2


@dataclass(frozen=True)
class Incarnation:
    """The endpoint of a name as stored now."""

    tenant: str  #: its owner
    created: datetime  #: when it was created (UTC)
    uid: str  #: its immutable id (Endpoint.uid)


#: The endpoint stored under a name now, None when there is none.
IncarnationOf = Callable[[str], Awaitable[Incarnation | None]]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def subject_for(filt: WatchFilter) -> str:
    """The narrowest subject filter: one kind when exactly one is asked, one endpoint when given."""
    kind = EventKind(next(iter(filt.kinds))) if len(filt.kinds) == 1 else None
    return event_filter_subject(kind, filt.endpoint or None)


class TenantScope:
    """Whether an event belongs to the caller's tenant (see the module docstring): by the endpoint
    incarnation the event happened under, looked up again when an event is newer than the last
    look."""

    def __init__(
        self, caller: Principal, incarnation_of: IncarnationOf, *, clock: Callable[[], datetime] = _utcnow
    ) -> None:
        self.caller = caller
        self._incarnation_of = incarnation_of
        self._clock = clock
        #: name -> (what was stored, when it was looked at)
        self._looked: dict[str, tuple[Incarnation | None, datetime]] = {}

    async def allows(self, event: events_pb2.Event) -> bool:
        if self.caller.all_tenants:
            return True
        if not event.endpoint:
            return False
        if event.WhichOneof("payload") == "endpoint_deleted":
            return self.caller.sees(event.endpoint_deleted.tenant)
        happened = event.time.ToDatetime(tzinfo=UTC)
        looked = self._looked.get(event.endpoint)
        if looked is None or happened >= looked[1]:
            looked = (await self._incarnation_of(event.endpoint), self._clock())
            self._looked[event.endpoint] = looked
        current = looked[0]
        if current is None or not self.caller.sees(current.tenant):
            return False
        if event.endpoint_uid:
            return event.endpoint_uid == current.uid
        return happened >= current.created


async def watch(
    js: JetStreamContext,
    filt: WatchFilter,
    *,
    scope: TenantScope,
    stopping: asyncio.Event,
    on_live: Callable[[], Awaitable[None]],
) -> AsyncGenerator[events_pb2.Event, None]:
    """Yield matching events until `stopping` is set (returns) or the consumer is cancelled.

    `on_live` is awaited once the consumer exists: every event published after it is delivered.
    """
    if filt.since is not None:
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=filt.since.astimezone(UTC)
        )
    else:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
    sub = await js.subscribe(subject_for(filt), stream="EVENTS", ordered_consumer=True, config=config)
    await on_live()
    stop = asyncio.ensure_future(stopping.wait())
    messages = sub.messages
    try:
        while not stopping.is_set():
            nxt = asyncio.ensure_future(messages.__anext__())
            try:
                done, _ = await asyncio.wait({nxt, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not nxt.done():
                    nxt.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await nxt
            if nxt not in done or nxt.cancelled():
                return
            try:
                msg = nxt.result()
            except StopAsyncIteration:
                return
            event = decode_event(msg.data, subject=msg.subject)
            if event is None or not filt.accepts(kind=event.kind, severity=event.severity):
                continue
            if await scope.allows(event):
                yield event
    finally:
        stop.cancel()
        with contextlib.suppress(nats.errors.Error):  # closed connection: its ordered consumer is ephemeral
            await sub.unsubscribe()
