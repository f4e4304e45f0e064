"""The telemetry store: ClickHouse through clickhouse-connect, embedded chDB by default.

`open_store(url, database=...)` gives a `Store` whose methods are all async. The clickhouse-connect
client is synchronous, so each store runs its client calls on one dedicated worker thread: calls
never overlap on the engine and the event loop never blocks on ClickHouse.

Two kinds of URL, one code path above the client:

- `chdb:///abs/folder`: the ClickHouse engine inside this process (chDB). chDB hosts one engine
  per process and one process per folder. Stores opened on the same folder in one process share
  the engine and its worker thread (reference counted: closing the last store closes the engine);
  opening a different folder while one is open, or a folder another process holds, raises
  `StoreUnavailable`.
- `http(s)://user:pass@host:port/`: a ClickHouse server. Each store has its own client and thread.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError, OperationalError

from evertune.errors import EvertuneError, InvalidArgument, StoreUnavailable

__all__ = ["QueryResult", "Store", "StoreError", "open_store"]

T = TypeVar("T")

#: Query parameters: `{"name": value}` for `{name:Type}` placeholders in the SQL.
Parameters = Mapping[str, Any] | Sequence[Any] | None

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ERRNO_REASON = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")
_SSL_REASON = re.compile(r"\[SSL(?:: [A-Z_]+)?\] ([^'\"(]+)")
_HTTP_STATUS = re.compile(r"received HTTP status (\d+)")
#: Seconds to wait for a TCP connection to a ClickHouse server.
CONNECT_TIMEOUT_S = 5.0
#: Longest ClickHouse error text kept in a message (they can quote a whole statement).
_MAX_DETAIL = 600


class StoreError(EvertuneError):
    """ClickHouse rejected a statement (bad SQL, unknown table, type mismatch...)."""


class QueryResult(list[tuple[Any, ...]]):
    """The rows of a query, as tuples, with the result's column names in `column_names`."""

    column_names: tuple[str, ...]

    def __init__(self, rows: Iterable[tuple[Any, ...]] = (), column_names: Sequence[str] = ()) -> None:
        super().__init__(rows)
        self.column_names = tuple(column_names)

    def dicts(self) -> list[dict[str, Any]]:
        """The rows as dicts keyed by column name."""
        return [dict(zip(self.column_names, row, strict=True)) for row in self]

    def scalar(self) -> Any:
        """The first column of the first row (e.g. of `SELECT count() ...`); None when empty."""
        return self[0][0] if self and self[0] else None


# --- URLs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    """A parsed store URL. `display` is safe to log and to put in messages (no password)."""

    kind: str  # "chdb" or "http"
    display: str
    folder: str = ""
    host: str = ""
    port: int = 0
    username: str = ""
    password: str = field(default="", repr=False)
    secure: bool = False


def _parse_url(url: str) -> _Target:
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme == "chdb" and rest:
        parts = urlsplit(url)
        if parts.netloc:
            raise StoreUnavailable(
                f"chDB store URL {url!r} must name an absolute folder: chdb:///abs/folder (three slashes)"
            )
        folder = unquote(parts.path)
        if not folder.startswith("/") or folder == "/":
            raise StoreUnavailable(f"chDB store URL {url!r} must name an absolute folder: chdb:///abs/folder")
        # chDB compares engine paths literally: one spelling per folder.
        folder = os.path.realpath(folder)
        return _Target(kind="chdb", display=f"chdb://{folder}", folder=folder)
    if scheme in ("http", "https") and rest:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            raise StoreUnavailable(f"store URL {_redact(url)!r} has an invalid port") from None
        if not parts.hostname:
            raise StoreUnavailable(
                f"store URL {_redact(url)!r} names no host: http(s)://user:pass@host:port/"
            )
        secure = scheme == "https"
        port = port or (8443 if secure else 8123)
        host = parts.hostname
        shown_host = f"[{host}]" if ":" in host else host
        return _Target(
            kind="http",
            display=f"{scheme}://{shown_host}:{port}",
            host=host,
            port=port,
            username=unquote(parts.username or "") or "default",
            password=unquote(parts.password or ""),
            secure=secure,
        )
    raise StoreUnavailable(
        f"unsupported store URL {_redact(url)!r}: use chdb:///abs/folder or http(s)://user:pass@host:port/"
    )


def _redact(url: str) -> str:
    """The URL without a password."""
    return re.sub(r"(://[^/@:]*):[^/@]*@", r"\1:***@", url)


def _detail(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 1] + "…"


def _network_reason(err: BaseException) -> str:
    """`Connection refused` rather than a urllib3 retry report."""
    text = str(err)
    match = _ERRNO_REASON.search(text)
    if match:
        return match.group(1).strip()
    match = _SSL_REASON.search(text)
    if match:
        return f"TLS failed: {match.group(1).strip()}"
    if "timed out" in text.lower():
        return "timed out"
    return _detail(err)


# --- chDB folders and the one engine of this process -----------------------------------------------


def _folder_locked(folder: str) -> bool:
    """True when some engine (another process, or this one) holds `<folder>/status`.

    ClickHouse takes an exclusive flock on that file for as long as its engine is open.
    """
    try:
        fd = os.open(os.path.join(folder, "status"), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _in_use_message(folder: str) -> str:
    return (
        f"ClickHouse folder {folder} is in use by another process "
        "(is another `evertune up` running on this data dir?)"
    )


class _Engine:
    """A worker thread, and the clients that run on it.

    For chDB this is the process's one embedded engine: every store on the folder shares it and the
    thread. For http each store has its own.
    """

    def __init__(self, name: str) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"evertune-store-{name}")
        self.refs = 0


_chdb_lock = threading.Lock()
#: The chDB engine open in this process: (folder, engine), or None.
_chdb_engine: tuple[str, _Engine] | None = None


def _acquire_chdb(folder: str) -> _Engine:
    """Take a reference on the engine for `folder`, creating it; raise when chDB cannot open it."""
    global _chdb_engine
    with _chdb_lock:
        if _chdb_engine is not None and _chdb_engine[0] == folder:
            _chdb_engine[1].refs += 1
            return _chdb_engine[1]
        # Another process first: that is the error to fix even when this process holds another folder.
        if _folder_locked(folder):
            raise StoreUnavailable(_in_use_message(folder))
        if _chdb_engine is not None:
            raise StoreUnavailable(
                f"cannot open ClickHouse folder {folder}: this process already has chDB folder "
                f"{_chdb_engine[0]} open, and chDB runs one folder per process (close those stores "
                "first, or use a ClickHouse server over http)"
            )
        engine = _Engine("chdb")
        engine.refs = 1
        _chdb_engine = (folder, engine)
        return engine


def _release_chdb(engine: _Engine) -> None:
    """Drop a reference; the last one removes the engine and stops its thread."""
    global _chdb_engine
    with _chdb_lock:
        engine.refs -= 1
        if engine.refs > 0:
            return
        if _chdb_engine is not None and _chdb_engine[1] is engine:
            _chdb_engine = None
    engine.executor.shutdown(wait=False)


def _connect_chdb(folder: str) -> Client:
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise StoreUnavailable(f"cannot create ClickHouse folder {folder}: {err.strerror or err}") from None
    try:
        return clickhouse_connect.get_client(interface="chdb", path=folder, tz_mode="aware")
    except ClickHouseError as err:
        if _folder_locked(folder):
            raise StoreUnavailable(_in_use_message(folder)) from None
        if "already initialized with path" in str(err):
            raise StoreUnavailable(
                f"cannot open ClickHouse folder {folder}: another chDB folder is open in this process "
                "(chDB runs one folder per process)"
            ) from None
        raise StoreUnavailable(f"cannot open ClickHouse folder {folder}: {_detail(err)}") from None


def _connect_http(target: _Target) -> Client:
    try:
        return clickhouse_connect.get_client(
            host=target.host,
            port=target.port,
            username=target.username,
            password=target.password,
            secure=target.secure,
            connect_timeout=CONNECT_TIMEOUT_S,
            autogenerate_session_id=False,
            tz_mode="aware",
        )
    except OperationalError as err:
        reason = _network_reason(err)
        raise StoreUnavailable(f"ClickHouse at {target.display} is unreachable: {reason}") from None
    except ClickHouseError as err:
        reason = _detail(err)
        status = _HTTP_STATUS.search(reason)
        if status and "Code: " not in reason:  # an HTTP server, but not ClickHouse's answer
            reason = f"HTTP status {status.group(1)} (is this ClickHouse's HTTP port?)"
        raise StoreUnavailable(f"ClickHouse at {target.display} refused the connection: {reason}") from None


def _bindable(parameters: Parameters) -> dict[str, Any] | Sequence[Any] | None:
    return dict(parameters) if isinstance(parameters, Mapping) else parameters


def _use_database(client: Client, database: str) -> None:
    """Create `database` if it is missing, and make it the client's default."""
    exists = client.query(
        "SELECT count() FROM system.databases WHERE name = {name:String}", parameters={"name": database}
    ).result_rows[0][0]
    if not exists:
        client.command(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    client.database = database


# --- the store ---------------------------------------------------------------------------------------


class Store:
    """Async access to one ClickHouse database. Make one with `open_store`; `close()` it when done."""

    def __init__(self, target: _Target, database: str, engine: _Engine, client: Client) -> None:
        self._target = target
        self._database = database
        self._engine = engine
        self._client: Client | None = client

    @property
    def database(self) -> str:
        """The database this store reads and writes (created by `open_store` if it was missing)."""
        return self._database

    @property
    def url(self) -> str:
        """The store's URL without credentials, for logs and messages."""
        return self._target.display

    @property
    def embedded(self) -> bool:
        """True for the in-process chDB engine, False for a ClickHouse server."""
        return self._target.kind == "chdb"

    @property
    def closed(self) -> bool:
        return self._client is None

    def __repr__(self) -> str:
        return f"Store({self.url!r}, database={self._database!r})"

    async def query(self, sql: str, parameters: Parameters = None) -> QueryResult:
        """Run a SELECT (or anything returning rows) and return all rows.

        Parameters bind server side as `{name:Type}` in the SQL (`{"name": value}`).
        """

        def run(client: Client) -> QueryResult:
            result = client.query(sql, parameters=_bindable(parameters))
            return QueryResult((tuple(row) for row in result.result_rows), result.column_names)

        return await self._call(run)

    async def command(self, sql: str, parameters: Parameters = None) -> None:
        """Run a statement that returns no rows (DDL, ALTER, OPTIMIZE, ...)."""
        await self._call(lambda client: client.command(sql, parameters=_bindable(parameters)))

    async def insert(
        self,
        table: str,
        rows: Sequence[Sequence[Any]],
        column_names: Sequence[str],
        *,
        dedup_token: str,
    ) -> None:
        """Insert `rows` (one sequence of values per row, in `column_names` order) into `table`.

        Idempotent per `dedup_token`: a batch retried with the same token is written once, as long
        as the table sets `non_replicated_deduplication_window` (or is replicated) and the token is
        still within that window. Give each distinct batch its own token (e.g. derived from the
        message ids or the spool offset it came from); an identical batch under a new token is
        written again.
        """
        if not dedup_token:
            raise InvalidArgument("Store.insert needs a non-empty dedup_token")
        if not rows:
            return
        names = list(column_names)
        data = rows if isinstance(rows, list) else list(rows)
        settings = {"insert_deduplication_token": dedup_token, "insert_deduplicate": 1}
        await self._call(lambda client: client.insert(table, data, column_names=names, settings=settings))

    async def close(self) -> None:
        """Close the client; the last store on a chDB folder also closes the engine. Idempotent."""
        client, self._client = self._client, None
        if client is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._engine.executor, client.close)
        finally:
            if self.embedded:
                _release_chdb(self._engine)
            else:
                self._engine.executor.shutdown(wait=False)

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, fn: Callable[[Client], T]) -> T:
        client = self._client
        if client is None:
            raise StoreUnavailable(f"store {self.url} ({self._database}) is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._engine.executor, fn, client)
        except OperationalError as err:
            if self.embedded:
                raise StoreError(f"ClickHouse rejected the statement: {_detail(err)}") from None
            raise StoreUnavailable(f"ClickHouse at {self.url} failed: {_network_reason(err)}") from None
        except ClickHouseError as err:
            raise StoreError(f"ClickHouse rejected the statement: {_detail(err)}") from None


async def open_store(url: str, *, database: str) -> Store:
    """Open the store at `url` (`chdb:///abs/folder` or `http(s)://user:pass@host:port/`).

    Creates `database` if it is missing. Raises a one-line `StoreUnavailable` when the URL is not a
    store URL, the server cannot be reached, or the chDB folder cannot be opened in this process.
    """
    if not _IDENTIFIER.match(database):
        raise StoreUnavailable(
            f"invalid ClickHouse database name {database!r}: use letters, digits and _ (not first)"
        )
    target = _parse_url(url)
    loop = asyncio.get_running_loop()
    if target.kind == "chdb":
        engine = _acquire_chdb(target.folder)
    else:
        engine = _Engine("http")
        engine.refs = 1

    def open_client() -> Client:
        client = _connect_chdb(target.folder) if target.kind == "chdb" else _connect_http(target)
        try:
            _use_database(client, database)
        except OperationalError as err:
            client.close()
            raise StoreUnavailable(f"ClickHouse at {target.display} failed: {_network_reason(err)}") from None
        except ClickHouseError as err:
            client.close()
            raise StoreUnavailable(
                f"cannot use database {database!r} at {target.display}: {_detail(err)}"
            ) from None
        return client

    def release() -> None:
        if target.kind == "chdb":
            _release_chdb(engine)
        else:
            engine.executor.shutdown(wait=False)

    def discard(done: asyncio.Future[Client]) -> None:
        # open_store was cancelled while the client was being made: close it once it exists.
        try:
            if not done.cancelled() and done.exception() is None:
                done.result().close()
        finally:
            release()

    pending = loop.run_in_executor(engine.executor, open_client)
    try:
        client = await asyncio.shield(pending)
    except asyncio.CancelledError:
        pending.add_done_callback(discard)
        raise
    except BaseException:
        release()
        raise
    return Store(target, database, engine, client)


def chdb_folder_in_use(folder: str | Path) -> bool:
    """True when an engine (another process's, or this process's) holds the chDB `folder`."""
    return _folder_locked(os.path.realpath(folder))
