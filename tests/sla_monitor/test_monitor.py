"""The pure core end to end: observations in, breach/resolved decisions out, scoped per deployment."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from evertune.domain.slo import Slo
from evertune.sla_monitor.alerts import Breach, Resolved
from evertune.sla_monitor.burn_rate import DEFAULT_RULES, FAST_RULE
from evertune.sla_monitor.monitor import MonitorConfig, SlaMonitor
from evertune.sla_monitor.window import Observation

TARGETS = Slo(ttft_ms=300.0, itl_ms=50.0, share=0.9)
T0 = 1_700_000_000.0


def _traffic(
    monitor: SlaMonitor, *, start: float, seconds: int, ttft_ms: float, deployment: str = "d1"
) -> None:
    for s in range(seconds):
        for i in range(10):
            obs = Observation(
                endpoint="ep",
                deployment=deployment,
                time_s=start + s + i / 10,
                ttft_ms=ttft_ms,
                itl_p99_ms=20.0,
                failed=False,
            )
            monitor.observe(obs, TARGETS)


def test_scaled_default_rules_breach_once_then_resolve() -> None:
    scale = 1 / 60  # 1 h -> 60 s, 6 h -> 6 min, 3 d -> 72 min
    monitor = SlaMonitor(
        MonitorConfig(
            rules=tuple(r.scaled(scale) for r in DEFAULT_RULES),
            slot_s=10 * scale,
            sketch_history_s=3600 * scale,
            resolve_hold_s=300 * scale,
            min_requests=10,
            fine_slot_s=scale,
        )
    )
    _traffic(monitor, start=T0, seconds=120, ttft_ms=100.0)
    assert monitor.evaluate(T0 + 120) == []
    _traffic(monitor, start=T0 + 120, seconds=300, ttft_ms=900.0)  # 5 min of all-bad traffic
    decisions = monitor.evaluate(T0 + 420)  # 6 h-scaled window: 60 s good + 300 s bad -> 8.3x
    # page-6h (6x) and ticket-3d (1x) fire; page-1h (14.4x) cannot with a 0.9 target (max 10x);
    # page-fast's short window, compressed to 1/12 s, never holds the 5 bad requests it needs
    fired = sorted(d.key.rule for d in decisions if isinstance(d, Breach))
    assert fired == ["page-6h", "ticket-3d"]
    assert all(d.key.deployment == "" for d in decisions)  # one deployment: endpoint-level only
    assert monitor.evaluate(T0 + 421) == []
    breach = next(d for d in decisions if d.key.rule == "page-6h")
    stats = monitor.latency("ep", "", now=T0 + 420, window_s=60)
    assert stats is not None and stats.ttft_p99_ms is not None and stats.ttft_p99_ms > 850

    _traffic(monitor, start=T0 + 420, seconds=40, ttft_ms=100.0)  # recovery
    resolved = [d for t in range(421, 461) for d in monitor.evaluate(T0 + t) if isinstance(d, Resolved)]
    assert [d.incident.breach_id for d in resolved if d.key.rule == "page-6h"] == [breach.incident.breach_id]


def test_deployments_are_alerted_separately_only_beside_another() -> None:
    rule = next(r for r in DEFAULT_RULES if r.name == "page-6h").scaled(1 / 600)  # 36 s / 3 s, 6x
    monitor = SlaMonitor(MonitorConfig(rules=(rule,), slot_s=1, sketch_history_s=60, resolve_hold_s=1))
    _traffic(monitor, start=T0, seconds=30, ttft_ms=100.0, deployment="stable")
    _traffic(monitor, start=T0, seconds=30, ttft_ms=900.0, deployment="canary")
    decisions = monitor.evaluate(T0 + 30)
    # the endpoint as a whole is at 50% bad (5x < 6x); the canary alone burns 10x
    assert [(d.key.deployment, type(d).__name__) for d in decisions] == [("canary", "Breach")]
    assert monitor.scopes() == [("ep", ""), ("ep", "canary"), ("ep", "stable")]
    assert monitor.counters.records == 600 and monitor.counters.breaches == 1


def _fast_monitor() -> SlaMonitor:
    return SlaMonitor(
        MonitorConfig(
            rules=(FAST_RULE,), slot_s=10, sketch_history_s=3600, resolve_hold_s=300, min_requests=10
        )
    )


def _poisson_requests(seed: int, *, start: float, seconds: float, rate: float) -> list[float]:
    rng = random.Random(seed)
    times, t = [], start
    while (t := t + rng.expovariate(rate)) < start + seconds:
        times.append(t)
    return times


def test_fast_rule_pages_on_a_ttft_doubling_at_5_rps_within_15_s() -> None:
    targets = Slo(ttft_ms=500.0, itl_ms=100.0, share=0.9)
    delays = []
    for seed in range(20):
        monitor, rng = _fast_monitor(), random.Random(seed)
        change, found = T0 + 120, None
        next_eval = T0 + 1
        for t in _poisson_requests(seed, start=T0, seconds=180, rate=5.0):
            while next_eval <= t and found is None:  # evaluated every second, as the service does
                if monitor.evaluate(next_eval):
                    found = next_eval
                next_eval += 1
            factor = 2.0 if t > change else 1.0
            ttft = rng.lognormvariate(math.log(300), 0.15) * factor
            monitor.observe(Observation("ep", "d1", t, ttft, 20.0, False), targets)
        assert found is not None and found > change  # nothing before the change
        delays.append(found - change)
    assert max(delays) <= 15, delays  # predicted ~7 s: 20% of 30 s bad at ~89% bad after the change


def test_fast_rule_stays_quiet_on_two_hours_burning_half_the_budget() -> None:
    """Stationary traffic at 5 rps with 5% of requests bad (half a 0.9 target's budget): the fast
    rule needs > 20% bad over 30 s (z ~ 5.5 above the mean at 150 requests) and over 5 s."""
    monitor = _fast_monitor()
    targets = Slo(ttft_ms=500.0, itl_ms=100.0, share=0.9)
    rng = random.Random(7)
    next_eval, decisions = T0 + 1, []
    for t in _poisson_requests(8, start=T0, seconds=7200, rate=5.0):
        while next_eval <= t:
            decisions += monitor.evaluate(next_eval)
            next_eval += 1
        ttft = 900.0 if rng.random() < 0.05 else 200.0
        monitor.observe(Observation("ep", "d1", t, ttft, 20.0, False), targets)
    assert next_eval > T0 + 7000 and decisions == []


def test_fast_rule_needs_several_bad_requests_in_its_short_window() -> None:
    """At a 0.999 target one slow request in 30 s burns ~7x; min_bad keeps it from paging."""
    monitor = _fast_monitor()
    strict = Slo(ttft_ms=500.0, itl_ms=100.0, share=0.999)
    for i in range(150):
        ttft = 900.0 if i in (140, 145) else 200.0
        monitor.observe(Observation("ep", "d1", T0 + i * 0.2, ttft, 20.0, False), strict)
    assert monitor.evaluate(T0 + 30) == []
    [ev] = monitor.burn_rates("ep", "", now=T0 + 30)
    assert ev.long.burn_rate > FAST_RULE.burn_rate and not ev.firing


def _canary_start(config: MonitorConfig) -> SlaMonitor:
    """Stable: an hour of healthy traffic at 1 rps. Canary: its first 12 requests, 2 of them slow
    (burn 1.67x at a 0.9 target); the endpoint as a whole stays healthy."""
    monitor = SlaMonitor(config)
    for s in range(3600):
        monitor.observe(Observation("ep", "stable", T0 + s, 200.0, 20.0, False), TARGETS)
    for i in range(12):
        ttft = 900.0 if i in (3, 9) else 200.0
        monitor.observe(Observation("ep", "canary", T0 + 3588 + i, ttft, 20.0, False), TARGETS)
    return monitor


def test_a_canary_s_first_dozen_requests_raise_no_breach() -> None:
    ticket = next(r for r in DEFAULT_RULES if r.name == "ticket-3d")
    config = MonitorConfig(
        rules=(ticket,), slot_s=10, sketch_history_s=3600, resolve_hold_s=300, min_requests=10
    )
    # without a deployment floor the 12 requests are "evidence": the bug a deployer rolled back on
    [ev] = _canary_start(config).burn_rates("ep", "canary", now=T0 + 3600)
    assert ev.long.requests == ev.short.requests == 12 and ev.long.burn_rate > 1.5 and ev.firing
    guarded = _canary_start(replace(config, deployment_min_requests=50))
    assert guarded.min_requests("canary") == (50, 50) and guarded.min_requests("") == (10, 1)
    assert guarded.evaluate(T0 + 3600) == []
    [ev] = guarded.burn_rates("ep", "canary", now=T0 + 3600)
    assert ev.long.burn_rate > ticket.burn_rate and not ev.firing


def test_a_deployment_needs_its_floor_in_the_short_window_too() -> None:
    """A canary bad for 30 s at 10 rps (300 requests in the long window), then 4 slow requests in the
    last 3 s: the short window (3 s) holds 4 < 50, so the canary is not paged on; a floor of 4 pages."""
    rule = next(r for r in DEFAULT_RULES if r.name == "page-6h").scaled(1 / 600)  # 36 s / 3 s, 6x
    config = MonitorConfig(
        rules=(rule,), slot_s=1, sketch_history_s=60, resolve_hold_s=1, deployment_min_requests=50
    )
    monitor = SlaMonitor(config)
    _traffic(monitor, start=T0, seconds=30, ttft_ms=100.0, deployment="stable")
    _traffic(monitor, start=T0, seconds=26, ttft_ms=900.0, deployment="canary")
    for i in range(4):
        monitor.observe(Observation("ep", "canary", T0 + 28 + i * 0.4, 900.0, 20.0, False), TARGETS)
    [ev] = monitor.burn_rates("ep", "canary", now=T0 + 30)
    assert ev.long.requests >= 50 and ev.short.requests == 4 and ev.short.burn_rate > rule.burn_rate
    assert monitor.evaluate(T0 + 30) == [] and not ev.firing
    loose = SlaMonitor(replace(config, deployment_min_requests=4))
    _traffic(loose, start=T0, seconds=30, ttft_ms=100.0, deployment="stable")
    _traffic(loose, start=T0, seconds=26, ttft_ms=900.0, deployment="canary")
    for i in range(4):
        loose.observe(Observation("ep", "canary", T0 + 28 + i * 0.4, 900.0, 20.0, False), TARGETS)
    assert [(d.key.deployment, type(d).__name__) for d in loose.evaluate(T0 + 30)] == [("canary", "Breach")]
