"""The alert state machine (pure): one breach per incident, resolved after the condition stays clear.

Per alert key (endpoint, deployment, rule):

    idle --firing--> open (emit Breach with a new breach id)
    open --firing--> open (nothing; a clear streak in progress is forgotten)
    open --clear for < hold--> open (nothing)
    open --clear for >= hold--> idle (emit Resolved with the same breach id)

The breach id is derived from the key and the time the incident opened, so it is stable: the shell
can republish a decision (same ids) and JetStream drops the repeat. A condition that fires again
after a resolve opens a new incident with a new id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from evertune.sla_monitor.burn_rate import RuleEvaluation


@dataclass(frozen=True)
class AlertKey:
    """What one alert is about."""

    endpoint: str  #: endpoint name
    deployment: str  #: deployment id; empty for the endpoint as a whole
    rule: str  #: burn-rate rule name


def breach_id(key: AlertKey, opened_at: float) -> str:
    """Stable id of the incident of `key` opened at `opened_at` (32 hex characters)."""
    text = f"{key.endpoint}:{key.deployment}:{key.rule}:{round(opened_at * 1000)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Incident:
    """An open incident."""

    breach_id: str  #: id shared by its sla.breach and sla.resolved
    opened_at: float  #: evaluation time at which it fired, in seconds since the epoch
    since: float  #: when the burning began: start of the short window that first fired


@dataclass(frozen=True)
class Breach:
    """Decision: publish an sla.breach."""

    key: AlertKey  #: what it is about
    incident: Incident  #: the incident opened
    evaluation: RuleEvaluation  #: the evaluation that opened it


@dataclass(frozen=True)
class Resolved:
    """Decision: publish an sla.resolved."""

    key: AlertKey  #: what it is about
    incident: Incident  #: the incident closed
    resolved_at: float  #: evaluation time at which it closed, in seconds since the epoch
    evaluation: RuleEvaluation  #: the evaluation that closed it


Decision = Breach | Resolved


@dataclass
class _Open:
    incident: Incident  #: the open incident
    clear_since: float | None = None  #: start of the current clear streak; None while firing


class AlertStateMachine:
    """Tracks open incidents and turns rule evaluations into breach / resolved decisions."""

    def __init__(self, *, resolve_hold_s: float) -> None:
        if resolve_hold_s < 0:
            raise ValueError(f"resolve_hold_s must be >= 0, got {resolve_hold_s}")
        self.resolve_hold_s = resolve_hold_s
        self._open: dict[AlertKey, _Open] = {}

    def step(self, key: AlertKey, evaluation: RuleEvaluation) -> Decision | None:
        """Feed one evaluation of `key`; returns the decision to publish, if any."""
        now = evaluation.now
        state = self._open.get(key)
        if state is None:
            if not evaluation.firing:
                return None
            since = now - evaluation.rule.short_window_s
            incident = Incident(breach_id=breach_id(key, now), opened_at=now, since=since)
            self._open[key] = _Open(incident)
            return Breach(key=key, incident=incident, evaluation=evaluation)
        if evaluation.firing:
            state.clear_since = None
            return None
        if state.clear_since is None:
            state.clear_since = now
        if now - state.clear_since < self.resolve_hold_s:
            return None
        del self._open[key]
        return Resolved(key=key, incident=state.incident, resolved_at=now, evaluation=evaluation)

    def open_incidents(self) -> dict[AlertKey, Incident]:
        """Incidents open now."""
        return {key: state.incident for key, state in self._open.items()}

    def is_open(self, key: AlertKey) -> bool:
        """Whether `key` has an open incident."""
        return key in self._open
