"""What the sla-monitor watches and what it counted, as plain data: one `SlaMonitorStats` per read.

`SlaMonitorService.read_stats(now)` takes it from the live state (the monitor's windows and
incidents, the judged counters, each endpoint's drift, the outbox, the alert receivers, the
telemetry consumer). Two readers render it, neither keeps figures of its own: `details()` is the
service's state as `evertune status` and `evertune slo status` show it, and
`metrics.sla_metrics` its Prometheus families.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evertune.domain.slo import Slo
from evertune.infra.bus import ConsumerStats
from evertune.sla_monitor.alerts import AlertKey, Incident
from evertune.sla_monitor.burn_rate import BurnRateRule, RuleEvaluation
from evertune.sla_monitor.monitor import MonitorCounters
from evertune.sla_monitor.window import WindowStats

#: `deployment` label (and judged-counter key) of the endpoint as a whole.
ALL = "all"


@dataclass(frozen=True)
class SloRow:
    """One (endpoint, deployment) of `evertune slo status` and the metrics."""

    endpoint: str  #: endpoint name
    deployment: str  #: deployment id; "" for the endpoint as a whole
    stats: WindowStats | None  #: percentiles and counts over the status window
    targets: Slo  #: the SLO applied
    slo_source: str  #: "endpoints" (the deployer's bucket) or "default" (settings)
    burn: list[RuleEvaluation] = field(default_factory=list)  #: every rule evaluated now


@dataclass
class JudgedCounts:
    """Requests the monitor observed in one scope, and the good ones among them (cumulative)."""

    requests: int = 0
    good: int = 0


@dataclass(frozen=True)
class DriftStatus:
    """One endpoint's drift detection, as the status shows it."""

    state: str  #: "learning" (a reference is being learnt from traffic) or "watching"
    reference: str  #: where the reference came from: "none", "traffic" or "profile"
    reference_requests: int  #: requests in the reference (or learnt so far)
    findings: int  #: findings reported so far


@dataclass(frozen=True)
class SlaMonitorStats:
    """The sla-monitor's state and counts at one moment (see the module doc)."""

    window_s: float  #: the status window, seconds (time scale applied)
    rows: Sequence[SloRow]  #: every watched (endpoint, deployment) with its figures and burn rates
    rules: Sequence[BurnRateRule]  #: the burn-rate rules evaluated
    open_incidents: Mapping[AlertKey, Incident]  #: incidents open now
    #: requests observed and good ones, cumulative, per (endpoint, deployment or ALL)
    judged: Mapping[tuple[str, str], JudgedCounts]
    drift: Mapping[str, DriftStatus]  #: drift detection per endpoint
    drift_findings: Mapping[tuple[str, str], int]  #: drift findings per (endpoint, feature)
    drift_events: int  #: drift.detected events decided
    counters: MonitorCounters  #: records seen and dropped, breach and resolved decisions
    duplicate_batches: int  #: redelivered telemetry batches skipped
    #: the telemetry consumer's durable name and stats (None before start)
    consumer: tuple[str, ConsumerStats] | None
    events_published: int  #: events published
    events_pending: int  #: events decided, not yet published (the outbox)
    endpoints_in_registry: int  #: endpoints of the deployer's bucket known
    receivers: Mapping[str, Mapping[str, Any]]  #: per alert receiver: kind, pending and its counts
    metrics_url: str  #: where `/metrics` is served ("" when off)

    def details(self) -> dict[str, Any]:
        """The service's state as `evertune status` (and `evertune slo status`) show it."""
        endpoints: dict[str, Any] = {}
        for row in self.rows:
            if row.stats is None:
                continue
            entry = endpoints.setdefault(row.endpoint, {"deployments": {}})
            figures = self._figures(row, row.stats)
            if row.deployment:
                entry["deployments"][row.deployment] = figures
                continue
            entry.update(figures)
            entry["slo"] = {
                "ttft_p99_ms": row.targets.ttft_ms,
                "itl_p99_ms": row.targets.itl_wire_ms,
                "attainment_target": row.targets.share,
                "source": row.slo_source,
            }
            drift = self.drift.get(row.endpoint)
            if drift is not None:
                entry["drift"] = {
                    "state": drift.state,
                    "reference": drift.reference,
                    "reference_requests": drift.reference_requests,
                    "findings": drift.findings,
                }
        consumer = self.consumer[1] if self.consumer is not None else None
        return {
            "window_s": self.window_s,
            "endpoints_watched": len(endpoints),
            "endpoints": endpoints,
            "endpoints_in_registry": self.endpoints_in_registry,
            "records_seen": self.counters.records,
            "records_dropped": self.counters.dropped,
            "duplicate_batches": self.duplicate_batches,
            "batches_acked": consumer.acked if consumer else 0,
            "batches_poisoned": consumer.poisoned if consumer else 0,
            "active_incidents": [
                {
                    "endpoint": key.endpoint,
                    "deployment": key.deployment,
                    "rule": key.rule,
                    "breach_id": incident.breach_id,
                    "since": incident.since,
                }
                for key, incident in self.open_incidents.items()
            ],
            "breaches": self.counters.breaches,
            "resolved": self.counters.resolved,
            "drift_events": self.drift_events,
            "events_published": self.events_published,
            "events_pending": self.events_pending,
            "receivers": {name: dict(figures) for name, figures in self.receivers.items()},
            "metrics_url": self.metrics_url,
        }

    def _figures(self, row: SloRow, stats: WindowStats) -> dict[str, Any]:
        """A scope's figures over the status window and its burn rates now."""
        return {
            "requests": stats.requests,
            "attainment": stats.attainment,
            "ttft_p50_ms": stats.ttft_p50_ms,
            "ttft_p90_ms": stats.ttft_p90_ms,
            "ttft_p99_ms": stats.ttft_p99_ms,
            "itl_p99_ms": stats.itl_p99_ms,
            "burn_rates": {
                ev.rule.name: {
                    "long": ev.long.burn_rate,
                    "short": ev.short.burn_rate,
                    "threshold": ev.rule.burn_rate,
                    "long_window_s": ev.rule.long_window_s,
                    "short_window_s": ev.rule.short_window_s,
                    "open": AlertKey(row.endpoint, row.deployment, ev.rule.name) in self.open_incidents,
                }
                for ev in row.burn
            },
        }
