"""Key-value state in NATS KV, with compare-and-set.

State that several writers change (endpoints, deployments, routes) is read with its revision and
written back only if nobody wrote in between: `update(key, value, revision=...)` raises
`ConflictError` otherwise, and `mutate` wraps read-modify-write in a retry loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from evertune.errors import AlreadyExists, ConflictError, NotFound

#: KV operations that remove a key.
KV_DELETES = ("DEL", "PURGE")
#: How long a listing waits for the server's next entry before it gives up.
LIST_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Entry:
    """A value with the revision it was read at."""

    key: str
    value: bytes
    revision: int  #: pass back to `update` for compare-and-set


class Bucket:
    """One KV bucket. Keys are NATS subject tokens: letters, digits, `-`, `_`, `=`, `.`."""

    def __init__(self, kv: KeyValue, name: str) -> None:
        self._kv = kv
        self.name = name

    @classmethod
    async def open(cls, js: JetStreamContext, name: str) -> Bucket:
        return cls(await js.key_value(name), name)

    @contextlib.asynccontextmanager
    async def watch(self, keys: str) -> AsyncIterator[AsyncIterator[Entry | None]]:
        """`async with bucket.watch("ep.*") as entries:` every current entry matching `keys` (a
        subject pattern), then None once they are all given, then each change as it happens (a
        deleted key comes with an empty value), until the block ends."""
        watcher = await self._kv.watch(keys)

        async def entries() -> AsyncIterator[Entry | None]:
            async for entry in watcher:
                if entry is None:
                    yield None
                    continue
                value = b"" if entry.operation in KV_DELETES else (entry.value or b"")
                yield Entry(key=entry.key, value=value, revision=entry.revision or 0)

        try:
            yield entries()
        finally:
            with contextlib.suppress(NatsError):  # the watch ends either way
                await watcher.stop()  # type: ignore[no-untyped-call]

    async def get(self, key: str) -> Entry | None:
        """The current value, or None when the key is missing or deleted."""
        try:
            entry = await self._kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return Entry(key=key, value=entry.value or b"", revision=entry.revision or 0)

    async def create(self, key: str, value: bytes) -> int:
        """Write `key` only if it does not exist; returns the new revision."""
        try:
            return await self._kv.create(key, value)
        except KeyWrongLastSequenceError:
            raise AlreadyExists(f"{self.name}/{key} already exists") from None

    async def update(self, key: str, value: bytes, *, revision: int) -> int:
        """Write `key` only if its revision is still `revision`; returns the new revision."""
        try:
            return await self._kv.update(key, value, last=revision)
        except KeyWrongLastSequenceError:
            raise ConflictError(f"{self.name}/{key} changed since revision {revision}") from None

    async def mutate(self, key: str, change: Callable[[bytes | None], bytes], *, attempts: int = 10) -> Entry:
        """Read-modify-write with compare-and-set, retried when another writer got in first.

        `change` gets the current value (None when missing) and returns the new one; it must be a
        pure function of its input since it may run several times.
        """
        for _ in range(attempts):
            current = await self.get(key)
            new = change(current.value if current else None)
            try:
                if current is None:
                    revision = await self.create(key, new)
                else:
                    revision = await self.update(key, new, revision=current.revision)
            except (ConflictError, AlreadyExists):
                continue
            return Entry(key=key, value=new, revision=revision)
        raise ConflictError(f"{self.name}/{key}: gave up after {attempts} conflicting writes")

    async def delete(self, key: str, *, revision: int | None = None) -> None:
        """Delete `key` (optionally only at `revision`); a missing key raises `NotFound`."""
        if await self.get(key) is None:
            raise NotFound(f"{self.name}/{key} not found")
        try:
            await self._kv.delete(key, last=revision)
        except KeyWrongLastSequenceError:
            raise ConflictError(f"{self.name}/{key} changed since revision {revision}") from None

    async def keys(self) -> list[str]:
        """Every live key, sorted, once each (empty list for an empty bucket).

        Not nats-py's `kv.keys()`, which can wrongly find a bucket empty (see
        `read_initial_entries`). A key written while the listing runs may come back twice (its old
        and its new message): its last entry decides whether it is live."""
        watcher = await self._kv.watchall(meta_only=True)
        try:
            entries = await read_initial_entries(watcher, timeout_s=LIST_TIMEOUT_S)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
        live = {e.key: e.operation not in KV_DELETES for e in entries}
        return sorted(key for key, alive in live.items() if alive)


async def read_initial_entries(watcher: KeyValue.KeyWatcher, *, timeout_s: float) -> list[KeyValue.Entry]:
    """The entries a new watch hands over first: each key's latest message, delete markers included.

    nats-py ends them with a None update. It can put that None first by mistake: it calls a watch
    empty when the server's consumer has nothing left to deliver and the client has received
    nothing yet, but the server may have sent everything already, still on its way. So a None that
    comes first is checked with the server: if its consumer has delivered anything, the initial
    entries end with the first entry that had nothing pending behind it (`delta == 0`).
    Raises nats' `TimeoutError` if the server sends nothing for `timeout_s`."""
    first = await watcher.updates(timeout=timeout_s)  # type: ignore[no-untyped-call]
    if first is not None:
        entries = [first]
        while (entry := await watcher.updates(timeout=timeout_s)) is not None:  # type: ignore[no-untyped-call]
            entries.append(entry)
        return entries
    subscription = watcher._sub  # nats-py's own keys() asks this consumer too
    assert subscription is not None  # set before watchall() returns
    info = await subscription.consumer_info()
    if info.num_pending == 0 and not (info.delivered and info.delivered.consumer_seq):
        return []  # truly empty
    entries = []
    while True:  # no second None comes: nats-py sends its marker once
        entry = await watcher.updates(timeout=timeout_s)  # type: ignore[no-untyped-call]
        entries.append(entry)
        if entry.delta == 0:
            return entries
