"""The EndpointService over gRPC, on the session's NATS, with stand-in engine processes."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import Bucket
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from evertune.v1 import events_pb2
from tests.deployer.conftest import Stack
from tests.deployer.helpers import (
    BROKEN_MODEL,
    SLOW_MODEL,
    create_request,
    new_name,
    requests_running,
    spec,
)


async def endpoint_in(stack: Stack, name: str, state: int) -> D.Endpoint:
    async def check() -> D.Endpoint | None:
        got = await stack.stub.GetEndpoint(pb.GetEndpointRequest(name=name), metadata=stack.op)
        return got.endpoint if got.endpoint.state == state else None

    return await eventually(check, what=f"{name} in state {D.EndpointState.Name(state)}")


async def deployments(stack: Stack, name: str) -> list[D.Deployment]:
    reply = await stack.stub.ListDeployments(
        pb.ListDeploymentsRequest(endpoint=name, include_stopped=True), metadata=stack.op
    )
    return list(reply.deployments)


async def routes(stack: Stack, name: str) -> D.RouteTable | None:
    entry = await (await Bucket.open(stack.ctx.js, "routes")).get(name)
    return D.RouteTable.FromString(entry.value) if entry else None


async def chat(url: str, model: str) -> str:
    async with aiohttp.ClientSession() as session:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        async with session.post(f"{url}/v1/chat/completions", json=body) as response:
            assert response.status == 200, await response.text()
            data = await response.json()
            return str(data["choices"][0]["message"]["content"])


async def events_of(stack: Stack, name: str) -> list[events_pb2.Event]:
    """Every stored event of the endpoint, in order."""
    call = stack.stub.WatchEvents(
        pb.WatchEventsRequest(endpoint=name, since=Timestamp(seconds=1)), metadata=stack.op, timeout=1.0
    )
    out: list[events_pb2.Event] = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for event in call:
            out.append(event)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    return out


async def test_create_serves_and_writes_the_route_table(stack: Stack) -> None:
    name = new_name()
    reply = await stack.stub.CreateEndpoint(create_request(name, max_num_seqs=7), metadata=stack.a)
    assert reply.endpoint.state == D.ENDPOINT_STATE_PROVISIONING and reply.endpoint.revision == 1
    assert (
        reply.endpoint.spec.tenant == "tenant-a" and reply.endpoint.spec.search_policy == D.SEARCH_POLICY_AUTO
    )
    assert reply.deployment.origin == D.DEPLOYMENT_ORIGIN_INITIAL and reply.deployment.id.startswith("dep-")
    ready = await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    assert ready.stable_deployment_id == reply.deployment.id
    table = await routes(stack, name)
    assert table is not None and len(table.routes) == 1 and table.tenant == "tenant-a"
    route = table.routes[0]
    assert route.deployment_id == reply.deployment.id and route.weight == 10_000
    assert await chat(route.upstream_url, name) == "s7 " * 5  # the engine serves the endpoint's name
    [deployment] = await deployments(stack, name)
    assert deployment.state == D.DEPLOYMENT_STATE_ACTIVE and deployment.upstream_url == route.upstream_url
    kinds = [e.kind for e in await events_of(stack, name)]
    assert kinds[:2] == ["endpoint.created", "deploy.started"] and "deploy.promoted" in kinds


async def test_create_is_idempotent_on_the_request_id(stack: Stack) -> None:
    name = new_name()
    request = create_request(name)
    first = await stack.stub.CreateEndpoint(request, metadata=stack.a)
    again = await stack.stub.CreateEndpoint(request, metadata=stack.a)
    assert again.endpoint.spec == first.endpoint.spec and again.deployment.id == first.deployment.id
    changed = pb.CreateEndpointRequest(request_id=request.request_id, spec=spec(name, ttft_p99_ms=999))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.stub.CreateEndpoint(changed, metadata=stack.a)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("request_id: already used with a different spec")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.stub.CreateEndpoint(create_request(name), metadata=stack.a)
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert len(await deployments(stack, name)) == 1


@pytest.mark.parametrize(
    ("request_", "code", "detail"),
    [
        (
            pb.CreateEndpointRequest(spec=spec("x-1")),
            grpc.StatusCode.INVALID_ARGUMENT,
            "request_id: required",
        ),
        (
            pb.CreateEndpointRequest(request_id="r", spec=spec("x-1", ttft_p99_ms=-1)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "spec.slo.ttft_p99_ms",
        ),
        (
            pb.CreateEndpointRequest(request_id="r", spec=spec("x-1", tenant="tenant-b")),
            grpc.StatusCode.PERMISSION_DENIED,
            "spec.tenant",
        ),
    ],
)
async def test_create_refusals(
    stack: Stack, request_: pb.CreateEndpointRequest, code: grpc.StatusCode, detail: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.stub.CreateEndpoint(request_, metadata=stack.a)
    assert err.value.code() == code and err.value.details().startswith(detail), err.value.details()


async def test_a_hardware_class_the_backend_does_not_serve_is_refused(stack: Stack) -> None:
    request = create_request(new_name())
    request.spec.hardware_pool.hardware_class = "h200"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.stub.CreateEndpoint(request, metadata=stack.a)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "hardware_class" in err.value.details()


async def test_unauthenticated_calls_are_refused_and_health_stays_open(stack: Stack) -> None:
    for metadata in [(), (("authorization", "Bearer not-a-known-token-000"),)]:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stack.stub.ListEndpoints(pb.ListEndpointsRequest(), metadata=metadata)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stack.stub.WatchEvents(pb.WatchEventsRequest(), metadata=metadata):
                pass
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    health = health_pb2_grpc.HealthStub(stack.channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service="evertune.v1.EndpointService"))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_tenant_sees_only_its_own_endpoints(stack: Stack) -> None:
    mine, theirs = new_name(), new_name()
    await stack.stub.CreateEndpoint(create_request(mine), metadata=stack.a)
    await stack.stub.CreateEndpoint(create_request(theirs), metadata=stack.b)
    for call in (
        stack.stub.GetEndpoint(pb.GetEndpointRequest(name=theirs), metadata=stack.a),
        stack.stub.ListDeployments(pb.ListDeploymentsRequest(endpoint=theirs), metadata=stack.a),
        stack.stub.DeleteEndpoint(pb.DeleteEndpointRequest(name=theirs), metadata=stack.a),
        stack.stub.Rollback(pb.RollbackRequest(endpoint=theirs, request_id="r"), metadata=stack.a),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert err.value.details() == f"endpoint {theirs} not found"
    listed = await stack.stub.ListEndpoints(pb.ListEndpointsRequest(), metadata=stack.a)
    names = {e.spec.name for e in listed.endpoints}
    assert mine in names and theirs not in names
    assert {e.spec.tenant for e in listed.endpoints} == {"tenant-a"}
    everything = await stack.stub.ListEndpoints(pb.ListEndpointsRequest(), metadata=stack.op)
    assert {mine, theirs} <= {e.spec.name for e in everything.endpoints}


async def test_list_endpoints_pages(stack: Stack) -> None:
    names = sorted(new_name() for _ in range(3))
    for name in names:
        await stack.stub.CreateEndpoint(create_request(name), metadata=stack.b)
    seen: list[str] = []
    token = ""
    while True:
        page = await stack.stub.ListEndpoints(
            pb.ListEndpointsRequest(tenant="tenant-b", page_size=2, page_token=token), metadata=stack.op
        )
        assert len(page.endpoints) <= 2
        seen += [e.spec.name for e in page.endpoints]
        token = page.next_page_token
        if not token:
            break
    assert set(names) <= set(seen) and seen == sorted(seen)


async def test_update_changes_the_masked_fields_with_compare_and_set(stack: Stack) -> None:
    name = new_name()
    await stack.stub.CreateEndpoint(create_request(name), metadata=stack.a)
    ready = await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    new = spec(name, ttft_p99_ms=250)
    new.search_policy = D.SEARCH_POLICY_OFF
    reply = await stack.stub.UpdateEndpoint(
        pb.UpdateEndpointRequest(
            name=name,
            spec=new,
            update_mask=FieldMask(paths=["slo", "search_policy"]),
            expected_revision=ready.revision,
        ),
        metadata=stack.a,
    )
    updated = reply.endpoint
    assert updated.spec.slo.ttft_p99_ms == 250 and updated.spec.search_policy == D.SEARCH_POLICY_OFF
    assert updated.revision == ready.revision + 1 and updated.spec.model == "tiny-model"
    with pytest.raises(grpc.aio.AioRpcError) as err:  # a stale revision
        await stack.stub.UpdateEndpoint(
            pb.UpdateEndpointRequest(
                name=name, spec=new, update_mask=FieldMask(paths=["slo"]), expected_revision=ready.revision
            ),
            metadata=stack.a,
        )
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.stub.UpdateEndpoint(
            pb.UpdateEndpointRequest(name=name, spec=new, update_mask=FieldMask(paths=["model"])),
            metadata=stack.a,
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("update_mask: 'model' cannot change")
    updates = [e for e in await events_of(stack, name) if e.kind == "endpoint.updated"]
    assert any(list(e.endpoint_updated.changed_fields) == ["slo", "search_policy"] for e in updates)


async def test_concurrent_updates_both_land(stack: Stack) -> None:
    """Two writers on one endpoint (no expected revision): compare-and-set retries, nothing lost."""
    name = new_name()
    await stack.stub.CreateEndpoint(create_request(name), metadata=stack.a)
    before = await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    slo = spec(name, ttft_p99_ms=321)
    policy = spec(name)
    policy.search_policy = D.SEARCH_POLICY_ADVISORY
    await asyncio.gather(
        *[
            stack.stub.UpdateEndpoint(
                pb.UpdateEndpointRequest(
                    name=name, spec=slo, update_mask=FieldMask(paths=["slo.ttft_p99_ms"])
                ),
                metadata=stack.a,
            )
            for _ in range(3)
        ],
        *[
            stack.stub.UpdateEndpoint(
                pb.UpdateEndpointRequest(
                    name=name, spec=policy, update_mask=FieldMask(paths=["search_policy"])
                ),
                metadata=stack.a,
            )
            for _ in range(3)
        ],
    )
    after = (await stack.stub.GetEndpoint(pb.GetEndpointRequest(name=name), metadata=stack.a)).endpoint
    assert after.spec.slo.ttft_p99_ms == 321 and after.spec.search_policy == D.SEARCH_POLICY_ADVISORY
    assert after.revision == before.revision + 2  # one change each; the repeats changed nothing


async def test_promote_swaps_traffic_and_rollback_restores(stack: Stack) -> None:
    name = new_name()
    created = await stack.stub.CreateEndpoint(create_request(name, max_num_seqs=1), metadata=stack.a)
    first = created.deployment.id
    await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    promote = pb.PromoteRequest(
        endpoint=name,
        request_id=uuid.uuid4().hex,
        engine_config=D.EngineConfig(max_num_seqs=2),
        reason="faster",
        skip_canary=True,
    )
    promoted = (await stack.stub.Promote(promote, metadata=stack.a)).deployment
    again = (await stack.stub.Promote(promote, metadata=stack.a)).deployment
    assert again.id == promoted.id and promoted.previous_deployment_id == first
    assert promoted.origin == D.DEPLOYMENT_ORIGIN_PROMOTE and promoted.engine_config.model == "tiny-model"

    async def swapped() -> bool:
        ds = {d.id: d.state for d in await deployments(stack, name)}
        return ds == {promoted.id: D.DEPLOYMENT_STATE_ACTIVE, first: D.DEPLOYMENT_STATE_RETIRED}

    await eventually(swapped, what="the promoted deployment active, the first retired")
    table = await routes(stack, name)
    assert table is not None and [(r.deployment_id, r.weight) for r in table.routes] == [
        (promoted.id, 10_000)
    ]
    assert await chat(table.routes[0].upstream_url, name) == "s2 " * 5
    endpoint = (await stack.stub.GetEndpoint(pb.GetEndpointRequest(name=name), metadata=stack.a)).endpoint
    assert endpoint.stable_deployment_id == promoted.id

    rollback = pb.RollbackRequest(endpoint=name, request_id=uuid.uuid4().hex, reason="worse live")
    restored = (await stack.stub.Rollback(rollback, metadata=stack.a)).deployment
    assert restored.origin == D.DEPLOYMENT_ORIGIN_ROLLBACK and restored.engine_config.max_num_seqs == 1
    assert (await stack.stub.Rollback(rollback, metadata=stack.a)).deployment.id == restored.id

    async def rolled_back() -> bool:
        ds = {d.id: d.state for d in await deployments(stack, name)}
        return (
            ds.get(restored.id) == D.DEPLOYMENT_STATE_ACTIVE
            and ds.get(promoted.id) == D.DEPLOYMENT_STATE_ROLLED_BACK
        )

    await eventually(rolled_back, what="the rollback deployment active")
    table = await routes(stack, name)
    assert table is not None and await chat(table.routes[0].upstream_url, name) == "s1 " * 5
    kinds = [e.kind for e in await events_of(stack, name)]
    assert kinds.count("deploy.started") == 3 and "deploy.rolled_back" in kinds
    assert len(stack.factory.live()) == 1  # the replaced engines were stopped


async def test_promote_preconditions_and_a_failed_start(stack: Stack) -> None:
    name = new_name()
    await stack.stub.CreateEndpoint(create_request(name, max_num_seqs=1), metadata=stack.a)
    with pytest.raises(grpc.aio.AioRpcError) as err:  # still provisioning
        await stack.stub.Promote(
            pb.PromoteRequest(endpoint=name, request_id="p1", engine_config=D.EngineConfig()),
            metadata=stack.a,
        )
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    ready = await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.stub.Promote(
            pb.PromoteRequest(endpoint=name, request_id="p2", trial_id="t-404"), metadata=stack.a
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "t-404" in err.value.details()
    broken = pb.PromoteRequest(
        endpoint=name, request_id="p3", engine_config=D.EngineConfig(model=BROKEN_MODEL)
    )
    failed = (await stack.stub.Promote(broken, metadata=stack.a)).deployment

    async def is_failed() -> bool:
        ds = {d.id: d for d in await deployments(stack, name)}
        return ds[failed.id].state == D.DEPLOYMENT_STATE_FAILED

    await eventually(is_failed, what="the broken deployment failed")
    endpoint = (await stack.stub.GetEndpoint(pb.GetEndpointRequest(name=name), metadata=stack.a)).endpoint
    assert (
        endpoint.stable_deployment_id == ready.stable_deployment_id
        and endpoint.state == D.ENDPOINT_STATE_READY
    )
    table = await routes(stack, name)
    assert table is not None and [r.deployment_id for r in table.routes] == [ready.stable_deployment_id]
    rolled = [e for e in await events_of(stack, name) if e.kind == "deploy.rolled_back"]
    assert rolled and rolled[-1].deploy_rolled_back.trigger == events_pb2.DEPLOY_TRIGGER_FAILURE
    with pytest.raises(grpc.aio.AioRpcError) as err:  # no predecessor to go back to
        await stack.stub.Rollback(pb.RollbackRequest(endpoint=name, request_id="r1"), metadata=stack.a)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_delete_drains_in_flight_requests_then_forgets_the_endpoint(stack: Stack) -> None:
    name = new_name()
    await stack.stub.CreateEndpoint(create_request(name), metadata=stack.a)
    ready = await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    table = await routes(stack, name)
    assert table is not None
    url = table.routes[0].upstream_url

    async def slow_request() -> int:
        async with aiohttp.ClientSession() as session:
            body = {"model": name, "messages": [{"role": "user", "content": "hi"}], "stream": True}
            async with session.post(
                f"{url}/v1/chat/completions", json=body, headers={"X-Fake": "ttft_ms=800"}
            ) as r:
                await r.read()
                return r.status

    in_flight = asyncio.create_task(slow_request())
    await eventually(lambda: requests_running(url), what="the slow request in flight")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.stub.DeleteEndpoint(
            pb.DeleteEndpointRequest(name=name, expected_revision=1), metadata=stack.a
        )
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    deleting = (
        await stack.stub.DeleteEndpoint(
            pb.DeleteEndpointRequest(name=name, expected_revision=ready.revision), metadata=stack.a
        )
    ).endpoint
    assert deleting.state == D.ENDPOINT_STATE_DELETING
    assert await in_flight == 200  # the request in flight finished before the engine stopped

    async def gone() -> bool:
        try:
            await stack.stub.GetEndpoint(pb.GetEndpointRequest(name=name), metadata=stack.a)
        except grpc.aio.AioRpcError as missing:
            return bool(missing.code() == grpc.StatusCode.NOT_FOUND)
        return False

    await eventually(gone, what="the endpoint deleted")
    assert await routes(stack, name) is None and not stack.factory.live()
    events = await events_of(stack, name)
    deleted = [e for e in events if e.kind == "endpoint.deleted"]
    assert deleted and deleted[0].endpoint_deleted.tenant == "tenant-a"


async def test_an_engine_that_dies_is_restarted_and_reported(stack: Stack) -> None:
    name = new_name()
    await stack.stub.CreateEndpoint(create_request(name), metadata=stack.a)
    await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    [engine] = stack.factory.live()
    port = engine.port
    async with aiohttp.ClientSession() as session, session.post(f"{engine.base_url}/fixture/exit") as r:
        assert r.status == 200

    async def restarted() -> bool:
        live = stack.factory.live()
        return len(live) == 1 and live[0] is not engine and live[0].port == port

    await eventually(restarted, what="a new engine on the same port")
    await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    assert await chat(f"http://127.0.0.1:{port}", name) == "s0 " * 5
    states = [
        e.endpoint_updated.endpoint.state
        for e in await events_of(stack, name)
        if e.kind == "endpoint.updated"
    ]
    assert D.ENDPOINT_STATE_DEGRADED in states and states[-1] == D.ENDPOINT_STATE_READY


async def test_delete_during_provisioning_stops_the_starting_engine(stack: Stack) -> None:
    name = new_name()
    await stack.stub.CreateEndpoint(create_request(name, model=SLOW_MODEL), metadata=stack.a)
    await eventually(lambda: bool(stack.factory.live()), what="the engine process started")
    await stack.stub.DeleteEndpoint(pb.DeleteEndpointRequest(name=name), metadata=stack.a)

    async def gone() -> bool:
        listed = await stack.stub.ListEndpoints(pb.ListEndpointsRequest(), metadata=stack.a)
        return name not in {e.spec.name for e in listed.endpoints}

    await eventually(gone, what="the endpoint deleted")
    assert not stack.factory.live() and await routes(stack, name) is None
    keys = await (await Bucket.open(stack.ctx.js, "deployments")).keys()
    assert not [k for k in keys if k.startswith(f"{name}.")]  # deployments and the rollout mutex


async def test_rollback_during_a_rollout_aborts_it(stack: Stack) -> None:
    name = new_name()
    await stack.stub.CreateEndpoint(create_request(name), metadata=stack.a)
    ready = await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    slow = pb.PromoteRequest(endpoint=name, request_id="slow", engine_config=D.EngineConfig(model=SLOW_MODEL))
    starting = (await stack.stub.Promote(slow, metadata=stack.a)).deployment
    restored = (
        await stack.stub.Rollback(pb.RollbackRequest(endpoint=name, request_id="back"), metadata=stack.a)
    ).deployment
    assert restored.id == ready.stable_deployment_id and restored.state == D.DEPLOYMENT_STATE_ACTIVE
    states = {d.id: d.state for d in await deployments(stack, name)}
    assert states[starting.id] == D.DEPLOYMENT_STATE_ROLLED_BACK
    assert len(stack.factory.live()) == 1
    await asyncio.sleep(2.0)  # past the slow engine's start: nothing brings it back
    table = await routes(stack, name)
    assert table is not None and [(r.deployment_id, r.weight) for r in table.routes] == [
        (restored.id, 10_000)
    ]
    again = (
        await stack.stub.Promote(
            pb.PromoteRequest(endpoint=name, request_id="next", engine_config=D.EngineConfig()),
            metadata=stack.a,
        )
    ).deployment
    assert again.state == D.DEPLOYMENT_STATE_PENDING  # the rollout mutex was released


async def test_rollback_to_a_draining_deployment_reuses_it(stack: Stack) -> None:
    name = new_name()
    first = (
        await stack.stub.CreateEndpoint(create_request(name, max_num_seqs=1), metadata=stack.a)
    ).deployment
    await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    table = await routes(stack, name)
    assert table is not None
    old_url = table.routes[0].upstream_url

    async def held_request() -> int:
        async with aiohttp.ClientSession() as session:
            body = {"model": name, "messages": [{"role": "user", "content": "hi"}]}
            headers = {"X-Fake": "ttft_ms=8000"}  # long enough for a loaded machine to see the drain
            async with session.post(f"{old_url}/v1/chat/completions", json=body, headers=headers) as r:
                await r.read()
                return r.status

    holding = asyncio.create_task(held_request())
    await eventually(lambda: requests_running(old_url), what="the held request in flight")
    promote = pb.PromoteRequest(
        endpoint=name, request_id="p", engine_config=D.EngineConfig(max_num_seqs=2), skip_canary=True
    )
    promoted = (await stack.stub.Promote(promote, metadata=stack.a)).deployment

    async def draining() -> bool:
        states = {d.id: d.state for d in await deployments(stack, name)}
        return states == {promoted.id: D.DEPLOYMENT_STATE_ACTIVE, first.id: D.DEPLOYMENT_STATE_DRAINING}

    await eventually(draining, what="the first deployment draining behind the held request")
    restored = (
        await stack.stub.Rollback(pb.RollbackRequest(endpoint=name, request_id="b"), metadata=stack.a)
    ).deployment
    assert restored.id == first.id and restored.state == D.DEPLOYMENT_STATE_ACTIVE  # no restart
    assert await holding == 200
    table = await routes(stack, name)
    assert table is not None and {r.deployment_id: r.weight for r in table.routes}[first.id] == 10_000
    assert await chat(old_url, name) == "s1 " * 5

    async def promoted_out() -> bool:
        states = {d.id: d.state for d in await deployments(stack, name)}
        return states[promoted.id] == D.DEPLOYMENT_STATE_ROLLED_BACK

    await eventually(promoted_out, what="the promoted deployment rolled back")
