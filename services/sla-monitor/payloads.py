"""Alert integrations, pure part: receiver configs, payload builders and the retry policy (no I/O).

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

from evertune.sla_monitor.alerts import Breach, Decision

from evertune.infra.retry import ExponentialBackoff

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
