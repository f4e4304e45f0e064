"""The sla-monitor's Prometheus metrics, read from the live state at scrape time (one source of truth).

| metric | labels | what |
|---|---|---|
| `evertune_sla_ttft_p50_seconds`, `_p90_`, `_p99_` | endpoint, deployment | TTFT percentiles, status window |
| `evertune_sla_itl_p99_seconds` | endpoint, deployment | p99 of per-request p99 inter-token gaps |
| `evertune_sla_window_requests` | endpoint, deployment | requests in the status window |
| `evertune_sla_attainment_ratio` | endpoint, deployment | share of good requests in the status window |
| `evertune_sla_ttft_target_seconds` | endpoint | the SLO's TTFT target |
| `evertune_sla_attainment_target_ratio` | endpoint | the SLO's attainment target |
| `evertune_sla_burn_rate` | endpoint, deployment, rule, window (long, short) | burn rate now |
| `evertune_sla_burn_rate_threshold` | rule, severity | the rule's threshold (severity page, ticket) |
| `evertune_sla_requests_total` | endpoint, deployment | requests observed (cumulative) |
| `evertune_sla_good_requests_total` | endpoint, deployment | of those, good (`Observation.is_good`) |
| `evertune_sla_open_incidents` | endpoint, deployment, rule | 1 per open incident |
| `evertune_sla_breaches_total`, `evertune_sla_resolved_total` | | decisions made |
| `evertune_sla_drift_findings_total` | endpoint, feature | drift findings reported |
| `evertune_sla_alert_deliveries_total` | receiver, kind | alerts a receiver accepted (2xx) |
| `evertune_sla_alert_delivery_failures_total` | receiver, kind | failed attempts (retried) |
| `evertune_sla_alerts_dropped_total` | receiver, kind | alerts given up on (rejected, expired, overflow) |
| `evertune_sla_alerts_pending` | receiver, kind | alerts waiting for delivery |
| `evertune_sla_records_total` | | telemetry records observed |
| `evertune_sla_events_pending` | | events not yet published |
| `evertune_sla_events_published_total` | | events published (breach, resolved, drift) |
| `evertune_sla_messages_*` | consumer | the telemetry consumer (`consumer_metrics`) |

`deployment="all"` is the endpoint as a whole. The TTFT percentiles are the monitor's own (exact
over the status window, as `evertune slo status` shows them), so they are gauges named per
percentile: a `quantile` label is reserved for summaries, and a histogram of TTFT is the
gateway's (`evertune_gateway_ttft_seconds`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from evertune.infra.runtime.metrics import consumer_metrics

if TYPE_CHECKING:
    from evertune.sla_monitor.service import SlaMonitorService

#: `deployment` label of the endpoint as a whole.
ALL = "all"


class SlaMonitorCollector(Collector):
    """Exports a running `SlaMonitorService`'s figures."""

    def __init__(self, service: SlaMonitorService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        svc = self.service
        scope = ["endpoint", "deployment"]
        ttft = {
            q: GaugeMetricFamily(
                f"evertune_sla_ttft_{q}_seconds",
                f"Client TTFT {q} over the status window",
                labels=scope,
            )
            for q in ("p50", "p90", "p99")
        }
        itl = GaugeMetricFamily(
            "evertune_sla_itl_p99_seconds",
            "p99 of per-request p99 inter-token gaps (status window)",
            labels=scope,
        )
        requests = GaugeMetricFamily(
            "evertune_sla_window_requests", "Requests in the status window", labels=scope
        )
        attainment = GaugeMetricFamily(
            "evertune_sla_attainment_ratio", "Share of good requests in the status window", labels=scope
        )
        ttft_target = GaugeMetricFamily(
            "evertune_sla_ttft_target_seconds", "TTFT target of the endpoint's SLO", labels=["endpoint"]
        )
        att_target = GaugeMetricFamily(
            "evertune_sla_attainment_target_ratio",
            "Attainment target of the endpoint's SLO",
            labels=["endpoint"],
        )
        burn = GaugeMetricFamily(
            "evertune_sla_burn_rate", "Error-budget burn rate now", labels=[*scope, "rule", "window"]
        )
        threshold = GaugeMetricFamily(
            "evertune_sla_burn_rate_threshold", "Rule threshold", labels=["rule", "severity"]
        )
        for rule in svc.monitor.config.rules:
            threshold.add_metric([rule.name, rule.severity], rule.burn_rate)
        judged = CounterMetricFamily("evertune_sla_requests", "Requests observed", labels=scope)
        good = CounterMetricFamily(
            "evertune_sla_good_requests",
            "Good requests observed: not failed, TTFT and ITL within the endpoint's targets",
            labels=scope,
        )
        for (endpoint, deployment), counts in sorted(svc.judged.items()):
            judged.add_metric([endpoint, deployment], counts.requests)
            good.add_metric([endpoint, deployment], counts.good)
        for row in svc.slo_rows():
            labels = [row.endpoint, row.deployment or ALL]
            stats = row.stats
            if stats is not None:
                for q, value in (
                    ("p50", stats.ttft_p50_ms),
                    ("p90", stats.ttft_p90_ms),
                    ("p99", stats.ttft_p99_ms),
                ):
                    if value is not None:
                        ttft[q].add_metric(labels, value / 1e3)
                if stats.itl_p99_ms is not None:
                    itl.add_metric(labels, stats.itl_p99_ms / 1e3)
                requests.add_metric(labels, stats.requests)
                if stats.attainment is not None:
                    attainment.add_metric(labels, stats.attainment)
            if not row.deployment:
                ttft_target.add_metric([row.endpoint], row.targets.ttft_ms / 1e3)
                att_target.add_metric([row.endpoint], row.targets.share)
            for ev in row.burn:
                burn.add_metric([*labels, ev.rule.name, "long"], ev.long.burn_rate)
                burn.add_metric([*labels, ev.rule.name, "short"], ev.short.burn_rate)
        incidents = GaugeMetricFamily(
            "evertune_sla_open_incidents", "Open SLO incidents", labels=[*scope, "rule"]
        )
        for key in svc.monitor.open_incidents():
            incidents.add_metric([key.endpoint, key.deployment or ALL, key.rule], 1)
        counters = svc.monitor.counters
        breaches = CounterMetricFamily("evertune_sla_breaches", "sla.breach decisions made")
        breaches.add_metric([], counters.breaches)
        resolved = CounterMetricFamily("evertune_sla_resolved", "sla.resolved decisions made")
        resolved.add_metric([], counters.resolved)
        records = CounterMetricFamily("evertune_sla_records", "Telemetry records observed")
        records.add_metric([], counters.records)
        pending_events = GaugeMetricFamily("evertune_sla_events_pending", "Events waiting to be published")
        pending_events.add_metric([], len(svc.outbox))
        published = CounterMetricFamily("evertune_sla_events_published", "Events published")
        published.add_metric([], svc.published)
        drift = CounterMetricFamily(
            "evertune_sla_drift_findings", "Drift findings reported", labels=["endpoint", "feature"]
        )
        for (endpoint, feature), count in sorted(svc.drift_findings.items()):
            drift.add_metric([endpoint, feature], count)
        rx = ["receiver", "kind"]
        delivered = CounterMetricFamily("evertune_sla_alert_deliveries", "Alerts delivered (2xx)", labels=rx)
        failed = CounterMetricFamily(
            "evertune_sla_alert_delivery_failures", "Failed delivery attempts (retried)", labels=rx
        )
        dropped = CounterMetricFamily("evertune_sla_alerts_dropped", "Alerts given up on", labels=rx)
        pending = GaugeMetricFamily("evertune_sla_alerts_pending", "Alerts waiting for delivery", labels=rx)
        for name, figures in sorted(svc.alerts.details().items()):
            labels = [name, str(figures["kind"])]
            delivered.add_metric(labels, figures.get("delivered", 0))
            failed.add_metric(labels, figures.get("retried", 0))
            dropped.add_metric(labels, figures.get("dropped", 0))
            pending.add_metric(labels, figures.get("pending", 0))
        yield from ttft.values()
        yield from (itl, requests, attainment, ttft_target, att_target, burn, threshold, incidents)
        yield from (published, judged, good)
        consumer = svc.telemetry_consumer
        yield from consumer_metrics("evertune_sla", {consumer[0]: consumer[1]} if consumer else {})
        yield from (breaches, resolved, records, pending_events, drift, delivered, failed, dropped, pending)
