"""WatchEvents: events from the EVENTS stream, filtered, until the client cancels or the deployer stops.

One ordered (ephemeral) consumer per call, on `evertune.events.<kind|*.*>.<endpoint|*>`; kinds
beyond one and the severity floor are filtered here. A caller scoped to a tenant watching every
endpoint sees only its tenant's endpoints' events (no system events).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from datetime import UTC

from evertune.deployer.validation import WatchFilter
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from evertune.events import EventKind, decode_event, event_filter_subject
from evertune.runtime.auth import Principal
from evertune.v1 import events_pb2

TenantOf = Callable[[str], Awaitable[str | None]]


def subject_for(filt: WatchFilter) -> str:
    """The narrowest subject filter: one kind when exactly one is asked, one endpoint when given."""
    kind = EventKind(next(iter(filt.kinds))) if len(filt.kinds) == 1 else None
    return event_filter_subject(kind, filt.endpoint or None)


class TenantScope:
    """Whether an event belongs to the caller's tenant (endpoint owners cached per call)."""

    def __init__(self, caller: Principal, tenant_of: TenantOf) -> None:
        self.caller = caller
        self._tenant_of = tenant_of
        self._owners: dict[str, str | None] = {}

    async def allows(self, event: events_pb2.Event) -> bool:
        if self.caller.all_tenants:
            return True
        if not event.endpoint:
            return False
        if event.WhichOneof("payload") == "endpoint_deleted":
            return self.caller.sees(event.endpoint_deleted.tenant)
        if event.endpoint not in self._owners or self._owners[event.endpoint] is None:
            self._owners[event.endpoint] = await self._tenant_of(event.endpoint)
        owner = self._owners[event.endpoint]
        return owner is not None and self.caller.sees(owner)


async def watch(
    js: JetStreamContext,
    filt: WatchFilter,
    *,
    scope: TenantScope,
    stopping: asyncio.Event,
) -> AsyncGenerator[events_pb2.Event, None]:
    """Yield matching events until `stopping` is set (returns) or the consumer is cancelled."""
    if filt.since is not None:
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=filt.since.astimezone(UTC)
        )
    else:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
    sub = await js.subscribe(subject_for(filt), stream="EVENTS", ordered_consumer=True, config=config)
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
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
