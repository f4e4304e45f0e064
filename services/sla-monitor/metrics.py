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

All of it is rendered from the service's `SlaMonitorStats` (stats.py) at scrape time, the same
figures `details()` shows.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from evertune.infra.runtime.metrics import Series, consumer_metrics, counter, gauge
from evertune.sla_monitor.stats import ALL, SlaMonitorStats

#: Labels of a watched scope.
SCOPE = ["endpoint", "deployment"]
#: Labels of an alert receiver's series.
RECEIVER = ["receiver", "kind"]


def sla_metrics(stats: SlaMonitorStats) -> Iterator[Metric]:
    """The families of the sla-monitor's stats (see the module doc)."""
    ttft: dict[str, dict[tuple[str, ...], float]] = {"p50": {}, "p90": {}, "p99": {}}
    itl: dict[tuple[str, ...], float] = {}
    requests: dict[tuple[str, ...], float] = {}
    attainment: dict[tuple[str, ...], float] = {}
    ttft_target: dict[tuple[str, ...], float] = {}
    attainment_target: dict[tuple[str, ...], float] = {}
    burn: dict[tuple[str, ...], float] = {}
    for row in stats.rows:
        scope = (row.endpoint, row.deployment or ALL)
        window = row.stats
        if window is not None:
            for q, value in (
                ("p50", window.ttft_p50_ms),
                ("p90", window.ttft_p90_ms),
                ("p99", window.ttft_p99_ms),
            ):
                if value is not None:
                    ttft[q][scope] = value / 1e3
            if window.itl_p99_ms is not None:
                itl[scope] = window.itl_p99_ms / 1e3
            requests[scope] = window.requests
            if window.attainment is not None:
                attainment[scope] = window.attainment
        if not row.deployment:
            ttft_target[(row.endpoint,)] = row.targets.ttft_ms / 1e3
            attainment_target[(row.endpoint,)] = row.targets.share
        for ev in row.burn:
            burn[(*scope, ev.rule.name, "long")] = ev.long.burn_rate
            burn[(*scope, ev.rule.name, "short")] = ev.short.burn_rate
    for q, series in ttft.items():
        yield gauge(
            f"evertune_sla_ttft_{q}_seconds", f"Client TTFT {q} over the status window", series, SCOPE
        )
    yield gauge(
        "evertune_sla_itl_p99_seconds", "p99 of per-request p99 inter-token gaps (status window)", itl, SCOPE
    )
    yield gauge("evertune_sla_window_requests", "Requests in the status window", requests, SCOPE)
    yield gauge(
        "evertune_sla_attainment_ratio", "Share of good requests in the status window", attainment, SCOPE
    )
    yield gauge(
        "evertune_sla_ttft_target_seconds", "TTFT target of the endpoint's SLO", ttft_target, ["endpoint"]
    )
    yield gauge(
        "evertune_sla_attainment_target_ratio",
        "Attainment target of the endpoint's SLO",
        attainment_target,
        ["endpoint"],
    )
    yield gauge("evertune_sla_burn_rate", "Error-budget burn rate now", burn, [*SCOPE, "rule", "window"])
    yield gauge(
        "evertune_sla_burn_rate_threshold",
        "Rule threshold",
        {(rule.name, rule.severity): rule.burn_rate for rule in stats.rules},
        ["rule", "severity"],
    )
    yield gauge(
        "evertune_sla_open_incidents",
        "Open SLO incidents",
        {(key.endpoint, key.deployment or ALL, key.rule): 1 for key in stats.open_incidents},
        [*SCOPE, "rule"],
    )
    yield counter("evertune_sla_events_published_total", "Events published", stats.events_published)
    yield counter(
        "evertune_sla_requests_total",
        "Requests observed",
        {scope: counts.requests for scope, counts in stats.judged.items()},
        SCOPE,
    )
    yield counter(
        "evertune_sla_good_requests_total",
        "Good requests observed: not failed, TTFT and ITL within the endpoint's targets",
        {scope: counts.good for scope, counts in stats.judged.items()},
        SCOPE,
    )
    yield from consumer_metrics("evertune_sla", dict([stats.consumer]) if stats.consumer else {})
    counters = stats.counters
    yield counter("evertune_sla_breaches_total", "sla.breach decisions made", counters.breaches)
    yield counter("evertune_sla_resolved_total", "sla.resolved decisions made", counters.resolved)
    yield counter("evertune_sla_records_total", "Telemetry records observed", counters.records)
    yield gauge("evertune_sla_events_pending", "Events waiting to be published", stats.events_pending)
    yield counter(
        "evertune_sla_drift_findings_total",
        "Drift findings reported",
        {key: count for key, count in stats.drift_findings.items()},
        ["endpoint", "feature"],
    )
    yield counter(
        "evertune_sla_alert_deliveries_total",
        "Alerts delivered (2xx)",
        _receivers(stats, "delivered"),
        RECEIVER,
    )
    yield counter(
        "evertune_sla_alert_delivery_failures_total",
        "Failed delivery attempts (retried)",
        _receivers(stats, "retried"),
        RECEIVER,
    )
    yield counter(
        "evertune_sla_alerts_dropped_total", "Alerts given up on", _receivers(stats, "dropped"), RECEIVER
    )
    yield gauge(
        "evertune_sla_alerts_pending", "Alerts waiting for delivery", _receivers(stats, "pending"), RECEIVER
    )


def _receivers(stats: SlaMonitorStats, figure: str) -> Series:
    """One figure of every alert receiver, by (receiver, kind); 0 where it has not counted it."""
    return {
        (name, str(figures["kind"])): float(figures.get(figure, 0))
        for name, figures in stats.receivers.items()
    }
