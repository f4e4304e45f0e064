"""A reused endpoint name does not carry one tenant's events to another (hole 3 of the security
issue, for WatchEvents): tenant B deletes an endpoint, tenant A creates one of the same name; A's
replay of the name holds none of B's history, and a watch B opened before keeps none of A's events.
Before the fix both leaked: ownership was the name's current owner, cached for the whole watch."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from nats.aio.client import Client

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus.publish import publish_event
from evertune.infra.events import EventKind, new_event
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from evertune.v1 import events_pb2
from tests.deployer.conftest import Stack, start_stack, stop_stack
from tests.deployer.helpers import create_request, new_name


async def _ready(stack: Stack, name: str, metadata: tuple[tuple[str, str], ...]) -> D.Endpoint:
    async def check() -> D.Endpoint | None:
        got = await stack.stub.GetEndpoint(pb.GetEndpointRequest(name=name), metadata=stack.op)
        return got.endpoint if got.endpoint.state == D.ENDPOINT_STATE_READY else None

    return await eventually(check, what=f"{name} ready")


async def _gone(stack: Stack, name: str) -> bool:
    try:
        await stack.stub.GetEndpoint(pb.GetEndpointRequest(name=name), metadata=stack.op)
    except grpc.aio.AioRpcError as err:
        return bool(err.code() == grpc.StatusCode.NOT_FOUND)
    return False


async def test_a_reused_name_keeps_each_tenants_events_its_own(nc: Client, tmp_path: Path) -> None:
    stack = await start_stack(nc, tmp_path)
    try:
        name = new_name()
        b_watch = stack.stub.WatchEvents(pb.WatchEventsRequest(kinds=["endpoint.created"]), metadata=stack.b)
        b_saw: list[str] = []

        async def read_b() -> None:
            async for event in b_watch:
                b_saw.append(event.endpoint)

        await b_watch.initial_metadata()  # B's watch is live
        reader = asyncio.create_task(read_b())
        await stack.stub.CreateEndpoint(create_request(name), metadata=stack.b)
        first = await _ready(stack, name, stack.b)
        await eventually(lambda: name in b_saw, what="B's own event")
        await stack.stub.DeleteEndpoint(
            pb.DeleteEndpointRequest(name=name, expected_revision=first.revision), metadata=stack.b
        )
        await eventually(lambda: _gone(stack, name), what="B's endpoint deleted")
        await stack.stub.CreateEndpoint(create_request(name), metadata=stack.a)
        await _ready(stack, name, stack.a)

        replay = stack.stub.WatchEvents(
            pb.WatchEventsRequest(endpoint=name, kinds=["endpoint.created"], since=Timestamp(seconds=1)),
            metadata=stack.a,
            timeout=2.0,
        )
        a_saw = []
        try:
            async for event in replay:
                a_saw.append(event)
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert len(a_saw) == 1 and a_saw[0].endpoint_created.endpoint.spec.tenant == "tenant-a"  # not B's too

        await asyncio.sleep(0.5)
        assert b_saw == [name]  # B's watch got its own creation, not A's
        b_watch.cancel()
        reader.cancel()
    finally:
        await stop_stack(stack)


async def test_an_event_of_the_earlier_endpoint_is_not_shown_to_the_new_owner(
    nc: Client, tmp_path: Path
) -> None:
    """An event about B's endpoint that arrives after A created the name again (a breach judged on
    B's last requests, a late trial) carries B's endpoint id: A's watch skips it and shows A's own.
    Judged by time alone (before ids) A saw it: it happened after A's endpoint was created."""
    stack = await start_stack(nc, tmp_path)
    try:
        name = new_name()
        await stack.stub.CreateEndpoint(create_request(name), metadata=stack.b)
        first = await _ready(stack, name, stack.b)
        await stack.stub.DeleteEndpoint(
            pb.DeleteEndpointRequest(name=name, expected_revision=first.revision), metadata=stack.b
        )
        await eventually(lambda: _gone(stack, name), what="B's endpoint deleted")
        await stack.stub.CreateEndpoint(create_request(name), metadata=stack.a)
        second = await _ready(stack, name, stack.a)
        assert second.uid and second.uid != first.uid

        a_watch = stack.stub.WatchEvents(
            pb.WatchEventsRequest(endpoint=name, kinds=["sla.breach"]), metadata=stack.a, timeout=5.0
        )
        await a_watch.initial_metadata()
        for uid in (first.uid, second.uid):
            event = new_event(
                EventKind.SLA_BREACH,
                endpoint=name,
                source="sla-monitor",
                payload_message=events_pb2.SlaBreach(),
                endpoint_uid=uid,
            )
            await publish_event(nc.jetstream(), event)
        seen = []
        async for event in a_watch:
            seen.append(event.endpoint_uid)
            break
        a_watch.cancel()
        assert seen == [second.uid]  # B's late breach skipped, A's shown
    finally:
        await stop_stack(stack)
