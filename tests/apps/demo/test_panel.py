"""What the demo prints: the SLO panel, event lines, and which stages of the loop happened."""

from __future__ import annotations

import io

from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console, RenderableType

from evertune.apps.cli.slo import SloRow
from evertune.apps.demo.panel import (
    DemoEvent,
    demo_event,
    loop_events,
    panel_cells,
    panel_rows,
    slo_panel,
    stage_verdicts,
)
from evertune.v1 import endpoint_pb2, events_pb2


def _row(deployment: str = "") -> SloRow:
    return SloRow(
        endpoint="voice-demo",
        deployment=deployment,
        requests=120,
        ttft_p50_ms=42.0,
        ttft_p99_ms=310.0,
        ttft_target_ms=500.0,
        attainment=0.975,
        attainment_target=0.9,
        slo_source="endpoints",
        window_s=20.0,
        burn_rates={
            "page-fast": {"long": 0.25, "short": 0.5, "open": False},
            "page-1h": {"long": 3.0, "short": 4.0, "open": True},
        },
    )


def _shown(renderable: RenderableType, *, terminal: bool = False) -> list[str]:
    console = Console(file=io.StringIO(), width=200, force_terminal=terminal)
    console.print(renderable)
    return str(console.file.getvalue()).splitlines()  # type: ignore[attr-defined]


def test_the_panel_shows_percentiles_against_the_target_attainment_and_burn_rates() -> None:
    assert panel_cells(_row()) == (
        "(all)",
        "42",
        "310",
        "500",
        "0.975",
        "0.90",
        "page-fast 0.25/0.50 page-1h 3.00/4.00!",
        "120",
        "20",
    )
    lines = _shown(
        slo_panel(
            [_row(), _row("dep-1"), _row("dep-2")], t_s=12.5, phase="baseline", sent=130, done=128, errors=1
        )
    )
    assert lines[0].startswith("[  +12.5s] SLO  phase baseline")
    assert "sent   130" in lines[0] and "errors 1" in lines[0]
    assert lines[1].split()[:9] == ["scope", "TTFT", "p50", "ms", "p99", "ms", "target", "ms", "attainment"]
    # plain text: one line a row, under the head's text, cells in their columns
    assert lines[2].startswith(" " * 11 + "(all)")
    figures = ["42", "310", "500", "0.975", "0.90", "page-fast", "0.25/0.50", "page-1h", "3.00/4.00!"]
    assert lines[2].split() == ["(all)", *figures, "120", "20"]
    assert lines[3].split()[0] == "dep-1" and lines[4].split()[0] == "dep-2" and len(lines) == 5
    assert "\x1b" not in "".join(lines)
    # one deployment: its row says it all
    assert [r.deployment for r in panel_rows([_row(), _row("dep-1")])] == ["dep-1"]
    # on a terminal the same figures, styled
    styled = "\n".join(
        _shown(slo_panel([_row()], t_s=1.0, phase="shifted", sent=1, done=1, errors=0), terminal=True)
    )
    assert "\x1b[" in styled and "0.975" in styled and "phase shifted" in styled


def test_an_empty_panel_says_so() -> None:
    lines = _shown(slo_panel([], t_s=1.0, phase="setup", sent=0, done=0, errors=0))
    assert "not seen traffic yet" in lines[1]


def _event(kind: str, t: float, **payload: object) -> DemoEvent:
    return DemoEvent(t_s=t, kind=kind, endpoint="voice-demo", line=kind, payload=dict(payload))


def test_stages_come_from_events_and_provisioning_is_not_a_rollout() -> None:
    events = [
        _event("deploy.started", -2.0, deployment_id="dep-first"),
        _event("deploy.promoted", -1.0, deployment_id="dep-first"),
        _event("profile.ready", 10.0),
        _event("search.started", 11.0, search_id="s1"),
        _event("trial.completed", 30.0),
        _event("search.completed", 31.0, search_id="s1", outcome="SEARCH_OUTCOME_NO_IMPROVEMENT"),
        _event("search.completed", 35.0, search_id="s2", outcome="SEARCH_OUTCOME_WINNER", verified=False),
        _event("deploy.promoted", 40.0, deployment_id="dep-first"),  # e.g. a restart notice
    ]
    loop = loop_events(events, since_s=0.0, initial_deployment="dep-first")
    assert [e.kind for e in loop] == [
        "profile.ready",
        "search.started",
        "trial.completed",
        "search.completed",
        "search.completed",
    ]
    verdicts = {v.stage: v for v in stage_verdicts(loop)}
    assert verdicts["profile"].happened and verdicts["profile"].first_t_s == 10.0
    assert verdicts["search"].happened and verdicts["search"].events == 2
    assert verdicts["search"].first_t_s == 31.0
    assert not verdicts["drift"].happened
    assert not verdicts["deploy (canary)"].happened
    assert "no improvement x1, winner not verified on real hardware x1" in verdicts["deploy (canary)"].note
    assert "did not happen" in verdicts["promotion or rollback"].note
    # a stage that began but did not finish did not happen
    begun = {
        v.stage: v for v in stage_verdicts([_event("search.started", 5.0), _event("trial.progress", 6.0)])
    }
    assert not begun["search"].happened and "began (search.started at +5 s)" in begun["search"].note
    assert not begun["verify (trials)"].happened


def test_bus_events_become_short_lines_on_the_demo_clock() -> None:
    when = Timestamp()
    when.FromSeconds(1_000_010)
    event = events_pb2.Event(
        kind="deploy.canary_step",
        endpoint="voice-demo",
        time=when,
        deploy_canary_step=events_pb2.DeployCanaryStep(
            deployment_id="dep-2",
            step=1,
            steps=3,
            weight=1000,
            verdict=events_pb2.CANARY_VERDICT_PROCEED,
            canary_ttft_p99_ms=120.0,
            stable_ttft_p99_ms=300.0,
            canary_requests=40,
        ),
    )
    seen = demo_event(event, t0=1_000_000.0)
    assert seen.t_s == 10.0
    assert "canary dep-2 step 2 of 3: proceed, canary at 10% of traffic" in seen.line
    assert "canary 120 vs stable 300 ms" in seen.line
    assert seen.payload["deployment_id"] == "dep-2"

    created = events_pb2.Event(
        kind="endpoint.created",
        endpoint="voice-demo",
        time=when,
        endpoint_created=events_pb2.EndpointCreated(
            endpoint=endpoint_pb2.Endpoint(
                spec=endpoint_pb2.EndpointSpec(name="voice-demo"),
                state=endpoint_pb2.ENDPOINT_STATE_PROVISIONING,
            )
        ),
    )
    assert demo_event(created, t0=1_000_000.0).line.endswith("endpoint voice-demo provisioning")


def test_a_completed_search_shows_its_summary_under_its_line() -> None:
    when = Timestamp()
    when.FromSeconds(1_000_020)
    done = events_pb2.SearchCompleted(
        search_id="search-1",
        outcome=events_pb2.SEARCH_OUTCOME_NO_IMPROVEMENT,
        trials=2,
        summary="No improvement: the live configuration ranked best.",
    )
    event = events_pb2.Event(kind="search.completed", endpoint="voice-demo", time=when, search_completed=done)
    first, second = demo_event(event, t0=1_000_000.0).line.split("\n")
    assert first.endswith("search search-1: no improvement after 2 trials")
    assert second.strip() == "No improvement: the live configuration ranked best."
    event.search_completed.ClearField("summary")
    assert "\n" not in demo_event(event, t0=1_000_000.0).line
