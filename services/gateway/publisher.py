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
import io
import os
import socket
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from nats.errors import MaxPayloadError

from evertune.errors import InvalidArgument
from evertune.gateway.chat_formats import ChatFormats
from evertune.gateway.prefix import chain_hashes, endpoint_key
from evertune.infra.logging import get_logger
from evertune.infra.retry import StepBackoff
from evertune.v1 import telemetry_pb2

log = get_logger("evertune.gateway.publisher")

UNROUTED = "_unrouted"  #: subject token of records that never matched an endpoint

PublishFn = Callable[[str, telemetry_pb2.RequestRecordBatch], Awaitable[None]]


@dataclass
class Pending:
    """A finished request waiting for the publisher."""

    record: telemetry_pb2.RequestRecord  #: the record, without prefix hashes yet
    prompt: str | list[int] | None = None  #: a completion's text or ids, hashed then dropped; never stored
    messages: list[dict[str, str]] | None = None  #: a chat's messages (text only), hashed then dropped
    model: str = ""  #: the endpoint's model (`RouteTable.model`): whose chat format and tokenizer count


@dataclass
class PublisherStats:
    """Counters shown by `evertune status`."""

    published_records: int = 0  #: records acked by JetStream
    published_batches: int = 0  #: batches acked by JetStream
    spooled_records: int = 0  #: records written to the spool
    drained_records: int = 0  #: spooled records published later
    dropped_records: int = (
        0  #: records given up: the spool outgrew its cap, or a record alone outgrew a message
    )
    queue_depth: int = 0  #: records waiting now
    last_error: str = field(default="")  #: the most recent publish failure


def subject_of(endpoint: str) -> str:
    """The telemetry subject of an endpoint's records."""
    return f"evertune.telemetry.{endpoint or UNROUTED}"


def default_source() -> str:
    """This gateway instance: host name and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def hash_prompts(items: Sequence[Pending], formats: ChatFormats | None, secret: bytes, block: int) -> None:
    """Fill each record's prefix hashes from its prompt, and drop the prompt. CPU-bound: a chat is
    rendered with its endpoint model's chat template and counted with that model's tokenizer."""
    ids: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        if isinstance(item.prompt, list):
            ids[i] = item.prompt
        elif formats is None:
            continue
        elif isinstance(item.prompt, str):
            ids[i] = formats.for_model(item.model).ids_of_text(item.prompt, cache=False)
        elif item.messages is not None:
            chat = formats.for_model(item.model)
            try:
                ids[i] = chat.ids_of_text(chat.render(item.messages), cache=False)
            except InvalidArgument:  # the template refuses the chat (a role it does not know): no hashes
                continue
    keys: dict[str, bytes] = {}
    for i, tokens in ids.items():
        record = items[i].record
        owner = record.endpoint_uid or record.endpoint  # a table without an id: the name
        key = keys.get(owner) or keys.setdefault(owner, endpoint_key(secret, owner))
        hashes = chain_hashes(key, tokens, block)
        if hashes:
            record.prefix_hashes.extend(hashes)
            record.prefix_block_tokens = block
    for item in items:
        item.prompt = None
        item.messages = None


#: Bytes a batch leaves free under the server's max payload (the Nats-Msg-Id header and framing).
HEADER_ROOM = 1024
#: Bytes a record adds to a batch besides its own (field tag and length).
RECORD_FRAMING = 6


def group_batches(
    records: Sequence[telemetry_pb2.RequestRecord], source: str, *, max_bytes: int
) -> list[telemetry_pb2.RequestRecordBatch]:
    """Batches per endpoint, records in the order they ended, each with a fresh batch id and at
    most `max_bytes` serialized (an endpoint's records are split over several batches when they do
    not fit one; a record larger than `max_bytes` alone gets a batch of its own)."""
    by_endpoint: dict[str, list[telemetry_pb2.RequestRecord]] = {}
    for record in records:
        by_endpoint.setdefault(record.endpoint, []).append(record)
    return [
        telemetry_pb2.RequestRecordBatch(records=part, batch_id=uuid.uuid4().hex, source=source)
        for rs in by_endpoint.values()
        for part in _fitting(rs, max_bytes - len(source) - 64)  # 64: the batch id and framing
    ]


def _fitting(
    records: Sequence[telemetry_pb2.RequestRecord], room: int
) -> list[list[telemetry_pb2.RequestRecord]]:
    """`records` cut into consecutive runs whose serialized sizes sum to at most `room`."""
    parts: list[list[telemetry_pb2.RequestRecord]] = [[]]
    used = 0
    for record in records:
        size = record.ByteSize() + RECORD_FRAMING
        if parts[-1] and used + size > room:
            parts.append([])
            used = 0
        parts[-1].append(record)
        used += size
    return [part for part in parts if part]


def split_batch(
    batch: telemetry_pb2.RequestRecordBatch, max_bytes: int
) -> list[telemetry_pb2.RequestRecordBatch]:
    """`batch` as pieces of at most `max_bytes` (itself when it fits). Pieces get ids derived from
    the batch's (`<id>-<n>`), so a piece published twice is still stored once."""
    if batch.ByteSize() <= max_bytes:
        return [batch]
    room = max_bytes - len(batch.source) - len(batch.batch_id) - 64
    return [
        telemetry_pb2.RequestRecordBatch(records=part, batch_id=f"{batch.batch_id}-{n}", source=batch.source)
        for n, part in enumerate(_fitting(batch.records, room))
    ]


#: Entry header of the spool file: the serialized batch's length, 4 bytes big-endian.
_LENGTH = struct.Struct(">I")
#: Bytes copied at a time when the spool is rewritten.
_COPY_CHUNK = 1 << 20
#: Share of `max_bytes` a spool file is cut back to when it outgrows it (room before the next cut).
TRIM_TO = 0.75


def _entries(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(offset just past the entry, serialized batch) of each whole entry from the file's current
    position, one at a time; stops at the end or at a torn last entry (a crash mid-write)."""
    while True:
        head = f.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            return
        (size,) = _LENGTH.unpack(head)
        body = f.read(size)
        if len(body) < size:
            return
        yield f.tell(), body


class Spool:
    """The append-only file of batches that could not be published, and the one being drained.

    Each file holds at most `max_bytes` of whole entries: an append that outgrows it drops the
    file's oldest entries (down to `TRIM_TO` of it) and says how many records it dropped. Files
    are read one entry at a time, never whole."""

    def __init__(self, path: Path, *, max_bytes: int) -> None:
        self.path = path
        self.draining = path.with_name(path.name + ".draining")
        self.max_bytes = max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, batches: Sequence[telemetry_pb2.RequestRecordBatch]) -> int:
        """Write `batches` after the others; the records dropped to stay under `max_bytes`."""
        data = b"".join(_LENGTH.pack(len(b)) + b for b in (x.SerializeToString() for x in batches))
        with self.path.open("ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        return self._trim() if size > self.max_bytes else 0

    def _trim(self) -> int:
        """Drop the oldest entries of the spool file until it holds at most `TRIM_TO` of
        `max_bytes`; the count of records dropped."""
        size = self.path.stat().st_size
        dropped = 0
        keep_from = 0
        with self.path.open("rb") as f:
            for end, body in _entries(f):
                if size - keep_from <= self.max_bytes * TRIM_TO:
                    break
                dropped += len(telemetry_pb2.RequestRecordBatch.FromString(body).records)
                keep_from = end
            f.seek(keep_from)
            tmp = self.path.with_name(self.path.name + ".trim")
            with tmp.open("wb") as out:
                while chunk := f.read(_COPY_CHUNK):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, self.path)
        return dropped

    def has_data(self) -> bool:
        return self.draining.exists() or (self.path.exists() and self.path.stat().st_size > 0)

    def take(self) -> Generator[tuple[int, telemetry_pb2.RequestRecordBatch]]:
        """Move the spool aside (unless an interrupted drain left one) and read its batches one at a
        time: (offset just past the batch, batch). Pass the offset reached to `done`."""
        if not self.draining.exists():
            if not self.path.exists():
                return
            self.path.rename(self.draining)
        with self.draining.open("rb") as f:
            for end, body in _entries(f):
                yield end, telemetry_pb2.RequestRecordBatch.FromString(body)

    def done(self, offset: int) -> int:
        """The drain ended at `offset` of the drained file: its entries from there (not published)
        go back into the spool, copied one at a time, then the drained file is removed. The
        records dropped to keep the spool under `max_bytes`."""
        if not self.draining.exists():
            return 0
        with self.draining.open("rb") as f, self.path.open("ab") as out:
            f.seek(offset)
            for _, body in _entries(f):
                out.write(_LENGTH.pack(len(body)) + body)
            out.flush()
            os.fsync(out.fileno())
            size = out.tell()
        self.draining.unlink()
        return self._trim() if size > self.max_bytes else 0


def read_spool(data: bytes) -> list[telemetry_pb2.RequestRecordBatch]:
    """The batches of a spool file's bytes; a torn last entry is skipped."""
    return [telemetry_pb2.RequestRecordBatch.FromString(body) for _, body in _entries(io.BytesIO(data))]


class Publisher:
    """Queue, batcher and spool of the gateway's telemetry."""

    def __init__(
        self,
        publish: PublishFn,
        spool: Spool,
        *,
        formats: ChatFormats | None,
        secret: bytes,
        block_tokens: int,
        queue_records: int,
        batch_records: int,
        batch_ms: float,
        retry_s: float,
        max_batch_bytes: Callable[[], int],
        source: str = "",
    ) -> None:
        """`max_batch_bytes`: the largest batch the bus takes now (the server's max payload less
        `HEADER_ROOM`), asked before each batch is cut."""
        self._publish = publish
        self._max_batch_bytes = max_batch_bytes
        self.spool = spool
        self._formats = formats
        self._secret = secret
        self._block = block_tokens
        self._queue: asyncio.Queue[Pending] = asyncio.Queue(maxsize=queue_records)
        self._batch_records = batch_records
        self._batch_s = batch_ms / 1000.0
        self._backoff = StepBackoff((retry_s,))  #: the wait between two tries while the bus fails
        self._source = source or default_source()
        self._failures = 0  #: publishes failed in a row (0: the bus works)
        self._last_try = 0.0  #: monotonic time the latest publish began
        self.stats = PublisherStats()

    def offer(self, item: Pending) -> None:
        """Take a finished request; never waits. A full queue spills it to the spool."""
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            hash_prompts([item], self._formats, self._secret, self._block)
            self._spool(group_batches([item.record], self._source, max_bytes=self._max_batch_bytes()))

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

    @property
    def _bus_down(self) -> bool:
        return self._failures > 0

    def _retry_wait_s(self) -> float:
        """Seconds from one try to the next while the bus fails (and the wait for a first record
        while the spool holds batches)."""
        return self._backoff.delay(self._failures)

    def _retry_due(self) -> bool:
        return time.monotonic() - self._last_try >= self._retry_wait_s()

    async def _collect(self, closing: asyncio.Task[bool]) -> list[Pending]:
        """Wait for a first record (or close, or a spool retry), then up to a batch or batch_ms."""
        items: list[Pending] = []
        if self._queue.empty():
            if closing.done():
                return items
            getting = asyncio.create_task(self._queue.get())
            timeout = self._retry_wait_s() if self.spool.has_data() else None
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
        await asyncio.to_thread(hash_prompts, items, self._formats, self._secret, self._block)
        batches = group_batches([p.record for p in items], self._source, max_bytes=self._max_batch_bytes())
        if self._bus_down:
            self._spool(batches)
            return
        for i, batch in enumerate(batches):
            published = await self._try(batch)
            if published is None:
                self._spool(batches[i:])
                return
            self.stats.published_records += published

    def _spool(self, batches: Sequence[telemetry_pb2.RequestRecordBatch]) -> None:
        self._dropped(self.spool.append(batches))
        self.stats.spooled_records += sum(len(b.records) for b in batches)

    def _dropped(self, records: int) -> None:
        if records:
            self.stats.dropped_records += records
            log.warning("telemetry records dropped: the spool is full", records=records)

    async def _try(self, batch: telemetry_pb2.RequestRecordBatch) -> int | None:
        """Publish `batch` (in pieces that fit the bus, a batch spooled under a larger limit
        included): the records published, or None when the bus failed and the batch is to be kept.
        A piece the bus refuses as too large, which `split_batch` leaves only to a single record
        larger than a message, is dropped and counted: kept, it would hold back every later batch
        of the spool."""
        published = 0
        for piece in split_batch(batch, self._max_batch_bytes()):
            sent = await self._try_piece(piece)
            if sent is None:
                return None
            published += sent
        return published

    async def _try_piece(self, batch: telemetry_pb2.RequestRecordBatch) -> int | None:
        """Publish one batch that should fit: its records published (0: refused as too large, and
        dropped), or None when the bus failed."""
        endpoint = batch.records[0].endpoint if batch.records else ""
        self._last_try = time.monotonic()
        try:
            await self._publish(subject_of(endpoint), batch)
        except MaxPayloadError:
            self.stats.dropped_records += len(batch.records)
            log.error("telemetry batch larger than a message dropped", records=len(batch.records))
            return 0
        except Exception as err:  # any failure of the bus: keep the batch, try again later
            self.stats.last_error = f"{type(err).__name__}: {err}"
            if not self._bus_down:
                log.warning("telemetry publish failed; spooling", error=self.stats.last_error)
            self._failures += 1
            return None
        if self._bus_down:
            log.info("telemetry publish works again; draining the spool")
        self._failures = 0
        self.stats.published_batches += 1
        return len(batch.records)

    async def drain(self) -> None:
        """Publish the spool's batches, oldest first, one at a time; stop at the first failure and
        keep the rest."""
        entries = self.spool.take()
        offset = 0  #: bytes of the drained file published
        try:
            for end, batch in entries:
                published = await self._try(batch)
                if published is None:
                    break
                offset = end
                self.stats.drained_records += published
                self.stats.published_records += published
        finally:
            entries.close()
            self._dropped(self.spool.done(offset))
