"""A client cannot hold the gateway's connections, an endpoint's capacity or more than its tenant's
request rate (hole 7 of the security issue): headers that do not arrive in time lose the
connection, a body that does not arrive in time is answered 408, an endpoint at its limit of
requests in flight and a tenant over its rate answer 429 with Retry-After instead of taking more;
what is admitted is answered and recorded."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from nats.aio.client import Client
from pydantic import SecretStr

from evertune.gateway import GatewayService
from evertune.gateway.proxy import Proxy
from evertune.gateway.publisher import Pending
from evertune.gateway.routing import RouteBook
from evertune.gateway.settings import GatewaySettings
from evertune.infra.bus import Bucket
from evertune.infra.nats_server import free_port
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings
from evertune.v1 import endpoint_pb2
from tests.gateway.conftest import read_records


@pytest.fixture
def offered() -> list[Pending]:
    """What the proxy of `proxy_url` handed to the publisher."""
    return []


@pytest.fixture
async def proxy_url(fake_url: str, offered: list[Pending]) -> AsyncIterator[str]:
    """A proxy (no bus: records are kept in `offered`) routing endpoint "ep" to the fake upstream."""
    book = RouteBook()
    table = endpoint_pb2.RouteTable(
        endpoint="ep", routes=[endpoint_pb2.Route(deployment_id="d", upstream_url=fake_url, weight=1)]
    )
    book.put("ep", table.SerializeToString())
    settings = GatewaySettings(port=0, body_read_timeout_s=0.5, max_in_flight_per_endpoint=2, retry_after_s=2)
    proxy = Proxy(settings, book, offered.append)
    runner = web.AppRunner(proxy.app, **proxy.server_args)
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


async def test_an_endpoint_at_its_limit_answers_429(proxy_url: str, offered: list[Pending]) -> None:
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
    turned_away = [p for p in offered if p.record.error_class == "concurrency_limit"]
    assert len(turned_away) == 1 and turned_away[0].record.status_code == 429
    assert turned_away[0].prompt is None  # refused before any prompt work
    assert all(p.prompt == "x" for p in offered if p.record.status_code == 200)


KEY_A = "sk-limits-a-0123456789abcdef"
KEY_B = "sk-limits-b-0123456789abcdef"
KEY_OPERATOR = "sk-limits-op-0123456789abcdef"
HEADER_TIMEOUT_S = 0.5


def _always(value: bytes) -> Callable[[bytes | None], bytes]:
    return lambda _: value


class Limited:
    """A running gateway (its own NATS records, metrics) with keys for tenants a and b; tenant a
    may send 1 request/s with 2 s of burst, b has no cap; headers must come within 0.5 s."""

    def __init__(self, service: GatewayService, endpoints: dict[str, str]) -> None:
        self.service = service
        self.url = f"http://127.0.0.1:{service.port}"
        self.endpoints = endpoints  #: tenant -> its endpoint


@pytest.fixture
async def limited(nc: Client, tmp_path: Path, fake_url: str) -> AsyncIterator[Limited]:
    routes = await Bucket.open(nc.jetstream(), "routes")
    endpoints = {tenant: f"limits-{tenant}-{uuid.uuid4().hex[:8]}" for tenant in ("a", "b")}
    for tenant, endpoint in endpoints.items():
        table = endpoint_pb2.RouteTable(
            endpoint=endpoint,
            tenant=tenant,
            routes=[endpoint_pb2.Route(deployment_id=f"d-{tenant}", upstream_url=fake_url, weight=1)],
        )
        await routes.mutate(endpoint, _always(table.SerializeToString()))
    settings = GatewaySettings(
        port=0,
        api_keys=SecretStr(f"{KEY_A} a, {KEY_B} b, {KEY_OPERATOR} *"),
        spool_path=tmp_path / "spool.bin",
        batch_ms=5.0,
        header_timeout_s=HEADER_TIMEOUT_S,
        tenant_rate_limits={"a": 1.0},
        tenant_rate_burst_s=2.0,
    )
    service = GatewayService(settings)
    ctx = ServiceContext(shared=SharedSettings(data_dir=tmp_path), nc=nc, js=nc.jetstream(), store=None)
    await service.start(ctx)
    try:
        yield Limited(service, endpoints)
    finally:
        await service.stop(5.0)


async def _closed_after(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, drip: bytes) -> float:
    """Send `drip` one byte every 0.1 s (a slowloris) until the gateway closes the connection;
    the seconds it took. Fails after 5 s."""
    started = time.monotonic()
    read = asyncio.ensure_future(reader.read())
    try:
        for byte in drip:
            if read.done():
                break
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.wait([read], timeout=0.1)
        async with asyncio.timeout(max(0.1, 5.0 - (time.monotonic() - started))):
            try:
                answer = await read
            except ConnectionError:
                answer = b""
        assert answer == b"", answer  # closed without an answer
        return time.monotonic() - started
    finally:
        read.cancel()
        writer.close()


async def test_headers_that_trickle_lose_the_connection(limited: Limited) -> None:
    port = limited.service.port
    # a slowloris: a request line and headers one byte every 0.1 s, never finished
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    drip = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    elapsed = await _closed_after(reader, writer, drip)
    assert HEADER_TIMEOUT_S * 0.8 <= elapsed < HEADER_TIMEOUT_S + 1.0, elapsed
    # a connection that says nothing at all
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await _closed_after(reader, writer, b"") < HEADER_TIMEOUT_S + 1.0
    # after a whole request on a kept-alive connection, the next request's headers are timed too
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    await reader.readexactly(int(re.findall(rb"Content-Length: (\d+)", head)[0]))
    elapsed = await _closed_after(reader, writer, b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X" * 100)
    assert elapsed < HEADER_TIMEOUT_S + 1.0, elapsed


async def test_a_normal_client_outlives_the_header_timeout(limited: Limited) -> None:
    """Requests whose answers take longer than the header timeout, and a connection reused within
    it, are served whole: the timer runs only while a request's headers are awaited."""
    endpoint = limited.endpoints["b"]
    request = {"model": endpoint, "prompt": "x", "max_tokens": 4, "stream": True}
    headers = {"Authorization": f"Bearer {KEY_B}", "X-Fake": "ttft_ms=700,itl_ms=100"}
    connector = aiohttp.TCPConnector(limit=1)  # one connection, reused
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(2):
            async with session.post(limited.url + "/v1/completions", json=request, headers=headers) as r:
                text = await r.text()
            assert r.status == 200 and "[DONE]" in text
            await asyncio.sleep(HEADER_TIMEOUT_S / 4)


def _metric(text: str, name: str) -> float:
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")]
    return values[0] if values else 0.0


async def test_a_tenant_over_its_rate_is_answered_429_and_nothing_admitted_is_lost(
    limited: Limited, nc: Client
) -> None:
    js = nc.jetstream()
    admitted: dict[str, list[str]] = {"a": [], "b": []}  #: tenant -> request ids answered 200
    refused: list[aiohttp.ClientResponse] = []
    bodies: list[dict[str, object]] = []
    async with aiohttp.ClientSession() as session:
        metrics_url = limited.url + "/metrics"
        operator = {"Authorization": f"Bearer {KEY_OPERATOR}"}
        async with session.get(metrics_url, headers=operator) as r:
            rejected_before = _metric(
                await r.text(), 'evertune_gateway_rejected_requests_total{reason="rate"}'
            )

        async def send(tenant: str, key: str) -> None:
            request = {"model": limited.endpoints[tenant], "prompt": "x", "max_tokens": 2}
            headers = {"Authorization": f"Bearer {key}", "X-Fake": "ttft_ms=1"}
            async with session.post(limited.url + "/v1/completions", json=request, headers=headers) as r:
                body = await r.json()
                if r.status == 200:
                    admitted[tenant].append(r.headers["x-request-id"])
                else:
                    refused.append(r)
                    bodies.append(body)

        started = time.monotonic()
        await asyncio.gather(*(send("a", KEY_A) for _ in range(6)), *(send("b", KEY_B) for _ in range(20)))
        burst_s = time.monotonic() - started
        assert burst_s < 0.9, burst_s  # less than one token came back meanwhile
        # a's bucket holds 2 requests (1/s, 2 s of burst): 2 answered, 4 refused; b has no cap
        assert len(admitted["a"]) == 2 and len(admitted["b"]) == 20
        assert len(refused) == 4
        for response, body in zip(refused, bodies, strict=True):
            assert response.status == 429 and response.headers["Retry-After"] == "1"
            assert body["error"] == {
                "message": "tenant a is over its limit of 1 requests/s",
                "type": "rate_limit_error",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        await asyncio.sleep(1.05)  # Retry-After: a token is due again
        await send("a", KEY_A)
        assert len(admitted["a"]) == 3 and len(refused) == 4
        async with session.get(metrics_url, headers=operator) as r:
            rejected = _metric(await r.text(), 'evertune_gateway_rejected_requests_total{reason="rate"}')
        assert rejected - rejected_before == 4
    for tenant, ids in admitted.items():
        subject = f"evertune.telemetry.{limited.endpoints[tenant]}"
        records = await read_records(js, subject, count=len(ids), request_ids=set(ids))
        assert sorted(r.request_id for r in records) == sorted(ids)
        assert all(r.status_code == 200 for r in records)
