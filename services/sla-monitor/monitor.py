"""The sla-monitor's core (pure): windows per (endpoint, deployment), burn-rate rules, incidents.

`observe` feeds finished requests; `evaluate(now)` runs every rule on every scope and returns the
breach / resolved decisions to publish. Scopes are the endpoint as a whole (deployment "") and each
deployment of it. A deployment is alerted on separately only while its endpoint has more than one
deployment with traffic in the rule's long window (a canary beside a stable one); with a single
deployment the endpoint's own alert says the same thing once.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from evertune.domain.slo import Slo
from evertune.sla_monitor.alerts import AlertKey, AlertStateMachine, Breach, Decision, Incident
from evertune.sla_monitor.burn_rate import (
    BurnRateRule,
    CountRing,
    RuleEvaluation,
    evaluate_rule,
    history_needed,
)
from evertune.sla_monitor.window import LatencyWindow, Observation, WindowStats


@dataclass(frozen=True)
class MonitorConfig:
    """How the core windows and alerts (windows already multiplied by any time scale)."""

    rules: tuple[BurnRateRule, ...]  #: burn-rate rules evaluated on every scope
    slot_s: float  #: time slot of sketches and counts, in seconds
    sketch_history_s: float  #: seconds of percentile sketches kept (long windows' p99 are capped to it)
    resolve_hold_s: float  #: a condition must stay clear this long before an incident resolves, s
    min_requests: int = 1  #: requests a long window needs before its rule may fire
    deployment_alerts: bool = True  #: alert per deployment while an endpoint has several
    #: requests a deployment scope needs in BOTH windows of a rule before it may fire (at least
    #: `min_requests`): a canary's first dozen requests are no evidence of a burn
    deployment_min_requests: int = 0
    fine_slot_s: float = 1.0  #: slot of the fine count ring, for rules with short windows, seconds
    fine_history_s: float = 900.0  #: rules whose long window is at most this use the fine ring, s


@dataclass
class Scope:
    """Windows of one (endpoint, deployment)."""

    latency: LatencyWindow  #: percentile sketches over the recent history
    counts: CountRing  #: request/good counts over the longest rule window
    targets: Slo  #: the endpoint's targets as of the latest request
    fine: CountRing | None = None  #: finer counts for the fast rules' short windows (None: none)
    last_seen_s: float = -math.inf  #: end time of the latest request, seconds since the epoch


@dataclass
class MonitorCounters:
    """Figures for the service's status."""

    records: int = 0  #: requests observed
    dropped: int = 0  #: requests older than the history kept (not counted)
    breaches: int = 0  #: breach decisions made
    resolved: int = 0  #: resolved decisions made
    last_incidents: list[str] = field(default_factory=list)  #: ids of the latest breaches (up to 20)


class SlaMonitor:
    """Windows, rule evaluation and incident state for every endpoint seen."""

    def __init__(self, config: MonitorConfig) -> None:
        self.config = config
        self.history_s = max(history_needed(config.rules), config.slot_s)
        fast = [r for r in config.rules if r.long_window_s <= config.fine_history_s]
        #: seconds the fine ring keeps (0: no rule uses it)
        self.fine_history_s = max(history_needed(fast), config.fine_slot_s) if fast else 0.0
        self.alerts = AlertStateMachine(resolve_hold_s=config.resolve_hold_s)
        self.counters = MonitorCounters()
        self._scopes: dict[tuple[str, str], Scope] = {}

    def _scope(self, endpoint: str, deployment: str, targets: Slo) -> Scope:
        scope = self._scopes.get((endpoint, deployment))
        if scope is None:
            scope = self._scopes[(endpoint, deployment)] = Scope(
                latency=LatencyWindow(slot_s=self.config.slot_s, history_s=self.config.sketch_history_s),
                counts=CountRing(slot_s=self.config.slot_s, history_s=self.history_s),
                targets=targets,
                fine=(
                    CountRing(slot_s=self.config.fine_slot_s, history_s=self.fine_history_s)
                    if self.fine_history_s
                    else None
                ),
            )
        scope.targets = targets
        return scope

    def observe(self, obs: Observation, targets: Slo) -> None:
        """Count one finished request under its endpoint and (if any) its deployment."""
        self.counters.records += 1
        good = obs.is_good(targets)
        keys = [(obs.endpoint, "")] + ([(obs.endpoint, obs.deployment)] if obs.deployment else [])
        for endpoint, deployment in keys:
            scope = self._scope(endpoint, deployment, targets)
            if not scope.counts.add(obs.time_s, good=good):
                self.counters.dropped += deployment == ""  # count a dropped request once
                continue
            scope.latency.add(obs, good=good)
            if scope.fine is not None:
                scope.fine.add(obs.time_s, good=good)
            scope.last_seen_s = max(scope.last_seen_s, obs.time_s)

    def evaluate(self, now: float) -> list[Decision]:
        """Evaluate every rule on every scope at `now`; returns the decisions, breaches first."""
        deployments: dict[str, list[float]] = defaultdict(list)
        for (endpoint, deployment), scope in self._scopes.items():
            if deployment:
                deployments[endpoint].append(scope.last_seen_s)
        decisions: list[Decision] = []
        for (endpoint, deployment), scope in list(self._scopes.items()):
            for rule in self.config.rules:
                key = AlertKey(endpoint=endpoint, deployment=deployment, rule=rule.name)
                if deployment and not self.alerts.is_open(key):
                    if not self.config.deployment_alerts:
                        continue
                    recent = [t for t in deployments[endpoint] if t >= now - rule.long_window_s]
                    if len(recent) < 2:
                        continue
                evaluation = self._evaluate(scope, rule, now, deployment=deployment)
                decision = self.alerts.step(key, evaluation)
                if decision is not None:
                    decisions.append(decision)
        self._evict(now)
        for decision in decisions:
            if isinstance(decision, Breach):
                self.counters.breaches += 1
                latest = [*self.counters.last_incidents, decision.incident.breach_id]
                self.counters.last_incidents = latest[-20:]
            else:
                self.counters.resolved += 1
        decisions.sort(key=lambda d: not isinstance(d, Breach))
        return decisions

    def min_requests(self, deployment: str) -> tuple[int, int]:
        """(long, short) window request floors of a scope: the endpoint as a whole needs
        `min_requests` in the long window; a deployment (a canary beside the stable one) needs
        `max(min_requests, deployment_min_requests)` in the long AND the short window."""
        if not deployment:
            return self.config.min_requests, 1
        floor = max(self.config.min_requests, self.config.deployment_min_requests)
        return floor, floor

    def _evaluate(self, scope: Scope, rule: BurnRateRule, now: float, *, deployment: str) -> RuleEvaluation:
        ring = scope.fine if scope.fine is not None and rule.long_window_s <= self.fine_history_s else None
        min_long, min_short = self.min_requests(deployment)
        return evaluate_rule(
            ring or scope.counts,
            rule,
            now=now,
            budget=scope.targets.budget,
            min_requests=min_long,
            min_short_requests=min_short,
        )

    def burn_rates(self, endpoint: str, deployment: str, *, now: float) -> list[RuleEvaluation]:
        """Every rule evaluated on a scope at `now` (no incident state changes); [] if never seen."""
        scope = self._scopes.get((endpoint, deployment))
        if scope is None:
            return []
        return [self._evaluate(scope, rule, now, deployment=deployment) for rule in self.config.rules]

    def _evict(self, now: float) -> None:
        """Forget scopes idle for longer than the history kept, unless an incident is open on them."""
        open_scopes = {(k.endpoint, k.deployment) for k in self.alerts.open_incidents()}
        for key, scope in list(self._scopes.items()):
            if scope.last_seen_s < now - self.history_s and key not in open_scopes:
                del self._scopes[key]

    def latency(self, endpoint: str, deployment: str, *, now: float, window_s: float) -> WindowStats | None:
        """Percentiles and counts of a scope over the last `window_s` seconds (capped at the sketch
        history); None for a scope never seen."""
        scope = self._scopes.get((endpoint, deployment))
        if scope is None:
            return None
        return scope.latency.stats(now=now, window_s=min(window_s, self.config.sketch_history_s))

    def targets(self, endpoint: str) -> Slo | None:
        """The targets last applied to `endpoint`; None for an endpoint never seen."""
        scope = self._scopes.get((endpoint, ""))
        return None if scope is None else scope.targets

    def scopes(self) -> list[tuple[str, str]]:
        """Every (endpoint, deployment) watched now; deployment "" is the endpoint as a whole."""
        return sorted(self._scopes)

    def open_incidents(self) -> dict[AlertKey, Incident]:
        """Incidents open now."""
        return self.alerts.open_incidents()
