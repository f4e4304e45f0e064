"""Where a service listens and how to talk to it: address, bearer token, TLS, deadline, retries.

Retries: a call the server never took (UNAVAILABLE: refused connection, server restarting) is tried
again, `attempts` times in all, after 0.2, 0.4, 0.8 ... s, but only when trying again cannot do a
thing twice (`RETRIED`): reads, and the writes that carry a `request_id` the server deduplicates
(create, promote, roll back, start a search: a second try answers what the first did). An update,
a delete or a cancel is tried once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc

from evertune.client.errors import rpc_error
from evertune.errors import SettingsError
from evertune.infra.runtime.auth import BearerToken

Reply = TypeVar("Reply")

#: The methods tried again after UNAVAILABLE (see the module doc).
RETRIED = frozenset(
    {
        "GetEndpoint", "ListEndpoints", "ListDeployments", "CreateEndpoint", "Promote", "Rollback",
        "GetSearch", "ListSearches", "ListTrials", "StartSearch",
    }
)  # fmt: skip
#: Seconds before the first retry; each later one waits twice as long.
FIRST_BACKOFF_S = 0.2


@dataclass(frozen=True)
class Connection:
    """How to reach one evertune service over gRPC."""

    address: str  #: host:port of its gRPC server
    token: str = ""  #: bearer token ("" = none, for a server with auth off)
    tls_ca: Path | None = None  #: speak TLS trusting this CA's PEM (None with no cert: plaintext)
    tls_cert: Path | None = None  #: client certificate (PEM) for mutual TLS, with `tls_key`
    tls_key: Path | None = None  #: its private key (PEM)
    timeout_s: float = 30.0  #: deadline of each unary call
    attempts: int = 3  #: tries of a retried call (1 = no retry)

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise SettingsError("set both the TLS client certificate and its key, or neither")
        if self.attempts < 1 or not self.timeout_s > 0:
            raise SettingsError(
                f"attempts must be >= 1 and the timeout > 0, got {self.attempts}, {self.timeout_s}"
            )

    def open_channel(self) -> grpc.aio.Channel:
        """A channel: plaintext, or TLS when a CA or a client certificate is set (TLS without a CA
        trusts the system's roots), the token sent with every call. An unreadable file is a
        one-line SettingsError."""
        interceptors = [BearerToken(self.token)] if self.token else None
        if self.tls_ca is None and self.tls_cert is None:
            return grpc.aio.insecure_channel(self.address, interceptors=interceptors)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(self.tls_ca, "TLS CA"),
            private_key=_read(self.tls_key, "TLS key"),
            certificate_chain=_read(self.tls_cert, "TLS certificate"),
        )
        return grpc.aio.secure_channel(self.address, credentials, interceptors=interceptors)


def _read(path: Path | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as err:
        raise SettingsError(f"cannot read the {what} {path}: {err.strerror}") from None


async def unary(
    connection: Connection, *, service: str, method: str, call: Callable[[float], Awaitable[Reply]]
) -> Reply:
    """`call(timeout_s)` with the retry rule of `method`; a refusal raises `RpcError`."""
    tries = connection.attempts if method in RETRIED else 1
    for attempt in range(tries):
        try:
            return await call(connection.timeout_s)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE or attempt == tries - 1:
                raise rpc_error(err, address=connection.address, service=service) from None
        await asyncio.sleep(FIRST_BACKOFF_S * 2**attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


class ServiceClient:
    """What a service's client shares: its channel (opened here, closed on exit of `async with`),
    its stub, and unary calls made with the connection's deadline and retry rule."""

    service = ""  #: the service's name in errors ("deployer", "searcher")

    def __init__(self, connection: Connection, *, stub: Callable[[grpc.aio.Channel], Any]) -> None:
        self.connection = connection  #: where the service is and how to talk to it
        self._channel = connection.open_channel()
        self._stub = stub(self._channel)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def _call(self, method: str, request: Any) -> Any:
        rpc: Callable[..., Awaitable[Any]] = getattr(self._stub, method)
        return await unary(
            self.connection,
            service=self.service,
            method=method,
            call=lambda timeout: rpc(request, timeout=timeout),
        )

    async def _pages(self, method: str, request: Any, *, items: str) -> list[Any]:
        """Every item of a paged list call: the reply's `items` field, page after page, the
        request's `page_token` moved on until a reply has no `next_page_token`."""
        found: list[Any] = []
        while True:
            page = await self._call(method, request)
            found.extend(getattr(page, items))
            if not page.next_page_token:
                return found
            request.page_token = page.next_page_token

    async def _stream(self, method: str, request: Any) -> AsyncIterator[Any]:
        """A server stream's messages (not retried: a watcher that reconnects resumes itself)."""
        try:
            async for message in getattr(self._stub, method)(request):
                yield message
        except grpc.aio.AioRpcError as err:
            raise rpc_error(err, address=self.connection.address, service=self.service) from None
