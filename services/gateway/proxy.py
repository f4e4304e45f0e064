"""The OpenAI-compatible HTTP proxy: routes by weight, streams chunk by chunk, times what it sends.

Clients name the endpoint in the request's `model` field. The proxy picks a deployment by the
endpoint's route weights, forwards the request (asking a streamed upstream for usage), passes the
stream through event by event as it arrives, and times every content chunk at the moment it is
written to the client. When the request ends (completed, failed, or the client went away) its
`Observation` becomes a record handed to the publisher: the response path does no telemetry I/O.

What OpenAI clients rely on: every error is an OpenAI error body (`record.error_body`), JSON for
unknown paths and methods too; a 503 or 429 says when to retry (`Retry-After`); a stream whose
upstream fails after the 200 headers ends with an error event (`data: {"error": ...}`, which the
OpenAI SDK raises as `APIError`) and no `[DONE]`, so a cut answer is never taken for a whole one;
the client's `X-Request-Id` comes back on the reply. `GET /health` answers while the process
serves; `GET /ready` while it also takes requests (routes loaded, not shutting down).

With API keys (`keys`): every inference call and `/v1/models` need `Authorization: Bearer <key>`
(401 otherwise); a key reaches only its tenant's endpoints (another tenant's is answered as an
unknown model, 404) and `/v1/models` lists only those; `/metrics` needs an operator's key.

Admission, before any prompt work, each refusal a 429 `rate_limit_error` with `Retry-After`: the
caller's tenant over its request rate (`ratelimit.TenantRates`, checked right after the key, before
the body is read), then the endpoint at its cap of requests in flight. A client slow to send its
headers loses the connection (`server_args`: aiohttp's keep-alive timer, which also runs while a
request's headers are incomplete), one slow to send its body gets 408.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from evertune.domain.replay.sse import SseDecoder
from evertune.errors import Unauthenticated
from evertune.gateway.prefix import chat_messages, completion_prompt
from evertune.gateway.publisher import Pending
from evertune.gateway.ratelimit import TenantRates, retry_after_s
from evertune.gateway.record import (
    Observation,
    apply_usage,
    build_record,
    client_request_id,
    error_body,
    read_payload,
)
from evertune.gateway.routing import NoDeployment, RouteBook, choose, unknown_model, upstream_model
from evertune.gateway.settings import GatewaySettings
from evertune.infra import engine_http
from evertune.infra.runtime.auth import Principal, TokenLookup, authenticate
from evertune.v1 import endpoint_pb2, telemetry_pb2

#: Request headers not forwarded upstream (hop-by-hop, recomputed, or replaced).
DROPPED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "accept-encoding",
        "x-request-id",
    }
)

Offer = Callable[[Pending], None]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Statuses whose answer says when to retry (`Retry-After`, whole seconds).
RETRY_STATUSES = frozenset({429, 503})


@web.middleware
async def json_errors(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
    """aiohttp's own errors (unknown path, wrong method, ...) as OpenAI error bodies, not text."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException as err:
        if err.status < 400:
            raise
        if err.status == 404:
            message = f"Invalid URL ({request.method} {request.path})"
        elif err.status == 405:
            message = f"{request.method} is not allowed on {request.path}"
        else:
            message = err.reason
        headers = {
            k: v for k, v in err.headers.items() if k.lower() not in ("content-type", "content-length")
        }
        return web.json_response(
            error_body(message, status=err.status, code=None), status=err.status, headers=headers
        )


class Proxy:
    """The aiohttp application of the gateway and its upstream client session."""

    def __init__(
        self,
        settings: GatewaySettings,
        book: RouteBook,
        offer: Offer,
        *,
        ready: Callable[[], str | None] = lambda: None,
        keys: TokenLookup | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        """`ready`: why the gateway takes no requests now (None: it does), for `GET /ready`.
        `keys`: the API keys clients must send (None: no authentication). `clock`: seconds, of the
        tenants' rate buckets."""
        self.settings = settings
        self.keys = keys
        self.book = book
        self.offer = offer
        self.ready = ready
        self.rng = rng or random.Random()
        self.clock = clock
        self.rates = TenantRates(
            settings.tenant_rate_limit, settings.tenant_rate_limits, settings.tenant_rate_burst_s
        )
        self.in_flight = 0
        self.endpoint_in_flight: dict[str, int] = {}  #: endpoint -> requests it is serving now
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None  #: for a second send (`engine_http`)
        self.app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[json_errors])
        self.app.router.add_post("/v1/chat/completions", self.chat)
        self.app.router.add_post("/v1/completions", self.completions)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/ready", self.readiness)
        self.app.on_startup.append(self._open)
        self.app.on_cleanup.append(self._close)

    @property
    def server_args(self) -> dict[str, Any]:
        """Keyword arguments of the `web.AppRunner` serving `app`. aiohttp has no header timeout of
        its own, but its keep-alive timer starts when a connection opens and again after each
        response, and closes the connection when it fires while no whole request line and headers
        have arrived: so `keepalive_timeout` bounds a slow sender's headers (and idle connections)."""
        return {"keepalive_timeout": self.settings.header_timeout_s}

    async def _open(self, _: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=self.settings.upstream_connect_timeout_s,
            sock_read=self.settings.upstream_read_timeout_s,
        )
        connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
        self._fresh = engine_http.fresh_session(self._session)

    async def _close(self, _: web.Application) -> None:
        if self._session is not None:
            await self._session.close()
        if self._fresh is not None:
            await self._fresh.close()

    def _caller(self, request: web.Request) -> Principal:
        """Who sends `request` (everyone is an operator without keys); `Unauthenticated` without a
        known key."""
        return authenticate(self.keys, [("authorization", request.headers.get("Authorization", ""))])

    def _unauthenticated(self, err: Unauthenticated) -> web.Response:
        body = error_body(str(err), status=401, code="invalid_api_key")
        return web.json_response(body, status=401, headers={"WWW-Authenticate": "Bearer"})

    def operators_only(self, handler: Handler) -> Handler:
        """`handler` answered only to an operator's key when the gateway has keys (401, 403)."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            try:
                who = self._caller(request)
            except Unauthenticated as err:
                return self._unauthenticated(err)
            if not who.all_tenants:
                body = error_body("an operator's key is needed", status=403, code="operators_only")
                return web.json_response(body, status=403)
            return await handler(request)

        return guarded

    async def models(self, request: web.Request) -> web.Response:
        try:
            who = self._caller(request)
        except Unauthenticated as err:
            return self._unauthenticated(err)
        data = [
            {"id": name, "object": "model", "created": self.book.created(name), "owned_by": "evertune"}
            for name in self.book.endpoints()
            if who.sees(self.book.tables[name].tenant)
        ]
        return web.json_response({"object": "list", "data": data})

    async def health(self, request: web.Request) -> web.Response:
        """Liveness: the process serves HTTP."""
        return web.json_response({"status": "ok"})

    async def readiness(self, request: web.Request) -> web.Response:
        """Readiness: 200 while the gateway takes requests, else 503 with the reason."""
        reason = self.ready()
        if reason is None:
            return web.json_response({"status": "ready"})
        body = error_body(reason, status=503, code="not_ready")
        return web.json_response(body, status=503, headers={"Retry-After": str(self.settings.retry_after_s)})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, telemetry_pb2.API_CHAT)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, telemetry_pb2.API_COMPLETIONS)

    async def _handle(self, request: web.Request, api: telemetry_pb2.Api) -> web.StreamResponse:
        request_id = uuid.uuid4().hex
        obs = Observation(
            request_id=request_id,
            reply_id=client_request_id(request.headers.get("X-Request-Id")) or request_id,
            start_time_unix_ns=time.time_ns(),
            received=time.perf_counter(),
            api=api,
        )
        prompt: str | list[int] | None = None
        messages: list[dict[str, str]] | None = None
        model = ""
        self.in_flight += 1
        try:
            try:
                who = self._caller(request)
            except Unauthenticated as err:
                obs.status, obs.error_class, obs.ended = 401, "invalid_api_key", time.perf_counter()
                return self._unauthenticated(err)
            wait_s = self.rates.take(who.tenant, self.clock())
            if wait_s > 0:  # before the body is read: a tenant over its rate costs no more than this
                message = (
                    f"tenant {who.tenant} is over its limit of {self.rates.rate(who.tenant):g} requests/s"
                )
                return self._error(
                    obs, 429, message, code="rate_limit_exceeded", retry_s=retry_after_s(wait_s)
                )
            body = await self._read_body(request, obs)
            if isinstance(body, web.Response):
                return body
            table = self.book.tables.get(obs.model)
            if table is None or not who.sees(table.tenant):  # another tenant's: answered as unknown
                return self._error(obs, 404, unknown_model(obs.model), code="model_not_found")
            obs.endpoint = endpoint = table.endpoint
            obs.endpoint_uid = table.endpoint_uid
            busy = self.endpoint_in_flight.get(endpoint, 0)
            if busy >= self.settings.max_in_flight_per_endpoint:
                message = f"endpoint {endpoint} is at its limit of {busy} requests in flight"
                return self._error(obs, 429, message, code="concurrency_limit")
            self.endpoint_in_flight[endpoint] = busy + 1  # no await since the check: no race
            try:
                # Prompt work only for a request that is served.
                model = table.model
                if api == telemetry_pb2.API_CHAT:
                    messages = chat_messages(body.get("messages"))
                elif api == telemetry_pb2.API_COMPLETIONS:
                    prompt = completion_prompt(body.get("prompt"))
                return await self._route(request, body, obs, table)
            finally:
                left = self.endpoint_in_flight[endpoint] - 1
                if left:
                    self.endpoint_in_flight[endpoint] = left
                else:
                    del self.endpoint_in_flight[endpoint]
        except asyncio.CancelledError:
            obs.client_disconnected = True
            obs.error_class = obs.error_class or "client_disconnect"
            obs.status = obs.status or 499
            raise
        finally:
            self.in_flight -= 1
            obs.ended = obs.ended or time.perf_counter()
            self.offer(Pending(record=build_record(obs), prompt=prompt, messages=messages, model=model))

    def _error(
        self, obs: Observation, status: int, message: str, *, code: str, retry_s: int | None = None
    ) -> web.Response:
        """The one error answer of a request (and its record's status): OpenAI's body; a 429 or 503
        says when to retry (`retry_s`, else `RETRY_AFTER_S`)."""
        obs.status = status
        obs.error_class = obs.error_class or code
        obs.ended = time.perf_counter()
        headers = {"x-request-id": obs.reply_id}
        if status in RETRY_STATUSES:
            headers["Retry-After"] = str(self.settings.retry_after_s if retry_s is None else retry_s)
        return web.json_response(
            error_body(message, status=status, code=code), status=status, headers=headers
        )

    async def _read_body(self, request: web.Request, obs: Observation) -> dict[str, Any] | web.Response:
        """The request's JSON object, or the error answer (too large, too slow, not JSON, no model)."""
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._error(
                obs,
                413,
                f"request body over {limit} bytes",
                code="body_too_large",
            )
        try:
            async with asyncio.timeout(self.settings.body_read_timeout_s):
                raw = await request.read()
        except TimeoutError:
            message = f"request body not received within {self.settings.body_read_timeout_s:g} s"
            return self._error(obs, 408, message, code="body_timeout")
        except web.HTTPRequestEntityTooLarge:
            return self._error(
                obs,
                413,
                f"request body over {limit} bytes",
                code="body_too_large",
            )
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            return self._error(obs, 400, "request body is not valid JSON", code="bad_json")
        if not isinstance(body, dict):
            return self._error(obs, 400, "request body must be a JSON object", code="bad_json")
        model = body.get("model")
        obs.stream = body.get("stream") is True
        if not isinstance(model, str) or not model:
            return self._error(
                obs,
                400,
                "`model` is required: the endpoint name",
                code="missing_model",
            )
        obs.model = model
        return body

    async def _route(
        self, request: web.Request, body: dict[str, Any], obs: Observation, table: endpoint_pb2.RouteTable
    ) -> web.StreamResponse:
        """Pick a deployment of `table` and relay the request to it."""
        try:
            route = choose(table, self.rng)
        except NoDeployment as err:
            return self._error(obs, 503, str(err), code="no_deployment")
        obs.deployment = route.deployment_id
        body["model"] = upstream_model(route, table.endpoint, self.settings.upstream_model)
        wants_usage = False
        if obs.stream:
            options = body.get("stream_options")
            options = dict(options) if isinstance(options, dict) else {}
            wants_usage = options.get("include_usage") is True
            options["include_usage"] = True
            body["stream_options"] = options
        headers = {k: v for k, v in request.headers.items() if k.lower() not in DROPPED_HEADERS}
        headers["X-Request-Id"] = obs.request_id
        headers["Content-Type"] = "application/json"
        url = route.upstream_url.rstrip("/") + request.path
        assert self._session is not None and self._fresh is not None
        obs.upstream_sent = time.perf_counter()
        try:
            async with engine_http.post(
                self._session, url, data=json.dumps(body).encode(), headers=headers, fresh=self._fresh
            ) as upstream:
                if upstream.status != 200 or not obs.stream:
                    return await self._whole(request, upstream, obs)
                return await self._stream(request, upstream, obs, wants_usage)
        except TimeoutError:
            return self._error(obs, 504, "upstream timed out", code="upstream_timeout")
        except aiohttp.ClientConnectorError:
            return self._error(obs, 502, "upstream unreachable", code="upstream_connect")
        except (aiohttp.ClientError, ConnectionError) as err:
            return self._error(obs, 502, f"upstream failed: {type(err).__name__}", code="upstream_error")

    async def _whole(
        self, request: web.Request, upstream: aiohttp.ClientResponse, obs: Observation
    ) -> web.Response:
        data = await upstream.read()
        obs.status = upstream.status
        if upstream.status >= 400:
            obs.error_class = "upstream_5xx" if upstream.status >= 500 else "upstream_4xx"
        else:
            try:
                parsed = json.loads(data)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                apply_usage(obs, parsed.get("usage"))
        content_type = upstream.headers.get("Content-Type", "application/json")
        response = web.Response(
            body=data,
            status=upstream.status,
            headers={"Content-Type": content_type, "x-request-id": obs.reply_id},
        )
        await response.prepare(request)
        await response.write_eof()
        obs.ended = time.perf_counter()
        if upstream.status == 200 and obs.completion_tokens:
            obs.writes.append(obs.ended)
        return response

    async def _stream(
        self, request: web.Request, upstream: aiohttp.ClientResponse, obs: Observation, wants_usage: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "x-request-id": obs.reply_id,
            },
        )
        await response.prepare(request)
        obs.status = 200
        decoder = SseDecoder()
        failure = ""  #: why the upstream's stream ended before `[DONE]`; "" = it did not
        try:
            async for data in upstream.content.iter_any():
                if await self._relay(response, decoder.feed(data), obs, wants_usage):
                    break
            else:
                if not await self._relay(response, decoder.close(), obs, wants_usage):
                    failure = "upstream_incomplete"
        except ConnectionResetError:  # the client went away (aiohttp's reset error is one too)
            obs.client_disconnected = True
            obs.error_class = obs.error_class or "client_disconnect"
        except TimeoutError:
            failure = "upstream_timeout"
        except aiohttp.ClientError:
            failure = "upstream_disconnect"
        if failure:
            await self._fail_stream(response, obs, failure)
        obs.ended = time.perf_counter()
        if not obs.client_disconnected:
            try:
                await response.write_eof()
            except ConnectionResetError:
                obs.client_disconnected = True
        obs.ended = time.perf_counter()
        return response

    async def _fail_stream(self, response: web.StreamResponse, obs: Observation, failure: str) -> None:
        """End a stream whose upstream failed after the 200 headers with an OpenAI error event, so
        the client knows its answer is cut (no `[DONE]` follows); recorded as a 502 (504 timeout)."""
        obs.error_class = obs.error_class or failure
        obs.status = 504 if failure == "upstream_timeout" else 502
        if obs.client_disconnected or obs.error_class == "upstream_stream_error":  # already told
            return
        message = f"the upstream failed mid-stream ({failure}); the answer is incomplete"
        event = json.dumps(error_body(message, status=obs.status, code=failure))
        try:
            await response.write(b"data: " + event.encode() + b"\n\n")
        except ConnectionResetError:
            obs.client_disconnected = True

    async def _relay(
        self, response: web.StreamResponse, payloads: list[str], obs: Observation, wants_usage: bool
    ) -> bool:
        """Write a read's events to the client as one write; True once `[DONE]` went by."""
        if not payloads:
            return False
        arrived = time.perf_counter()
        out: list[bytes] = []
        content = 0
        done = False
        for payload in payloads:
            info = read_payload(payload)
            if info.usage is not None:
                apply_usage(obs, info.usage)
            if info.error and not obs.error_class:
                # the upstream's own error event: a 502 from here on, even should the client leave
                # at once and the handler be cancelled before the stream's end
                obs.error_class, obs.status = "upstream_stream_error", 502
            if info.content:
                content += 1
            if info.usage_only and not wants_usage:
                continue
            out.append(b"data: " + payload.encode() + b"\n\n")
            if info.done:
                done = True
                break
        if out:
            await response.write(b"".join(out))
        if content:
            now = time.perf_counter()
            if obs.upstream_first is None:
                obs.upstream_first = arrived
            obs.writes.extend([now] * content)
        return done
