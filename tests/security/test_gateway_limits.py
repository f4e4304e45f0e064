"""A client cannot hold the gateway's connections or an endpoint's capacity (hole 7 of the security
issue, in part): a body that does not arrive in time is answered 408, and an endpoint at its limit
of requests in flight answers 429 with Retry-After instead of taking more."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from evertune.gateway.proxy import Proxy
from evertune.gateway.routing import RouteBook
from evertune.gateway.settings import GatewaySettings

from evertune.infra.nats_server import free_port
from evertune.v1 import endpoint_pb2


@pytest.fixture
async def proxy_url(fake_url: str) -> AsyncIterator[str]:
    """A proxy (no bus: records are dropped) routing endpoint "ep" to the fake upstream."""
    book = RouteBook()
    table = endpoint_pb2.RouteTable(
        endpoint="ep", routes=[endpoint_pb2.Route(deployment_id="d", upstream_url=fake_url, weight=1)]
    )
    book.put("ep", table.SerializeToString())
    settings = GatewaySettings(port=0, body_read_timeout_s=0.5, max_in_flight_per_endpoint=2, retry_after_s=2)
    proxy = Proxy(settings, book, lambda _: None)
    runner = web.AppRunner(proxy.app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_body_that_trickles_is_answered_408(proxy_url: str) -> None:
    async def trickle() -> AsyncIterator[bytes]:
        yield b'{"model": "ep", '
        await asyncio.sleep(3.0)  # a slow sender holding the connection
        yield b'"prompt": "x"}'

    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        async with session.post(proxy_url + "/v1/completions", data=trickle()) as response:
            body = await response.json()
    assert response.status == 408 and body["error"]["code"] == "body_timeout"
    assert time.monotonic() - started < 2.5


async def test_an_endpoint_at_its_limit_answers_429(proxy_url: str) -> None:
    request = {"model": "ep", "prompt": "x", "max_tokens": 3, "stream": True}
    slow = {"X-Fake": "ttft_ms=1500"}
    async with aiohttp.ClientSession() as session:
        held = [
            await session.post(proxy_url + "/v1/completions", json=request, headers=slow) for _ in range(2)
        ]
        try:
            async with session.post(proxy_url + "/v1/completions", json=request) as refused:
                body = json.loads(await refused.read())
                assert refused.status == 429 and refused.headers["Retry-After"] == "2"
                assert (
                    body["error"]["type"] == "rate_limit_error"
                    and body["error"]["code"] == "concurrency_limit"
                )
        finally:
            for response in held:
                await response.read()
                response.release()
        async with session.post(
            proxy_url + "/v1/completions", json=request, headers={"X-Fake": "ttft_ms=1"}
        ) as ok:
            await ok.read()
            assert ok.status == 200  # the slots came back
