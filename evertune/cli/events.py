"""`evertune events tail`: print events from the EVENTS stream as they happen."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from nats.js.api import ConsumerConfig, DeliverPolicy

from evertune.bus import connect
from evertune.cli.common import nats_url_for, shared_settings, stop_on_signals
from evertune.errors import InvalidArgument
from evertune.events import EventKind, event_filter_subject
from evertune.v1 import events_pb2


def tail_subject(*, endpoint: str | None, kind: str | None) -> str:
    """The subject filter for `--endpoint` and `--kind` (either may be absent)."""
    if kind is not None and kind not in {k.value for k in EventKind}:
        known = ", ".join(k.value for k in EventKind)
        raise InvalidArgument(f"unknown event kind {kind!r}; one of: {known}")
    return event_filter_subject(EventKind(kind) if kind else None, endpoint)


def format_event(event: events_pb2.Event) -> str:
    """One readable line: time, kind, endpoint, source, then the payload's fields."""
    payload_field = event.WhichOneof("payload")
    payload = MessageToDict(getattr(event, payload_field)) if payload_field else {}
    when = event.time.ToDatetime().strftime("%H:%M:%S.%f")[:-3]
    fields = " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in payload.items())
    return f"{when} {event.kind:<22} {event.endpoint or '-':<16} {event.source:<12} {fields}"


def tail(
    *,
    data_dir: Path | None,
    nats_url: str | None,
    endpoint: str | None,
    kind: str | None,
    as_json: bool,
    from_start: bool,
    count: int | None,
) -> int:
    shared = shared_settings(data_dir, log_format="console")
    subject = tail_subject(endpoint=endpoint, kind=kind)
    url = nats_url_for(shared, nats_url)

    async def main() -> int:
        stop = asyncio.Event()
        stop_on_signals(stop)
        nc = await connect(url, name="evertune-events-tail", connect_timeout_s=shared.connect_timeout_s)
        try:
            js = nc.jetstream()
            policy = DeliverPolicy.ALL if from_start else DeliverPolicy.NEW
            sub = await js.subscribe(
                subject, stream="EVENTS", ordered_consumer=True, config=ConsumerConfig(deliver_policy=policy)
            )

            async def printer() -> None:
                seen = 0
                async for msg in sub.messages:
                    event = events_pb2.Event.FromString(msg.data)
                    line = json.dumps(MessageToDict(event)) if as_json else format_event(event)
                    print(line, flush=True)
                    seen += 1
                    if count is not None and seen >= count:
                        return

            printing = asyncio.create_task(printer())
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({printing, stopping}, return_when=asyncio.FIRST_COMPLETED)
            for task in (printing, stopping):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        finally:
            await nc.close()
        return 0

    return asyncio.run(main())
