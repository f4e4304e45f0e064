"""The deployer's answers to events and calls, branch by branch: a search winner's verdict, an
engine report's steps, a rollback's steps (`decisions.py`, pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

import pytest

from evertune.deployer.backend import EngineReport
from evertune.deployer.decisions import (
    AnnounceRolledBack,
    AnnounceStarted,
    CancelWork,
    Drain,
    EndRollout,
    Locked,
    Mark,
    MarkEndpoint,
    Relaunch,
    Reroute,
    RollOut,
    StopEngines,
    TellCanary,
    engine_report_steps,
    rollback_steps,
    search_winner,
)
from evertune.deployer.plan import AllTo, RollbackPlan, Silence, Without
from evertune.domain.engines import EngineSpec
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import events_pb2 as E

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
WINNER = EngineSpec(model="/m", max_num_seqs=32)
STABLE = EngineSpec(model="/m", max_num_seqs=256)


def _endpoint(policy: int = D.SEARCH_POLICY_AUTO, pool: str = "cpu-avx512bf16") -> D.Endpoint:
    endpoint = D.Endpoint(stable_deployment_id="dep-s")
    endpoint.spec.name, endpoint.spec.model, endpoint.spec.search_policy = "voice", "/m", policy  # type: ignore[assignment]
    endpoint.spec.hardware_pool.hardware_class = pool
    return endpoint


def _completed(
    *,
    outcome: int = E.SEARCH_OUTCOME_WINNER,
    verified: bool = True,
    measured_on: str = "cpu-avx512bf16",
    age_s: float = 5.0,
    winner: EngineSpec | None = WINNER,
) -> E.Event:
    event = E.Event(endpoint="voice")
    event.time.FromDatetime(NOW - timedelta(seconds=age_s))
    done = event.search_completed
    done.search_id, done.outcome, done.verified = "s-1", outcome, verified  # type: ignore[assignment]
    done.winner_hardware_class, done.winner_trial_id = measured_on, "t-7"
    if winner is not None:
        done.winner.CopyFrom(winner.to_proto())
    return event


@pytest.mark.parametrize(
    ("event", "endpoint", "rolls_out", "warning"),
    [
        (_completed(), _endpoint(), True, False),
        (_completed(outcome=E.SEARCH_OUTCOME_NO_IMPROVEMENT, winner=None), _endpoint(), False, False),
        (_completed(), _endpoint(policy=D.SEARCH_POLICY_ADVISORY), False, False),
        (_completed(), _endpoint(policy=D.SEARCH_POLICY_OFF), False, False),
        (_completed(verified=False), _endpoint(), False, True),  # modelled only, on a real pool
        (_completed(verified=False, measured_on="sim-h200"), _endpoint(pool="sim-h200"), True, False),
        (_completed(measured_on="h100"), _endpoint(), False, True),  # another hardware class
        (_completed(age_s=3_601), _endpoint(), False, False),  # older than max_age_s
        (_completed(winner=STABLE), _endpoint(), False, False),  # the stable configuration already
    ],
)
def test_search_winner(event: E.Event, endpoint: D.Endpoint, rolls_out: bool, warning: bool) -> None:
    verdict = search_winner(event, endpoint=endpoint, stable_engine=STABLE, now=NOW, max_age_s=3_600)
    assert (verdict.engine == WINNER) is rolls_out and (verdict.engine is None) is not rolls_out
    assert bool(verdict.reason) is not rolls_out and verdict.warning is warning


def _report(what: Literal["exited", "restarted", "gave_up"], deployment_id: str = "dep-s") -> EngineReport:
    return EngineReport(
        deployment_id=deployment_id, endpoint="voice", what=what, replica=0, restarts=1, detail="x"
    )


DEGRADED, READY, FAILED = D.ENDPOINT_STATE_DEGRADED, D.ENDPOINT_STATE_READY, D.DEPLOYMENT_STATE_FAILED
GAVE_UP_STABLE = "stable deployment dep-s failed: x; Promote or Rollback"


@pytest.mark.parametrize(
    ("report", "canary_here", "steps"),
    [
        (_report("exited"), "", [Mark("dep-s", message="x"), MarkEndpoint(DEGRADED, "dep-s: x")]),
        (_report("exited", "dep-c"), "", [Mark("dep-c", message="x")]),
        (_report("restarted"), "", [Mark("dep-s", message=""), MarkEndpoint(READY, "")]),
        (_report("restarted", "dep-c"), "dep-c", [Mark("dep-c", message="")]),
        (_report("gave_up", "dep-c"), "dep-c", [TellCanary("the canary's engine failed: x")]),
        (
            _report("gave_up", "dep-c"),  # a canary whose loop another deployer runs
            "",
            [Reroute(Silence("dep-c")), Mark("dep-c", state=FAILED, message="x"), StopEngines("dep-c")],
        ),
        (
            _report("gave_up"),
            "dep-c",
            [
                Reroute(Silence("dep-s")),
                Mark("dep-s", state=FAILED, message="x"),
                StopEngines("dep-s"),
                MarkEndpoint(DEGRADED, GAVE_UP_STABLE),
            ],
        ),
    ],
)
def test_engine_report_steps(report: EngineReport, canary_here: str, steps: list[object]) -> None:
    assert engine_report_steps(report, stable_id="dep-s", canary_here=canary_here) == steps


def _dep(id_: str, state: int, urls: str = "") -> D.Deployment:
    return D.Deployment(id=id_, state=state, upstream_url=urls, previous_deployment_id="dep-s")  # type: ignore[arg-type]


ROLLED_BACK, RETIRED = D.DEPLOYMENT_STATE_ROLLED_BACK, D.DEPLOYMENT_STATE_RETIRED
STABLE_DEP = _dep("dep-s", D.DEPLOYMENT_STATE_ACTIVE)
CANARY = _dep("dep-c", D.DEPLOYMENT_STATE_CANARY)
STARTING = _dep("dep-n", D.DEPLOYMENT_STATE_STARTING)
DRAINING = _dep("dep-o", D.DEPLOYMENT_STATE_DRAINING, urls="http://a,http://b")
STOPPED = _dep("dep-o", RETIRED)


def _steps(
    restore: D.Deployment, take_out: tuple[str, ...], in_progress: D.Deployment | None, restart: bool
) -> list[object]:
    chosen = RollbackPlan(restore=restore, restart=restart, take_out=take_out)
    result_id = "dep-r" if restart else restore.id
    return rollback_steps(  # type: ignore[return-value]
        chosen, stable_id="dep-s", in_progress=in_progress, restart=restart, result_id=result_id, reason="why"
    )


def test_rollback_of_a_canary_drains_it_and_keeps_the_stable() -> None:
    assert _steps(STABLE_DEP, ("dep-c",), CANARY, restart=False) == [
        CancelWork(),
        Reroute(AllTo("dep-s")),
        Mark("dep-c", message="why"),
        Drain("dep-c", final=ROLLED_BACK),
        EndRollout("dep-c"),
        AnnounceRolledBack(taken_out="dep-c", restored="dep-s", reason="why"),
    ]


def test_rollback_of_a_starting_rollout_stops_it_at_once() -> None:
    assert _steps(STABLE_DEP, ("dep-n",), STARTING, restart=False) == [
        CancelWork(),
        Reroute(AllTo("dep-s")),
        StopEngines("dep-n"),
        Reroute(Without("dep-n")),
        Mark("dep-n", state=ROLLED_BACK, message="why"),
        EndRollout("dep-n"),
        AnnounceRolledBack(taken_out="dep-n", restored="dep-s", reason="why"),
    ]


def test_rollback_to_a_draining_deployment_takes_the_traffic_back_and_drains_the_stable() -> None:
    assert _steps(DRAINING, ("dep-s",), None, restart=False) == [
        Locked(
            (
                Reroute(AllTo("dep-o"), urls={"dep-o": ["http://a", "http://b"]}),
                Mark("dep-o", state=D.DEPLOYMENT_STATE_ACTIVE, message=""),
                MarkEndpoint(READY, "", stable_id="dep-o"),
            )
        ),
        AnnounceRolledBack(taken_out="dep-s", restored="dep-o", reason="why"),
        Drain("dep-s", final=ROLLED_BACK),
    ]


def test_rollback_to_a_stopped_deployment_relaunches_its_config() -> None:
    assert _steps(STOPPED, ("dep-s",), None, restart=True) == [
        Relaunch(
            config_of="dep-o",
            engine_config=STOPPED.engine_config,
            deployment_id="dep-r",
            previous_id="dep-s",
            message="why",
        ),
        AnnounceStarted("dep-r"),
        AnnounceRolledBack(taken_out="dep-s", restored="dep-r", reason="why"),
        RollOut("dep-r"),
    ]


def test_rollback_past_a_canary_to_a_drain_that_had_stopped_aborts_and_relaunches() -> None:
    steps = _steps(DRAINING, ("dep-s", "dep-c"), CANARY, restart=True)
    assert steps[:5] == [
        CancelWork(),
        Reroute(Silence("dep-c")),  # the target takes the traffic later, by its rollout
        Mark("dep-c", message="why"),
        Drain("dep-c", final=ROLLED_BACK),
        EndRollout("dep-c"),
    ]
    assert steps[5:7] == [
        Relaunch(
            config_of="dep-o",
            engine_config=DRAINING.engine_config,
            deployment_id="dep-r",
            previous_id="dep-s",
            message="why",
        ),
        Drain("dep-o", final=RETIRED),  # the drain the rollback cancelled is finished
    ]
    assert steps[-1] == RollOut("dep-r")


def test_rollback_steps_assert_that_whatever_the_plan_takes_out_leaves() -> None:
    with pytest.raises(AssertionError):  # a second serving deployment that no step takes out
        _steps(STOPPED, ("dep-s", "dep-x"), None, restart=True)
