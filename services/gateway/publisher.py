"""Telemetry publishing: a bounded queue, batches to JetStream, and a spool when NATS is away.

The proxy hands each finished request to `Publisher.offer` (no I/O, never waits). The publisher
task collects records into batches (up to `batch_records`, or `batch_ms` after the first),
computes their prefix hashes (off the response path, in a thread), and publishes one
`RequestRecordBatch` per endpoint on `evertune.telemetry.<endpoint>` with its `batch_id` as the
Nats-Msg-Id. A batch whose publish fails or times out is appended to the spool file; the spool is
drained (oldest first) as soon as a publish succeeds again. A full queue spills to the spool too,
so memory stays bounded and nothing is lost; a batch published twice is stored once (its id).

Spool format: append-only records of a 4-byte big-endian length then a serialized
`RequestRecordBatch`. Draining renames the file first, so records spilled meanwhile go to a fresh
file; a torn last entry (a crash mid-write) is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evertune.gateway.prefix import chain_hashes, endpoint_key
from tokenizers import Tokenizer

from evertune.logging import get_logger
from evertune.v1 import telemetry_pb2

log = get_logger("evertune.gateway.publisher")

UNROUTED = "_unrouted"  #: subject token of records that never matched an endpoint

PublishFn = Callable[[str, telemetry_pb2.RequestRecordBatch], Awaitable[None]]


@dataclass
class Pending:
    """A finished request waiting for the publisher."""

    record: telemetry_pb2.RequestRecord  #: the record, without prefix hashes yet
    prompt: str | list[int] | None = None  #: prompt text or ids, hashed then dropped; never stored


@dataclass
class PublisherStats:
    """Counters shown by `evertune status`."""

    published_records: int = 0  #: records acked by JetStream
    published_batches: int = 0  #: batches acked by JetStream
    spooled_records: int = 0  #: records written to the spool
    drained_records: int = 0  #: spooled records published later
    queue_depth: int = 0  #: records waiting now
    last_error: str = field(default="")  #: the most recent publish failure


def subject_of(endpoint: str) -> str:
    """The telemetry subject of an endpoint's records."""
    return f"evertune.telemetry.{endpoint or UNROUTED}"


def default_source() -> str:
    """This gateway instance: host name and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def hash_prompts(items: Sequence[Pending], tokenizer: Tokenizer | None, secret: bytes, block: int) -> None:
    """Fill each record's prefix hashes from its prompt, and drop the prompt. CPU-bound."""
    texts = [(i, p.prompt) for i, p in enumerate(items) if isinstance(p.prompt, str)]
    ids: dict[int, list[int]] = {i: p.prompt for i, p in enumerate(items) if isinstance(p.prompt, list)}
    if tokenizer is not None and texts:
        encoded = tokenizer.encode_batch([t for _, t in texts], add_special_tokens=False)
        for (i, _), enc in zip(texts, encoded, strict=True):
            ids[i] = list(enc.ids)
    keys: dict[str, bytes] = {}
    for i, tokens in ids.items():
        record = items[i].record
        key = keys.get(record.endpoint) or keys.setdefault(
            record.endpoint, endpoint_key(secret, record.endpoint)
        )
        hashes = chain_hashes(key, tokens, block)
        if hashes:
            record.prefix_hashes.extend(hashes)
            record.prefix_block_tokens = block
    for item in items:
        item.prompt = None


def group_batches(
    records: Sequence[telemetry_pb2.RequestRecord], source: str
) -> list[telemetry_pb2.RequestRecordBatch]:
    """One batch per endpoint, records in the order they ended, each with a fresh batch id."""
    by_endpoint: dict[str, list[telemetry_pb2.RequestRecord]] = {}
    for record in records:
        by_endpoint.setdefault(record.endpoint, []).append(record)
    return [
        telemetry_pb2.RequestRecordBatch(records=rs, batch_id=uuid.uuid4().hex, source=source)
        for rs in by_endpoint.values()
    ]


class Spool:
    """The append-only file of batches that could not be published."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.draining = path.with_name(path.name + ".draining")
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, batches: Sequence[telemetry_pb2.RequestRecordBatch]) -> None:
        data = b"".join(struct.pack(">I", len(b)) + b for b in (x.SerializeToString() for x in batches))
        with self.path.open("ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def has_data(self) -> bool:
        return self.draining.exists() or (self.path.exists() and self.path.stat().st_size > 0)

    def take(self) -> list[telemetry_pb2.RequestRecordBatch]:
        """Move the spool aside and read its batches (a previous interrupted drain comes first)."""
        if not self.draining.exists():
            if not self.path.exists():
                return []
            self.path.rename(self.draining)
        return read_spool(self.draining.read_bytes())

    def done(self, rest: Sequence[telemetry_pb2.RequestRecordBatch]) -> None:
        """The drain ended: put back what was not published, remove the drained file."""
        if rest:
            self.append(rest)
        self.draining.unlink(missing_ok=True)


def read_spool(data: bytes) -> list[telemetry_pb2.RequestRecordBatch]:
    """The batches of a spool file's bytes; a torn last entry is skipped."""
    batches: list[telemetry_pb2.RequestRecordBatch] = []
    offset = 0
    while offset + 4 <= len(data):
        (size,) = struct.unpack_from(">I", data, offset)
        if offset + 4 + size > len(data):
            break
        batch = telemetry_pb2.RequestRecordBatch()
        batch.ParseFromString(data[offset + 4 : offset + 4 + size])
        batches.append(batch)
        offset += 4 + size
    return batches


class Publisher:
    """Queue, batcher and spool of the gateway's telemetry."""

    def __init__(
        self,
        publish: PublishFn,
        spool: Spool,
        *,
        tokenizer: Tokenizer | None,
        secret: bytes,
        block_tokens: int,
        queue_records: int,
        batch_records: int,
        batch_ms: float,
        retry_s: float,
        source: str = "",
    ) -> None:
        self._publish = publish
        self.spool = spool
        self._tokenizer = tokenizer
        self._secret = secret
        self._block = block_tokens
        self._queue: asyncio.Queue[Pending] = asyncio.Queue(maxsize=queue_records)
        self._batch_records = batch_records
        self._batch_s = batch_ms / 1000.0
        self._retry_s = retry_s
        self._source = source or default_source()
        self._bus_down = False
        self._last_try = 0.0
        self.stats = PublisherStats()

    def offer(self, item: Pending) -> None:
        """Take a finished request; never waits. A full queue spills it to the spool."""
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            hash_prompts([item], self._tokenizer, self._secret, self._block)
            self.spool.append(group_batches([item.record], self._source))
            self.stats.spooled_records += 1

    async def run(self, closed: asyncio.Event) -> None:
        """Publish until `closed` is set (no more offers will come), then flush and return."""
        closing = asyncio.create_task(closed.wait())
        try:
            while True:
                items = await self._collect(closing)
                if items:
                    await self._send(items)
                elif closing.done() and self._queue.empty():
                    break
                if self.spool.has_data() and (not self._bus_down or self._retry_due()):
                    await self.drain()
        finally:
            closing.cancel()
        if self.spool.has_data():
            await self.drain()

    def _retry_due(self) -> bool:
        return time.monotonic() - self._last_try >= self._retry_s

    async def _collect(self, closing: asyncio.Task[bool]) -> list[Pending]:
        """Wait for a first record (or close, or a spool retry), then up to a batch or batch_ms."""
        items: list[Pending] = []
        if self._queue.empty():
            if closing.done():
                return items
            getting = asyncio.create_task(self._queue.get())
            timeout = self._retry_s if self.spool.has_data() else None
            done, _ = await asyncio.wait(
                {getting, closing}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if getting not in done:
                getting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await getting
                if not getting.cancelled():
                    items.append(getting.result())
                return items
            items.append(getting.result())
        deadline = asyncio.get_running_loop().time() + self._batch_s
        while len(items) < self._batch_records:
            try:
                items.append(self._queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0 or closing.done():
                break
            try:
                items.append(await asyncio.wait_for(self._queue.get(), left))
            except TimeoutError:
                break
        self.stats.queue_depth = self._queue.qsize()
        return items

    async def _send(self, items: list[Pending]) -> None:
        await asyncio.to_thread(hash_prompts, items, self._tokenizer, self._secret, self._block)
        batches = group_batches([p.record for p in items], self._source)
        if self._bus_down:
            self._spool(batches)
            return
        for i, batch in enumerate(batches):
            if not await self._try(batch):
                self._spool(batches[i:])
                return
            self.stats.published_records += len(batch.records)

    def _spool(self, batches: Sequence[telemetry_pb2.RequestRecordBatch]) -> None:
        self.spool.append(batches)
        self.stats.spooled_records += sum(len(b.records) for b in batches)

    async def _try(self, batch: telemetry_pb2.RequestRecordBatch) -> bool:
        endpoint = batch.records[0].endpoint if batch.records else ""
        self._last_try = time.monotonic()
        try:
            await self._publish(subject_of(endpoint), batch)
        except Exception as err:  # any failure of the bus: keep the batch, try again later
            self.stats.last_error = f"{type(err).__name__}: {err}"
            if not self._bus_down:
                log.warning("telemetry publish failed; spooling", error=self.stats.last_error)
            self._bus_down = True
            return False
        if self._bus_down:
            log.info("telemetry publish works again; draining the spool")
        self._bus_down = False
        self.stats.published_batches += 1
        return True

    async def drain(self) -> None:
        """Publish the spool's batches, oldest first; stop at the first failure and keep the rest."""
        batches = self.spool.take()
        sent = 0
        try:
            for batch in batches:
                if not await self._try(batch):
                    break
                sent += 1
                self.stats.drained_records += len(batch.records)
                self.stats.published_records += len(batch.records)
        finally:
            self.spool.done(batches[sent:])
