"""Publishing to JetStream. Every publish carries a `Nats-Msg-Id`, so a retry is stored once."""

from __future__ import annotations

import asyncio
import itertools

from google.protobuf.message import Message
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError

from evertune.errors import InvalidArgument
from evertune.infra.events import event_kind, event_subject
from evertune.infra.logging import get_logger
from evertune.infra.retry import StepBackoff
from evertune.v1 import events_pb2

log = get_logger("evertune.bus.publish")

MSG_ID_HEADER = "Nats-Msg-Id"
#: Waits between tries of an event JetStream did not store: its stream had no leader for a moment
#: (a cluster electing one after a node went away, a server restarting).
EVENT_RETRY = StepBackoff((0.1, 0.25, 0.5, 1.0, 2.0))
#: What "not stored, try again" looks like: no ack in time, no stream answered, JetStream busy.
NOT_STORED = (TimeoutError, NoStreamResponseError, ServiceUnavailableError)


async def publish(
    js: JetStreamContext,
    subject: str,
    payload: bytes | Message,
    *,
    msg_id: str,
    headers: dict[str, str] | None = None,
    timeout_s: float = 5.0,
) -> PubAck:
    """Publish `payload` (bytes or a protobuf message) with `msg_id` as its deduplication id.

    Returns JetStream's ack; `ack.duplicate` is true when the stream already held `msg_id` within
    its duplicate window (the message was not stored again).
    """
    if not msg_id:
        raise InvalidArgument("publish needs a non-empty msg_id (the Nats-Msg-Id header)")
    data = payload.SerializeToString() if isinstance(payload, Message) else payload
    all_headers = {**(headers or {}), MSG_ID_HEADER: msg_id}
    ack: PubAck = await js.publish(subject, data, timeout=timeout_s, headers=all_headers)
    return ack


async def publish_event(js: JetStreamContext, event: events_pb2.Event, *, deadline_s: float = 20.0) -> PubAck:
    """Publish an event on `evertune.events.<kind>.<endpoint>` with its id as the msg id.

    An event is the control plane's record of what happened, so one JetStream did not store is
    tried again (same id: stored once, however many tries land) for up to `deadline_s`; then the
    last error is raised.
    """
    subject = event_subject(event_kind(event), event.endpoint)
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deadline_s
    for attempt in itertools.count(1):
        timeout_s = min(5.0, max(0.1, give_up - loop.time()))
        try:
            return await publish(js, subject, event, msg_id=event.id, timeout_s=timeout_s)
        except NOT_STORED as err:
            wait = EVENT_RETRY.delay(attempt)
            if loop.time() + wait >= give_up:
                raise
            log.info(
                "event not stored; trying again", subject=subject, attempt=attempt, error=type(err).__name__
            )
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")
