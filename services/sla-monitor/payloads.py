"""What the sla-monitor sends and reads, pure (no I/O): alert bodies, and the wire conversions.

Wire conversions (one place per type): a telemetry `RequestRecord` becomes an `Observation`
(`observation`) and a `DriftSample` (`drift_sample`); a `profile.ready` a drift reference
(`profile_from_ready`); a decision the `SlaBreach` / `SlaResolved` of its event
(`incident_payload`, id `incident_event_id`); a drift report its `DriftDetected`
(`drift_payload`, id `drift_event_id`, one line `drift_summary`, receivers' body
`drift_alert_body`).

Alert integrations: receiver configs, payload builders and the retry policy.

A `Breach` / `Resolved` decision becomes an `AlertFacts` (what every integration says about it);
each receiver kind turns the facts into its own JSON body:

- `alertmanager`: Alertmanager's webhook body, version "4" (one alert per message);
- `pagerduty`: PagerDuty Events API v2, trigger / resolve with `dedup_key` = the breach id;
- `webhook`: the decision as plain JSON.

`RetryPolicy` says what to do with an HTTP answer (done, retry, drop) and how long to wait before
the next try (`evertune.infra.retry.ExponentialBackoff`: capped, jittered; the draw is an argument).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any, Literal

from google.protobuf.duration_pb2 import Duration
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

from evertune.domain.slo import Slo
from evertune.infra.events import EventKind
from evertune.infra.retry import ExponentialBackoff
from evertune.sla_monitor.alerts import Breach, Decision, Resolved
from evertune.sla_monitor.drift_reference import DriftReference, DriftSample
from evertune.sla_monitor.endpoint_drift import DriftReport
from evertune.sla_monitor.window import Observation, WindowStats, p99_gap
from evertune.v1 import common_pb2, events_pb2, telemetry_pb2

#: Integration kinds (EVERTUNE_SLA_MONITOR_RECEIVERS `kind`); "log" writes a structured log line.
ReceiverKind = Literal["alertmanager", "pagerduty", "webhook", "log"]
#: Event kinds of SLO incidents (every receiver kind takes them).
SLA_KINDS: tuple[str, ...] = ("sla.breach", "sla.resolved")
#: Event kinds a receiver takes when its `event_kinds` is empty (as AlertRoute.event_kinds says;
#: deploy.rolled_back is the deployer's to deliver). Alertmanager and PagerDuty take SLA kinds only:
#: a drift finding has no resolve, so it would stay open there forever.
DEFAULT_EVENT_KINDS: tuple[str, ...] = (*SLA_KINDS, "drift.detected")
#: Alert severities, PagerDuty's names, lowest first.
AlertSeverity = Literal["info", "warning", "error", "critical"]
#: Rank of each severity, for `min_severity`.
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2, "critical": 3}
#: Severity of an incident by the severity of its burn-rate rule.
RULE_SEVERITY: dict[str, AlertSeverity] = {"page": "critical", "ticket": "warning"}
#: PagerDuty's Events API v2 endpoint, used when a pagerduty receiver has no url.
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
#: `endsAt` of a firing alert in Alertmanager's webhook (Go's zero time).
ZERO_TIME = "0001-01-01T00:00:00Z"
#: `alertname` label of every SLO burn-rate alert.
ALERT_NAME = "SlaBurnRate"


@dataclass(frozen=True)
class ReceiverConfig:
    """One alert receiver (an element of EVERTUNE_SLA_MONITOR_RECEIVERS)."""

    kind: ReceiverKind  #: integration kind
    url: str = ""  #: http(s) URL POSTed to; empty = PagerDuty's for pagerduty (required otherwise)
    routing_key: str = ""  #: PagerDuty integration key (required for pagerduty)
    min_severity: AlertSeverity = "warning"  #: lowest incident severity forwarded
    name: str = ""  #: name in logs, status and Alertmanager's `receiver`; empty = "<kind>-<index>"
    event_kinds: tuple[str, ...] = ()  #: event kinds forwarded; empty = DEFAULT_EVENT_KINDS

    @property
    def target(self) -> str:
        """The URL deliveries go to."""
        return self.url or (PAGERDUTY_URL if self.kind == "pagerduty" else "")

    def accepts(self, severity: str) -> bool:
        """Whether an incident of `severity` is forwarded."""
        return SEVERITY_RANK[severity] >= SEVERITY_RANK[self.min_severity]

    def takes(self, kind: str) -> bool:
        """Whether events of `kind` (e.g. "drift.detected") are forwarded."""
        if kind not in (self.event_kinds or DEFAULT_EVENT_KINDS):
            return False
        return kind in SLA_KINDS or self.kind in ("webhook", "log")


def check_receivers(receivers: list[ReceiverConfig]) -> list[ReceiverConfig]:
    """The receivers with default names filled in; raises ValueError (one line) on a bad entry."""
    named: list[ReceiverConfig] = []
    for i, r in enumerate(receivers):
        name = r.name or f"{r.kind}-{i}"
        where = f"receiver {i} ({name})"
        if r.kind != "log" and not r.target.startswith(("http://", "https://")):
            raise ValueError(f"{where}: url must be http:// or https://, got {r.url!r}")
        if r.kind == "pagerduty" and not r.routing_key:
            raise ValueError(f"{where}: pagerduty needs routing_key")
        named.append(ReceiverConfig(r.kind, r.url, r.routing_key, r.min_severity, name, tuple(r.event_kinds)))
    names = [r.name for r in named]
    if len(set(names)) != len(names):
        raise ValueError(f"receiver names must be unique, got {names}")
    return named


@dataclass(frozen=True)
class AlertFacts:
    """What every integration says about one decision."""

    status: Literal["firing", "resolved"]  #: breach -> firing, resolved -> resolved
    breach_id: str  #: incident id, shared by the breach and its resolve (dedup key)
    endpoint: str  #: endpoint name
    deployment: str  #: deployment id; empty for the endpoint as a whole
    rule: str  #: burn-rate rule name
    severity: AlertSeverity  #: the incident's severity (its rule's), also on the resolve
    since: float  #: when the burning began, seconds since the epoch
    at: float  #: evaluation time of the decision, seconds since the epoch
    summary: str  #: one line for a person
    details: dict[str, Any] = field(default_factory=dict)  #: figures of the evaluation

    @property
    def description(self) -> str:
        """A longer line: the figures behind the summary."""
        d = self.details
        return (
            f"burn rate {d['burn_rate']:.2f}x over {d['long_window_s']:g} s and {d['short_burn_rate']:.2f}x "
            f"over {d['short_window_s']:g} s (threshold {d['burn_rate_threshold']:g}x); "
            f"{d['requests']} requests, attainment {d['attainment']:.3f}"
        )


def alert_facts(decision: Decision) -> AlertFacts:
    """The facts of a Breach or Resolved decision."""
    key, incident, ev = decision.key, decision.incident, decision.evaluation
    rule = ev.rule
    firing = isinstance(decision, Breach)
    scope = f"{key.endpoint}/{key.deployment}" if key.deployment else key.endpoint
    long = ev.long
    details: dict[str, Any] = {
        "breach_id": incident.breach_id,
        "rule": rule.name,
        "burn_rate": long.burn_rate,
        "short_burn_rate": ev.short.burn_rate,
        "burn_rate_threshold": rule.burn_rate,
        "long_window_s": rule.long_window_s,
        "short_window_s": rule.short_window_s,
        "requests": long.requests,
        "attainment": long.attainment if long.attainment is not None else 1.0,
        "since": _iso(incident.since),
    }
    if firing:
        summary = f"SLO burn on {scope}: {long.burn_rate:.1f}x > {rule.burn_rate:g}x ({rule.name})"
        at = ev.now
    else:
        assert not isinstance(decision, Breach)
        at = decision.resolved_at
        details["duration_s"] = at - incident.since
        summary = f"SLO burn resolved on {scope} ({rule.name})"
    return AlertFacts(
        status="firing" if firing else "resolved",
        breach_id=incident.breach_id,
        endpoint=key.endpoint,
        deployment=key.deployment,
        rule=rule.name,
        severity=RULE_SEVERITY[rule.severity],
        since=incident.since,
        at=at,
        summary=summary,
        details=details,
    )


def _iso(seconds: float) -> str:
    """RFC 3339 UTC time with milliseconds, e.g. 2026-01-02T03:04:05.678Z."""
    t = dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def alertmanager_payload(facts: AlertFacts, *, receiver: str, external_url: str = "") -> dict[str, Any]:
    """Alertmanager's webhook body (version "4") holding the one alert of `facts`."""
    labels = {
        "alertname": ALERT_NAME,
        "endpoint": facts.endpoint,
        "deployment": facts.deployment,
        "severity": facts.severity,
        "rule": facts.rule,
    }
    annotations = {"summary": facts.summary, "description": facts.description}
    group_labels = {"alertname": ALERT_NAME, "endpoint": facts.endpoint}
    group_key = "{}:{" + ", ".join(f'{k}="{v}"' for k, v in group_labels.items()) + "}"
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": facts.status,
        "receiver": receiver,
        "groupLabels": group_labels,
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": external_url,
        "alerts": [
            {
                "status": facts.status,
                "labels": labels,
                "annotations": annotations,
                "startsAt": _iso(facts.since),
                "endsAt": _iso(facts.at) if facts.status == "resolved" else ZERO_TIME,
                "generatorURL": "",
                "fingerprint": facts.breach_id[:16],
            }
        ],
    }


def pagerduty_payload(facts: AlertFacts, *, routing_key: str) -> dict[str, Any]:
    """PagerDuty Events API v2: a trigger for a breach, a resolve (same dedup_key) for a resolve."""
    if facts.status == "resolved":
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": facts.breach_id}
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": facts.breach_id,
        "payload": {
            "summary": facts.summary[:1024],
            "source": facts.endpoint + (f"/{facts.deployment}" if facts.deployment else ""),
            "severity": facts.severity,
            "timestamp": _iso(facts.at),
            "component": facts.deployment or facts.endpoint,
            "group": facts.endpoint,
            "class": facts.rule,
            "custom_details": facts.details,
        },
    }


def webhook_payload(facts: AlertFacts) -> dict[str, Any]:
    """The decision as plain JSON."""
    return {
        "kind": "sla.breach" if facts.status == "firing" else "sla.resolved",
        "status": facts.status,
        "breach_id": facts.breach_id,
        "endpoint": facts.endpoint,
        "deployment": facts.deployment,
        "rule": facts.rule,
        "severity": facts.severity,
        "since": _iso(facts.since),
        "at": _iso(facts.at),
        "summary": facts.summary,
        "details": facts.details,
    }


def payload_for(receiver: ReceiverConfig, facts: AlertFacts) -> dict[str, Any]:
    """The body `receiver` gets for `facts`."""
    if receiver.kind == "alertmanager":
        return alertmanager_payload(facts, receiver=receiver.name)
    if receiver.kind == "pagerduty":
        return pagerduty_payload(facts, routing_key=receiver.routing_key)
    return webhook_payload(facts)


#: What to do after one attempt: delivered, try again later, or give up on this alert.
Outcome = Literal["delivered", "retry", "drop"]


@dataclass(frozen=True)
class RetryPolicy:
    """When to retry a delivery and how long to wait (pure; the random draw is passed in)."""

    base_s: float = 0.5  #: wait before the first retry, in seconds
    cap_s: float = 60.0  #: longest wait between two tries, in seconds
    max_age_s: float = 3600.0  #: an alert not delivered this long after it was decided is dropped

    @staticmethod
    def outcome(status: int | None) -> Outcome:
        """2xx delivered; 429, 5xx and no answer (None: connection error, timeout) retry; other
        codes (400, 401, 404, ... and 1xx/3xx) drop: the same body would fail again."""
        if status is None or status == 429 or status >= 500:
            return "retry"
        return "delivered" if 200 <= status < 300 else "drop"

    @property
    def backoff(self) -> ExponentialBackoff:
        """The wait after a failed attempt: full jitter, `draw` in [0, 1) times min(cap, base *
        2^(attempt-1)), at least base/10."""
        return ExponentialBackoff(base_s=self.base_s, cap_s=self.cap_s, floor_s=self.base_s / 10)

    def expired(self, created_at: float, now: float) -> bool:
        """Whether an alert decided at `created_at` is too old to deliver at `now`."""
        return now - created_at > self.max_age_s


#: Header of the unix time (whole seconds) a signed alert was sent at.
TIMESTAMP_HEADER = "X-Evertune-Timestamp"
#: Header of a signed alert's signature: "sha256=" + hex HMAC-SHA256(secret, timestamp "." body).
SIGNATURE_HEADER = "X-Evertune-Signature"


def signature(secret: bytes, *, timestamp: int, body: bytes) -> str:
    """The `SIGNATURE_HEADER` value of `body` sent at `timestamp`. A receiver recomputes it from the
    raw body and the timestamp header, compares in constant time, and refuses old timestamps (a
    replay)."""
    digest = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


# --------------------------------------------------------------------------------------------------
# Wire conversions: telemetry records in, events out (one place per type)


#: Event severity of an incident by the severity of its burn-rate rule.
EVENT_SEVERITY: dict[str, common_pb2.Severity] = {
    "page": common_pb2.SEVERITY_CRITICAL,
    "ticket": common_pb2.SEVERITY_WARNING,
}


def observation(record: telemetry_pb2.RequestRecord) -> Observation | None:
    """A RequestRecord as the core sees it; None for a request that says nothing about latency
    (the client went away before any token, without an error)."""
    failed = bool(record.error_class) or record.status_code >= 400
    if not failed and record.ttft_ms <= 0 and record.client_disconnected:
        return None
    return Observation(
        endpoint=record.endpoint,
        deployment=record.deployment,
        time_s=record.start_time_unix_ns / 1e9 + record.e2e_ms / 1e3,
        ttft_ms=record.ttft_ms,
        itl_p99_ms=p99_gap(record.itl_ms),
        failed=failed,
    )


def drift_sample(record: telemetry_pb2.RequestRecord) -> DriftSample | None:
    """A RequestRecord as drift detection sees it; None for a request that was not served (an
    error, or no prompt length reported): drift watches the workload that was served."""
    if record.error_class or record.status_code >= 400 or record.prompt_tokens <= 0:
        return None
    return DriftSample(
        time_s=record.start_time_unix_ns / 1e9,
        prompt_tokens=record.prompt_tokens,
        output_tokens=record.completion_tokens,
        prefix_hashes=tuple(record.prefix_hashes),
        prefix_block_tokens=record.prefix_block_tokens,
        ttft_ms=record.ttft_ms,
    )


def profile_from_ready(
    ready: events_pb2.ProfileReady, *, min_requests: int, prefix_horizon_s: float
) -> DriftReference | None:
    """The drift reference a `profile.ready` carries, or None when it carries too little: fewer than
    `min_requests` requests, no summary, or neither a rate nor a prompt median.

    Its prefix reuse share is used only when it was measured with our cache horizon (within 1%, or
    the profile does not say): a share over another horizon is a different quantity."""
    summary = ready.summary
    if ready.request_count < min_requests or not ready.HasField("summary"):
        return None
    if summary.rate_rps <= 0 and summary.prompt_tokens_p50 <= 0:
        return None
    start = ready.window_start.ToNanoseconds() / 1e9
    span = max(0.0, ready.window_end.ToNanoseconds() / 1e9 - start)
    horizon = summary.prefix_horizon_s
    # 0 reuse is read as "not measured" (a profile without prefix hashes reports 0 as well)
    same_horizon = horizon <= 0 or abs(horizon - prefix_horizon_s) <= 0.01 * prefix_horizon_s
    return DriftReference.from_summary(
        requests=int(ready.request_count),
        span_s=span,
        rate_rps=summary.rate_rps,
        prompt_p50=summary.prompt_tokens_p50,
        output_p50=summary.completion_tokens_p50,
        prefix_reuse_share=summary.prefix_reuse_share
        if same_horizon and summary.prefix_reuse_share > 0
        else None,
        profile_id=ready.profile_id,
        start_s=start,
    )


def drift_event_id(report: DriftReport) -> str:
    """Stable id of the drift.detected of `report` (endpoint, check time, features)."""
    features = ",".join(sorted(f.feature for f in report.findings))
    text = f"{report.endpoint}:drift:{round(report.time_s * 1000)}:{features}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def drift_payload(report: DriftReport) -> events_pb2.DriftDetected:
    """The DriftDetected of a report: one DriftSignal per finding, saying exactly what was measured."""
    signals = []
    for f in report.findings:
        signal = events_pb2.DriftSignal(
            feature=f.feature,
            statistic=f.test,
            score=f.statistic,
            threshold=f.critical_value,
            reference_value=f.reference_value,
            current_value=f.live_value,
            measure=f.measure,
            relative_change=f.relative_change,
            min_change=f.min_change,
            current_requests=f.live_requests,
            reference_requests=f.reference_requests,
            current_window=_duration(f.live_window_s),
        )
        if f.p_value is not None:
            signal.p_value = f.p_value
        if f.p_value_threshold is not None:
            signal.p_value_threshold = f.p_value_threshold
        signals.append(signal)
    return events_pb2.DriftDetected(
        reference_profile_id=report.reference_profile_id,
        reference_window=_duration(report.reference_span_s),
        current_window=_duration(max(f.live_window_s for f in report.findings)),
        signals=signals,
    )


def drift_summary(report: DriftReport) -> str:
    """One line for a person: what moved, by how much, and the test."""
    parts = [
        f"{f.feature} {f.measure} {f.reference_value:.4g} -> {f.live_value:.4g} "
        f"({f.relative_change:+.0%}, {f.test})"
        for f in report.findings
    ]
    return f"workload drift on {report.endpoint}: " + "; ".join(parts)


def drift_alert_body(
    report: DriftReport, *, event_id: str, summary: str, payload: events_pb2.DriftDetected
) -> dict[str, Any]:
    """The JSON a webhook or log receiver gets for a drift.detected."""
    return {
        "kind": EventKind.DRIFT_DETECTED.value,
        "id": event_id,
        "endpoint": report.endpoint,
        "summary": summary,
        "reference_source": report.reference_source,
        **MessageToDict(payload),
    }


def incident_event_id(breach_id: str, kind: EventKind) -> str:
    """Stable id of an incident's sla.breach or sla.resolved (a republish is dropped by JetStream)."""
    return hashlib.sha256(f"{breach_id}:{kind.value}".encode()).hexdigest()[:32]


def incident_payload(
    decision: Decision, *, latency: WindowStats | None, targets: Slo
) -> events_pb2.SlaBreach | events_pb2.SlaResolved:
    """The SlaBreach of a `Breach`, the SlaResolved of a `Resolved`; `latency` is the scope's
    percentiles over the rule's long window, `targets` the SLO judged."""
    incident, evaluation = decision.incident, decision.evaluation
    rule, long = evaluation.rule, evaluation.long
    attainment = long.attainment if long.attainment is not None else 1.0
    ttft_p99 = _or_zero(latency.ttft_p99_ms if latency is not None else None)
    if isinstance(decision, Breach):
        return events_pb2.SlaBreach(
            breach_id=incident.breach_id,
            deployment=decision.key.deployment,
            metric=events_pb2.SLO_METRIC_ATTAINMENT,
            window=_duration(rule.long_window_s),
            short_window=_duration(rule.short_window_s),
            burn_rate=long.burn_rate,
            short_burn_rate=evaluation.short.burn_rate,
            burn_rate_threshold=rule.burn_rate,
            observed_ttft_p99_ms=ttft_p99,
            target_ttft_p99_ms=targets.ttft_ms,
            observed_itl_p99_ms=_or_zero(latency.itl_p99_ms if latency is not None else None),
            target_itl_p99_ms=targets.itl_wire_ms,
            observed_attainment=attainment,
            attainment_target=targets.share,
            request_count=long.requests,
            since=_timestamp(incident.since),
        )
    assert isinstance(decision, Resolved)
    return events_pb2.SlaResolved(
        breach_id=incident.breach_id,
        deployment=decision.key.deployment,
        metric=events_pb2.SLO_METRIC_ATTAINMENT,
        since=_timestamp(incident.since),
        duration=_duration(decision.resolved_at - incident.since),
        burn_rate=long.burn_rate,
        observed_ttft_p99_ms=ttft_p99,
        observed_attainment=attainment,
    )


def _or_zero(value: float | None) -> float:
    """A percentile as the wire carries it: 0 when there were no requests to take it over."""
    return value or 0.0


def _timestamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(round(seconds * 1e9))
    return ts


def _duration(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d
