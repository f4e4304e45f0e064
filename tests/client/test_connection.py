"""The client's connection rules: TLS settings refused with one line, and which calls are retried
while the server cannot be reached (a free port nobody listens on, then a deployer started there)."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import grpc
import pytest
from nats.aio.client import Client

from evertune.client import Connection, EndpointClient, RpcError, SearchClient
from evertune.client.connection import FIRST_BACKOFF_S
from evertune.errors import SettingsError
from tests.deployer.conftest import TOKEN_A, start_stack, stop_stack


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_tls_settings_come_whole_and_readable(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="both"):
        Connection(address="127.0.0.1:1", tls_cert=tmp_path / "c.pem")
    with pytest.raises(SettingsError, match="attempts"):
        Connection(address="127.0.0.1:1", attempts=0)
    with pytest.raises(SettingsError, match="cannot read the TLS CA"):
        Connection(address="127.0.0.1:1", tls_ca=tmp_path / "missing.pem").open_channel()


async def test_a_read_is_tried_again_and_a_delete_is_not() -> None:
    address = f"127.0.0.1:{_free_port()}"
    async with EndpointClient(Connection(address=address, attempts=3, timeout_s=2)) as client:
        started = time.monotonic()
        with pytest.raises(RpcError) as read:
            await client.list()
        read_s = time.monotonic() - started
        started = time.monotonic()
        with pytest.raises(RpcError) as delete:
            await client.delete("x")
        delete_s = time.monotonic() - started
    assert read.value.code == delete.value.code == grpc.StatusCode.UNAVAILABLE
    assert f"cannot reach the deployer at {address}" in str(read.value)
    assert read_s >= FIRST_BACKOFF_S * (1 + 2)  # waited before the 2nd and the 3rd try
    assert delete_s < FIRST_BACKOFF_S  # tried once


async def test_a_retried_call_reaches_a_server_that_comes_up_meanwhile(nc: Client, tmp_path: Path) -> None:
    port = _free_port()
    async with EndpointClient(Connection(address=f"127.0.0.1:{port}", token=TOKEN_A, attempts=8)) as client:
        listing = asyncio.create_task(client.list())
        await asyncio.sleep(FIRST_BACKOFF_S)  # the first tries find nobody
        stack = await start_stack(nc, tmp_path, grpc_port=port)
        try:
            assert isinstance(await listing, list)
        finally:
            await stop_stack(stack)


async def test_the_search_client_says_which_searcher_it_could_not_reach() -> None:
    address = f"127.0.0.1:{_free_port()}"
    async with SearchClient(Connection(address=address, attempts=1)) as client:
        with pytest.raises(RpcError, match=f"UNAVAILABLE: cannot reach the searcher at {address}"):
            await client.get("s-1")
        with pytest.raises(RpcError, match="UNAVAILABLE"):
            async for _ in client.watch("s-1"):
                pass
