"""The deployer's pure decisions: route tables, rollback targets, resume, restarts, drains."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from evertune.deployer import plan
from evertune.errors import FailedPrecondition, NotFound
from evertune.v1 import endpoint_pb2 as D

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def dep(id_: str, state: int, previous: str = "") -> D.Deployment:
    return D.Deployment(id=id_, endpoint="e", state=state, previous_deployment_id=previous)  # type: ignore[arg-type]


def test_route_table_splits_weight_over_replicas_and_keeps_zero_weight_routes() -> None:
    table = plan.route_table(
        "e",
        {"dep-new": 10_000, "dep-old": 0, "dep-nourl": 5},
        {"dep-new": ["http://a", "http://b", "http://c"], "dep-old": ["http://o"]},
        revision=4,
        now=NOW,
        tenant="team-a",
    )
    assert table.endpoint == "e" and table.revision == 4 and table.tenant == "team-a"
    assert [(r.deployment_id, r.upstream_url, r.weight) for r in table.routes] == [
        ("dep-new", "http://a", 3334),
        ("dep-new", "http://b", 3333),
        ("dep-new", "http://c", 3333),
        ("dep-old", "http://o", 0),
    ]
    assert plan.weights_of(table) == {"dep-new": 10_000, "dep-old": 0}
    assert plan.urls_of(table)["dep-new"] == ["http://a", "http://b", "http://c"]


FULL = plan.FULL_WEIGHT


@pytest.mark.parametrize(
    ("change", "now", "expected"),
    [
        (plan.AllTo("b"), {"a": FULL}, {"a": 0, "b": FULL}),
        (plan.AllTo("a"), {"a": 2_000, "b": 8_000, "c": 0}, {"a": FULL, "b": 0, "c": 0}),
        (
            plan.CanarySplit(stable_id="s", canary_id="c", canary_weight=500),
            {"s": FULL, "old": 0},
            {"s": 9_500, "c": 500, "old": 0},
        ),
        (
            plan.CanarySplit(stable_id="s", canary_id="c", canary_weight=0),
            {"s": 9_000, "c": 1_000},
            {"s": FULL, "c": 0},
        ),
        (plan.Silence("a"), {"a": FULL, "b": 0}, {"a": 0, "b": 0}),
        (plan.Silence("x"), {"a": FULL}, {"a": FULL}),  # not listed: nothing to silence
        (plan.SilenceAll(), {"a": 500, "b": 9_500}, {"a": 0, "b": 0}),
        (plan.Without("a"), {"a": 0, "b": FULL}, {"b": FULL}),
        (plan.Rejoin("a", weight=FULL), {}, {"a": FULL}),
        (plan.Rejoin("a", weight=FULL), {"a": 0, "b": FULL}, {"a": 0, "b": FULL}),  # the table's weight wins
    ],
)
def test_weight_changes(change: plan.WeightChange, now: dict[str, int], expected: dict[str, int]) -> None:
    assert change(now) == expected


@pytest.mark.parametrize(
    ("change", "now"),
    [
        (plan.CanarySplit(stable_id="s", canary_id="c", canary_weight=FULL + 1), {"s": FULL}),
        (plan.Rejoin("a", weight=FULL), {"b": FULL}),  # two at full weight
        (plan.Without("a"), {"a": 0, "b": -1}),
    ],
)
def test_weight_changes_assert_their_invariant(change: plan.WeightChange, now: dict[str, int]) -> None:
    with pytest.raises(AssertionError):
        change(now)


def test_rollback_goes_to_the_stables_predecessor_and_restarts_it_when_stopped() -> None:
    deployments = [
        dep("dep-2", D.DEPLOYMENT_STATE_ACTIVE, previous="dep-1"),
        dep("dep-1", D.DEPLOYMENT_STATE_RETIRED),
    ]
    decision = plan.plan_rollback(stable_id="dep-2", deployments=deployments, to_deployment_id="")
    assert decision.restore.id == "dep-1" and decision.restart and decision.take_out == ("dep-2",)


def test_rollback_reuses_a_draining_predecessor() -> None:
    deployments = [
        dep("dep-2", D.DEPLOYMENT_STATE_ACTIVE, previous="dep-1"),
        dep("dep-1", D.DEPLOYMENT_STATE_DRAINING),
    ]
    decision = plan.plan_rollback(stable_id="dep-2", deployments=deployments, to_deployment_id="")
    assert decision.restore.id == "dep-1" and not decision.restart


def test_rollback_during_a_rollout_keeps_the_stable_and_takes_the_new_one_out() -> None:
    deployments = [
        dep("dep-3", D.DEPLOYMENT_STATE_STARTING, previous="dep-2"),
        dep("dep-2", D.DEPLOYMENT_STATE_ACTIVE, previous="dep-1"),
    ]
    decision = plan.plan_rollback(stable_id="dep-2", deployments=deployments, to_deployment_id="")
    assert decision.restore.id == "dep-2" and not decision.restart and decision.take_out == ("dep-3",)


def test_rollback_refusals() -> None:
    only = [dep("dep-1", D.DEPLOYMENT_STATE_ACTIVE)]
    with pytest.raises(FailedPrecondition, match="nothing to roll back to"):
        plan.plan_rollback(stable_id="dep-1", deployments=only, to_deployment_id="")
    with pytest.raises(FailedPrecondition, match="already the stable"):
        plan.plan_rollback(stable_id="dep-1", deployments=only, to_deployment_id="dep-1")
    with pytest.raises(NotFound):
        plan.plan_rollback(stable_id="dep-1", deployments=only, to_deployment_id="dep-9")


@pytest.mark.parametrize(
    ("state", "endpoint_state", "action"),
    [
        (D.DEPLOYMENT_STATE_ACTIVE, D.ENDPOINT_STATE_READY, "restart"),
        (D.DEPLOYMENT_STATE_PENDING, D.ENDPOINT_STATE_PROVISIONING, "finish_start"),
        (D.DEPLOYMENT_STATE_STARTING, D.ENDPOINT_STATE_READY, "finish_start"),
        (D.DEPLOYMENT_STATE_CANARY, D.ENDPOINT_STATE_READY, "continue_canary"),
        (D.DEPLOYMENT_STATE_DRAINING, D.ENDPOINT_STATE_READY, "finish_drain"),
        (D.DEPLOYMENT_STATE_RETIRED, D.ENDPOINT_STATE_READY, "nothing"),
        (D.DEPLOYMENT_STATE_ACTIVE, D.ENDPOINT_STATE_DELETING, "nothing"),
    ],
)
def test_resume_action(state: int, endpoint_state: int, action: str) -> None:
    assert plan.resume_action(dep("dep-1", state), endpoint_state=endpoint_state) == action


def test_restart_budget_is_a_sliding_window() -> None:
    budget = plan.RestartBudget(max_restarts=2, window_s=10.0)
    assert budget.allow(0.0) and budget.allow(1.0)
    assert not budget.allow(2.0)
    assert budget.allow(10.5)  # the restart at 0.0 left the window
    assert budget.used == 2


def test_drained() -> None:
    assert plan.drained(0, waited_s=0.0, timeout_s=5.0)
    assert not plan.drained(3, waited_s=1.0, timeout_s=5.0)
    assert not plan.drained(None, waited_s=1.0, timeout_s=5.0)
    assert plan.drained(3, waited_s=5.0, timeout_s=5.0)
