"""Every deploy.* event says what caused it (`Event.cause_id`), through the real API, real NATS and
real chDB: a search winner's rollout carries the search.completed event's id from deploy.started
through each canary step to deploy.promoted; an operator's Promote and Rollback carry their request
ids; a roll back on an sla.breach carries the breach event's id."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.store import Store
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from evertune.v1 import events_pb2
from tests.deployer.conftest import Stack, start_stack, stop_stack
from tests.deployer.helpers import create_request, new_name
from tests.deployer.test_api import deployments, endpoint_in, events_of, routes
from tests.deployer.test_progressive import _search_completed, _states, traffic


def _of(events: list[events_pb2.Event], deployment: str) -> list[events_pb2.Event]:
    """The deploy.* events about `deployment` (as the canary, the promoted or the restarted one)."""
    out = []
    for event in events:
        payload = event.WhichOneof("payload")
        if event.kind.startswith("deploy.") and getattr(event, payload or "").deployment_id == deployment:
            out.append(event)
    return out


async def _ready(stack: Stack) -> tuple[str, str, str]:
    """A READY endpoint: its name, first deployment and the CreateEndpoint's request id."""
    name = new_name()
    request = create_request(name, max_num_seqs=1)
    created = await stack.stub.CreateEndpoint(request, metadata=stack.a)
    await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    return name, created.deployment.id, request.request_id


async def test_a_search_winners_rollout_carries_the_search_events_id_to_its_promotion(
    canary_stack: Stack, store: Store
) -> None:
    stack = canary_stack
    name, first, create_id = await _ready(stack)
    async with traffic(stack, store, name, lambda deployment: 50.0):
        search = await _search_completed(stack.ctx.js, name, store=store)

        async def winner() -> D.Deployment | None:
            found = [d for d in await deployments(stack, name) if d.origin == D.DEPLOYMENT_ORIGIN_SEARCH]
            return found[0] if found else None

        canary = (await eventually(winner, what="the winner deployed")).id
        expected = {canary: D.DEPLOYMENT_STATE_ACTIVE, first: D.DEPLOYMENT_STATE_RETIRED}
        await eventually(lambda: _states(stack, name, expected), timeout_s=30, what="the winner promoted")
    events = await events_of(stack, name)
    initial = _of(events, first)
    assert [(e.kind, e.cause_id) for e in initial] == [
        ("deploy.started", create_id),
        ("deploy.promoted", create_id),
    ]
    created = [e for e in events if e.kind == "endpoint.created"]
    assert [e.cause_id for e in created] == [create_id]
    rollout = _of(events, canary)
    kinds = [e.kind for e in rollout]
    assert kinds[0] == "deploy.started" and kinds[-1] == "deploy.promoted" and "deploy.canary_step" in kinds
    assert {e.cause_id for e in rollout} == {search.id}  # deploy.started -> each step -> deploy.promoted


@pytest.fixture
async def slow_stack(nc: Client, tmp_path: Path) -> AsyncIterator[Stack]:
    """Long canary steps: only a Rollback or a breach ends a rollout in these tests."""
    running = await start_stack(nc, tmp_path, rollout={"step_duration_s": 30.0})
    try:
        yield running
    finally:
        await stop_stack(running)


async def test_an_operators_promote_and_rollback_carry_their_request_ids(slow_stack: Stack) -> None:
    stack = slow_stack
    name, first, _ = await _ready(stack)
    promote = pb.PromoteRequest(
        endpoint=name, request_id=uuid.uuid4().hex, engine_config=D.EngineConfig(max_num_seqs=2)
    )
    promoted = (await stack.stub.Promote(promote, metadata=stack.a)).deployment.id
    await eventually(
        lambda: _states(stack, name, {promoted: D.DEPLOYMENT_STATE_CANARY, first: D.DEPLOYMENT_STATE_ACTIVE}),
        what="the canary taking traffic",
    )
    rollback = pb.RollbackRequest(endpoint=name, request_id=uuid.uuid4().hex, reason="operator")
    await stack.stub.Rollback(rollback, metadata=stack.a)
    expected = {promoted: D.DEPLOYMENT_STATE_ROLLED_BACK, first: D.DEPLOYMENT_STATE_ACTIVE}
    await eventually(lambda: _states(stack, name, expected), what="the canary rolled back")
    events = _of(await events_of(stack, name), promoted)
    started = [e for e in events if e.kind == "deploy.started"]
    assert [e.cause_id for e in started] == [promote.request_id]
    assert {e.cause_id for e in events if e.kind == "deploy.canary_step"} <= {promote.request_id}
    back = [e for e in events if e.kind == "deploy.rolled_back"]
    assert [e.cause_id for e in back] == [rollback.request_id]


async def _breach(js: JetStreamContext, name: str, deployment: str) -> events_pb2.Event:
    payload = events_pb2.SlaBreach(breach_id=uuid.uuid4().hex, deployment=deployment, burn_rate=20.0)
    event = new_event(EventKind.SLA_BREACH, endpoint=name, source="test", payload_message=payload)
    await publish_event(js, event)
    return event


async def test_a_roll_back_on_a_breach_carries_the_breach_events_id(slow_stack: Stack) -> None:
    stack = slow_stack
    name, first, _ = await _ready(stack)
    promote = pb.PromoteRequest(
        endpoint=name, request_id=uuid.uuid4().hex, engine_config=D.EngineConfig(max_num_seqs=2)
    )
    canary = (await stack.stub.Promote(promote, metadata=stack.a)).deployment.id

    async def at_first_step() -> bool:
        table = await routes(stack, name)
        return table is not None and {r.deployment_id: r.weight for r in table.routes}.get(canary) == 1000

    await eventually(at_first_step, what="the canary at 10%")
    breach = await _breach(stack.ctx.js, name, deployment=canary)
    expected = {canary: D.DEPLOYMENT_STATE_ROLLED_BACK, first: D.DEPLOYMENT_STATE_ACTIVE}
    await eventually(lambda: _states(stack, name, expected), what="the canary rolled back on the breach")
    back = [e for e in _of(await events_of(stack, name), canary) if e.kind == "deploy.rolled_back"]
    assert len(back) == 1 and back[0].deploy_rolled_back.trigger == events_pb2.DEPLOY_TRIGGER_BREACH
    assert back[0].cause_id == breach.id
