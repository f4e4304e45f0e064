"""A POST on a pooled connection the engine had closed goes out again on a fresh one (the server:
`tests/closing_server.py`, which closes as llama.cpp's does after a stream)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from evertune.infra import engine_http
from evertune.infra.nats_server import free_port
from tests.closing_server import EVENTS, closing_server


@pytest.fixture
async def closing() -> AsyncIterator[tuple[str, list[int]]]:
    async with closing_server() as server:
        yield server


async def _read(response: aiohttp.ClientResponse) -> bytes:
    return await response.read()


async def test_the_second_request_is_sent_again_on_a_fresh_connection(
    closing: tuple[str, list[int]],
) -> None:
    url, answered = closing
    async with aiohttp.ClientSession() as session, engine_http.fresh_session(session) as fresh:
        for _ in range(3):
            async with engine_http.post(
                session, f"{url}/v1/completions", data=b"{}", headers={}, fresh=fresh
            ) as r:
                assert r.status == 200 and await _read(r) == EVENTS
    assert answered == [2, 2, 2]  # each request reached the engine once


async def test_without_it_the_pooled_connection_fails(closing: tuple[str, list[int]]) -> None:
    url, _ = closing
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
