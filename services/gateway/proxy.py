"""The OpenAI-compatible HTTP proxy: routes by weight, streams chunk by chunk, times what it sends.

Clients name the endpoint in the request's `model` field. The proxy picks a deployment by the
endpoint's route weights, forwards the request (asking a streamed upstream for usage), passes the
stream through event by event as it arrives, and times every content chunk at the moment it is
written to the client. When the request ends (completed, failed, or the client went away) its
`Observation` becomes a record handed to the publisher: the response path does no telemetry I/O.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web
from evertune.gateway.prefix import chat_prompt, completion_prompt
from evertune.gateway.publisher import Pending
from evertune.gateway.record import Observation, apply_usage, build_record, error_body, read_payload
from evertune.gateway.routing import NoDeployment, RouteBook, choose, upstream_model
from evertune.gateway.settings import GatewaySettings

from evertune.errors import NotFound
from evertune.replay.sse import SseDecoder
from evertune.v1 import telemetry_pb2

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


class Proxy:
    """The aiohttp application of the gateway and its upstream client session."""

    def __init__(
        self, settings: GatewaySettings, book: RouteBook, offer: Offer, *, rng: random.Random | None = None
    ):
        self.settings = settings
        self.book = book
        self.offer = offer
        self.rng = rng or random.Random()
        self.in_flight = 0
        self._session: aiohttp.ClientSession | None = None
        self.app = web.Application(client_max_size=settings.max_body_bytes)
        self.app.router.add_post("/v1/chat/completions", self.chat)
        self.app.router.add_post("/v1/completions", self.completions)
        self.app.router.add_get("/v1/models", self.models)
        self.app.on_startup.append(self._open)
        self.app.on_cleanup.append(self._close)

    async def _open(self, _: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=self.settings.upstream_connect_timeout_s,
            sock_read=self.settings.upstream_read_timeout_s,
        )
        connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)

    async def _close(self, _: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    async def models(self, request: web.Request) -> web.Response:
        data = [{"id": name, "object": "model", "owned_by": "evertune"} for name in self.book.endpoints()]
        return web.json_response({"object": "list", "data": data})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, telemetry_pb2.API_CHAT)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, telemetry_pb2.API_COMPLETIONS)

    async def _handle(self, request: web.Request, api: telemetry_pb2.Api) -> web.StreamResponse:
        obs = Observation(
            request_id=uuid.uuid4().hex,
            start_time_unix_ns=time.time_ns(),
            received=time.perf_counter(),
            api=api,
        )
        prompt: str | list[int] | None = None
        self.in_flight += 1
        try:
            body = await self._read_body(request, obs)
            if isinstance(body, web.Response):
                return body
            prompt = chat_prompt(body.get("messages")) if api == telemetry_pb2.API_CHAT else None
            if api == telemetry_pb2.API_COMPLETIONS:
                prompt = completion_prompt(body.get("prompt"))
            return await self._forward(request, body, obs)
        except asyncio.CancelledError:
            obs.client_disconnected = True
            obs.error_class = obs.error_class or "client_disconnect"
            obs.status = obs.status or 499
            raise
        finally:
            self.in_flight -= 1
            obs.ended = obs.ended or time.perf_counter()
            self.offer(Pending(record=build_record(obs), prompt=prompt))

    def _error(self, obs: Observation, status: int, message: str, *, kind: str, code: str) -> web.Response:
        obs.status = status
        obs.error_class = obs.error_class or code
        obs.ended = time.perf_counter()
        headers = {"x-request-id": obs.request_id}
        return web.json_response(error_body(message, kind=kind, code=code), status=status, headers=headers)

    async def _read_body(self, request: web.Request, obs: Observation) -> dict[str, Any] | web.Response:
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._error(
                obs,
                413,
                f"request body over {limit} bytes",
                kind="invalid_request_error",
                code="body_too_large",
            )
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._error(
                obs,
                413,
                f"request body over {limit} bytes",
                kind="invalid_request_error",
                code="body_too_large",
            )
        try:
            body = json.loads(raw)
        except ValueError:
            return self._error(
                obs, 400, "request body is not valid JSON", kind="invalid_request_error", code="bad_json"
            )
        if not isinstance(body, dict):
            return self._error(
                obs, 400, "request body must be a JSON object", kind="invalid_request_error", code="bad_json"
            )
        model = body.get("model")
        obs.stream = body.get("stream") is True
        if not isinstance(model, str) or not model:
            return self._error(
                obs,
                400,
                "`model` is required: the endpoint name",
                kind="invalid_request_error",
                code="missing_model",
            )
        obs.model = model
        return body

    async def _forward(
        self, request: web.Request, body: dict[str, Any], obs: Observation
    ) -> web.StreamResponse:
        try:
            table = self.book.table(obs.model)
        except NotFound as err:
            return self._error(obs, 404, str(err), kind="invalid_request_error", code="model_not_found")
        obs.endpoint = table.endpoint
        try:
            route = choose(table, self.rng)
        except NoDeployment as err:
            return self._error(obs, 503, str(err), kind="service_unavailable", code="no_deployment")
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
        assert self._session is not None
        obs.upstream_sent = time.perf_counter()
        try:
            async with self._session.post(url, data=json.dumps(body).encode(), headers=headers) as upstream:
                if upstream.status != 200 or not obs.stream:
                    return await self._whole(request, upstream, obs)
                return await self._stream(request, upstream, obs, wants_usage)
        except TimeoutError:
            return self._error(obs, 504, "upstream timed out", kind="upstream_error", code="upstream_timeout")
        except aiohttp.ClientConnectorError:
            return self._error(
                obs, 502, "upstream unreachable", kind="upstream_error", code="upstream_connect"
            )
        except (aiohttp.ClientError, ConnectionError) as err:
            name = type(err).__name__
            return self._error(
                obs, 502, f"upstream failed: {name}", kind="upstream_error", code="upstream_error"
            )

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
            headers={"Content-Type": content_type, "x-request-id": obs.request_id},
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
                "x-request-id": obs.request_id,
            },
        )
        await response.prepare(request)
        obs.status = 200
        decoder = SseDecoder()
        done = False
        try:
            async for data in upstream.content.iter_any():
                if await self._relay(response, decoder.feed(data), obs, wants_usage):
                    done = True
                    break
            if not done:
                await self._relay(response, decoder.close(), obs, wants_usage)
                obs.error_class = obs.error_class or "upstream_incomplete"
        except ConnectionResetError:  # the client went away (aiohttp's reset error is one too)
            obs.client_disconnected = True
            obs.error_class = obs.error_class or "client_disconnect"
        except TimeoutError:
            obs.error_class = obs.error_class or "upstream_timeout"
        except aiohttp.ClientError:
            obs.error_class = obs.error_class or "upstream_disconnect"
        obs.ended = time.perf_counter()
        if not obs.client_disconnected:
            try:
                await response.write_eof()
            except ConnectionResetError:
                obs.client_disconnected = True
        obs.ended = time.perf_counter()
        return response

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
            if info.error:
                obs.error_class = obs.error_class or "upstream_stream_error"
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
