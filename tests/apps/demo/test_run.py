"""Which missing stages make `evertune up --demo` exit 1."""

from __future__ import annotations

from evertune.apps.demo.choices import DemoOptions
from evertune.apps.demo.driver import DemoRun
from evertune.apps.demo.panel import DemoEvent
from evertune.apps.demo.run import missing_stages


def _run(kinds: list[str]) -> DemoRun:
    run = DemoRun(engine="sim", endpoint="e", started_at=0.0, ttft_target_ms=50.0, attainment_target=0.9)
    run.traffic_start_s = 0.0
    run.events = [
        DemoEvent(
            t_s=1.0 + i, kind=k, endpoint="e", line=k, payload={"deployment_id": "d2", "search_id": "s"}
        )
        for i, k in enumerate(kinds)
    ]
    return run


def test_every_stage_is_expected_and_drift_only_with_a_shift() -> None:
    everything = _run(
        [
            "profile.ready",
            "drift.detected",
            "search.completed",
            "trial.completed",
            "deploy.started",
            "deploy.promoted",
        ]
    )
    assert missing_stages(everything, DemoOptions(engine="sim")) == []
    no_drift = _run(
        ["profile.ready", "search.completed", "trial.completed", "deploy.started", "deploy.promoted"]
    )
    assert missing_stages(no_drift, DemoOptions(engine="sim", drift=False)) == []
    assert missing_stages(no_drift, DemoOptions(engine="sim")) == ["drift"]
    assert missing_stages(_run(["profile.ready"]), DemoOptions(engine="sim", drift=False)) == [
        "search",
        "verify (trials)",
        "deploy (canary)",
        "promotion or rollback",
    ]
