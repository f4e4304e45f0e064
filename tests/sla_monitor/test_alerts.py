"""The alert state machine: one breach per incident, resolve after a hold, a new incident re-fires."""

from __future__ import annotations

from evertune.sla_monitor.alerts import AlertKey, AlertStateMachine, Breach, Resolved, breach_id
from evertune.sla_monitor.burn_rate import BurnRateRule, RuleEvaluation, WindowBurn

RULE = BurnRateRule(name="page", long_window_s=60, short_window_s=5, burn_rate=6.0)
KEY = AlertKey(endpoint="voice-eu", deployment="", rule="page")


def _ev(now: float, firing: bool) -> RuleEvaluation:
    burn = WindowBurn(window_s=60, requests=100, good=0 if firing else 100, burn_rate=10.0 if firing else 0.0)
    return RuleEvaluation(rule=RULE, now=now, long=burn, short=burn, firing=firing)


def test_one_breach_per_incident_and_resolve_after_hold_with_same_id() -> None:
    machine = AlertStateMachine(resolve_hold_s=10)
    assert machine.step(KEY, _ev(100, firing=False)) is None
    first = machine.step(KEY, _ev(101, firing=True))
    assert isinstance(first, Breach)
    assert first.incident.breach_id == breach_id(KEY, 101) and first.incident.since == 96
    decisions = [machine.step(KEY, _ev(t, firing=True)) for t in range(102, 130)]
    assert decisions == [None] * len(decisions)  # still firing: nothing new
    assert machine.step(KEY, _ev(130, firing=False)) is None  # clear streak starts
    assert machine.step(KEY, _ev(135, firing=True)) is None  # flaps back: streak forgotten
    assert machine.step(KEY, _ev(136, firing=False)) is None
    assert machine.step(KEY, _ev(145, firing=False)) is None  # 9 s clear < 10 s hold
    resolved = machine.step(KEY, _ev(146, firing=False))
    assert isinstance(resolved, Resolved)
    assert resolved.incident == first.incident and resolved.resolved_at == 146
    assert machine.open_incidents() == {}
    assert machine.step(KEY, _ev(147, firing=False)) is None  # never resolved twice


def test_refire_after_resolve_is_a_new_incident_and_keys_are_independent() -> None:
    machine = AlertStateMachine(resolve_hold_s=0)
    first = machine.step(KEY, _ev(10, firing=True))
    assert isinstance(machine.step(KEY, _ev(11, firing=False)), Resolved)
    second = machine.step(KEY, _ev(20, firing=True))
    assert isinstance(first, Breach) and isinstance(second, Breach)
    assert first.incident.breach_id != second.incident.breach_id
    other = AlertKey(endpoint="voice-eu", deployment="dep-1", rule="page")
    third = machine.step(other, _ev(20, firing=True))
    assert isinstance(third, Breach) and third.incident.breach_id != second.incident.breach_id
    assert set(machine.open_incidents()) == {KEY, other}
    # the id is stable: same key and opening time give the same id
    assert breach_id(KEY, 20) == second.incident.breach_id
