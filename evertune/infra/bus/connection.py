"""Connecting to NATS: reconnect forever once connected, fail fast with one line if never connected."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from urllib.parse import urlsplit, urlunsplit

import nats
from nats.aio.client import Client

from evertune.errors import BusUnavailable, InvalidArgument, SettingsError
from evertune.infra.logging import get_logger
from evertune.infra.settings import NATS_SCHEMES, NatsAuth

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


def redact(url: str) -> str:
    """`url` without the password it may carry (`nats://user:***@host:port`)."""
    split = urlsplit(url)
    if split.password is None:
        return url
    host = split.netloc.rsplit("@", 1)[1]
    return urlunsplit(split._replace(netloc=f"{split.username}:***@{host}"))


def tls_context(auth: NatsAuth) -> ssl.SSLContext | None:
    """The TLS context `auth` asks for (None: plain TCP, unless a URL says tls://); a one-line
    `SettingsError` when a file is missing or is not what it should be."""
    if not auth.tls:
        return None
    try:
        context = ssl.create_default_context(
            cafile=str(auth.tls_ca_file) if auth.tls_ca_file is not None else None
        )
        if auth.tls_cert_file is not None:
            key = str(auth.tls_key_file) if auth.tls_key_file is not None else None
            context.load_cert_chain(str(auth.tls_cert_file), key)
    except (OSError, ssl.SSLError) as err:
        files = [str(f) for f in (auth.tls_ca_file, auth.tls_cert_file, auth.tls_key_file) if f]
        detail = getattr(err, "strerror", None) or str(err) or type(err).__name__
        raise SettingsError(f"NATS TLS files {', '.join(files)} cannot be loaded: {detail}") from None
    return context


def inbox_prefix(user: str) -> str:
    """The inboxes a NATS user gets its replies and deliveries on: `_INBOX.<user>` (its
    permissions let it subscribe to no other), `_INBOX` without a user."""
    return f"_INBOX.{user}" if user else "_INBOX"


async def connect(
    urls: str, *, name: str, connect_timeout_s: float = 5.0, auth: NatsAuth | None = None
) -> Client:
    """Connect to NATS and return the client, logging in with `auth` when given (user and password,
    TLS; credentials in a URL, `nats://user:pass@host:port`, work too).

    The first connection must succeed within `connect_timeout_s` or a one-line `BusUnavailable` is
    raised (a refused login too). After that the client reconnects forever, buffering publishes
    while it is away. A user's replies and deliveries come to inboxes under `_INBOX.<user>.`, the
    only inboxes its permissions let it subscribe to (`evertune.infra.bus.permissions`): no service
    reads what another fetches.
    """
    servers = parse_servers(urls)
    auth = auth or NatsAuth()
    tls = tls_context(auth)
    client = Client()
    refused = asyncio.Event()  #: the server said no (login, TLS): no use waiting for the timeout
    handshake: list[str] = []  #: why the TLS handshake failed, when it did

    async def on_error(err: Exception) -> None:
        if not client.is_connected and "authorization" in str(err).lower():
            refused.set()
        elif not client.is_connected and isinstance(err, ssl.SSLError):
            handshake.append(getattr(err, "verify_message", None) or err.reason or str(err))
            refused.set()
        log.warning("nats error", error=str(err) or type(err).__name__)

    async def on_disconnect() -> None:
        if not (client.is_closed or client.is_draining):  # closing on purpose is not news
            log.warning("nats disconnected")

    async def on_reconnect() -> None:
        log.info("nats reconnected")

    async def first_connect() -> None:
        await client.connect(
            servers,
            name=name,
            connect_timeout=max(1, round(connect_timeout_s)),
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=1,
            error_cb=on_error,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
            tls=tls,
            user=auth.user or None,
            password=auth.password or None,
            inbox_prefix=inbox_prefix(auth.user),
        )

    connecting = asyncio.ensure_future(first_connect())
    waiting = asyncio.ensure_future(refused.wait())
    try:
        await asyncio.wait(
            {connecting, waiting},
            timeout=connect_timeout_s * len(servers) + 1,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if not connecting.done():
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connecting
            raise TimeoutError()
        connecting.result()
    except (TimeoutError, OSError, nats.errors.Error) as err:
        where = ",".join(redact(s) for s in servers)
        with contextlib.suppress(nats.errors.Error, OSError):  # never connected: the error below says why
            await client.close()
        if handshake:
            raise BusUnavailable(
                f"NATS at {where} failed the TLS handshake ({handshake[0]}): check "
                "EVERTUNE_NATS_TLS_CA_FILE against the server's certificate"
            ) from None
        if refused.is_set() or "authorization" in str(err).lower():
            who = f"user {auth.user!r}" if auth.user else "no credentials"
            raise BusUnavailable(
                f"NATS at {where} refused the login ({who}): check the credentials"
            ) from None
        detail = str(err) or type(err).__name__
        raise BusUnavailable(f"cannot reach NATS at {where}: {detail}") from None
    finally:
        waiting.cancel()
    return client
