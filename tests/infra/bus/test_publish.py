from __future__ import annotations

import uuid

import pytest
from nats.js import JetStreamContext

from evertune.errors import InvalidArgument
from evertune.infra.bus import MSG_ID_HEADER, publish


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
