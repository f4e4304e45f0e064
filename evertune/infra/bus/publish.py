"""Publishing to JetStream. Every publish carries a `Nats-Msg-Id`, so a retry is stored once."""

from __future__ import annotations

from google.protobuf.message import Message
from nats.js import JetStreamContext
from nats.js.api import PubAck

from evertune.errors import InvalidArgument
from evertune.infra.events import event_kind, event_subject
from evertune.v1 import events_pb2

MSG_ID_HEADER = "Nats-Msg-Id"


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


async def publish_event(js: JetStreamContext, event: events_pb2.Event) -> PubAck:
    """Publish an event on `evertune.events.<kind>.<endpoint>` with its id as the msg id."""
    subject = event_subject(event_kind(event), event.endpoint)
    return await publish(js, subject, event, msg_id=event.id)
