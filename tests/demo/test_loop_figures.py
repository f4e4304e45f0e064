"""`evertune bench loop`'s pure parts: when the loop has settled, and the figures."""

from __future__ import annotations

import pytest

from evertune.benchmarks.loop import loop_figures, settled_at
from evertune.demo.driver import DemoRun, RequestPoint
from evertune.demo.panel import DemoEvent
from evertune.demo.shift import BASELINE, SHIFTED


def _e(kind: str, t: float, **payload: object) -> DemoEvent:
    return DemoEvent(t_s=t, kind=kind, endpoint="e", line=kind, payload=dict(payload))


def test_the_loop_settles_when_searches_and_rollouts_after_the_drift_have_ended() -> None:
    events = [_e("search.started", 5.0, search_id="early"), _e("drift.detected", 32.0)]
    assert settled_at(events, shift_s=30.0) is None  # a search still runs
    events += [_e("search.completed", 40.0, search_id="early"), _e("search.started", 41.0, search_id="s1")]
    assert settled_at(events, shift_s=30.0) is None
    events += [_e("search.completed", 60.0, search_id="s1"), _e("deploy.started", 61.0, deployment_id="d2")]
    assert settled_at(events, shift_s=30.0) is None  # rollout in progress
    events += [_e("deploy.promoted", 90.0, deployment_id="d2")]
    assert settled_at(events, shift_s=30.0) == 90.0
    # the search that ran at the drift completing does not settle it: the drift's own search is
    # queued behind it and starts a moment later (a bench loop on vLLM measured in that gap)
    only = [
        _e("search.started", 5.0, search_id="a"),
        _e("drift.detected", 32.0),
        _e("search.completed", 50.0, search_id="a"),
    ]
    assert settled_at(only, shift_s=30.0) is None
    only += [_e("search.started", 50.1, search_id="b"), _e("search.completed", 70.0, search_id="b")]
    assert settled_at(only, shift_s=30.0) == 70.0
    # a drift before the shift does not count
    assert settled_at([_e("drift.detected", 10.0)], shift_s=30.0) is None


def _points(phase: str, start: float, ttft: float, n: int) -> list[RequestPoint]:
    return [
        RequestPoint(sent_t_s=start + i, phase=phase, ttft_ms=ttft, ok=True, sent=True, error_class="")
        for i in range(n)
    ]


def test_the_figures_compare_the_default_with_the_settled_window() -> None:
    default = DemoRun(
        engine="sim", endpoint="loop-default", started_at=0, ttft_target_ms=100, attainment_target=0.9
    )
    default.points = _points(BASELINE, 0.0, 200.0, 30)
    default.sent_count, default.telemetry_rows = 30, 30
    loop = DemoRun(
        engine="sim", endpoint="voice-demo", started_at=0, ttft_target_ms=100, attainment_target=0.9
    )
    loop.traffic_start_s = 0.0
    loop.points = (
        _points(BASELINE, 0.0, 20.0, 30)
        + _points(SHIFTED, 30.0, 200.0, 60)
        + _points(SHIFTED, 90.0, 80.0, 30)
    )
    loop.sent_count, loop.telemetry_rows = 120, 119
    loop.events = [
        _e("drift.detected", 35.0),
        _e("search.started", 36.0, search_id="s", simulated=False),
        _e("trial.completed", 50.0, simulated=False),
        _e("trial.completed", 60.0, simulated=True),
        _e("search.completed", 70.0, search_id="s", outcome="SEARCH_OUTCOME_WINNER"),
        _e("deploy.started", 71.0, deployment_id="d2"),
        _e("deploy.promoted", 85.0, deployment_id="d2"),
    ]
    got = loop_figures(default, loop, shift_s=30.0, window=(90.0, 120.0), settled=True)
    assert got["p50_ttft_reduction"] == pytest.approx(0.6)
    assert got["p99_ttft_ratio"] == pytest.approx(0.4)
    assert got["default_attainment"] == 0.0 and got["loop_attainment"] == 1.0
    assert got["goodput_ratio"] is None  # the default met the target for no request: no ratio
    assert got["drift_to_promotion_s"] == pytest.approx(50.0)
    assert got["real_trials"] == 1 and got["model_trials"] == 1
    assert got["lost_records"] == 1
    assert got["search_outcomes"] == ["winner"]
    assert got["stages_missing"] == ["profile"]
