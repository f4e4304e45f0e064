"""The telemetry sink: `RequestRecordBatch` messages from the TELEMETRY stream into `requests` rows.

Pure core: `rows_of` (the one conversion of a record to a row, in `COLUMNS` order), `decode`,
`group_token`. Thin shell: `TelemetrySink`, the `BatchHandler` of a bus `BatchingConsumer`, which
does the fetching, acking, nak'ing, resting and stopping; the sink decodes, dedups and inserts.

How a group of messages reaches the store exactly once:
- the consumer fetches messages and the sink accumulates their rows until `batch_rows` rows or
  `flush_ms` since the group's first message; the group is written with ONE `Store.insert` whose
  dedup token is derived from the group's message ids (`group_token`), then its messages acked;
- an insert that fails (store down, table missing) naks every message of the group with a growing
  delay, and the consumer itself rests that long before it fetches again (the delay grows with the
  failures in a row and resets at the first success), so a store that is down costs one insert
  attempt per backoff step, not one per arriving message; nothing is acked, nothing is lost (the
  consumer never gives up: `max_deliver` is unlimited);
- a message delivered more than once (nak'ed, or its earlier instance inserted and died before the
  ack) may come back in another group, under another token. So rows of redelivered messages are
  first checked against the table (`endpoint`, `request_id`), and rows already stored are dropped;
- a nats-server that crashes can lose its latest consumer state (deliveries and acks not yet
  written): it then delivers messages this sink has already inserted again, as FIRST deliveries.
  So the sink remembers the ids of the messages it inserted (the last `remember_messages`) and
  acks such a message again without inserting its rows (`known_messages_skipped`);
- an undecodable message is terminated at once (`PoisonMessage`) and reported as a
  `service.poison_message` event;
- a record the table cannot hold (`unfit`: a status code over 65535, a start time outside
  DateTime64's years) would fail its group's insert on every retry and hold back every later
  message: it is set aside (counted in `records_set_aside`, logged with its message's stream
  sequence; the message stays in the stream), and the batch's other records are stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig

from evertune.infra.bus import MSG_ID_HEADER, BatchingConsumer, BatchSpec, PoisonMessage
from evertune.infra.logging import get_logger
from evertune.infra.runtime.metrics import COUNT_BUCKETS, FAST_BUCKETS, Distribution
from evertune.infra.store import Store
from evertune.v1 import telemetry_pb2

log = get_logger("evertune.profiler.sink")

#: Table the sink writes.
TABLE = "requests"

#: Columns of `requests` in the order `rows_of` fills them.
COLUMNS: tuple[str, ...] = (
    "endpoint",
    "endpoint_uid",
    "deployment",
    "request_id",
    "ts",
    "api",
    "model",
    "stream",
    "status_code",
    "error_class",
    "ttft_ms",
    "e2e_ms",
    "upstream_ttft_ms",
    "itl_ms",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "prefix_hashes",
    "client_disconnected",
)

#: Where `rows_of` puts the columns a stored row is recognised by.
_ENDPOINT_AT = COLUMNS.index("endpoint")
_REQUEST_ID_AT = COLUMNS.index("request_id")

#: `Api` enum value -> the `api` column.
API_NAMES: dict[int, str] = {
    telemetry_pb2.API_UNSPECIFIED: "",
    telemetry_pb2.API_CHAT: "chat",
    telemetry_pb2.API_COMPLETIONS: "completions",
}

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: Longest list of request ids checked against the table in one query.
_CHECK_CHUNK = 5000


# --- pure core -----------------------------------------------------------------------------------


def timestamp_of(unix_ns: int) -> datetime:
    """Nanoseconds since the epoch -> UTC datetime, truncated to microseconds."""
    return _EPOCH + timedelta(microseconds=unix_ns // 1000)


#: Largest `status_code` the column holds (UInt16).
MAX_STATUS_CODE = 65_535
#: Start times the column holds (DateTime64(6): years 1900 to 2299), ns since the epoch.
TS_RANGE_NS = (
    int((datetime(1900, 1, 1, tzinfo=UTC) - _EPOCH).total_seconds()) * 10**9,
    int((datetime(2299, 12, 31, tzinfo=UTC) - _EPOCH).total_seconds()) * 10**9,
)


def unfit(record: telemetry_pb2.RequestRecord) -> str:
    """Why the `requests` table cannot hold `record` ("" when it can). One such record would fail
    its whole group's insert, and the retries never end: it is set aside instead (`rows_of`)."""
    if record.status_code > MAX_STATUS_CODE:
        return f"status_code {record.status_code} over {MAX_STATUS_CODE}"
    if not TS_RANGE_NS[0] <= record.start_time_unix_ns <= TS_RANGE_NS[1]:
        return f"start_time_unix_ns {record.start_time_unix_ns} outside 1900-2299"
    return ""


def rows_of(batch: telemetry_pb2.RequestRecordBatch) -> list[list[Any]]:
    """The `requests` rows of a batch, one per record the table can hold (`unfit`), values in
    `COLUMNS` order. Never any text."""
    api_names = API_NAMES
    return [
        [
            r.endpoint,
            r.endpoint_uid,
            r.deployment,
            r.request_id,
            timestamp_of(r.start_time_unix_ns),
            api_names.get(r.api, ""),
            r.model,
            r.stream,
            r.status_code,
            r.error_class,
            r.ttft_ms,
            r.e2e_ms,
            r.upstream_ttft_ms,
            list(r.itl_ms),
            r.prompt_tokens,
            r.cached_tokens,
            r.completion_tokens,
            list(r.prefix_hashes),
            r.client_disconnected,
        ]
        for r in batch.records
        if not unfit(r)
    ]


def decode(data: bytes) -> telemetry_pb2.RequestRecordBatch:
    """Parse a message payload; raise `PoisonMessage` when it is not a `RequestRecordBatch`."""
    batch = telemetry_pb2.RequestRecordBatch()
    try:
        batch.ParseFromString(data)
    except DecodeError as err:
        raise PoisonMessage(f"undecodable RequestRecordBatch ({len(data)} bytes): {err}") from None
    return batch


def group_token(msg_ids: Sequence[str]) -> str:
    """The insert dedup token of a group of messages: a digest of their ids, in order."""
    digest = hashlib.sha256("\n".join(msg_ids).encode()).hexdigest()
    return f"sink-{digest[:40]}"


# --- the shell -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SinkConfig:
    """Where the sink reads and how it batches and retries."""

    stream: str = "TELEMETRY"  #: JetStream stream name
    durable: str = "profiler-sink"  #: durable consumer name; instances sharing it share the work
    filter_subject: str = "evertune.telemetry.>"  #: subjects read
    batch_rows: int = 5000  #: rows that trigger an insert
    flush_ms: float = 200.0  #: longest wait, ms, from a group's first message to its insert
    fetch_batch: int = 64  #: messages asked for per fetch
    fetch_timeout_s: float = 5.0  #: longest server wait of one fetch when nothing is pending
    ack_wait_s: float = 30.0  #: seconds before an unacked message is redelivered
    backoff_s: tuple[float, ...] = (0.5, 2.0, 5.0, 10.0)  #: nak delay after the 1st, 2nd, ... failure
    source: str = "profiler"  #: source named in poison reports
    remember_messages: int = 100_000  #: ids of inserted messages kept, to skip them when they return

    def batch_spec(self) -> BatchSpec:
        """The bus consumer's part of the configuration."""
        return BatchSpec(
            stream=self.stream,
            durable=self.durable,
            filter_subject=self.filter_subject,
            group_size=self.batch_rows,
            flush_s=self.flush_ms / 1000,
            fetch_batch=self.fetch_batch,
            fetch_timeout_s=self.fetch_timeout_s,
            ack_wait_s=self.ack_wait_s,
            backoff_s=self.backoff_s,
        )


@dataclass
class SinkStats:
    """Counters for the service's status."""

    rows_inserted: int = 0  #: rows written to the store (after redelivery filtering)
    batches: int = 0  #: inserts done (one per group)
    messages_acked: int = 0  #: messages whose rows are stored and acked
    redelivered_rows_skipped: int = 0  #: rows of redelivered messages already in the table
    known_messages_skipped: int = 0  #: messages delivered again after this sink inserted them
    rows_pending: int = 0  #: rows taken from the bus and not yet inserted
    retried: int = 0  #: messages nak'ed after a failed insert
    failed_inserts: int = 0  #: insert attempts that failed (each followed by a backoff pause)
    poisoned: int = 0  #: undecodable messages terminated
    records_set_aside: int = 0  #: records the table cannot hold (`unfit`), logged and not stored
    last_error: str = field(default="")  #: the most recent insert or poison error


def _msg_id(msg: Msg, batch: telemetry_pb2.RequestRecordBatch | None = None) -> str:
    header = (msg.headers or {}).get(MSG_ID_HEADER, "")
    if header:
        return header
    if batch is not None and batch.batch_id:
        return batch.batch_id
    meta = msg.metadata
    return f"seq:{meta.sequence.stream if meta.sequence else 0}"


@dataclass
class _Group:
    """The rows of the messages in hand, waiting for one insert (the consumer holds the messages)."""

    ids: list[str] = field(default_factory=list)  #: the message ids, in fetch order
    id_set: set[str] = field(default_factory=set)  #: the same ids, for lookups
    rows: list[list[Any]] = field(default_factory=list)  #: rows of messages delivered once
    redelivered: list[list[Any]] = field(default_factory=list)  #: rows of redelivered messages
    skipped: int = 0  #: messages of the group whose rows are stored or in hand already

    @property
    def size(self) -> int:
        """Rows in hand: what `batch_rows` is compared with."""
        return len(self.rows) + len(self.redelivered)


class RecentIds:
    """A bounded set of message ids, oldest forgotten first."""

    def __init__(self, capacity: int) -> None:
        self._capacity = max(1, capacity)
        self._ids: dict[str, None] = {}

    def __contains__(self, msg_id: object) -> bool:
        return msg_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add_all(self, msg_ids: Sequence[str]) -> None:
        ids = self._ids
        for msg_id in msg_ids:
            ids.pop(msg_id, None)
            ids[msg_id] = None
        while len(ids) > self._capacity:
            del ids[next(iter(ids))]


class TelemetrySink:
    """The batching durable consumer over TELEMETRY into `store`: `run(stop)` until a stop event
    is set. The sink is the consumer's `BatchHandler` (`take`, `flush`)."""

    def __init__(self, js: JetStreamContext, store: Store, config: SinkConfig | None = None) -> None:
        self._store = store
        self.config = config or SinkConfig()
        self._consumer = BatchingConsumer(js, self.config.batch_spec(), self, source=self.config.source)
        self._counts = SinkStats()  #: the sink's own counters (the consumer keeps the others)
        self.insert_seconds = Distribution(FAST_BUCKETS)  #: seconds of each successful insert
        self.batch_rows = Distribution(COUNT_BUCKETS)  #: rows of each successful insert
        self._inserted = RecentIds(self.config.remember_messages)
        self._group = _Group()

    @property
    def stats(self) -> SinkStats:
        """The counters now: the sink's and its consumer's."""
        c = self._consumer.stats
        return replace(
            self._counts,
            messages_acked=c.acked,
            retried=c.retried,
            failed_inserts=c.failed_flushes,
            poisoned=c.poisoned,
            last_error=c.last_error,
        )

    def consumer_config(self) -> ConsumerConfig:
        """The durable consumer's configuration (created by `run` when missing)."""
        return self._consumer.consumer_config()

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until `stop` is set; the group in hand is inserted (or nak'ed) before returning.

        Stopping never waits on a fetch: it is cancelled, and what it would have delivered stays
        unacked on the server for the next fetch or another instance.
        """
        await self._consumer.run(stop)

    def take(self, msg: Msg) -> int:
        """Decode one message into the group (`PoisonMessage` when it cannot be); the rows in hand."""
        batch = decode(msg.data)
        group = self._group
        msg_id = _msg_id(msg, batch)
        known = msg_id in self._inserted or msg_id in group.id_set
        group.ids.append(msg_id)
        group.id_set.add(msg_id)
        if known:  # inserted by this sink already, or in hand: acked with the group, no rows
            group.skipped += 1
            return group.size
        rows = rows_of(batch)
        if len(rows) < len(batch.records):
            self._set_aside(msg, batch)
        if (msg.metadata.num_delivered or 1) > 1:
            group.redelivered.extend(rows)
        else:
            group.rows.extend(rows)
        self._counts.rows_pending += len(rows)
        return group.size

    def _set_aside(self, msg: Msg, batch: telemetry_pb2.RequestRecordBatch) -> None:
        """Count and log the records of `batch` the table cannot hold; the rest go on. The message
        stays in the stream (by its sequence) for whoever wants to look at them."""
        sequence = msg.metadata.sequence.stream if msg.metadata.sequence else 0
        for record in batch.records:
            reason = unfit(record)
            if reason:
                self._counts.records_set_aside += 1
                log.warning(
                    "telemetry record set aside",
                    endpoint=record.endpoint,
                    request_id=record.request_id,
                    reason=reason,
                    stream_sequence=sequence,
                )

    async def flush(self) -> None:
        """Insert the group's rows with one insert and start a new group; raise when the insert
        failed (the consumer naks the group's messages and rests)."""
        group, self._group = self._group, _Group()
        self._counts.rows_pending -= group.size
        rows = group.rows
        if group.redelivered:
            fresh = await self._not_stored(group.redelivered)
            self._counts.redelivered_rows_skipped += len(group.redelivered) - len(fresh)
            rows = rows + fresh
        inserting = time.monotonic()
        await self._store.insert(TABLE, rows, COLUMNS, dedup_token=group_token(group.ids))
        self.insert_seconds.observe(time.monotonic() - inserting)
        self.batch_rows.observe(len(rows))
        self._inserted.add_all(group.ids)
        self._counts.rows_inserted += len(rows)
        self._counts.batches += 1
        self._counts.known_messages_skipped += group.skipped

    async def _not_stored(self, rows: list[list[Any]]) -> list[list[Any]]:
        """The rows whose (endpoint, request_id) the table does not hold yet."""
        stored: set[tuple[str, str]] = set()
        keys = sorted({(row[_ENDPOINT_AT], row[_REQUEST_ID_AT]) for row in rows})
        for i in range(0, len(keys), _CHECK_CHUNK):
            chunk = keys[i : i + _CHECK_CHUNK]
            result = await self._store.query(
                f"SELECT endpoint, request_id FROM {TABLE} "
                "WHERE (endpoint, request_id) IN {keys:Array(Tuple(String, String))}",
                {"keys": chunk},
            )
            stored.update((str(e), str(r)) for e, r in result)
        return [row for row in rows if (row[_ENDPOINT_AT], row[_REQUEST_ID_AT]) not in stored]
