"""The report's figures and files, from a DemoRun with known contents."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import pytest

from evertune.apps.demo.driver import DemoRun, RequestPoint
from evertune.apps.demo.panel import DemoEvent
from evertune.apps.demo.report import before_after, by_phase, figures, summarize, write_report
from evertune.apps.demo.sizing import size_load
from evertune.apps.demo.traffic import BASELINE, SHIFTED, plan_traffic


def _points(phase: str, start: float, ttfts: list[float]) -> list[RequestPoint]:
    return [
        RequestPoint(sent_t_s=start + i, phase=phase, ttft_ms=t, ok=True, sent=True, error_class="")
        for i, t in enumerate(ttfts)
    ]


def _run(events: list[DemoEvent]) -> DemoRun:
    run = DemoRun(
        engine="sim", endpoint="voice-demo", started_at=0.0, ttft_target_ms=100.0, attainment_target=0.9
    )
    run.traffic = plan_traffic(duration_s=40, peak_calls_per_s=1.0, shift_at_s=20)
    run.traffic_start_s = 0.0
    run.points = _points(BASELINE, 0.0, [10.0] * 20) + _points(SHIFTED, 20.0, [50.0] * 10 + [200.0] * 10)
    run.points.append(
        RequestPoint(
            sent_t_s=math.nan, phase=SHIFTED, ttft_ms=None, ok=False, sent=False, error_class="client_lag"
        )
    )
    run.sent_count = 40
    run.telemetry_rows = 40
    run.events = events
    run.initial_deployment = "dep-first"
    return run


def test_figures_count_only_sent_requests_and_the_target() -> None:
    run = _run([])
    f = figures([p for p in run.points if p.phase == SHIFTED], label="x", target_ms=100.0)
    assert f.requests == 20 and f.completed == 20
    assert f.ttft_p50_ms == pytest.approx(125.0)
    assert f.attainment == pytest.approx(0.5)
    assert f.good_rps == pytest.approx(10 / 19)


def test_without_a_promotion_before_and_after_is_the_shift() -> None:
    before, after = before_after(_run([]))
    assert before.label == "before the shift" and before.ttft_p99_ms == pytest.approx(10.0)
    assert "first configuration still serving" in after.label


def test_after_a_promotion_the_after_set_starts_at_it() -> None:
    promoted = DemoEvent(
        t_s=30.0, kind="deploy.promoted", endpoint="voice-demo", line="", payload={"deployment_id": "dep-2"}
    )
    before, after = before_after(_run([promoted]))
    assert after.requests == 10 and after.ttft_p50_ms == pytest.approx(200.0)
    assert before.requests == 10 and before.ttft_p50_ms == pytest.approx(50.0)


def test_by_phase_cuts_the_run_at_the_shift_the_rollout_and_the_promotion() -> None:
    def event(t_s: float, kind: str) -> DemoEvent:
        payload: dict[str, object] = {"deployment_id": "dep-2"}
        return DemoEvent(t_s=t_s, kind=kind, endpoint="voice-demo", line="", payload=payload)

    rows = by_phase(_run([event(25.0, "deploy.started"), event(30.0, "deploy.promoted")]))
    assert [r.label for r in rows] == [
        "before the shift",
        "after the shift, first configuration",
        "during the rollout",
        "after the promotion at +30 s",
    ]
    assert [r.requests for r in rows] == [20, 5, 5, 10]
    assert rows[1].ttft_p50_ms == pytest.approx(50.0) and rows[3].ttft_p50_ms == pytest.approx(200.0)


def test_by_phase_without_a_rollout_has_two_rows() -> None:
    rows = by_phase(_run([]))
    assert [r.requests for r in rows] == [20, 20]


def test_the_report_is_written_with_its_plots_and_says_what_did_not_happen(tmp_path: Path) -> None:
    events = [
        DemoEvent(
            t_s=-1.0,
            kind="deploy.promoted",
            endpoint="voice-demo",
            line="",
            payload={"deployment_id": "dep-first"},
        ),
        DemoEvent(t_s=5.0, kind="profile.ready", endpoint="voice-demo", line="profile.ready p1", payload={}),
        DemoEvent(
            t_s=25.0,
            kind="trial.completed",
            endpoint="voice-demo",
            line="trial.completed t1",
            payload={
                "trial_id": "t1",
                "ttft_p50_ms": 30.0,
                "passed": True,
                "simulated": True,
                "gates": [{"name": "correctness", "passed": True, "value": 0.97}],
                "engine_config": {"engine": "sim", "max_num_seqs": 64},
            },
        ),
    ]
    run = _run(events)
    path = write_report(run, tmp_path / "report")
    text = path.read_text()
    assert "| profile | yes | +5.0 s |" in text
    assert "| drift | **no** |" in text
    assert (
        "Stages that did not happen in this run: drift, search, deploy (canary), promotion or rollback."
        in text
    )
    assert "max_num_seqs=64" in text and "0.970" in text
    for plot in ("ttft_over_time.png", "ttft_before_after.png", "trials.png"):
        assert (tmp_path / "report" / plot).stat().st_size > 5_000
    summary = json.loads((tmp_path / "report" / "report.json").read_text())
    assert summary == json.loads(json.dumps(summarize(run)))
    assert summary["lost_records"] == 0 and summary["real_trials"] == 0


def test_the_report_says_what_each_search_concluded(tmp_path: Path) -> None:
    completed = DemoEvent(
        t_s=30.0,
        kind="search.completed",
        endpoint="voice-demo",
        line="",
        payload={
            "search_id": "search-1",
            "outcome": "SEARCH_OUTCOME_WINNER",
            "trials": 4,
            "summary": "Winner on cpu: enable_prefix_caching off -> on. Noise rule: better.",
        },
    )
    text = write_report(_run([completed]), tmp_path / "r").read_text()
    assert "| search-1 | winner | 4 | - |" in text
    assert "- `search-1`: Winner on cpu: enable_prefix_caching off -> on. Noise rule: better." in text


def _trial(trial_id: str, config: Mapping[str, object], p50: float, *, baseline: bool = False) -> DemoEvent:
    return DemoEvent(
        t_s=25.0,
        kind="trial.completed",
        endpoint="voice-demo",
        line="",
        payload={
            "trial_id": trial_id,
            "ttft_p50_ms": p50,
            "ttft_p99_ms": 3 * p50,
            "passed": True,
            "baseline": baseline,
            "metrics": {"attainment": 0.5 if baseline else 1.0},
            "engine_config": {"engine": "vllm", **config},
        },
    )


def _completed(*, winner: str, defaults: str) -> DemoEvent:
    payload: dict[str, object] = {"search_id": "s1", "winner_trial_id": winner, "defaults_trial_id": defaults}
    return DemoEvent(t_s=30.0, kind="search.completed", endpoint="voice-demo", line="", payload=payload)


def test_vllms_defaults_stand_beside_the_live_configuration_and_the_winner(tmp_path: Path) -> None:
    off, on, tuned = (
        {"enable_prefix_caching": False},
        {"enable_prefix_caching": True},
        {"enable_prefix_caching": True, "max_num_seqs": 32},
    )
    events = [
        _trial("s1-r0-base", off, 130.0, baseline=True),
        _trial("s1-r0-best", tuned, 100.0),
        _trial("s1-r0-dflt", on, 110.0),
        _trial("s1-r1-base", off, 150.0, baseline=True),
        _trial("s1-r1-best", tuned, 104.0),
        _trial("other-r0-x", on, 1.0),  # another search's trial is not counted
        _completed(winner="s1-r1-best", defaults="s1-r0-dflt"),
    ]
    summary = summarize(_run(events))
    rows = {r["label"]: r for r in summary["references"]}
    assert list(rows) == ["live configuration", "vLLM's defaults", "winner"]
    assert rows["live configuration"]["trials"] == 2 and rows["live configuration"]["ttft_p50_ms"] == 140.0
    assert rows["vLLM's defaults"]["ttft_p50_ms"] == 110.0 and rows["vLLM's defaults"]["attainment"] == 1.0
    assert rows["winner"]["trials"] == 2 and rows["winner"]["ttft_p99_ms"] == 306.0
    text = write_report(_run(events), tmp_path / "r").read_text()
    assert "| s1 | vLLM's defaults: enable_prefix_caching=True | 1 | 110.0 | 330.0 | 1.000 |" in text


def test_when_the_defaults_win_they_are_one_row() -> None:
    on = {"enable_prefix_caching": True}
    events = [
        _trial("s1-r0-base", {"enable_prefix_caching": False}, 130.0, baseline=True),
        _trial("s1-r0-dflt", on, 100.0),
        _completed(winner="s1-r0-dflt", defaults="s1-r0-dflt"),
    ]
    labels = [r["label"] for r in summarize(_run(events))["references"]]
    assert labels == ["live configuration", "vLLM's defaults (the winner)"]


def test_the_report_says_how_the_load_was_sized(tmp_path: Path) -> None:
    run = _run([])
    run.sizing = size_load(
        probe_ttft_ms=[500.0],
        requests_per_call=4.0,
        shift_calls=1.25,
        busy_share=0.65,
        default_calls_per_s=0.4,
        bounds=(0.25, 3.0),
    )
    text = write_report(run, tmp_path / "r").read_text()
    assert f"- {run.sizing.line()}" in text
    assert summarize(run)["load_sizing"]["calls_per_s"] == run.sizing.calls_per_s


def _event(t_s: float, kind: str, *, id: str, cause_id: str = "") -> DemoEvent:
    return DemoEvent(t_s=t_s, kind=kind, endpoint="voice-demo", line=kind, id=id, cause_id=cause_id)


def test_the_promotions_causes_are_followed_back_to_the_drift() -> None:
    events = [
        _event(1.0, "deploy.promoted", id="p0"),  # the first deployment's: before the traffic
        _event(21.0, "drift.detected", id="d"),
        _event(22.0, "sla.breach", id="b"),  # an event of another chain
        _event(23.0, "profile.ready", id="r", cause_id="d"),
        _event(30.0, "search.completed", id="s", cause_id="r"),
        _event(31.0, "deploy.started", id="st", cause_id="s"),
        _event(35.0, "deploy.promoted", id="p", cause_id="s"),
    ]
    summary = summarize(_run(events))
    assert summary["promotion_causes"] == [
        "drift.detected",
        "profile.ready",
        "search.completed",
        "deploy.promoted",
    ]
    assert {"kind": "profile.ready", "id": "r", "cause_id": "d"}.items() <= summary["events"][3].items()


def test_a_cause_the_demo_did_not_see_ends_the_chain() -> None:
    events = [
        _event(30.0, "search.completed", id="s", cause_id="unseen"),
        _event(35.0, "deploy.promoted", id="p", cause_id="s"),
    ]
    assert summarize(_run(events))["promotion_causes"] == ["search.completed", "deploy.promoted"]
    assert summarize(_run([]))["promotion_causes"] == []
