"""The gateway's Prometheus metrics (served on the proxy's own port at `/metrics`).

| metric | type | labels | what |
|---|---|---|---|
| `evertune_gateway_requests_total` | counter | endpoint, deployment, status_class | finished requests |
| `evertune_gateway_ttft_seconds` | histogram | endpoint, deployment | client-observed TTFT |
| `evertune_gateway_in_flight_requests` | gauge | | requests being served now (streams included) |
| `evertune_gateway_rejected_requests_total` | counter | reason | requests refused by a limit |
| `evertune_gateway_telemetry_queue_records` | gauge | | records waiting for the publisher |
| `evertune_gateway_spool_bytes` | gauge | | bytes in the spool files (NATS away) |
| `evertune_gateway_records_published_total` | counter | | records acked by JetStream |
| `evertune_gateway_records_spooled_total` | counter | | records written to the spool |
| `evertune_gateway_records_drained_total` | counter | | spooled records published later |
| `evertune_gateway_records_dropped_total` | counter | | records given up (spool cap, oversized) |

Requests and TTFT are counted when a request's record is handed to the publisher (every request
gets one, errors included); the publisher's figures are read from its stats at scrape time.
`endpoint` is "unknown" for a request that never matched one (bad input, 404), `deployment` "none"
for one that never reached a deployment; `status_class` is "2xx", "4xx", "5xx", ...
`reason` of a refusal (`REJECTION_REASONS`, from the record's error class): "rate" (tenant over its
request rate), "concurrency" (endpoint at its cap of requests in flight), "body_timeout",
"body_too_large". A connection closed for slow headers never became a request: it is not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from evertune.gateway.publisher import PublisherStats
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from evertune.v1 import telemetry_pb2

#: TTFT buckets, seconds: fine around a voice turn's budget (the model's share of ~800 ms).
TTFT_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0)

#: `reason` of `evertune_gateway_rejected_requests_total` by the record's error class.
REJECTION_REASONS = {
    "rate_limit_exceeded": "rate",
    "concurrency_limit": "concurrency",
    "body_timeout": "body_timeout",
    "body_too_large": "body_too_large",
}


def status_class(code: int) -> str:
    """'2xx', '4xx', ... of an HTTP status; 'none' for 0 (no answer was sent)."""
    return f"{code // 100}xx" if code > 0 else "none"


class _PublisherCollector(Collector):
    """The publisher's counters and the spool's size, read at scrape time."""

    def __init__(self, stats: Callable[[], PublisherStats | None], spool_files: Callable[[], list[Path]]):
        self._stats = stats
        self._spool_files = spool_files

    def collect(self) -> Iterator[Metric]:
        stats = self._stats() or PublisherStats()
        for name, help_text, value in (
            (
                "evertune_gateway_records_published",
                "Telemetry records acked by JetStream",
                stats.published_records,
            ),
            (
                "evertune_gateway_records_spooled",
                "Telemetry records written to the spool",
                stats.spooled_records,
            ),
            ("evertune_gateway_records_drained", "Spooled records published later", stats.drained_records),
            (
                "evertune_gateway_records_dropped",
                "Telemetry records given up (spool over its cap, a record larger than a message)",
                stats.dropped_records,
            ),
        ):
            counter = CounterMetricFamily(name, help_text)
            counter.add_metric([], value)
            yield counter
        queue = GaugeMetricFamily(
            "evertune_gateway_telemetry_queue_records", "Records waiting for the publisher"
        )
        queue.add_metric([], stats.queue_depth)
        yield queue
        size = 0
        for path in self._spool_files():
            try:
                size += path.stat().st_size
            except OSError:
                continue
        spool = GaugeMetricFamily("evertune_gateway_spool_bytes", "Bytes in the spool files (NATS away)")
        spool.add_metric([], size)
        yield spool


class GatewayMetrics:
    """The gateway's metrics in a registry of its own."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        in_flight: Callable[[], int],
        publisher_stats: Callable[[], PublisherStats | None],
        spool_files: Callable[[], list[Path]],
    ) -> None:
        self.registry = registry
        labels = ["endpoint", "deployment"]
        self.requests = Counter(
            "evertune_gateway_requests",
            "Finished requests",
            [*labels, "status_class"],
            registry=registry,
        )
        self.ttft = Histogram(
            "evertune_gateway_ttft_seconds",
            "Client-observed time to first token",
            labels,
            buckets=TTFT_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "evertune_gateway_in_flight_requests",
            "Requests being served now (streams included)",
            registry=registry,
        )
        self.in_flight.set_function(lambda: float(in_flight()))
        self.rejected = Counter(
            "evertune_gateway_rejected_requests",
            "Requests refused by a limit (rate, concurrency, body timeout or size)",
            ["reason"],
            registry=registry,
        )
        for reason in REJECTION_REASONS.values():
            self.rejected.labels(reason)  # shown at 0 before the first refusal
        registry.register(_PublisherCollector(publisher_stats, spool_files))

    def observe(self, record: telemetry_pb2.RequestRecord) -> None:
        """Count one finished request (called with its record, before the publisher takes it)."""
        endpoint = record.endpoint or "unknown"
        deployment = record.deployment or "none"
        self.requests.labels(endpoint, deployment, status_class(record.status_code)).inc()
        reason = REJECTION_REASONS.get(record.error_class)
        if reason is not None:
            self.rejected.labels(reason).inc()
        if record.ttft_ms > 0:
            self.ttft.labels(endpoint, deployment).observe(record.ttft_ms / 1e3)
