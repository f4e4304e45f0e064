"""Key-value state in NATS KV, with compare-and-set.

State that several writers change (endpoints, deployments, routes) is read with its revision and
written back only if nobody wrote in between: `update(key, value, revision=...)` raises
`ConflictError` otherwise, and `mutate` wraps read-modify-write in a retry loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError, NoKeysError
from nats.js.kv import KeyValue

from evertune.errors import AlreadyExists, ConflictError, NotFound


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
        """Every live key, once each (empty list for an empty bucket).

        nats-py lists keys through a watcher, which also hands over an update made while it lists:
        a key written meanwhile came back twice (a deployment listed twice by `deployments list`)."""
        try:
            return sorted(set(await self._kv.keys()))
        except NoKeysError:
            return []
