"""The searcher's SearchService: start, follow, list and cancel searches, and read their trials."""

from __future__ import annotations

import builtins
import uuid
from collections.abc import AsyncIterator

from evertune.client.connection import Connection, ServiceClient
from evertune.v1 import events_pb2
from evertune.v1 import search_service_pb2 as pb
from evertune.v1 import search_service_pb2_grpc as pb_grpc


class SearchClient(ServiceClient):
    """A client of one searcher; use it as an async context manager (it owns its channel)."""

    service = "searcher"

    def __init__(self, connection: Connection) -> None:
        super().__init__(connection, stub=pb_grpc.SearchServiceStub)

    async def start(self, request: pb.StartSearchRequest) -> pb.Search:
        """Start a search (a request id is set when `request` has none, so a retry starts one)."""
        if not request.request_id:
            request.request_id = uuid.uuid4().hex
        reply: pb.StartSearchResponse = await self._call("StartSearch", request)
        return reply.search

    async def get(self, search_id: str) -> pb.Search:
        reply: pb.GetSearchResponse = await self._call("GetSearch", pb.GetSearchRequest(search_id=search_id))
        return reply.search

    async def list(self, *, endpoint: str = "") -> builtins.list[pb.Search]:
        """The searches of `endpoint` ("" = every endpoint the caller may see), all pages."""
        request = pb.ListSearchesRequest(endpoint=endpoint)
        return await self._pages("ListSearches", request, items="searches")

    async def cancel(self, search_id: str, *, reason: str = "") -> pb.Search:
        """Cancel a search (tried once)."""
        reply: pb.CancelSearchResponse = await self._call(
            "CancelSearch", pb.CancelSearchRequest(search_id=search_id, reason=reason)
        )
        return reply.search

    async def trials(self, search_id: str) -> builtins.list[pb.Trial]:
        """A search's finished trials, all pages."""
        request = pb.ListTrialsRequest(search_id=search_id, page_size=1000)
        return await self._pages("ListTrials", request, items="trials")

    async def watch(self, search_id: str, *, replay: bool = True) -> AsyncIterator[events_pb2.Event]:
        """A search's events as they happen (its past ones first with `replay`), until it ends."""
        async for event in self._stream(
            "WatchSearch", pb.WatchSearchRequest(search_id=search_id, replay=replay)
        ):
            yield event
