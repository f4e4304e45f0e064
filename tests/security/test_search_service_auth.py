"""SearchService authenticates as the deployer does and scopes every RPC to the caller's tenant
(hole 1 of the security issue): without a token nothing is served; a tenant's token can neither
start a search on another tenant's endpoint nor read, list or cancel its searches (NOT_FOUND, as for
an unknown one); the owner and an operator can."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import grpc
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from pydantic import SecretStr

from evertune.errors import SettingsError
from evertune.infra.store import Store, migrate
from evertune.searcher import SearcherService
from evertune.v1 import endpoint_pb2
from evertune.v1 import search_service_pb2 as pb
from evertune.v1 import search_service_pb2_grpc as pb_grpc
from tests.apps.cli.helpers import assert_one_line_error, cli_env, run_cli
from tests.searcher.stack import make_endpoint, make_searcher, running, store_profile

OWNER = "tenant-t-token-0123456789"  # make_endpoint's endpoints belong to tenant "t"
OTHER = "tenant-u-token-0123456789"
OPERATOR = "operator-token-0123456789"
TOKENS = SecretStr(f"{OWNER} t, {OTHER} u, {OPERATOR} *")


def _as(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def _code(call: Awaitable[Any]) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value.code()


async def test_searches_are_scoped_to_the_callers_tenant(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path, searcher_model_dir: Path
) -> None:
    await migrate(store)
    endpoint = await make_endpoint(js, policy=endpoint_pb2.SEARCH_POLICY_AUTO, hardware="sim-h200")
    await store_profile(store, endpoint, searcher_model_dir)
    searcher = make_searcher(tmp_path, model_dir=searcher_model_dir, tokens=TOKENS)
    async with running(searcher, nc, store), grpc.aio.insecure_channel(searcher.grpc.address) as channel:
        stub = pb_grpc.SearchServiceStub(channel)  # type: ignore[no-untyped-call]
        start = pb.StartSearchRequest(request_id=uuid.uuid4().hex, endpoint=endpoint)
        assert await _code(stub.StartSearch(start)) == grpc.StatusCode.UNAUTHENTICATED
        assert await _code(stub.StartSearch(start, metadata=_as("not-a-known-token-xx"))) == (
            grpc.StatusCode.UNAUTHENTICATED
        )
        assert await _code(stub.StartSearch(start, metadata=_as(OTHER))) == grpc.StatusCode.NOT_FOUND
        search = (await stub.StartSearch(start, metadata=_as(OWNER))).search
        by_id = pb.GetSearchRequest(search_id=search.id)
        not_found = grpc.StatusCode.NOT_FOUND
        assert await _code(stub.GetSearch(by_id, metadata=_as(OTHER))) == not_found
        trials = pb.ListTrialsRequest(search_id=search.id)
        assert await _code(stub.ListTrials(trials, metadata=_as(OTHER))) == not_found
        mine = pb.ListSearchesRequest(endpoint=endpoint)
        assert await _code(stub.ListSearches(mine, metadata=_as(OTHER))) == not_found
        everything = pb.ListSearchesRequest()
        assert (
            await _code(stub.ListSearches(everything, metadata=_as(OTHER)))
            == grpc.StatusCode.INVALID_ARGUMENT
        )
        cancel = pb.CancelSearchRequest(search_id=search.id, reason="not yours")
        assert await _code(stub.CancelSearch(cancel, metadata=_as(OTHER))) == not_found
        watch = stub.WatchSearch(pb.WatchSearchRequest(search_id=search.id), metadata=_as(OTHER))
        assert await _code(watch.read()) == not_found

        assert (await stub.GetSearch(by_id, metadata=_as(OWNER))).search.id == search.id
        listed = await stub.ListSearches(mine, metadata=_as(OWNER))
        assert search.id in [s.id for s in listed.searches]
        assert search.id in [
            s.id for s in (await stub.ListSearches(everything, metadata=_as(OPERATOR))).searches
        ]
        # The CLI sends its token ($EVERTUNE_TOKEN) with every call.
        args = ("search", "list", "--address", searcher.grpc.address, "--endpoint", endpoint, "--json")
        listed_by_cli = await asyncio.to_thread(run_cli, *args, env=cli_env(EVERTUNE_TOKEN=OWNER))
        assert listed_by_cli.returncode == 0, listed_by_cli.stderr
        assert search.id in [s["id"] for s in json.loads(listed_by_cli.stdout)]
        refused = await asyncio.to_thread(run_cli, *args)
        assert_one_line_error(refused, "UNAUTHENTICATED")
        cancelled = await stub.CancelSearch(cancel, metadata=_as(OPERATOR))
        assert cancelled.search.id == search.id


def test_no_tokens_off_loopback_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="EVERTUNE_SEARCHER_TOKEN_FILE: no tokens configured"):
        make_searcher(tmp_path, grpc_host="0.0.0.0")
    allowed = make_searcher(tmp_path, grpc_host="0.0.0.0", tokens=TOKENS, allow_plaintext_tokens=True)
    assert isinstance(allowed, SearcherService)  # tokens, behind a TLS proxy
