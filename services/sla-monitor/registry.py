"""The deployer's endpoints as the sla-monitor needs them (pure): SLO, alert routes, stable deployment.

The service watches the `endpoints` KV bucket (one serialized `Endpoint` per endpoint name) and
puts every change here. An endpoint in the bucket is judged by its own `spec.slo` and alerts go to
its own `spec.alert_routes` (none: no receiver); an endpoint not in the bucket falls back to the
settings' default SLO and receivers. This module is the one place an `AlertRoute` becomes a
`ReceiverConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass

from evertune.sla_monitor.payloads import AlertSeverity, ReceiverConfig, ReceiverKind
from evertune.v1 import common_pb2, endpoint_pb2

#: AlertRoute.min_severity -> receiver severity (unspecified = warning, as endpoint.proto says).
ROUTE_SEVERITY: dict[int, AlertSeverity] = {
    common_pb2.SEVERITY_UNSPECIFIED: "warning",
    common_pb2.SEVERITY_INFO: "info",
    common_pb2.SEVERITY_WARNING: "warning",
    common_pb2.SEVERITY_ERROR: "error",
    common_pb2.SEVERITY_CRITICAL: "critical",
}
#: AlertRoute.kind -> receiver kind (unspecified routes are skipped).
ROUTE_KIND: dict[int, ReceiverKind] = {
    endpoint_pb2.ALERT_ROUTE_KIND_WEBHOOK: "webhook",
    endpoint_pb2.ALERT_ROUTE_KIND_LOG: "log",
    endpoint_pb2.ALERT_ROUTE_KIND_ALERTMANAGER: "alertmanager",
    endpoint_pb2.ALERT_ROUTE_KIND_PAGERDUTY: "pagerduty",
}


def receivers_from_routes(endpoint: str, routes: list[endpoint_pb2.AlertRoute]) -> list[ReceiverConfig]:
    """An endpoint's alert routes as receivers, named `<endpoint>/<route name>`.

    A route of unspecified kind, a webhook or Alertmanager route without an http(s) url, or a
    PagerDuty route without a routing key is skipped (the deployer validates specs; a bad one must
    not take the monitor down). A PagerDuty route without a url posts to PagerDuty's events URL."""
    found: list[ReceiverConfig] = []
    for i, route in enumerate(routes):
        kind = ROUTE_KIND.get(route.kind)
        if kind is None:
            continue
        has_url = route.url.startswith(("http://", "https://"))
        if kind in ("webhook", "alertmanager") and not has_url:
            continue
        if kind == "pagerduty" and (not route.routing_key or (route.url and not has_url)):
            continue
        found.append(
            ReceiverConfig(
                kind=kind,
                url=route.url if kind != "log" else "",
                routing_key=route.routing_key if kind == "pagerduty" else "",
                min_severity=ROUTE_SEVERITY.get(route.min_severity, "warning"),
                name=f"{endpoint}/{route.name or i}",
                event_kinds=tuple(route.event_kinds),
            )
        )
    return found


@dataclass(frozen=True)
class EndpointEntry:
    """What the monitor keeps of one stored endpoint."""

    slo: endpoint_pb2.Slo | None  #: its SLO; None when the spec has no usable one (ttft_p99_ms <= 0)
    receivers: tuple[ReceiverConfig, ...]  #: its alert routes as receivers
    stable_deployment_id: str  #: deployment carrying its stable traffic ("" while provisioning)
    revision: int  #: the endpoint's revision
    uid: str = ""  #: the endpoint's immutable id (Endpoint.uid)


@dataclass(frozen=True)
class Change:
    """What one put or delete changed."""

    endpoint: str  #: endpoint name
    deployment_changed: bool  #: the stable deployment moved from one id to another
    #: the name no longer holds the endpoint it held (deleted, or created again with a new id)
    replaced: bool = False


class EndpointRegistry:
    """The endpoints bucket's current content, as SLOs and receivers."""

    def __init__(self) -> None:
        self._entries: dict[str, EndpointEntry] = {}

    def put(self, key: str, value: bytes | None) -> Change:
        """Apply one KV entry (None = deleted); a value that is not an Endpoint raises DecodeError."""
        old = self._entries.get(key)
        if value is None:
            self._entries.pop(key, None)
            return Change(endpoint=key, deployment_changed=False, replaced=old is not None)
        ep = endpoint_pb2.Endpoint.FromString(value)
        name = ep.spec.name or key
        slo = endpoint_pb2.Slo()
        slo.CopyFrom(ep.spec.slo)
        entry = EndpointEntry(
            slo=slo if slo.ttft_p99_ms > 0 else None,
            receivers=tuple(receivers_from_routes(name, list(ep.spec.alert_routes))),
            stable_deployment_id=ep.stable_deployment_id,
            revision=ep.revision,
            uid=ep.uid,
        )
        self._entries[key] = entry
        if old is not None and old.uid != entry.uid:
            return Change(endpoint=key, deployment_changed=False, replaced=True)
        moved = (
            old is not None
            and bool(old.stable_deployment_id)
            and old.stable_deployment_id != entry.stable_deployment_id
        )
        return Change(endpoint=key, deployment_changed=moved)

    def get(self, endpoint: str) -> EndpointEntry | None:
        """The stored endpoint; None when the bucket does not have it."""
        return self._entries.get(endpoint)

    def uid_of(self, endpoint: str) -> str:
        """The stored endpoint's immutable id; "" when the bucket does not have it."""
        entry = self._entries.get(endpoint)
        return entry.uid if entry is not None else ""

    def __contains__(self, endpoint: str) -> bool:
        return endpoint in self._entries

    def __len__(self) -> int:
        return len(self._entries)
