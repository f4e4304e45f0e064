"""The SearchService servicer: validate, scope to the caller, call `SearchSupervisor`, answer.
Errors become gRPC statuses in one place (`evertune.infra.runtime.run_unary`): INVALID_ARGUMENT,
NOT_FOUND and FAILED_PRECONDITION with one-line details naming the field.

Callers authenticate as the deployer's do (`evertune.infra.runtime.auth`: bearer tokens scoped to a
tenant). A tenant's token reaches only searches of its own endpoints: another tenant's endpoint or
search is NOT_FOUND, as an unknown one is (no existence leaks); ListSearches needs an endpoint from
a tenant's token. A search belongs to the endpoint it was started on by id (`Search.endpoint_uid`),
not by name: a tenant reaches it only while that very endpoint holds the name
(`records.Incarnation`); a search of an earlier endpoint of the name (deleted, created again,
perhaps by another tenant) is NOT_FOUND to every tenant. An operator's token (tenant `*`), or no
tokens on loopback, reaches everything."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from evertune.errors import EvertuneError, InvalidArgument, NotFound
from evertune.infra.runtime import run_unary
from evertune.infra.runtime.auth import caller
from evertune.searcher.records import Incarnation, SearchRecord
from evertune.searcher.searches import SearchSupervisor
from evertune.v1 import events_pb2
from evertune.v1 import search_service_pb2 as pb
from evertune.v1 import search_service_pb2_grpc as pb_grpc

#: Full name of the service (health and reflection list it).
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SearchService"].full_name
#: ListSearches / ListTrials page size when the request leaves it at 0, and the most it may ask.
DEFAULT_PAGE, MAX_PAGE = 100, 1000


def page_offset(token: str) -> int:
    """The offset a page token stands for ("" = 0)."""
    if not token:
        return 0
    if not token.startswith("o") or not token[1:].isdigit():
        raise InvalidArgument("page_token: not a token this server issued (use next_page_token)")
    return int(token[1:])


class SearchApi(pb_grpc.SearchServiceServicer):
    """gRPC face of `SearchSupervisor`. `searches` is set once the service has started."""

    def __init__(self) -> None:
        self.searches: SearchSupervisor | None = None
        #: Set when the service stops: open WatchSearch streams end (the service sets it).
        self.stopping = asyncio.Event()

    def add_to(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_SearchServiceServicer_to_server(self, server)  # type: ignore[no-untyped-call]

    def _require(self) -> SearchSupervisor:
        if self.searches is None:
            raise EvertuneError("the searcher is still starting")
        return self.searches

    async def _visible_endpoint(self, endpoint: str, *, field: str) -> Incarnation | None:
        """NOT_FOUND unless the caller may reach `endpoint`; the endpoint that holds the name now
        (None for an operator, who reaches every endpoint and every search)."""
        who = caller()
        if who.all_tenants:
            return None
        found = await self._require().endpoint(endpoint) if endpoint else None
        if found is None or not who.sees(found.spec.tenant):
            raise NotFound(f"{field}: endpoint {endpoint!r} not found")
        return Incarnation.of(endpoint, found)

    async def _visible_search(self, search_id: str) -> SearchRecord:
        """The search, NOT_FOUND (as an unknown search) unless the caller may reach the endpoint it
        was started on: that endpoint's id must be the one its name holds now."""
        record = await self._require().get(search_id)
        try:
            current = await self._visible_endpoint(record.search.endpoint, field="search_id")
            if current is not None and not current.holds(record.search):
                raise NotFound("an earlier endpoint of the name")
        except NotFound:
            raise NotFound(f"search_id: search {search_id!r} not found") from None
        return record

    async def StartSearch(
        self, request: pb.StartSearchRequest, context: grpc.aio.ServicerContext
    ) -> pb.StartSearchResponse:
        async def work() -> pb.StartSearchResponse:
            current = await self._visible_endpoint(request.endpoint, field="endpoint")
            record = await self._require().start(request, caller_sees=current)
            return pb.StartSearchResponse(search=record.search)

        return await run_unary(context, "StartSearch", work)

    async def GetSearch(
        self, request: pb.GetSearchRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSearchResponse:
        async def work() -> pb.GetSearchResponse:
            return pb.GetSearchResponse(search=(await self._visible_search(request.search_id)).search)

        return await run_unary(context, "GetSearch", work)

    async def ListSearches(
        self, request: pb.ListSearchesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSearchesResponse:
        async def work() -> pb.ListSearchesResponse:
            if request.page_size > MAX_PAGE:
                raise InvalidArgument(f"page_size: at most {MAX_PAGE}, got {request.page_size}")
            current = None
            if not caller().all_tenants:
                if not request.endpoint:
                    raise InvalidArgument(
                        "endpoint: required with a tenant's token (one endpoint's searches)"
                    )
                current = await self._visible_endpoint(request.endpoint, field="endpoint")
            states = []
            for i, state in enumerate(request.states):
                if state not in pb.SearchState.values() or state == pb.SEARCH_STATE_UNSPECIFIED:
                    raise InvalidArgument(f"states[{i}]: {state} is not a search state")
                states.append(pb.SearchState.Name(state))
            offset = page_offset(request.page_token)
            limit = request.page_size or DEFAULT_PAGE
            records, more = await self._require().records.page(
                endpoint=request.endpoint, states=states, limit=limit, offset=offset, incarnation=current
            )
            return pb.ListSearchesResponse(
                searches=[r.search for r in records], next_page_token=f"o{offset + limit}" if more else ""
            )

        return await run_unary(context, "ListSearches", work)

    async def ListTrials(
        self, request: pb.ListTrialsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTrialsResponse:
        async def work() -> pb.ListTrialsResponse:
            if request.page_size > MAX_PAGE:
                raise InvalidArgument(f"page_size: at most {MAX_PAGE}, got {request.page_size}")
            offset = page_offset(request.page_token)
            limit = request.page_size or DEFAULT_PAGE
            await self._visible_search(request.search_id)
            trials, more = await self._require().trials(request.search_id, limit=limit, offset=offset)
            return pb.ListTrialsResponse(trials=trials, next_page_token=f"o{offset + limit}" if more else "")

        return await run_unary(context, "ListTrials", work)

    async def CancelSearch(
        self, request: pb.CancelSearchRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelSearchResponse:
        async def work() -> pb.CancelSearchResponse:
            await self._visible_search(request.search_id)
            record = await self._require().cancel(request.search_id, request.reason)
            return pb.CancelSearchResponse(search=record.search)

        return await run_unary(context, "CancelSearch", work)

    async def WatchSearch(
        self, request: pb.WatchSearchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[events_pb2.Event]:
        searches = await run_unary(context, "WatchSearch", self._check_watch(request))
        async for event in searches.watch(request.search_id, replay=request.replay, stopping=self.stopping):
            yield event

    def _check_watch(self, request: pb.WatchSearchRequest) -> Callable[[], Awaitable[SearchSupervisor]]:
        async def check() -> SearchSupervisor:
            await self._visible_search(request.search_id)
            return self._require()

        return check
