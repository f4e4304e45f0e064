"""A POST on a pooled connection the engine had closed goes out again on a fresh one.

The fixture is a raw HTTP server that answers every request as llama.cpp's does after a stream:
a chunked SSE answer with `Keep-Alive` in its headers, then, a moment later and without reading
another request, it closes the connection. A client that sends its next request at once sends it
on a connection about to close.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from evertune.infra import engine_http
from evertune.infra.nats_server import free_port

ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Keep-Alive: timeout=5, max=100\r\n\r\n"
    b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
)


@pytest.fixture
async def closing_server() -> AsyncIterator[tuple[str, list[int]]]:
    """(base URL, requests answered): each connection answers one request, then is closed."""
    answered: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            ),
            0,
        )
        await reader.readexactly(length)
        answered.append(length)
        writer.write(ANSWER)
        await writer.drain()
        await asyncio.sleep(0.1)  # a next request on this connection arrives meanwhile, unread
        writer.close()

    port = free_port()
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        yield f"http://127.0.0.1:{port}", answered


async def _read(response: aiohttp.ClientResponse) -> bytes:
    return await response.read()


async def test_the_second_request_is_sent_again_on_a_fresh_connection(
    closing_server: tuple[str, list[int]],
) -> None:
    url, answered = closing_server
    async with aiohttp.ClientSession() as session, engine_http.fresh_session(session) as fresh:
        for _ in range(3):
            async with engine_http.post(
                session, f"{url}/v1/completions", data=b"{}", headers={}, fresh=fresh
            ) as r:
                assert r.status == 200 and await _read(r) == b"data: [DONE]\n\n"
    assert answered == [2, 2, 2]  # each request reached the engine once


async def test_without_it_the_pooled_connection_fails(closing_server: tuple[str, list[int]]) -> None:
    url, _ = closing_server
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/v1/completions", data=b"{}") as r:
            await r.read()
        with pytest.raises((aiohttp.ClientOSError, aiohttp.ServerDisconnectedError)):
            async with session.post(f"{url}/v1/completions", data=b"{}") as r:
                await r.read()


async def test_an_engine_that_is_down_is_not_tried_twice() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with aiohttp.ClientSession() as session, engine_http.fresh_session(session) as fresh:
        with pytest.raises(aiohttp.ClientConnectorError):
            async with engine_http.post(session, url, data=b"{}", headers={}, fresh=fresh):
                pass
