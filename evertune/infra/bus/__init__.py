"""The message bus: NATS with JetStream. Connect, declare, publish with ids, consume durably, KV,
follow KV buckets and subscriptions across NATS restarts."""

from evertune.infra.bus.connection import connect
from evertune.infra.bus.consumer import (
    ConsumerSpec,
    ConsumerStats,
    DurableConsumer,
    Handler,
    PoisonMessage,
    backoff_delay,
    fetch_unless_stopped,
    terminate_poison,
)
from evertune.infra.bus.definitions import DeclareReport, Definitions, declare, load_definitions
from evertune.infra.bus.follow import KvFollower, ReconnectSignal, Resubscriber, reconnect_signal
from evertune.infra.bus.kv import Bucket, Entry
from evertune.infra.bus.publish import MSG_ID_HEADER, publish, publish_event

__all__ = [
    "MSG_ID_HEADER",
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
    "backoff_delay",
    "connect",
    "declare",
    "fetch_unless_stopped",
    "load_definitions",
    "publish",
    "publish_event",
    "reconnect_signal",
    "terminate_poison",
]
