"""A message on an events subject that is not an Event (forged or corrupt) is skipped by every
reader that cannot terminate it, and the events after it still arrive (hole 9 of the security
issue): `WatchEvents`, the trial lookup of Promote-by-trial, `evertune events tail`. Before the
fix each raised on it: WatchEvents ended, Promote-by-trial answered UNKNOWN for the stream's 30
days, and `events tail` crashed."""

from __future__ import annotations

import asyncio
import json
import uuid

from nats.js import JetStreamContext

from evertune.deployer.commands import WatchFilter
from evertune.deployer.trial_lookup import find_trial
from evertune.deployer.watch import Incarnation, TenantScope, watch
from evertune.infra.bus import publish, publish_event
from evertune.infra.events import EventKind, decode_event, event_subject, new_event
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime.auth import ALL_TENANTS, Principal
from evertune.v1 import endpoint_pb2, events_pb2
from tests.apps.cli.helpers import evertune

#: Bytes no protobuf parser accepts (a field tag whose varint never ends).
GARBAGE = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"


async def _plant(js: JetStreamContext, kind: EventKind, endpoint: str) -> None:
    await publish(js, event_subject(kind, endpoint), GARBAGE, msg_id=uuid.uuid4().hex)


def _trial_completed(endpoint: str, trial_id: str) -> events_pb2.Event:
    completed = events_pb2.TrialCompleted(
        trial_id=trial_id, search_id="s1", engine_config=endpoint_pb2.EngineConfig(engine="vllm"), passed=True
    )
    return new_event(EventKind.TRIAL_COMPLETED, endpoint=endpoint, source="runner", payload_message=completed)


def test_decode_event_says_none_for_garbage() -> None:
    assert decode_event(GARBAGE, subject="evertune.events.x") is None
    event = _trial_completed("ep", "t1")
    assert decode_event(event.SerializeToString()) == event


async def test_trial_lookup_skips_a_forged_message(js: JetStreamContext) -> None:
    endpoint = f"forged-{uuid.uuid4().hex[:8]}"
    await _plant(js, EventKind.TRIAL_COMPLETED, endpoint)
    await publish_event(js, _trial_completed(endpoint, "t-real"))
    found = await find_trial(js, endpoint=endpoint, trial_id="t-real")
    assert found.trial_id == "t-real" and found.search_id == "s1"


async def test_watch_events_goes_on_past_a_forged_message(js: JetStreamContext) -> None:
    endpoint = f"forged-{uuid.uuid4().hex[:8]}"
    stopping = asyncio.Event()
    scope = TenantScope(Principal(tenant=ALL_TENANTS, label="operator"), lambda _: _incarnation())
    filt = WatchFilter(endpoint=endpoint, kinds=frozenset(), min_severity=0, since=None)
    live = asyncio.Event()

    async def on_live() -> None:
        live.set()

    events = watch(js, filt, scope=scope, stopping=stopping, on_live=on_live)
    first = asyncio.ensure_future(events.__anext__())
    await asyncio.wait_for(live.wait(), 10.0)  # subscribed: new events only from here
    await _plant(js, EventKind.TRIAL_COMPLETED, endpoint)
    real = _trial_completed(endpoint, "t-after")
    await publish_event(js, real)
    try:
        assert (await asyncio.wait_for(first, 10.0)).id == real.id
    finally:
        stopping.set()
        await events.aclose()


async def _incarnation() -> Incarnation | None:
    return None  # an operator's watch never asks


async def test_events_tail_prints_past_a_forged_message(
    nats_server: EmbeddedNats, js: JetStreamContext
) -> None:
    endpoint = f"forged-{uuid.uuid4().hex[:8]}"
    await _plant(js, EventKind.TRIAL_COMPLETED, endpoint)
    real = _trial_completed(endpoint, "t-tail")
    await publish_event(js, real)
    args = ("events", "tail", "--nats-url", nats_server.url, "--all", "--count", "1", "--json")
    result = await asyncio.to_thread(evertune, *args, "--endpoint", endpoint, timeout=30)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["id"] == real.id
    assert "skipped an undecodable message" in result.stderr
