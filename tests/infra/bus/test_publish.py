from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from nats.js.errors import NoStreamResponseError

from evertune.errors import InvalidArgument
from evertune.infra.bus import MSG_ID_HEADER, connect, declare, load_definitions, publish, publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.nats_server import EmbeddedNats
from evertune.v1 import events_pb2


async def test_same_msg_id_is_reported_duplicate_and_stored_once(js: JetStreamContext) -> None:
    subject = f"evertune.telemetry.dup-{uuid.uuid4().hex[:8]}"
    msg_id = uuid.uuid4().hex
    first = await publish(js, subject, b"record", msg_id=msg_id)
    second = await publish(js, subject, b"record", msg_id=msg_id)
    other = await publish(js, subject, b"record", msg_id=uuid.uuid4().hex)

    assert not first.duplicate
    assert second.duplicate
    assert second.seq == first.seq
    assert not other.duplicate
    stored = await js.stream_info("TELEMETRY", subjects_filter=subject)
    assert stored.state.subjects == {subject: 2}
    message = await js.get_msg("TELEMETRY", seq=first.seq)
    assert message.headers is not None and message.headers[MSG_ID_HEADER] == msg_id


async def test_publish_without_msg_id_is_refused(js: JetStreamContext) -> None:
    with pytest.raises(InvalidArgument, match="msg_id"):
        await publish(js, "evertune.telemetry.x", b"record", msg_id="")


def _breach(endpoint: str) -> events_pb2.Event:
    payload = events_pb2.SlaBreach(breach_id="b1", deployment="dep-a", burn_rate=2.0)
    return new_event(EventKind.SLA_BREACH, endpoint=endpoint, source="test", payload_message=payload)


async def test_an_event_no_stream_took_is_tried_again_until_one_does(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")  # a server of its own: no EVENTS stream yet
    await server.start()
    client = await connect(server.url, name="test-publish-retry")
    try:
        js = client.jetstream()
        event = _breach("retry")
        publishing = asyncio.create_task(publish_event(js, event, deadline_s=20.0))
        await asyncio.sleep(0.5)
        assert not publishing.done()  # no stream answered: still trying
        await declare(js, load_definitions())
        ack = await asyncio.wait_for(publishing, 10.0)
        assert ack.stream == "EVENTS" and not ack.duplicate
        stored = await js.get_msg("EVENTS", seq=ack.seq)
        assert stored.headers is not None and stored.headers[MSG_ID_HEADER] == event.id
        assert (await js.stream_info("EVENTS")).state.messages == 1

        other = client.jetstream()
        await js.delete_stream("EVENTS")
        started = time.monotonic()
        with pytest.raises(NoStreamResponseError):
            await publish_event(other, _breach("gone"), deadline_s=0.5)
        assert time.monotonic() - started < 3.0  # gave up at its deadline, not at a fixed count
    finally:
        await client.close()
        await server.stop()
