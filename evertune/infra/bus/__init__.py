"""The message bus: NATS with JetStream. Connect, declare, publish with ids, consume durably (a
message at a time, or in groups written at once), KV, follow KV buckets and subscriptions across
NATS restarts."""

from evertune.infra.bus.batching import BatchHandler, BatchingConsumer, BatchSpec
from evertune.infra.bus.connection import connect
from evertune.infra.bus.consumer import (
    ConsumerSpec,
    ConsumerStats,
    DurableConsumer,
    Handler,
    PoisonMessage,
)
from evertune.infra.bus.definitions import DeclareReport, Definitions, declare, load_definitions
from evertune.infra.bus.follow import KvFollower, ReconnectSignal, Resubscriber, reconnect_signal
from evertune.infra.bus.kv import Bucket, Entry
from evertune.infra.bus.publish import MSG_ID_HEADER, publish, publish_event

__all__ = [
    "MSG_ID_HEADER",
    "BatchHandler",
    "BatchSpec",
    "BatchingConsumer",
    "Bucket",
    "ConsumerSpec",
    "ConsumerStats",
    "DeclareReport",
    "Definitions",
    "DurableConsumer",
    "Entry",
    "Handler",
    "KvFollower",
    "PoisonMessage",
    "ReconnectSignal",
    "Resubscriber",
    "connect",
    "declare",
    "load_definitions",
    "publish",
    "publish_event",
    "reconnect_signal",
]
