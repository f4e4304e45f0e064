"""Event kinds, their subjects, and the one way to build an `evertune.v1.Event`.

Every event travels on `evertune.events.<kind>.<endpoint>` (JetStream) with Nats-Msg-Id = Event.id.
A kind is two dotted words ("sla.breach"), so the endpoint is always the subject's fifth token and
`evertune.events.*.*.<endpoint>` selects one endpoint's events. System events (no endpoint) use the
token `_system`. The payload field of a kind is the kind with '.' replaced by '_'
("sla.breach" -> Event.sla_breach, a SlaBreach).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final

from google.protobuf.message import DecodeError

from evertune.errors import InvalidArgument
from evertune.infra.logging import get_logger
from evertune.v1 import common_pb2, events_pb2

log = get_logger("evertune.events")

#: First two tokens of every event subject.
SUBJECT_PREFIX: Final = "evertune.events"
#: Endpoint token of events that belong to no endpoint.
SYSTEM_ENDPOINT_TOKEN: Final = "_system"
#: Name of the oneof in Event that holds the payload.
PAYLOAD_ONEOF: Final = "payload"


class EventKind(StrEnum):
    """Every event kind on the bus, dotted as on the wire (Event.kind)."""

    PROFILE_READY = "profile.ready"
    SLA_BREACH = "sla.breach"
    SLA_RESOLVED = "sla.resolved"
    DRIFT_DETECTED = "drift.detected"
    SEARCH_STARTED = "search.started"
    SEARCH_COMPLETED = "search.completed"
    TRIAL_PROGRESS = "trial.progress"
    TRIAL_COMPLETED = "trial.completed"
    DEPLOY_STARTED = "deploy.started"
    DEPLOY_CANARY_STEP = "deploy.canary_step"
    DEPLOY_PROMOTED = "deploy.promoted"
    DEPLOY_ROLLED_BACK = "deploy.rolled_back"
    ENDPOINT_CREATED = "endpoint.created"
    ENDPOINT_UPDATED = "endpoint.updated"
    ENDPOINT_DELETED = "endpoint.deleted"
    SERVICE_POISON_MESSAGE = "service.poison_message"

    @property
    def payload_field(self) -> str:
        """Name of the Event.payload oneof field carrying this kind's payload."""
        return self.value.replace(".", "_")


#: Any payload message of an Event.
EventPayload = (
    events_pb2.ProfileReady
    | events_pb2.SlaBreach
    | events_pb2.SlaResolved
    | events_pb2.DriftDetected
    | events_pb2.SearchStarted
    | events_pb2.SearchCompleted
    | events_pb2.TrialProgress
    | events_pb2.TrialCompleted
    | events_pb2.DeployStarted
    | events_pb2.DeployCanaryStep
    | events_pb2.DeployPromoted
    | events_pb2.DeployRolledBack
    | events_pb2.EndpointCreated
    | events_pb2.EndpointUpdated
    | events_pb2.EndpointDeleted
    | events_pb2.ServicePoisonMessage
)

#: Payload message type of each kind.
PAYLOAD_TYPES: Final[dict[EventKind, type[EventPayload]]] = {
    EventKind.PROFILE_READY: events_pb2.ProfileReady,
    EventKind.SLA_BREACH: events_pb2.SlaBreach,
    EventKind.SLA_RESOLVED: events_pb2.SlaResolved,
    EventKind.DRIFT_DETECTED: events_pb2.DriftDetected,
    EventKind.SEARCH_STARTED: events_pb2.SearchStarted,
    EventKind.SEARCH_COMPLETED: events_pb2.SearchCompleted,
    EventKind.TRIAL_PROGRESS: events_pb2.TrialProgress,
    EventKind.TRIAL_COMPLETED: events_pb2.TrialCompleted,
    EventKind.DEPLOY_STARTED: events_pb2.DeployStarted,
    EventKind.DEPLOY_CANARY_STEP: events_pb2.DeployCanaryStep,
    EventKind.DEPLOY_PROMOTED: events_pb2.DeployPromoted,
    EventKind.DEPLOY_ROLLED_BACK: events_pb2.DeployRolledBack,
    EventKind.ENDPOINT_CREATED: events_pb2.EndpointCreated,
    EventKind.ENDPOINT_UPDATED: events_pb2.EndpointUpdated,
    EventKind.ENDPOINT_DELETED: events_pb2.EndpointDeleted,
    EventKind.SERVICE_POISON_MESSAGE: events_pb2.ServicePoisonMessage,
}

#: Kinds that may be published without an endpoint; every other kind is about one endpoint.
SYSTEM_KINDS: Final = frozenset({EventKind.SERVICE_POISON_MESSAGE})

#: Severity new_event gives a kind when the caller does not choose one.
DEFAULT_SEVERITY: Final[dict[EventKind, common_pb2.Severity]] = {
    EventKind.SLA_BREACH: common_pb2.SEVERITY_CRITICAL,
    EventKind.DRIFT_DETECTED: common_pb2.SEVERITY_WARNING,
    EventKind.DEPLOY_ROLLED_BACK: common_pb2.SEVERITY_WARNING,
    EventKind.SERVICE_POISON_MESSAGE: common_pb2.SEVERITY_ERROR,
}

_BAD_TOKEN_CHARS: Final = frozenset(".*>")


def _kind(kind: EventKind | str) -> EventKind:
    try:
        return EventKind(kind)
    except ValueError:
        raise InvalidArgument(f"unknown event kind {kind!r}") from None


def endpoint_token(endpoint: str) -> str:
    """The subject token of an endpoint name: the name itself, or `_system` when it is empty.

    Raises InvalidArgument for a name that is not a valid NATS subject token ('.', '*', '>',
    whitespace or control characters) or is the reserved `_system`.
    """
    if not endpoint:
        return SYSTEM_ENDPOINT_TOKEN
    if endpoint == SYSTEM_ENDPOINT_TOKEN:
        raise InvalidArgument(f"endpoint name {endpoint!r} is reserved for system events")
    bad = sorted({c for c in endpoint if c in _BAD_TOKEN_CHARS or c.isspace() or not c.isprintable()})
    if bad:
        shown = " ".join(repr(c) for c in bad)
        raise InvalidArgument(
            f"endpoint name {endpoint!r} cannot be a NATS subject token: it contains {shown}"
        )
    return endpoint


def event_subject(kind: EventKind, endpoint: str) -> str:
    """Subject an event of `kind` about `endpoint` is published on.

    >>> event_subject(EventKind.SLA_BREACH, "voice-eu")
    'evertune.events.sla.breach.voice-eu'
    >>> event_subject(EventKind.SERVICE_POISON_MESSAGE, "")
    'evertune.events.service.poison_message._system'
    """
    return f"{SUBJECT_PREFIX}.{_kind(kind).value}.{endpoint_token(endpoint)}"


def event_filter_subject(kind: EventKind | None = None, endpoint: str | None = None) -> str:
    """Subscription filter for events of one kind and/or one endpoint; None means any.

    `endpoint=""` selects system events (`_system`).

    >>> event_filter_subject(endpoint="voice-eu")
    'evertune.events.*.*.voice-eu'
    >>> event_filter_subject()
    'evertune.events.>'
    """
    if kind is None and endpoint is None:
        return f"{SUBJECT_PREFIX}.>"
    kind_part = "*.*" if kind is None else _kind(kind).value
    endpoint_part = "*" if endpoint is None else endpoint_token(endpoint)
    return f"{SUBJECT_PREFIX}.{kind_part}.{endpoint_part}"


def new_event(
    kind: EventKind,
    *,
    endpoint: str,
    source: str,
    payload_message: EventPayload,
    severity: common_pb2.Severity | None = None,
    cause_id: str = "",
    endpoint_uid: str = "",
) -> events_pb2.Event:
    """Build an Event: a fresh id (uuid4 hex), time = now (UTC), and the payload in its oneof field.
    `endpoint_uid` is the endpoint's immutable id when the emitter knows it.

    `severity` defaults to the kind's (DEFAULT_SEVERITY, else INFO). Raises InvalidArgument when
    the payload's type is not the kind's, the endpoint is not a valid subject token, the endpoint
    is empty for a kind about an endpoint, or `source` is empty.
    """
    kind = _kind(kind)
    expected = PAYLOAD_TYPES[kind]
    if type(payload_message) is not expected:
        raise InvalidArgument(
            f"event kind {kind.value!r} takes a {expected.DESCRIPTOR.full_name} payload, "
            f"not {type(payload_message).__name__}"
        )
    endpoint_token(endpoint)
    if not endpoint and kind not in SYSTEM_KINDS:
        raise InvalidArgument(f"event kind {kind.value!r} needs an endpoint")
    if not source:
        raise InvalidArgument("an event needs a source (the emitting service's name)")
    if severity is None or severity == common_pb2.SEVERITY_UNSPECIFIED:
        severity = DEFAULT_SEVERITY.get(kind, common_pb2.SEVERITY_INFO)
    event = events_pb2.Event(
        id=uuid.uuid4().hex,
        kind=kind.value,
        endpoint=endpoint,
        source=source,
        severity=severity,
        cause_id=cause_id,
        endpoint_uid=endpoint_uid,
    )
    event.time.FromDatetime(datetime.now(UTC))
    getattr(event, kind.payload_field).CopyFrom(payload_message)
    return event


def event_kind(event: events_pb2.Event) -> EventKind:
    """Kind of a received event, checked against the payload that is set.

    Raises InvalidArgument for an unknown kind (e.g. from a newer publisher) or a kind whose
    payload field is not the one set.
    """
    kind = _kind(event.kind)
    which = event.WhichOneof(PAYLOAD_ONEOF)
    if which != kind.payload_field:
        raise InvalidArgument(
            f"event {event.id!r} of kind {kind.value!r} carries payload {which or 'none'}, "
            f"not {kind.payload_field}"
        )
    return kind


def event_payload(event: events_pb2.Event) -> EventPayload:
    """The payload message of a received event (checked as by event_kind)."""
    payload: EventPayload = getattr(event, event_kind(event).payload_field)
    return payload


def subject_of(event: events_pb2.Event) -> str:
    """Subject a received or built event belongs on."""
    return event_subject(event_kind(event), event.endpoint)


def decode_event(data: bytes, *, subject: str = "") -> events_pb2.Event | None:
    """The event `data` carries, or None when it does not decode (logged with its subject and
    size). Readers that cannot terminate a message (ordered consumers: `WatchEvents`, the trial
    lookup, `events tail`) skip it with this, so one forged or corrupt message on an events
    subject never ends their stream; durable consumers terminate it as poison instead."""
    try:
        return events_pb2.Event.FromString(data)
    except DecodeError:
        log.warning("undecodable message on an events subject skipped", subject=subject, size=len(data))
        return None
