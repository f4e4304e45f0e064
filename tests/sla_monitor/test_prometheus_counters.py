"""The sla-monitor's cumulative counters of requests and good requests (what Prometheus computes
burn rates from, infra/prometheus/rules/evertune-slo.yml) and the severity of its rules."""

from __future__ import annotations

import time

from prometheus_client import generate_latest

from evertune.infra.settings import load_settings
from evertune.sla_monitor.service import SlaMonitorService
from evertune.sla_monitor.settings import SlaMonitorSettings
from evertune.sla_monitor.window import Observation


def _series(service: SlaMonitorService) -> str:
    return generate_latest(service.metrics_registry).decode()


def test_requests_are_counted_good_as_the_monitor_judges_them_and_forgotten_with_their_scope() -> None:
    settings = load_settings(
        SlaMonitorSettings, ttft_p99_ms=200.0, itl_p99_ms=50.0, attainment_target=0.9, drift=False
    )
    service = SlaMonitorService(settings)
    targets = service.slo_for("ep")
    now = time.time()
    observed = [
        Observation("ep", "d1", now, 100.0, 20.0, False),  # good
        Observation("ep", "d1", now, 300.0, 20.0, False),  # TTFT over its target
        Observation("ep", "d2", now, 100.0, 80.0, False),  # p99 inter-token gap over its target
        Observation("ep", "d2", now, 100.0, 20.0, True),  # failed
        Observation("ep", "", now, 150.0, 10.0, False),  # good, no deployment
        Observation("other", "d9", now, 50.0, 1.0, False),  # good
    ]
    for obs in observed:
        service.monitor.observe(obs, targets)
        service.count_judged(obs, targets)
    text = _series(service)
    expected = {
        ("ep", "all"): (5, 2),
        ("ep", "d1"): (2, 1),
        ("ep", "d2"): (2, 0),
        ("other", "all"): (1, 1),
        ("other", "d9"): (1, 1),
    }
    for (endpoint, deployment), (requests, good) in expected.items():
        labels = f'deployment="{deployment}",endpoint="{endpoint}"'
        assert f"evertune_sla_requests_total{{{labels}}} {requests}.0" in text
        assert f"evertune_sla_good_requests_total{{{labels}}} {good}.0" in text
    assert text.count("evertune_sla_requests_total{") == len(expected)
    # the counts agree with the monitor's own windows: attainment over the status window
    assert 'evertune_sla_window_requests{deployment="all",endpoint="ep"} 5.0' in text
    assert 'evertune_sla_attainment_ratio{deployment="all",endpoint="ep"} 0.4' in text
    # every rule's threshold carries its severity
    assert 'evertune_sla_burn_rate_threshold{rule="page-1h",severity="page"} 14.4' in text
    assert 'evertune_sla_burn_rate_threshold{rule="ticket-3d",severity="ticket"} 1.0' in text

    # once the monitor forgets an idle deployment, so do the counters; an endpoint's stay
    service.evaluate_and_queue(now + service.monitor.history_s + 60)
    assert service.monitor.scopes() == []
    assert set(service.judged) == {("ep", "all"), ("other", "all")}
    assert 'evertune_sla_requests_total{deployment="all",endpoint="ep"} 5.0' in _series(service)
