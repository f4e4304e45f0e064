"""Connecting to NATS: reconnect forever once connected, fail fast with one line if never connected."""

from __future__ import annotations

import asyncio

import nats
from nats.aio.client import Client

from evertune.errors import BusUnavailable, InvalidArgument
from evertune.infra.logging import get_logger
from evertune.infra.settings import NATS_SCHEMES

log = get_logger("evertune.infra.bus")


def parse_servers(urls: str) -> list[str]:
    """`nats://a:4222,nats://b:4222` -> list of server URLs."""
    servers = [u.strip() for u in urls.split(",") if u.strip()]
    if not servers:
        raise BusUnavailable("no NATS server given (set EVERTUNE_NATS_URL)")
    for server in servers:
        if not server.startswith(NATS_SCHEMES):
            raise InvalidArgument(f"{server!r} is not a NATS URL (nats://host:port)")
    return servers


async def connect(urls: str, *, name: str, connect_timeout_s: float = 5.0) -> Client:
    """Connect to NATS and return the client.

    The first connection must succeed within `connect_timeout_s` or a one-line `BusUnavailable` is
    raised. After that the client reconnects forever, buffering publishes while it is away.
    """
    servers = parse_servers(urls)
    client = Client()

    async def on_error(err: Exception) -> None:
        log.warning("nats error", error=str(err) or type(err).__name__)

    async def on_disconnect() -> None:
        if not (client.is_closed or client.is_draining):  # closing on purpose is not news
            log.warning("nats disconnected")

    async def on_reconnect() -> None:
        log.info("nats reconnected")

    try:
        await asyncio.wait_for(
            client.connect(
                servers,
                name=name,
                connect_timeout=max(1, round(connect_timeout_s)),
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=1,
                error_cb=on_error,
                disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
            ),
            timeout=connect_timeout_s * len(servers) + 1,
        )
    except (TimeoutError, OSError, nats.errors.Error) as err:
        detail = str(err) or type(err).__name__
        raise BusUnavailable(f"cannot reach NATS at {','.join(servers)}: {detail}") from None
    return client
