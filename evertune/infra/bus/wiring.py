"""A service's place in the loop, declared once: what it subscribes to (stream or KV bucket, filter
subject, durable name, handler), what it publishes (event kinds, other subjects, KV buckets), and
which store tables it reads and writes.

Each service states its `Wiring` in `services/<name>/wiring.py`; its `on_start` starts its
consumers from it (`durable_consumers`, `handler_of`), and `evertune.apps.loop_map` renders every
service's wiring into docs/loop.md (a test fails when the page and the code disagree). ClickHouse
tables are the loop's second channel: one service writes a table that another reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from nats.js import JetStreamContext

from evertune.infra.bus.consumer import ConsumerSpec, DurableConsumer, Handler
from evertune.infra.events import SUBJECT_PREFIX, EventKind


class Delivery(StrEnum):
    """How a subscription receives its messages."""

    DURABLE = "durable"  #: `DurableConsumer`: each message handled once, acked after its side effect
    BATCHING = "batching"  #: `BatchingConsumer`: messages written to the store in groups
    KV_WATCH = "kv watch"  #: `KvFollower`: every key loaded at start, then each change
    LATEST = "latest per subject"  #: ordered consumer from each subject's last message (`Resubscriber`)
    CORE = "core"  #: plain NATS subscription: only what is published while it listens
    ON_DEMAND = "on demand"  #: an ordered consumer opened per API call, not at start


@dataclass(frozen=True)
class Consumes:
    """One subscription of a service."""

    delivery: Delivery  #: how it receives messages
    source: str  #: JetStream stream ("EVENTS") or KV bucket ("routes"); "" for core NATS
    subject: str  #: filter subject ("" for a KV watch: every key)
    #: attribute path from the service to the function given each message or change (ON_DEMAND:
    #: the API call that opens it)
    handler: str
    durable: str = ""  #: durable consumer name; instances sharing it share the work ("" if none)
    queue: str = ""  #: core NATS queue group; instances sharing it share the requests ("" if none)
    consumer: ConsumerSpec | None = None  #: how a durable consumer reads and retries (DURABLE only)

    @classmethod
    def durable_of(cls, spec: ConsumerSpec, handler: str) -> Consumes:
        """A `DurableConsumer` reading as `spec` says."""
        return cls(
            Delivery.DURABLE,
            source=spec.stream,
            subject=spec.filter_subject,
            handler=handler,
            durable=spec.durable,
            consumer=spec,
        )

    @property
    def kind(self) -> EventKind | None:
        """The one event kind its subject selects (None: not events, or any kind)."""
        parts = self.subject.split(".")
        if ".".join(parts[:2]) != SUBJECT_PREFIX or len(parts) < 4:
            return None
        try:
            return EventKind(f"{parts[2]}.{parts[3]}")
        except ValueError:
            return None


@dataclass(frozen=True)
class Wiring:
    """What a service takes from the loop and gives to it."""

    service: str  #: the service's name
    consumes: tuple[Consumes, ...]  #: its subscriptions, in the order it starts them
    events: tuple[EventKind, ...] = ()  #: event kinds it publishes (`evertune.events.<kind>.<endpoint>`)
    subjects: tuple[
        str, ...
    ] = ()  #: other subjects it publishes on, as patterns (`evertune.jobs.<hardware>`)
    writes_buckets: tuple[str, ...] = ()  #: KV buckets it writes
    reads_buckets: tuple[str, ...] = ()  #: KV buckets it reads when it needs them (watched ones: `consumes`)
    reads_tables: tuple[str, ...] = ()  #: store tables it reads
    writes_tables: tuple[str, ...] = ()  #: store tables it writes

    def of(self, delivery: Delivery) -> Iterator[Consumes]:
        """Its subscriptions of one delivery, in start order."""
        return (c for c in self.consumes if c.delivery == delivery)

    def one(self, delivery: Delivery) -> Consumes:
        """Its only subscription of `delivery` (ValueError when it has none or several)."""
        (found,) = self.of(delivery)
        return found


def handler_of(target: object, path: str) -> Callable[..., Any]:
    """The function at attribute `path` ("trials.on_completed") of `target`, the service."""
    found: Any = target
    for name in path.split("."):
        found = getattr(found, name)
    if not callable(found):
        raise TypeError(f"{type(target).__name__}.{path} is not callable")
    return found  # type: ignore[no-any-return]


def durable_consumers(
    js: JetStreamContext, wiring: Wiring, target: object, *, source: str
) -> dict[str, DurableConsumer]:
    """A `DurableConsumer` for each DURABLE subscription of `wiring`, by durable name, each with
    its handler found on `target` (the service); the caller spawns their `run`."""
    consumers: dict[str, DurableConsumer] = {}
    for consumes in wiring.of(Delivery.DURABLE):
        assert consumes.consumer is not None, "a durable subscription has its ConsumerSpec"
        handler: Handler = handler_of(target, consumes.handler)
        consumers[consumes.durable] = DurableConsumer(js, consumes.consumer, handler, source=source)
    return consumers
