"""A reused endpoint name does not hand one tenant's searches to another (hole 3 of the security
issue, for SearchService): tenant B runs a search on endpoint "foo" and deletes it; tenant A creates
"foo" again (a new endpoint id). A can neither read, list, cancel nor watch B's search (NOT_FOUND,
as an unknown one), cannot pick it up through B's request id, is not held back by it, and A's
searches use only profiles of A's endpoint: with only B's profile stored, A's StartSearch finds no
profile. The searches store the
id they were started on, and their events carry it. Before the fix all of it leaked: searches and
profiles were the name's."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import grpc
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from pydantic import SecretStr

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.store import Store, migrate
from evertune.v1 import endpoint_pb2, events_pb2
from evertune.v1 import search_service_pb2 as pb
from evertune.v1 import search_service_pb2_grpc as pb_grpc
from tests.searcher.stack import (
    delete_endpoint,
    make_endpoint,
    make_searcher,
    new_uid,
    running,
    store_profile,
)

TENANT_A = "tenant-a-token-0123456789"
TENANT_B = "tenant-b-token-0123456789"
OPERATOR = "operator-token-0123456789"
TOKENS = SecretStr(f"{TENANT_A} a, {TENANT_B} b, {OPERATOR} *")


def _as(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def _refused(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


async def _listed(stub: pb_grpc.SearchServiceStub, name: str, token: str) -> list[str]:
    page = await stub.ListSearches(pb.ListSearchesRequest(endpoint=name), metadata=_as(token))
    return [s.id for s in page.searches]


async def _stored_uid(store: Store, search_id: str) -> str:
    rows = await store.query(
        "SELECT endpoint_uid FROM searches FINAL WHERE search_id = {s:String}", {"s": search_id}
    )
    return str(rows.scalar())


async def _start(
    stub: pb_grpc.SearchServiceStub, name: str, token: str, *, request_id: str = ""
) -> pb.Search:
    request = pb.StartSearchRequest(request_id=request_id or uuid.uuid4().hex, endpoint=name)
    started: pb.StartSearchResponse = await stub.StartSearch(request, metadata=_as(token), timeout=20)
    return started.search


async def test_a_reused_name_keeps_each_tenants_searches_and_profiles_its_own(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path, searcher_model_dir: Path
) -> None:
    await migrate(store)
    name = f"foo-{uuid.uuid4().hex[:8]}"
    uid_b, uid_a = new_uid(), new_uid()
    auto, pool = endpoint_pb2.SEARCH_POLICY_AUTO, "sim-h200"  # no runner: searches wait on their jobs
    await make_endpoint(js, name=name, tenant="b", uid=uid_b, policy=auto, hardware=pool)
    b_profile = await store_profile(store, name, searcher_model_dir, uid=uid_b, version=1)
    searcher = make_searcher(tmp_path, model_dir=searcher_model_dir, tokens=TOKENS)
    async with running(searcher, nc, store), grpc.aio.insecure_channel(searcher.grpc.address) as channel:
        stub = pb_grpc.SearchServiceStub(channel)  # type: ignore[no-untyped-call]
        b_request = uuid.uuid4().hex
        b_search = await _start(stub, name, TENANT_B, request_id=b_request)
        assert b_search.endpoint_uid == uid_b and b_search.profile_id == b_profile.profile_id
        assert await _stored_uid(store, b_search.id) == uid_b
        # B deletes the endpoint (its search still running: the searcher cancels it on the
        # endpoint.deleted it has not seen yet) and A creates the name again.
        await delete_endpoint(js, name)
        await make_endpoint(js, name=name, tenant="a", uid=uid_a, policy=auto, hardware=pool)

        # B's search is A's to see in no way: NOT_FOUND, as an unknown search.
        unknown = await _refused(
            stub.GetSearch(pb.GetSearchRequest(search_id="search-unknown"), metadata=_as(TENANT_A))
        )
        for call in (
            stub.GetSearch(pb.GetSearchRequest(search_id=b_search.id), metadata=_as(TENANT_A)),
            stub.ListTrials(pb.ListTrialsRequest(search_id=b_search.id), metadata=_as(TENANT_A)),
            stub.CancelSearch(pb.CancelSearchRequest(search_id=b_search.id), metadata=_as(TENANT_A)),
            stub.WatchSearch(pb.WatchSearchRequest(search_id=b_search.id), metadata=_as(TENANT_A)).read(),
        ):
            err = await _refused(call)
            assert err.code() == unknown.code() == grpc.StatusCode.NOT_FOUND
            assert err.details() == unknown.details().replace("search-unknown", b_search.id)
        assert await _listed(stub, name, TENANT_A) == []
        # Nor through B's request id (a retry returns the search a request id started).
        reused = await _refused(
            stub.StartSearch(
                pb.StartSearchRequest(request_id=b_request, endpoint=name), metadata=_as(TENANT_A)
            )
        )
        assert reused.code() == grpc.StatusCode.INVALID_ARGUMENT and b_search.id not in (
            reused.details() or ""
        )

        # A's endpoint has no profile yet: B's is not A's to search with, named or not.
        none = await _refused(
            stub.StartSearch(
                pb.StartSearchRequest(request_id=uuid.uuid4().hex, endpoint=name), metadata=_as(TENANT_A)
            )
        )
        assert none.code() == grpc.StatusCode.FAILED_PRECONDITION and "no profile" in (none.details() or "")
        named = pb.StartSearchRequest(
            request_id=uuid.uuid4().hex, endpoint=name, profile_id=b_profile.profile_id
        )
        not_ours = await _refused(stub.StartSearch(named, metadata=_as(TENANT_A)))
        assert not_ours.code() == grpc.StatusCode.NOT_FOUND and "profile_id" in (not_ours.details() or "")
        assert await searcher.searches.latest_profile_id(name) == ""  # type: ignore[union-attr]

        # With a profile of its own, A's search uses it and belongs to A's endpoint (B's search,
        # still running, is another endpoint's and holds nothing back).
        a_profile = await store_profile(store, name, searcher_model_dir, uid=uid_a, version=2)
        a_search = await _start(stub, name, TENANT_A)
        assert a_search.endpoint_uid == uid_a and a_search.profile_id == a_profile.profile_id
        assert await _stored_uid(store, a_search.id) == uid_a
        assert await _listed(stub, name, TENANT_A) == [a_search.id]
        got = await stub.GetSearch(pb.GetSearchRequest(search_id=a_search.id), metadata=_as(TENANT_A))
        assert got.search.endpoint_uid == uid_a
        await stub.CancelSearch(pb.CancelSearchRequest(search_id=a_search.id), metadata=_as(TENANT_A))
        watch = stub.WatchSearch(
            pb.WatchSearchRequest(search_id=a_search.id, replay=True), metadata=_as(TENANT_A), timeout=20
        )
        events = [event async for event in watch]
        assert events[-1].kind == "search.completed" and {e.endpoint_uid for e in events} == {uid_a}

        # An operator sees both, as before.
        assert set(await _listed(stub, name, OPERATOR)) == {a_search.id, b_search.id}
        old = await stub.GetSearch(pb.GetSearchRequest(search_id=b_search.id), metadata=_as(OPERATOR))
        assert old.search.endpoint_uid == uid_b and old.search.state == pb.SEARCH_STATE_RUNNING

        # B's endpoint.deleted arrives after A created the name: it cancels B's search, by its id
        deleted = new_event(
            EventKind.ENDPOINT_DELETED,
            endpoint=name,
            source="deployer",
            payload_message=events_pb2.EndpointDeleted(name=name, tenant="b", revision=1),
            endpoint_uid=uid_b,
        )
        await publish_event(js, deleted)

        async def b_cancelled() -> bool:
            got = await stub.GetSearch(pb.GetSearchRequest(search_id=b_search.id), metadata=_as(OPERATOR))
            return bool(got.search.outcome == events_pb2.SEARCH_OUTCOME_CANCELLED)

        await eventually(b_cancelled, timeout_s=20, what="B's search cancelled by its endpoint's deletion")
        await stub.CancelSearch(pb.CancelSearchRequest(search_id=b_search.id), metadata=_as(OPERATOR))


async def test_a_search_stored_before_endpoint_ids_is_an_operators_only(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path, searcher_model_dir: Path
) -> None:
    """A search without an endpoint id (stored before the migration) belongs to no endpoint that
    has one: its tenant's token finds it NOT_FOUND, an operator's reads it."""
    await migrate(store)
    name = await make_endpoint(js, tenant="a", policy=endpoint_pb2.SEARCH_POLICY_AUTO, hardware="sim-h200")
    await store_profile(store, name, searcher_model_dir)
    searcher = make_searcher(tmp_path, model_dir=searcher_model_dir, tokens=TOKENS)
    async with running(searcher, nc, store), grpc.aio.insecure_channel(searcher.grpc.address) as channel:
        stub = pb_grpc.SearchServiceStub(channel)  # type: ignore[no-untyped-call]
        search = await _start(stub, name, TENANT_A)
        await stub.CancelSearch(pb.CancelSearchRequest(search_id=search.id), metadata=_as(TENANT_A))
        assert searcher.searches is not None
        record = await searcher.searches.get(search.id)
        record.search.endpoint_uid = ""  # as a row written before ids
        await searcher.searches.records.save(record)
        err = await _refused(stub.GetSearch(pb.GetSearchRequest(search_id=search.id), metadata=_as(TENANT_A)))
        assert err.code() == grpc.StatusCode.NOT_FOUND
        assert await _listed(stub, name, TENANT_A) == []
        assert (
            await stub.GetSearch(pb.GetSearchRequest(search_id=search.id), metadata=_as(OPERATOR))
        ).search.id
        assert await _listed(stub, name, OPERATOR) == [search.id]
