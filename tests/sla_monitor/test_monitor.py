"""The pure core end to end: observations in, breach/resolved decisions out, scoped per deployment."""

from __future__ import annotations

from evertune.sla_monitor.alerts import Breach, Resolved
from evertune.sla_monitor.burn_rate import DEFAULT_RULES
from evertune.sla_monitor.monitor import MonitorConfig, SlaMonitor
from evertune.sla_monitor.window import Observation, Targets

TARGETS = Targets(ttft_ms=300.0, itl_ms=50.0, attainment=0.9)
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
        )
    )
    _traffic(monitor, start=T0, seconds=120, ttft_ms=100.0)
    assert monitor.evaluate(T0 + 120) == []
    _traffic(monitor, start=T0 + 120, seconds=300, ttft_ms=900.0)  # 5 min of all-bad traffic
    decisions = monitor.evaluate(T0 + 420)  # 6 h-scaled window: 60 s good + 300 s bad -> 8.3x
    # page-6h (6x) and ticket-3d (1x) fire; page-1h (14.4x) cannot with a 0.9 target (max 10x)
    assert sorted(d.key.rule for d in decisions if isinstance(d, Breach)) == ["page-6h", "ticket-3d"]
    assert all(d.key.deployment == "" for d in decisions)  # one deployment: endpoint-level only
    assert monitor.evaluate(T0 + 421) == []
    breach = next(d for d in decisions if d.key.rule == "page-6h")
    stats = monitor.latency("ep", "", now=T0 + 420, window_s=60)
    assert stats is not None and stats.ttft_p99_ms is not None and stats.ttft_p99_ms > 850

    _traffic(monitor, start=T0 + 420, seconds=40, ttft_ms=100.0)  # recovery
    resolved = [d for t in range(421, 461) for d in monitor.evaluate(T0 + t) if isinstance(d, Resolved)]
    assert [d.incident.breach_id for d in resolved if d.key.rule == "page-6h"] == [breach.incident.breach_id]


def test_deployments_are_alerted_separately_only_beside_another() -> None:
    rule = DEFAULT_RULES[1].scaled(1 / 600)  # 36 s / 3 s, 6x
    monitor = SlaMonitor(MonitorConfig(rules=(rule,), slot_s=1, sketch_history_s=60, resolve_hold_s=1))
    _traffic(monitor, start=T0, seconds=30, ttft_ms=100.0, deployment="stable")
    _traffic(monitor, start=T0, seconds=30, ttft_ms=900.0, deployment="canary")
    decisions = monitor.evaluate(T0 + 30)
    # the endpoint as a whole is at 50% bad (5x < 6x); the canary alone burns 10x
    assert [(d.key.deployment, type(d).__name__) for d in decisions] == [("canary", "Breach")]
    assert monitor.scopes() == [("ep", ""), ("ep", "canary"), ("ep", "stable")]
    assert monitor.counters.records == 600 and monitor.counters.breaches == 1
