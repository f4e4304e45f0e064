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

All of it is rendered from the gateway's `GatewayStats` (stats.py) at scrape time.
`endpoint` is "unknown" for a request that never matched one (bad input, 404), `deployment` "none"
for one that never reached a deployment; `status_class` is "2xx", "4xx", "5xx", ...
`reason` of a refusal (`REJECTION_REASONS`, from the record's error class): "rate" (tenant over its
request rate), "concurrency" (endpoint at its cap of requests in flight), "body_timeout",
"body_too_large". A connection closed for slow headers never became a request: it is not counted.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from evertune.gateway.publisher import PublisherStats
from evertune.gateway.stats import REJECTION_REASONS, GatewayStats
from evertune.infra.runtime.metrics import by_label, counter, gauge, histogram


def gateway_metrics(stats: GatewayStats) -> Iterator[Metric]:
    """The families of a gateway's stats (see the module doc)."""
    yield counter(
        "evertune_gateway_requests_total",
        "Finished requests",
        stats.requests,
        ["endpoint", "deployment", "status_class"],
    )
    yield histogram(
        "evertune_gateway_ttft_seconds",
        "Client-observed time to first token",
        stats.ttft_seconds,
        ["endpoint", "deployment"],
    )
    yield gauge(
        "evertune_gateway_in_flight_requests",
        "Requests being served now (streams included)",
        stats.in_flight or 0,
    )
    yield counter(
        "evertune_gateway_rejected_requests_total",
        "Requests refused by a limit (rate, concurrency, body timeout or size)",
        by_label(stats.rejected, REJECTION_REASONS.values(), 0),
        ["reason"],
    )
    publisher = stats.publisher or PublisherStats()
    yield counter(
        "evertune_gateway_records_published_total",
        "Telemetry records acked by JetStream",
        publisher.published_records,
    )
    yield counter(
        "evertune_gateway_records_spooled_total",
        "Telemetry records written to the spool",
        publisher.spooled_records,
    )
    yield counter(
        "evertune_gateway_records_drained_total", "Spooled records published later", publisher.drained_records
    )
    yield counter(
        "evertune_gateway_records_dropped_total",
        "Telemetry records given up (spool over its cap, a record larger than a message)",
        publisher.dropped_records,
    )
    yield gauge(
        "evertune_gateway_telemetry_queue_records", "Records waiting for the publisher", publisher.queue_depth
    )
    yield gauge("evertune_gateway_spool_bytes", "Bytes in the spool files (NATS away)", stats.spool_bytes)
