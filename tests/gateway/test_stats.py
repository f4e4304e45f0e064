"""The gateway's stats (pure): one dataclass behind both `details()` and `/metrics`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from evertune.gateway.metrics import gateway_metrics
from evertune.gateway.publisher import PublisherStats
from evertune.gateway.stats import GatewayStats, status_class
from evertune.infra.runtime.metrics import FunctionCollector
from evertune.v1 import telemetry_pb2
from tests.metrics import Samples, samples_of, types_of, value


def _exposition(stats: GatewayStats) -> str:
    registry = CollectorRegistry()
    registry.register(FunctionCollector(lambda: gateway_metrics(stats)))
    return generate_latest(registry).decode()


def _samples(stats: GatewayStats) -> Samples:
    return samples_of(_exposition(stats))


def test_status_classes() -> None:
    assert [status_class(c) for c in (200, 404, 502, 0)] == ["2xx", "4xx", "5xx", "none"]


def test_requests_ttft_and_refusals_are_counted_once_for_both_readers() -> None:
    stats = GatewayStats()
    served = {"endpoint": "e", "deployment": "d"}
    for ttft_ms in (30.0, 120.0):
        stats.observe(
            telemetry_pb2.RequestRecord(endpoint="e", deployment="d", status_code=200, ttft_ms=ttft_ms)
        )
    stats.observe(telemetry_pb2.RequestRecord(endpoint="e", deployment="d", status_code=502))
    stats.observe(telemetry_pb2.RequestRecord(status_code=429, error_class="rate_limit_exceeded"))
    samples = _samples(stats)
    assert value(samples, "evertune_gateway_requests_total", status_class="2xx", **served) == 2
    assert value(samples, "evertune_gateway_requests_total", status_class="5xx", **served) == 1
    unmatched = {"endpoint": "unknown", "deployment": "none", "status_class": "4xx"}
    assert value(samples, "evertune_gateway_requests_total", **unmatched) == 1
    assert value(samples, "evertune_gateway_ttft_seconds_count", **served) == 2  # the 502 sent no token
    assert value(samples, "evertune_gateway_ttft_seconds_bucket", le="0.05", **served) == 1
    assert value(samples, "evertune_gateway_ttft_seconds_bucket", le="0.15", **served) == 2
    assert abs(value(samples, "evertune_gateway_ttft_seconds_sum", **served) - 0.15) < 1e-9
    assert value(samples, "evertune_gateway_rejected_requests_total", reason="rate") == 1
    assert value(samples, "evertune_gateway_rejected_requests_total", reason="concurrency") == 0  # shown at 0


def test_details_and_metrics_show_the_same_figures() -> None:
    stats = GatewayStats()
    assert stats.details() == {"endpoints": 0}  # not started: no proxy, no publisher
    samples = _samples(stats)
    assert value(samples, "evertune_gateway_in_flight_requests") == 0
    assert value(samples, "evertune_gateway_records_published_total") == 0
    stats.endpoints, stats.in_flight, stats.spool_bytes = 2, 3, 4096
    stats.publisher = PublisherStats(
        published_records=10, spooled_records=4, drained_records=3, dropped_records=1, queue_depth=5
    )
    assert stats.details() == {
        "endpoints": 2,
        "in_flight": 3,
        "published_records": 10,
        "spooled_records": 4,
        "drained_records": 3,
        "dropped_records": 1,
        "queue_depth": 5,
    }
    text = _exposition(stats)
    samples = samples_of(text)
    assert value(samples, "evertune_gateway_in_flight_requests") == 3
    assert value(samples, "evertune_gateway_records_published_total") == 10
    assert value(samples, "evertune_gateway_records_spooled_total") == 4
    assert value(samples, "evertune_gateway_records_drained_total") == 3
    assert value(samples, "evertune_gateway_records_dropped_total") == 1
    assert value(samples, "evertune_gateway_telemetry_queue_records") == 5
    assert value(samples, "evertune_gateway_spool_bytes") == 4096
    types = types_of(text)
    assert types["evertune_gateway_requests"] == types["evertune_gateway_rejected_requests"] == "counter"
    assert types["evertune_gateway_ttft_seconds"] == "histogram"
    assert types["evertune_gateway_in_flight_requests"] == types["evertune_gateway_spool_bytes"] == "gauge"
