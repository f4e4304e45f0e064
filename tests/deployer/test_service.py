"""The deployer as a service: event streams, deadlines, TLS, auth off, two deployers, restarts,
trials, and a request through the real gateway."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from pydantic import SecretStr

from evertune.apps.harness.waiting import eventually
from evertune.deployer import DeployerService
from evertune.errors import SettingsError
from evertune.gateway import GatewayService
from evertune.infra.bus import publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.runtime import run_unary
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from evertune.v1 import endpoint_service_pb2_grpc as pb_grpc
from evertune.v1 import events_pb2
from tests.deployer.conftest import Stack, deployer_settings, purge_state, start_stack, stop_stack
from tests.deployer.helpers import create_request, new_name
from tests.deployer.test_api import deployments, endpoint_in, routes
from tests.tls import self_signed


async def consumers(js: JetStreamContext) -> set[str]:
    """Names of the EVENTS stream's consumers (other tests' and services' come and go)."""
    return {info.name for info in await js.consumers_info("EVENTS")}


async def test_watch_streams_new_events_filtered_and_ends_on_cancel(stack: Stack) -> None:
    name = new_name()
    before = await consumers(stack.ctx.js)
    call = stack.stub.WatchEvents(
        pb.WatchEventsRequest(endpoint=name, kinds=["endpoint.created", "deploy.promoted"]), metadata=stack.op
    )
    received: list[events_pb2.Event] = []

    async def read() -> None:
        async for event in call:
            received.append(event)

    await call.initial_metadata()  # the watch is live
    reader = asyncio.create_task(read())
    await stack.stub.CreateEndpoint(create_request(name), metadata=stack.a)
    await eventually(lambda: len(received) >= 2, what="two events")
    assert [e.kind for e in received] == ["endpoint.created", "deploy.promoted"]
    assert all(e.endpoint == name for e in received)
    # the watch's consumer: filtered on this endpoint's subjects
    watching = {
        info.name
        for info in await stack.ctx.js.consumers_info("EVENTS")
        if info.name not in before and name in (info.config.filter_subject or "")
    }
    assert len(watching) == 1
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader

    async def removed() -> bool:
        return not watching & await consumers(stack.ctx.js)

    await eventually(removed, what="the watch's consumer removed after cancel")


async def test_a_tenants_watch_of_everything_holds_only_its_events(stack: Stack) -> None:
    mine, theirs = new_name(), new_name()
    call = stack.stub.WatchEvents(pb.WatchEventsRequest(kinds=["endpoint.created"]), metadata=stack.a)
    received: list[str] = []

    async def read() -> None:
        async for event in call:
            received.append(event.endpoint)

    await call.initial_metadata()  # the watch is live
    reader = asyncio.create_task(read())
    await stack.stub.CreateEndpoint(create_request(theirs), metadata=stack.b)
    await stack.stub.CreateEndpoint(create_request(mine), metadata=stack.a)
    await eventually(lambda: mine in received, what="tenant a's own event")
    assert theirs not in received
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader


async def test_watches_end_cleanly_when_the_deployer_stops(nc: Client, tmp_path: Path) -> None:
    stack = await start_stack(nc, tmp_path)
    try:
        call = stack.stub.WatchEvents(pb.WatchEventsRequest(), metadata=stack.op)
        await call.initial_metadata()  # the watch is live
        reader = asyncio.create_task(_drain(call))
        stopping = asyncio.create_task(stack.service.stop(5.0))
        assert await asyncio.wait_for(reader, 5.0) == grpc.StatusCode.OK  # the stream ended, not failed
        await stopping
    finally:
        await stop_stack(stack)


async def _drain(call: Any) -> grpc.StatusCode:
    async for _ in call:
        pass
    code: grpc.StatusCode = await call.code()
    return code


class _Context:
    """Enough of a grpc.aio.ServicerContext for `run_unary`: a deadline, and abort."""

    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def time_remaining(self) -> float | None:
        return self.remaining

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise grpc.aio.AbortError()


async def test_unary_calls_stop_at_the_callers_deadline() -> None:
    context = _Context(remaining=0.05)

    async def slow() -> int:
        await asyncio.sleep(5)
        return 1

    with pytest.raises(grpc.aio.AbortError):
        await run_unary(context, "GetEndpoint", slow)
    assert context.aborted == (grpc.StatusCode.DEADLINE_EXCEEDED, "GetEndpoint: the deadline ran out")

    async def quick() -> int:
        return 7

    assert await run_unary(_Context(remaining=None), "GetEndpoint", quick) == 7


async def test_tls(nc: Client, tmp_path: Path) -> None:
    cert_file, key_file = self_signed(tmp_path)
    pem = cert_file.read_bytes()
    stack = await start_stack(nc, tmp_path, tls_cert_file=cert_file, tls_key_file=key_file)
    try:
        assert stack.service.server.tls
        secure = grpc.aio.secure_channel(stack.address, grpc.ssl_channel_credentials(root_certificates=pem))
        try:
            stub = pb_grpc.EndpointServiceStub(secure)  # type: ignore[no-untyped-call]
            reply = await stub.ListEndpoints(pb.ListEndpointsRequest(tenant="nobody"), metadata=stack.op)
            assert list(reply.endpoints) == []
        finally:
            await secure.close()
        with pytest.raises(grpc.aio.AioRpcError) as err:  # plaintext is refused
            await stack.stub.ListEndpoints(pb.ListEndpointsRequest(), metadata=stack.op, timeout=2.0)
        assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        await stop_stack(stack)


async def test_without_tokens_auth_is_off_on_loopback_only(nc: Client, tmp_path: Path) -> None:
    stack = await start_stack(nc, tmp_path, tokens=SecretStr(""))
    try:
        reply = await stack.stub.ListEndpoints(pb.ListEndpointsRequest(tenant="nobody"))  # no credentials
        assert list(reply.endpoints) == []
    finally:
        await stop_stack(stack)
    with pytest.raises(SettingsError, match="no tokens configured"):
        DeployerService(deployer_settings(tmp_path, tokens=SecretStr(""), grpc_host="0.0.0.0"))


async def test_two_deployers_racing_on_one_endpoint(nc: Client, tmp_path: Path) -> None:
    """Both serve the same KV: concurrent Promotes take the rollout mutex in turn (one is refused),
    concurrent updates all land."""
    one = await start_stack(nc, tmp_path / "one")
    two = await start_stack(nc, tmp_path / "two")
    try:
        name = new_name()
        await one.stub.CreateEndpoint(create_request(name), metadata=one.a)
        ready = await endpoint_in(one, name, D.ENDPOINT_STATE_READY)
        results = await asyncio.gather(
            *[
                stack.stub.Promote(
                    pb.PromoteRequest(
                        endpoint=name,
                        request_id=uuid.uuid4().hex,
                        engine_config=D.EngineConfig(max_num_seqs=n),
                        skip_canary=True,
                    ),
                    metadata=stack.a,
                )
                for stack, n in ((one, 3), (two, 4))
            ],
            return_exceptions=True,
        )
        won = [r for r in results if isinstance(r, pb.PromoteResponse)]
        lost = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert len(won) == 1 and len(lost) == 1, results
        assert lost[0].code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "rollout in progress" in lost[0].details()
        winner = won[0].deployment.id

        expected = {winner: D.DEPLOYMENT_STATE_ACTIVE, ready.stable_deployment_id: D.DEPLOYMENT_STATE_RETIRED}

        async def promoted() -> bool:
            return {d.id: d.state for d in await deployments(one, name)} == expected

        await eventually(promoted, what="the winner active, the first deployment retired")
        endpoint = await one.stub.GetEndpoint(pb.GetEndpointRequest(name=name), metadata=one.a)
        assert endpoint.endpoint.stable_deployment_id == winner
    finally:
        await stop_stack(two, purge=False)
        await stop_stack(one)


async def test_a_restarted_deployer_brings_its_deployments_back(nc: Client, tmp_path: Path) -> None:
    # the second deployer resumes every endpoint in the session's KV: only this test's (a CI run
    # once timed out here, the second deployer busy with what earlier tests had left)
    await purge_state(nc.jetstream())
    first = await start_stack(nc, tmp_path / "first")
    name = new_name()
    try:
        await first.stub.CreateEndpoint(create_request(name, max_num_seqs=5), metadata=first.a)
        await endpoint_in(first, name, D.ENDPOINT_STATE_READY)
        old = await routes(first, name)
        assert old is not None
    finally:
        await stop_stack(first, purge=False)  # engines stop with it; KV keeps the endpoint ACTIVE
    second = await start_stack(nc, tmp_path / "second")
    try:

        async def rerouted() -> D.RouteTable | None:
            table = await routes(second, name)
            ok = table and table.routes[0].upstream_url != old.routes[0].upstream_url
            return table if ok else None

        table = await eventually(rerouted, timeout_s=60, what="routes pointing at the restarted engine")
        assert (
            table.routes[0].deployment_id == old.routes[0].deployment_id and table.routes[0].weight == 10_000
        )
        assert len(second.factory.live()) == 1
        endpoint = await endpoint_in(second, name, D.ENDPOINT_STATE_READY)
        assert endpoint.stable_deployment_id == old.routes[0].deployment_id
    finally:
        await stop_stack(second)


async def _publish_trial(js: JetStreamContext, endpoint: str, trial_id: str, *, passed: bool) -> None:
    payload = events_pb2.TrialCompleted(
        search_id="search-1",
        trial_id=trial_id,
        engine_config=D.EngineConfig(engine="vllm", model="tiny-model", max_num_seqs=9),
        passed=passed,
    )
    event = new_event(EventKind.TRIAL_COMPLETED, endpoint=endpoint, source="runner", payload_message=payload)
    await publish_event(js, event)


async def test_promote_a_trial(stack: Stack) -> None:
    name = new_name()
    await stack.stub.CreateEndpoint(create_request(name), metadata=stack.a)
    await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    await _publish_trial(stack.ctx.js, name, "trial-bad", passed=False)
    await _publish_trial(stack.ctx.js, name, "trial-good", passed=True)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.stub.Promote(
            pb.PromoteRequest(endpoint=name, request_id="t1", trial_id="trial-bad"), metadata=stack.a
        )
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    reply = await stack.stub.Promote(
        pb.PromoteRequest(endpoint=name, request_id="t2", trial_id="trial-good", skip_canary=True),
        metadata=stack.a,
    )
    deployment = reply.deployment
    assert deployment.origin_trial_id == "trial-good" and deployment.origin_search_id == "search-1"
    assert deployment.engine_config.max_num_seqs == 9


async def test_a_stream_through_the_gateway_reaches_the_deployment(
    stack: Stack, gateway: GatewayService
) -> None:
    name = new_name()
    await stack.stub.CreateEndpoint(create_request(name, max_num_seqs=6), metadata=stack.a)
    await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    await eventually(lambda: name in gateway.book.tables, what="the gateway's route table")
    body = {
        "model": name,
        "messages": [{"role": "user", "content": "hello"}],
        "stream": True,
        "max_tokens": 5,
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{gateway.port}/v1/chat/completions", json=body) as response,
    ):
        assert response.status == 200
        text = (await response.read()).decode()
    assert text.count('"content": "s6 "') == 5 and text.rstrip().endswith("data: [DONE]")


async def test_messages_over_the_size_cap_are_refused(nc: Client, tmp_path: Path) -> None:
    stack = await start_stack(nc, tmp_path, max_message_bytes=64 * 1024)
    try:
        request = create_request(new_name())
        request.spec.model = "m" * (80 * 1024)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stack.stub.CreateEndpoint(request, metadata=stack.a)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        request.spec.model = "m" * 2000  # under the cap: validation answers, naming the field
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stack.stub.CreateEndpoint(request, metadata=stack.a)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith(
            "spec.model"
        )
    finally:
        await stop_stack(stack)
