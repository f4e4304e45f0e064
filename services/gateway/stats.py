"""What the gateway is doing and what it counted, as plain data: one `GatewayStats` per gateway.

Every finished request is counted as its record goes to the publisher (`observe`; every request
gets a record, errors included); what other parts keep (the route tables held, the proxy's requests
in flight, the publisher's counts, the spool's size) is read into it before it is shown
(`GatewayService.read_stats`). Two readers render it, neither keeps figures of its own: `details()`
is the gateway's state as `evertune status` shows it, and `metrics.gateway_metrics` its Prometheus
families.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evertune.gateway.publisher import PublisherStats
from evertune.infra.runtime.metrics import Distribution
from evertune.v1 import telemetry_pb2

#: TTFT buckets, seconds: fine around a voice turn's budget (the model's share of ~800 ms).
TTFT_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0)

#: The reason a limit refused a request, by the record's error class.
REJECTION_REASONS = {
    "rate_limit_exceeded": "rate",
    "concurrency_limit": "concurrency",
    "body_timeout": "body_timeout",
    "body_too_large": "body_too_large",
}


def status_class(code: int) -> str:
    """'2xx', '4xx', ... of an HTTP status; 'none' for 0 (no answer was sent)."""
    return f"{code // 100}xx" if code > 0 else "none"


@dataclass
class GatewayStats:
    """The gateway's state and counts (see the module doc)."""

    #: finished requests, by (endpoint, deployment, status class): endpoint "unknown" for a request
    #: that never matched one (bad input, 404), deployment "none" for one that never reached one
    requests: dict[tuple[str, ...], int] = field(default_factory=dict)
    #: client-observed TTFT of the requests that sent a token, s, by (endpoint, deployment)
    ttft_seconds: dict[tuple[str, ...], Distribution] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)  #: requests refused by a limit, by reason
    endpoints: int = 0  #: route tables held
    in_flight: int | None = None  #: requests being served now, streams included (None: no proxy yet)
    publisher: PublisherStats | None = None  #: the telemetry publisher's counts (None: not started)
    spool_bytes: int = 0  #: bytes in the spool files (records kept while NATS is away)

    def observe(self, record: telemetry_pb2.RequestRecord) -> None:
        """Count one finished request (called with its record, before the publisher takes it)."""
        endpoint = record.endpoint or "unknown"
        deployment = record.deployment or "none"
        key = (endpoint, deployment, status_class(record.status_code))
        self.requests[key] = self.requests.get(key, 0) + 1
        reason = REJECTION_REASONS.get(record.error_class)
        if reason is not None:
            self.rejected[reason] = self.rejected.get(reason, 0) + 1
        if record.ttft_ms > 0:
            scope = (endpoint, deployment)
            ttft = self.ttft_seconds.get(scope)
            if ttft is None:
                ttft = self.ttft_seconds[scope] = Distribution(TTFT_BUCKETS)
            ttft.observe(record.ttft_ms / 1e3)

    def details(self) -> dict[str, Any]:
        """The gateway's state as `evertune status` shows it."""
        figures: dict[str, Any] = {"endpoints": self.endpoints}
        if self.in_flight is not None:
            figures["in_flight"] = self.in_flight
        if self.publisher is not None:
            figures |= {
                "published_records": self.publisher.published_records,
                "spooled_records": self.publisher.spooled_records,
                "drained_records": self.publisher.drained_records,
                "dropped_records": self.publisher.dropped_records,
                "queue_depth": self.publisher.queue_depth,
            }
        return figures
