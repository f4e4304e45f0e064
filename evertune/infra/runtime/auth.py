"""Bearer-token authentication of evertune's gRPC APIs (the deployer's EndpointService, the
searcher's SearchService), scoped by tenant, one way for both.

Tokens come from a token file (`EVERTUNE_<SERVICE>_TOKEN_FILE`) and/or the
`EVERTUNE_<SERVICE>_TOKENS` setting (`load_tokens`), in one format: entries `<token> <tenant>`, one
per line in a file (or separated by commas in the setting); blank lines and lines starting with `#`
are ignored. The tenant `*` makes an
operator token that sees every tenant. Tokens are at least 16 characters, without whitespace or
commas.

A client sends `authorization: Bearer <token>` metadata. `AuthInterceptor` answers UNAUTHENTICATED
to a call without a known token, before any handler runs; health checks and reflection stay open.
The handler finds the caller with `caller()`.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import grpc

from evertune.errors import InvalidArgument, SettingsError, Unauthenticated
from evertune.infra.logging import get_logger

log = get_logger("evertune.infra.runtime.auth")

#: Tenant of an operator token: every tenant.
ALL_TENANTS: Final = "*"
#: Addresses that only this machine reaches: the one place a service may run without tokens.
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
#: Shortest token accepted.
MIN_TOKEN_CHARS: Final = 16
#: Method prefixes served without a token.
OPEN_METHOD_PREFIXES: Final = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


@dataclass(frozen=True)
class Principal:
    """Who is calling."""

    tenant: str  #: the tenant the token is scoped to; ALL_TENANTS for operators
    label: str  #: how logs name the caller (never the token): "token#<first 8 hex of its sha256>"

    @property
    def all_tenants(self) -> bool:
        return self.tenant == ALL_TENANTS

    def sees(self, tenant: str) -> bool:
        """Whether this caller may see an endpoint of `tenant`."""
        return self.all_tenants or self.tenant == tenant


#: The caller when authentication is off (no tokens configured, loopback only).
ANONYMOUS_OPERATOR: Final = Principal(tenant=ALL_TENANTS, label="anonymous")

_CALLER: ContextVar[Principal | None] = ContextVar("evertune_grpc_caller", default=None)


def caller() -> Principal:
    """The authenticated caller of the RPC being served (set by AuthInterceptor)."""
    principal = _CALLER.get()
    if principal is None:
        raise Unauthenticated("no authenticated caller (the auth interceptor is not installed)")
    return principal


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def parse_tokens(text: str, *, source: str) -> dict[str, str]:
    """`{token: tenant}` from token-file text (entries on lines, or separated by commas).

    Raises InvalidArgument naming `source` and the entry for a malformed entry.
    """
    tokens: dict[str, str] = {}
    entries = [e for line in text.splitlines() for e in line.split(",")]
    for number, raw in enumerate(entries, start=1):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        parts = entry.split()
        if len(parts) != 2:
            raise InvalidArgument(f"{source}: entry {number} must be `<token> <tenant>`")
        token, tenant = parts
        if len(token) < MIN_TOKEN_CHARS:
            raise InvalidArgument(
                f"{source}: entry {number}: a token needs at least {MIN_TOKEN_CHARS} characters"
            )
        if tenant != ALL_TENANTS and not all(c.isalnum() or c in "-_" for c in tenant):
            raise InvalidArgument(
                f"{source}: entry {number}: tenant {tenant!r} must be letters, digits, '-', '_'"
            )
        if token in tokens and tokens[token] != tenant:
            raise InvalidArgument(f"{source}: entry {number}: the same token is given two tenants")
        tokens[token] = tenant
    return tokens


def load_tokens(
    *, token_file: Path | None, tokens: str, file_setting: str, tokens_setting: str
) -> TokenSource | None:
    """A service's tokens from its token file and its tokens setting (named by their variables,
    e.g. "EVERTUNE_DEPLOYER_TOKEN_FILE" and "EVERTUNE_DEPLOYER_TOKENS"), reloaded when the file
    changes (`TokenSource`); None when neither has one at start (authentication off). A file that
    cannot be read or a bad entry is a one-line SettingsError."""
    table = _read_tokens(
        token_file=token_file, tokens=tokens, file_setting=file_setting, tokens_setting=tokens_setting
    )
    if not len(table):
        return None
    return TokenSource(
        table, token_file=token_file, tokens=tokens, file_setting=file_setting, tokens_setting=tokens_setting
    )


def _read_tokens(
    *, token_file: Path | None, tokens: str, file_setting: str, tokens_setting: str
) -> TokenTable:
    found: dict[str, str] = {}
    try:
        if token_file is not None:
            try:
                text = token_file.read_text()
            except OSError as err:
                raise SettingsError(
                    f"invalid setting {file_setting}: cannot read {token_file}: {err.strerror}"
                ) from None
            found |= parse_tokens(text, source=str(token_file))
        found |= parse_tokens(tokens, source=tokens_setting)
    except InvalidArgument as err:
        raise SettingsError(f"invalid {tokens_setting} or {file_setting}: {err}") from None
    return TokenTable(found)


class TokenLookup(Protocol):
    """What authentication needs of a set of tokens."""

    def lookup(self, token: str) -> Principal | None: ...


#: Seconds between two looks at a token file's modification time.
TOKEN_FILE_CHECK_S: Final = 2.0


class TokenSource:
    """A service's tokens, reloaded from its token file when the file changes (looked at on use,
    at most every `check_s`), so tokens are added, rotated and revoked without a restart. A file
    that no longer reads or parses leaves the tokens in force (logged); an emptied one refuses
    every caller: authentication, on at start, never turns itself off."""

    def __init__(
        self,
        table: TokenTable,
        *,
        token_file: Path | None,
        tokens: str,
        file_setting: str,
        tokens_setting: str,
        check_s: float = TOKEN_FILE_CHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._table = table
        self._file = token_file
        self._names = {"tokens": tokens, "file_setting": file_setting, "tokens_setting": tokens_setting}
        self._check_s = check_s
        self._clock = clock
        self._checked = clock()
        self._stamp = _stamp(token_file)

    def __len__(self) -> int:
        return len(self._table)

    def lookup(self, token: str) -> Principal | None:
        self._refresh()
        return self._table.lookup(token)

    def _refresh(self) -> None:
        if self._file is None or self._clock() - self._checked < self._check_s:
            return
        self._checked = self._clock()
        stamp = _stamp(self._file)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._table = _read_tokens(token_file=self._file, **self._names)
        except SettingsError as err:
            log.error("token file changed but does not load; the tokens in force stay", error=str(err))
            return
        log.info("token file reloaded", file=str(self._file), tokens=len(self._table))


def _stamp(path: Path | None) -> tuple[int, int] | None:
    """(modification time ns, size) of a file, None when it cannot be looked at."""
    if path is None:
        return None
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


class TokenTable:
    """Known tokens, kept as sha256 digests; lookups compare digests in constant time."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self._entries = [(_digest(t), tenant) for t, tenant in tokens.items()]

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, token: str) -> Principal | None:
        digest = _digest(token)
        found: Principal | None = None
        for known, tenant in self._entries:
            if hmac.compare_digest(known, digest):
                found = Principal(tenant=tenant, label=f"token#{digest.hex()[:8]}")
        return found


def bearer_token(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The token of an `authorization: Bearer <token>` metadata entry, or None."""
    for key, value in metadata or ():
        if key.lower() != "authorization":
            continue
        text = value.decode() if isinstance(value, bytes) else str(value)
        scheme, _, token = text.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


def authenticate(tokens: TokenLookup | None, metadata: Iterable[tuple[str, Any]] | None) -> Principal:
    """The caller for this metadata; `tokens=None` means authentication is off. Pure."""
    if tokens is None:
        return ANONYMOUS_OPERATOR
    token = bearer_token(metadata)
    if token is None:
        raise Unauthenticated("missing credentials: send `authorization: Bearer <token>` metadata")
    principal = tokens.lookup(token)
    if principal is None:
        raise Unauthenticated("invalid token")
    return principal


Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses calls without a known bearer token (UNAUTHENTICATED); health and reflection are open.

    An accepted call's handler runs with `caller()` set to its principal. `tokens=None` turns
    authentication off: every call is the anonymous operator.
    """

    def __init__(self, tokens: TokenLookup | None) -> None:
        self._tokens = tokens

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        method: str = handler_call_details.method
        handler = await continuation(handler_call_details)
        if handler is None or method.startswith(OPEN_METHOD_PREFIXES):
            return handler
        try:
            principal = authenticate(self._tokens, handler_call_details.invocation_metadata)
        except Unauthenticated as err:
            return _deny(handler, str(err))
        return _as(handler, principal)


def _as(handler: Any, principal: Principal) -> Any:
    """The handler, run with `caller()` = principal."""
    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            _CALLER.set(principal)
            return await inner_uu(request, context)

        return handler._replace(unary_unary=unary_unary)
    if handler.unary_stream is not None:
        inner_us = handler.unary_stream

        async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            _CALLER.set(principal)
            async for item in inner_us(request, context):
                yield item

        return handler._replace(unary_stream=unary_stream)
    raise TypeError("evertune's APIs serve unary and server-streaming methods only")


def _deny(handler: Any, message: str) -> Any:
    """A handler of the same shape that answers UNAUTHENTICATED."""
    if handler.unary_stream is not None:

        async def deny_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
            yield  # pragma: no cover - abort raises

        return handler._replace(unary_stream=deny_stream)

    async def deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    return handler._replace(unary_unary=deny)


class BearerToken(grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """A client channel's interceptor that sends `authorization: Bearer <token>` with every call."""

    def __init__(self, token: str) -> None:
        self._entry = ("authorization", f"Bearer {token}")

    def _with_token(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()), self._entry)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._with_token(details), request)

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._with_token(details), request)
