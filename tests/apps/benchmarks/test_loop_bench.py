"""`evertune bench loop`'s pure parts: when the loop has settled, and the figures."""

from __future__ import annotations

import pytest

from evertune.apps.benchmarks.loop import Measured, loop_figures, measured_of, settled_at, settled_config
from evertune.apps.demo.driver import DemoRun, RequestPoint
from evertune.apps.demo.panel import DemoEvent
from evertune.apps.demo.traffic import BASELINE, SHIFTED
from evertune.v1 import endpoint_pb2 as D


def _e(kind: str, t: float, **payload: object) -> DemoEvent:
    return DemoEvent(t_s=t, kind=kind, endpoint="e", line=kind, payload=dict(payload))


def test_the_loop_settles_when_searches_and_rollouts_after_the_drift_have_ended() -> None:
    events = [_e("search.started", 5.0, search_id="early"), _e("drift.detected", 32.0)]
    assert settled_at(events, shift_s=30.0, min_profile_requests=30) is None  # a search still runs
    events += [_e("search.completed", 40.0, search_id="early"), _e("search.started", 41.0, search_id="s1")]
    assert settled_at(events, shift_s=30.0, min_profile_requests=30) is None
    events += [_e("search.completed", 60.0, search_id="s1"), _e("deploy.started", 61.0, deployment_id="d2")]
    assert settled_at(events, shift_s=30.0, min_profile_requests=30) is None  # rollout in progress
    events += [_e("deploy.promoted", 90.0, deployment_id="d2")]
    assert settled_at(events, shift_s=30.0, min_profile_requests=30) == 90.0
    # the first promotion settles it, though a later search runs (a drift on the new configuration)
    events += [_e("search.started", 91.0, search_id="s2")]
    assert settled_at(events, shift_s=30.0, min_profile_requests=30) == 90.0
    # the search that ran at the drift completing does not settle it: the drift's own search is
    # queued behind it and starts a moment later (a bench loop on vLLM measured in that gap)
    only = [
        _e("search.started", 5.0, search_id="a"),
        _e("drift.detected", 32.0),
        _e("search.completed", 50.0, search_id="a"),
    ]
    assert settled_at(only, shift_s=30.0, min_profile_requests=30) is None
    only += [_e("search.started", 50.1, search_id="b"), _e("search.completed", 70.0, search_id="b")]
    assert settled_at(only, shift_s=30.0, min_profile_requests=30) == 70.0
    # a searchable profile after the last search.started: a search is queued, not settled
    queued = [*only, _e("profile.ready", 65.0, request_count="119")]
    assert settled_at(queued, shift_s=30.0, min_profile_requests=30) is None
    # ... but not a profile too small to search, or an empty one
    small = [
        *only,
        _e("profile.ready", 65.0, request_count="12"),
        _e("profile.ready", 66.0, empty_reason="x"),
    ]
    assert settled_at(small, shift_s=30.0, min_profile_requests=30) == 70.0
    queued += [_e("search.started", 70.1, search_id="c")]
    assert settled_at(queued, shift_s=30.0, min_profile_requests=30) is None  # it runs
    # a drift before the shift does not count
    assert settled_at([_e("drift.detected", 10.0)], shift_s=30.0, min_profile_requests=30) is None


def _points(phase: str, start: float, ttft: float, n: int) -> list[RequestPoint]:
    return [
        RequestPoint(sent_t_s=start + i, phase=phase, ttft_ms=ttft, ok=True, sent=True, error_class="")
        for i in range(n)
    ]


def _window(arm: str, repeat: int, ttft: float) -> Measured:
    run = DemoRun(
        engine="vllm", endpoint=f"bench-{arm}", started_at=0, ttft_target_ms=100, attainment_target=0.9
    )
    run.points = _points(SHIFTED, 0.0, ttft, 20)
    run.sent_count, run.telemetry_rows = 20, 20
    return measured_of(run, arm=arm, repeat=repeat)


def test_the_figures_compare_the_three_configurations_by_their_medians() -> None:
    loop = DemoRun(
        engine="vllm", endpoint="voice-demo", started_at=0, ttft_target_ms=100, attainment_target=0.9
    )
    loop.traffic_start_s = 0.0
    loop.points = (
        _points(BASELINE, 0.0, 20.0, 30)
        + _points(SHIFTED, 30.0, 300.0, 60)
        + _points(SHIFTED, 90.0, 80.0, 30)
    )
    loop.sent_count, loop.telemetry_rows = 120, 119
    loop.events = [
        _e("sla.breach", 33.0),
        _e("drift.detected", 35.0),
        _e("search.started", 36.0, search_id="s"),
        _e("trial.completed", 50.0, simulated=False),
        _e("search.completed", 70.0, search_id="s", outcome="SEARCH_OUTCOME_WINNER"),
        _e("deploy.started", 71.0, deployment_id="d2"),
        _e("deploy.promoted", 85.0, deployment_id="d2"),
    ]
    measured = [
        _window("start", 0, 200.0),
        _window("defaults", 0, 90.0),
        _window("loop", 0, 80.0),
        _window("loop", 1, 60.0),
        _window("start", 1, 400.0),
        _window("defaults", 1, 70.0),
        _window("floor", 0, 50.0),
        _window("floor", 1, 70.0),
    ]
    got = loop_figures(loop, measured, shift_s=30.0, settled=True)
    assert got["ttft_ms"]["start"]["p50"] == pytest.approx(300.0)  # median of 200 and 400
    assert got["p50_ttft_reduction"] == pytest.approx(1 - 70 / 300, abs=1e-4)
    assert got["vs_defaults_p50_ratio"] == pytest.approx(70 / 80, abs=1e-4)
    assert got["attainment_start"] == 0.0 and got["attainment_loop"] == 1.0
    assert got["goodput_ratio"] is None  # the start met the target for no request: no ratio
    assert got["breach_to_promotion_s"] == pytest.approx(52.0)
    assert got["drift_to_promotion_s"] == pytest.approx(50.0)
    assert got["swap_ttft_p99_ratio"] == pytest.approx(300 / 300)  # sent 71..84: all at 300 ms
    assert got["swap_attainment"] == 0.0 and got["swap_slo_met"] is False  # 300 ms > the 100 ms target
    assert got["floor_ratio"] == pytest.approx(70 / 60, abs=1e-3)  # loop 70 over the floor's median 60
    assert got["real_trials"] == 1 and got["failed_requests"] == 0
    assert got["lost_records"] == 1
    assert got["search_outcomes"] == ["winner"]
    assert got["stages_missing"] == ["profile"]
    assert [w["arm"] for w in got["windows"]] == [
        "start", "defaults", "loop", "loop", "start", "defaults", "floor", "floor",
    ]  # fmt: skip


def test_the_settled_configuration_is_the_last_promotion_after_the_shift() -> None:
    start = D.EngineConfig(engine="vllm", enable_prefix_caching=False)
    loop = DemoRun(
        engine="vllm", endpoint="voice-demo", started_at=0, ttft_target_ms=100, attainment_target=0.9
    )
    loop.traffic_start_s = 0.0
    assert settled_config(loop, shift_s=30.0, start=start) == start
    loop.events = [
        _e(
            "deploy.promoted",
            40.0,
            deployment_id="d2",
            engine_config={"engine": "vllm", "model": "/m", "enable_prefix_caching": True},
        ),
    ]
    got = settled_config(loop, shift_s=30.0, start=start)
    assert got.enable_prefix_caching and got.model == ""
