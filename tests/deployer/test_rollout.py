"""The rollout state machine: steps up on PROCEED, holds then gives up, rolls back on a failed
analysis, a breach or a crash, and ignores everything once finished."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from evertune.deployer.canary import Analysis, Verdict
from evertune.deployer.plan import FULL_WEIGHT
from evertune.deployer.rollout import ActionKind, Phase, Rollout, Trigger
from evertune.deployer.rollout_policy import RolloutPolicy

PROCEED = Analysis(verdict=Verdict.PROCEED, reason="ok")
HOLD = Analysis(verdict=Verdict.HOLD, reason="too few")
FAIL = Analysis(verdict=Verdict.ROLL_BACK, reason="ttft_p50: slower")


def test_default_steps_go_10_50_100_then_promote() -> None:
    rollout = Rollout(RolloutPolicy())
    actions = [rollout.ready()] + [rollout.on_analysis(PROCEED) for _ in range(3)]
    assert [(a.kind, a.weight) for a in actions] == [
        (ActionKind.SET_WEIGHT, 1000),
        (ActionKind.SET_WEIGHT, 5000),
        (ActionKind.SET_WEIGHT, FULL_WEIGHT),
        (ActionKind.PROMOTE, FULL_WEIGHT),
    ]
    assert rollout.phase is Phase.PROMOTED and rollout.finished


def test_holds_up_to_the_limit_then_rolls_back() -> None:
    rollout = Rollout(RolloutPolicy(max_holds=2))
    rollout.ready()
    assert rollout.on_analysis(HOLD).kind is ActionKind.HOLD
    assert rollout.on_analysis(HOLD).kind is ActionKind.HOLD
    last = rollout.on_analysis(HOLD)
    assert (last.kind, last.weight, last.trigger) == (ActionKind.ROLL_BACK, 0, Trigger.CANARY_ANALYSIS)
    assert "still undecided after 3" in last.reason


def test_holds_are_counted_per_step() -> None:
    rollout = Rollout(RolloutPolicy(max_holds=1))
    rollout.ready()
    assert rollout.on_analysis(HOLD).kind is ActionKind.HOLD
    assert rollout.on_analysis(PROCEED).weight == 5000
    assert rollout.on_analysis(HOLD).kind is ActionKind.HOLD  # a fresh allowance at the new step


def test_failure_limit_allows_a_reanalysis_at_the_same_weight() -> None:
    rollout = Rollout(RolloutPolicy(failures_tolerated=1))
    rollout.ready()
    again = rollout.on_analysis(FAIL)
    assert (again.kind, again.weight) == (ActionKind.HOLD, 1000)
    back = rollout.on_analysis(FAIL)
    assert (back.kind, back.trigger, back.step) == (ActionKind.ROLL_BACK, Trigger.CANARY_ANALYSIS, 0)
    assert back.reason == "ttft_p50: slower"


def test_first_failure_rolls_back_by_default() -> None:
    rollout = Rollout(RolloutPolicy())
    rollout.ready()
    rollout.on_analysis(PROCEED)
    back = rollout.on_analysis(FAIL)
    assert (back.kind, back.weight, back.step) == (ActionKind.ROLL_BACK, 0, 1)


def test_breach_and_crash_roll_back_even_while_starting() -> None:
    starting = Rollout(RolloutPolicy())
    crash = starting.on_failure("engine exited with code -9")
    assert (crash.kind, crash.trigger) == (ActionKind.ROLL_BACK, Trigger.FAILURE)
    live = Rollout(RolloutPolicy())
    live.ready()
    breach = live.on_breach("br-1")
    assert (breach.kind, breach.trigger) == (ActionKind.ROLL_BACK, Trigger.BREACH)
    assert "br-1" in breach.reason


def test_finished_rollouts_ignore_later_events() -> None:
    rollout = Rollout(RolloutPolicy(steps=(FULL_WEIGHT,)))
    rollout.ready()
    assert rollout.on_analysis(PROCEED).kind is ActionKind.PROMOTE
    for action in (
        rollout.on_analysis(FAIL),
        rollout.on_breach("b"),
        rollout.on_failure("x"),
        rollout.ready(),
    ):
        assert action.kind is ActionKind.NONE
    assert rollout.phase is Phase.PROMOTED and rollout.weight == FULL_WEIGHT


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ((), "at least one"),
        ((5000, 1000, 10000), "strictly increase"),
        ((1000, 5000), "end at 10000"),
        ((0, 10000), "1..10000"),
    ],
)
def test_bad_step_plans_are_refused(steps: tuple[int, ...], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RolloutPolicy(steps=steps)


def test_a_resumed_rollout_returns_to_its_step_with_its_failures() -> None:
    rollout = Rollout(RolloutPolicy(failures_tolerated=1))
    action = rollout.resume(step=1, failures=1)
    assert (action.kind, action.weight, action.step) == (ActionKind.SET_WEIGHT, 5000, 1)
    assert rollout.on_analysis(FAIL).kind is ActionKind.ROLL_BACK  # the earlier failure counts
    clamped = Rollout(RolloutPolicy(steps=(2000, FULL_WEIGHT)))
    assert clamped.resume(step=5, failures=0).weight == FULL_WEIGHT  # a policy with fewer steps
    assert Rollout(RolloutPolicy()).resume(step=-1, failures=0).weight == 1000  # before the first step
    assert clamped.resume(step=0, failures=0).kind is ActionKind.NONE  # only from STARTING
