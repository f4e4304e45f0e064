"""`evertune events tail --chain`: one drift followed to its promotion through the events' cause ids,
on a real nats-server; `CauseChain` on its own."""

from __future__ import annotations

import asyncio
import json

from nats.js import JetStreamContext

from evertune.apps.cli.events import CauseChain
from evertune.infra.bus import publish_event
from evertune.infra.events import EventKind, EventPayload, new_event
from evertune.infra.nats_server import EmbeddedNats
from evertune.v1 import events_pb2
from tests.apps.cli.helpers import run_cli

ENDPOINT = "chain-a"


def _event(
    kind: EventKind, payload: EventPayload, *, cause: str = "", endpoint: str = ENDPOINT
) -> events_pb2.Event:
    return new_event(kind, endpoint=endpoint, source="test", payload_message=payload, cause_id=cause)


def test_a_chain_takes_its_first_event_and_what_it_caused() -> None:
    drift = _event(EventKind.DRIFT_DETECTED, events_pb2.DriftDetected())
    profile = _event(EventKind.PROFILE_READY, events_pb2.ProfileReady(), cause=drift.id)
    search = _event(EventKind.SEARCH_COMPLETED, events_pb2.SearchCompleted(), cause=profile.id)
    unrelated = _event(EventKind.PROFILE_READY, events_pb2.ProfileReady(), cause="elsewhere")
    chain = CauseChain.of(drift.id)
    assert [chain.take(e) for e in (unrelated, drift, profile, unrelated, search)] == [
        False,
        True,
        True,
        False,
        True,
    ]
    assert chain.ids == {drift.id, profile.id, search.id}


async def test_tail_follows_a_drift_to_its_promotion(nats_server: EmbeddedNats, js: JetStreamContext) -> None:
    before = _event(EventKind.SLA_BREACH, events_pb2.SlaBreach())
    drift = _event(EventKind.DRIFT_DETECTED, events_pb2.DriftDetected())
    other_drift = _event(EventKind.DRIFT_DETECTED, events_pb2.DriftDetected(), endpoint="chain-b")
    profile = _event(EventKind.PROFILE_READY, events_pb2.ProfileReady(), cause=drift.id)
    other_profile = _event(EventKind.PROFILE_READY, events_pb2.ProfileReady(), cause=other_drift.id)
    started = _event(EventKind.SEARCH_STARTED, events_pb2.SearchStarted(), cause=profile.id)
    completed = _event(EventKind.SEARCH_COMPLETED, events_pb2.SearchCompleted(), cause=profile.id)
    deploying = _event(EventKind.DEPLOY_STARTED, events_pb2.DeployStarted(), cause=completed.id)
    step = _event(EventKind.DEPLOY_CANARY_STEP, events_pb2.DeployCanaryStep(), cause=deploying.id)
    promoted = _event(EventKind.DEPLOY_PROMOTED, events_pb2.DeployPromoted(), cause=deploying.id)
    published = (
        before,
        drift,
        other_drift,
        profile,
        other_profile,
        started,
        completed,
        deploying,
        step,
        promoted,
    )
    for event in published:
        await publish_event(js, event)
    chain = (drift, profile, started, completed, deploying, step, promoted)

    base = ("events", "tail", "--nats-url", nats_server.url, "--chain", drift.id)
    result = await asyncio.to_thread(run_cli, *base, "--json", "--count", str(len(chain)))
    assert result.returncode == 0, result.stderr
    printed = [json.loads(line)["id"] for line in result.stdout.strip().splitlines()]
    assert printed == [e.id for e in chain]

    # --kind picks what is printed along the chain, not what is followed
    only = await asyncio.to_thread(run_cli, *base, "--kind", "deploy.promoted", "--count", "1")
    assert only.returncode == 0, only.stderr
    assert "deploy.promoted" in only.stdout and "drift.detected" not in only.stdout
