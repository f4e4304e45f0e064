"""Following bus state across NATS restarts: a KV bucket kept in sync, a subscription kept alive.

nats-py replays plain subscriptions after a reconnect, but a JetStream watch or ordered consumer
lives on the server: when the server restarts its ephemeral consumer is gone, and nats-py's ordered
consumer (behind `kv.watchall()`) does not reliably reset, so a follower would silently stop seeing
changes. Here every reconnect of the client (nats-py's reconnected callback, counted by
`nc.stats["reconnects"]`) wakes the follower, which throws its watch away and starts a new one:

- `KvFollower`: load every key of a bucket, then apply each change; after a reconnect (or a watch
  that ended) load again and watch anew. Keys that vanished meanwhile are applied as deletes.
- `Resubscriber`: make a subscription (e.g. an ordered consumer) and make it again after each
  reconnect.
- `reconnect_signal(nc)`: the per-client wake-up both use (no polling: waiters sleep until the
  client's reconnected callback runs, or until stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from evertune.infra.bus.kv import KV_DELETES, read_initial_entries
from evertune.infra.logging import get_logger
from evertune.infra.retry import rest
from evertune.infra.runtime.tasks import cancel_and_wait

log = get_logger("evertune.infra.bus")

#: Applies one key's new value (None: the key was deleted or purged).
ApplyKey = Callable[[str, bytes | None], None]


class ReconnectSignal:
    """Wakes waiters each time one nats-py client has reconnected.

    Chained onto the client's reconnected callback (whatever was set at connect still runs first);
    the generation is the client's own reconnect counter, so a reconnect that happened before a
    waiter looked is not missed: a waiter passes the generation it last acted on."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._changed = asyncio.Event()
        previous = nc._reconnected_cb  # nats-py keeps the connect() callback here

        async def reconnected() -> None:
            try:
                if previous is not None:
                    await previous()
            finally:
                self._changed.set()
                self._changed = asyncio.Event()

        nc._reconnected_cb = reconnected

    @property
    def generation(self) -> int:
        """Reconnects of the client so far."""
        reconnects: int = self._nc.stats["reconnects"]
        return reconnects

    async def wait(self, after: int, stopping: asyncio.Event) -> bool:
        """Sleep until the client has reconnected since `after` (True) or `stopping` is set (False)."""
        while self.generation == after:
            if stopping.is_set():
                return False
            await _first(self._changed.wait(), stopping.wait())
        return True


_signals: weakref.WeakKeyDictionary[Client, ReconnectSignal] = weakref.WeakKeyDictionary()


def reconnect_signal(nc: Client) -> ReconnectSignal:
    """The (one) reconnect signal of `nc`."""
    signal = _signals.get(nc)
    if signal is None:
        signal = _signals[nc] = ReconnectSignal(nc)
    return signal


async def _first(*aws: Awaitable[Any]) -> None:
    """Wait until the first of `aws` is done; cancel the others."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait(tasks)


@dataclass
class FollowStats:
    """What a follower did, for status pages and tests."""

    loads: int = 0  #: full loads of the bucket (the first one and one per re-watch)
    changes: int = 0  #: changes applied after a load
    failed_loads: int = 0  #: loads that failed (NATS not back yet) and were retried


class KvFollower:
    """Keeps a KV bucket's keys flowing into `apply`, across NATS reconnects.

    `await load()` applies the latest value of every key (raises when the bucket cannot be read,
    e.g. `BucketNotFoundError`); `await run(stopping)` then applies each change until `stopping` is
    set, and loads the bucket again through a new watch after each reconnect of `nc` or when the
    watch ends, retrying every `retry_s` while NATS is not back. `stop()` ends the current watch."""

    def __init__(
        self,
        js: JetStreamContext,
        nc: Client,
        bucket: str,
        apply: ApplyKey,
        *,
        retry_s: float = 0.5,
        load_timeout_s: float = 10.0,
    ) -> None:
        self._js = js
        self.bucket = bucket
        self._apply = apply
        self._signal = reconnect_signal(nc)
        self._retry_s = retry_s
        self._load_timeout_s = load_timeout_s
        self._watcher: KeyValue.KeyWatcher | None = None
        self._generation = self._signal.generation
        self._keys: set[str] = set()  #: live keys as last applied
        self.stats = FollowStats()

    async def load(self) -> None:
        """Watch the bucket anew and apply the latest value of every key (and, as deletes, the keys
        applied before that the bucket no longer has)."""
        self._generation = self._signal.generation  # a reconnect from now on means load again
        await self.stop()
        kv = await self._js.key_value(self.bucket)
        watcher = await kv.watchall()
        try:
            entries = await read_initial_entries(watcher, timeout_s=self._load_timeout_s)
        except BaseException:
            with contextlib.suppress(NatsError):  # the load's own error is the one raised
                await watcher.stop()  # type: ignore[no-untyped-call]
            raise
        seen: set[str] = set()
        for entry in entries:
            seen.add(entry.key)
            self._put(entry)
        for key in sorted(self._keys - seen):  # gone without a delete marker (purged, compacted)
            self._keys.discard(key)
            self._apply(key, None)
        self._watcher = watcher
        self.stats.loads += 1

    def _put(self, entry: KeyValue.Entry) -> None:
        deleted = entry.operation in KV_DELETES
        if deleted:
            self._keys.discard(entry.key)
        else:
            self._keys.add(entry.key)
        self._apply(entry.key, None if deleted else (entry.value or b""))

    async def run(self, stopping: asyncio.Event) -> None:
        """Apply changes until `stopping`; load again after a reconnect or an ended watch."""
        try:
            while not stopping.is_set():
                watcher = self._watcher
                if watcher is None or self._signal.generation != self._generation:
                    await self._reload(stopping)
                    continue
                nxt = asyncio.ensure_future(watcher.__anext__())  # type: ignore[no-untyped-call]
                woke = asyncio.ensure_future(self._signal.wait(self._generation, stopping))
                done, _ = await asyncio.wait({nxt, woke}, return_when=asyncio.FIRST_COMPLETED)
                if nxt not in done:
                    nxt.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await nxt
                    continue  # a reconnect (load again) or stop
                woke.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await woke
                try:
                    entry = nxt.result()
                except StopAsyncIteration:
                    self._watcher = None  # the watch ended: start another
                    continue
                if entry is not None:
                    self._put(entry)
                    self.stats.changes += 1
        finally:
            await self.stop()

    async def _reload(self, stopping: asyncio.Event) -> None:
        try:
            await self.load()
            log.info("kv watch restarted", bucket=self.bucket, keys=len(self._keys))
        except Exception as err:  # NATS or JetStream not back yet: keep what we have, retry
            self.stats.failed_loads += 1
            log.warning("kv watch restart failed", bucket=self.bucket, error=f"{type(err).__name__}: {err}")
            await rest(stopping, self._retry_s)

    async def stop(self) -> None:
        """End the current watch (run() ends only with its `stopping`)."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            with contextlib.suppress(NatsError):  # the watch ends either way
                await watcher.stop()  # type: ignore[no-untyped-call]


class Resubscriber:
    """A subscription made by `subscribe()` and made again after each reconnect of `nc`.

    For JetStream ordered consumers and push consumers whose server-side state a NATS restart may
    take away. Whatever the subscription delivers again after a re-subscribe (e.g. the last message
    per subject) reaches its callback again: callbacks must be idempotent."""

    def __init__(
        self, nc: Client, subscribe: Callable[[], Awaitable[Any]], *, name: str, retry_s: float = 0.5
    ) -> None:
        self._signal = reconnect_signal(nc)
        self._subscribe = subscribe
        self.name = name
        self._retry_s = retry_s
        self._sub: Any = None
        self._generation = self._signal.generation
        self.subscriptions = 0  #: subscriptions made (the first and one per re-subscribe)

    async def start(self) -> None:
        """Make the first subscription (errors propagate)."""
        self._generation = self._signal.generation
        self._sub = await self._subscribe()
        self.subscriptions += 1

    async def run(self, stopping: asyncio.Event) -> None:
        """Re-subscribe after each reconnect until `stopping`; then unsubscribe."""
        try:
            while await self._signal.wait(self._generation, stopping):
                await self._unsubscribe()
                try:
                    await self.start()
                    log.info("subscription restarted", subscription=self.name)
                except Exception as err:  # NATS or JetStream not back yet: try again shortly
                    log.warning(
                        "re-subscribe failed", subscription=self.name, error=f"{type(err).__name__}: {err}"
                    )
                    self._generation = -1  # not subscribed: the next round tries again
                    await rest(stopping, self._retry_s)
        finally:
            await self._unsubscribe()

    async def _unsubscribe(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(NatsError):  # the subscription ends either way
                await sub.unsubscribe()
