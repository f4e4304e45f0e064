"""Per-endpoint rollout policies (pure): the merge over the deployer's defaults, the wire's
failure limit through the rollout state machine, and the CLI's flags."""

from __future__ import annotations

import argparse

import pytest
from pydantic import ValidationError

from evertune.apps.cli.endpoint import canary_steps, rollout_line, rollout_policy
from evertune.deployer.canary import Analysis, Verdict
from evertune.deployer.plan import FULL_WEIGHT
from evertune.deployer.rollout import ActionKind, Phase, Rollout, Trigger
from evertune.deployer.rollout_policy import RolloutOverrides, RolloutPolicy, effective_policy
from evertune.deployer.settings import DeployerSettings
from evertune.deployer.validation import rollout_overrides
from evertune.errors import InvalidArgument
from evertune.v1 import endpoint_pb2

PROCEED = Analysis(verdict=Verdict.PROCEED, reason="ok")
FAIL = Analysis(verdict=Verdict.ROLL_BACK, reason="ttft_p50: slower")

#: Deployer defaults unlike the built-in ones, so the merge shows where each value came from.
DEFAULTS = RolloutPolicy(
    steps=(2000, 6000, FULL_WEIGHT),
    step_duration_s=45.0,
    max_holds=3,
    failures_tolerated=0,
    min_requests=40,
    ttft_slack_ms=7.0,
    p_value=0.02,
)


def test_no_overrides_is_the_deployers_policy() -> None:
    assert effective_policy(DEFAULTS, RolloutOverrides()) == DEFAULTS
    assert RolloutOverrides().empty and not RolloutOverrides(p_value=0.05).empty


def test_overrides_win_field_by_field_and_the_rest_is_the_deployers() -> None:
    overrides = RolloutOverrides(
        steps=(5000, FULL_WEIGHT), step_duration_s=10.0, failures_tolerated=1, ttft_slack_ms=0.0, p_value=0.05
    )
    policy = effective_policy(DEFAULTS, overrides)
    assert policy.steps == (5000, FULL_WEIGHT) and policy.step_duration_s == 10.0
    assert policy.failures_tolerated == 1 and policy.max_holds == 3  # max_holds: from the defaults
    assert policy.ttft_slack_ms == 0.0  # an explicit 0 is kept, not taken for "unset"
    assert policy.p_value == 0.05
    assert policy.min_requests == 40  # from the defaults
    assert policy.max_ttft_regression == DEFAULTS.max_ttft_regression


def test_the_merge_starts_from_the_settings() -> None:
    settings = DeployerSettings(
        rollout=RolloutPolicy(steps=(500, 10000), min_requests=12, failures_tolerated=2)
    )
    policy = effective_policy(settings.rollout, RolloutOverrides(min_requests=99))
    assert policy.steps == (500, FULL_WEIGHT) and policy.failures_tolerated == 2
    assert policy.min_requests == 99


def test_overrides_refuse_what_a_policy_refuses() -> None:
    with pytest.raises(ValidationError, match="strictly increase"):
        RolloutOverrides(steps=(5000, 1000, FULL_WEIGHT))
    with pytest.raises(ValidationError):
        RolloutOverrides(p_value=1.0)
    with pytest.raises(ValidationError):
        RolloutOverrides(failures_tolerated=-1)


def _rollout(wire: endpoint_pb2.RolloutPolicy) -> Rollout:
    return Rollout(effective_policy(DEFAULTS, rollout_overrides(wire, field="spec.rollout")))


def test_failure_limit_2_holds_after_the_first_failed_analysis_and_rolls_back_at_the_second() -> None:
    rollout = _rollout(endpoint_pb2.RolloutPolicy(steps=[5000, FULL_WEIGHT], failure_limit=2))
    assert rollout.ready().weight == 5000
    first = rollout.on_analysis(FAIL)
    assert (first.kind, first.weight, first.step) == (ActionKind.HOLD, 5000, 0)
    assert "failure 1 of 1 allowed" in first.reason and not rollout.finished
    second = rollout.on_analysis(FAIL)
    assert (second.kind, second.weight, second.trigger) == (ActionKind.ROLL_BACK, 0, Trigger.CANARY_ANALYSIS)
    assert rollout.phase is Phase.ROLLED_BACK and rollout.failures == 2


def test_failures_count_over_the_whole_rollout() -> None:
    rollout = _rollout(endpoint_pb2.RolloutPolicy(failure_limit=2))
    rollout.ready()
    assert rollout.on_analysis(FAIL).kind is ActionKind.HOLD
    assert rollout.on_analysis(PROCEED).weight == 6000  # a passing window moves on
    assert rollout.on_analysis(FAIL).kind is ActionKind.ROLL_BACK  # the second failure, a step later


@pytest.mark.parametrize("limit", [0, 1])
def test_failure_limit_0_or_1_rolls_back_at_the_first_failure(limit: int) -> None:
    # 0 takes the deployer's default, whose failures_tolerated is 0 here
    rollout = _rollout(endpoint_pb2.RolloutPolicy(failure_limit=limit))
    rollout.ready()
    assert rollout.on_analysis(FAIL).kind is ActionKind.ROLL_BACK


def test_two_steps_walk_then_promote() -> None:
    rollout = _rollout(endpoint_pb2.RolloutPolicy(steps=[5000, FULL_WEIGHT]))
    actions = [rollout.ready(), rollout.on_analysis(PROCEED), rollout.on_analysis(PROCEED)]
    assert [(a.kind, a.weight) for a in actions] == [
        (ActionKind.SET_WEIGHT, 5000),
        (ActionKind.SET_WEIGHT, FULL_WEIGHT),
        (ActionKind.PROMOTE, FULL_WEIGHT),
    ]


def _args(**flags: object) -> argparse.Namespace:
    values: dict[str, object] = {"canary_steps": None, "canary_step_s": None, "canary_failure_limit": None}
    values.update(flags)
    return argparse.Namespace(**values)


def test_cli_flags_make_the_wire_policy_and_its_mask() -> None:
    assert canary_steps("10,50,100") == [1000, 5000, FULL_WEIGHT]
    assert canary_steps("2.5, 100") == [250, FULL_WEIGHT] and canary_steps("default") == []
    with pytest.raises(InvalidArgument, match="--canary-steps 'ten,100': expected percents"):
        canary_steps("ten,100")
    policy, paths = rollout_policy(_args(canary_steps="50,100", canary_step_s=30.0, canary_failure_limit=2))
    assert list(policy.steps) == [5000, FULL_WEIGHT] and policy.step_duration_s == 30
    assert policy.failure_limit == 2
    assert paths == ["rollout.steps", "rollout.step_duration_s", "rollout.failure_limit"]
    assert rollout_policy(_args()) == (endpoint_pb2.RolloutPolicy(), [])
    with pytest.raises(InvalidArgument, match="--canary-failure-limit"):
        rollout_policy(_args(canary_failure_limit=-1))


def test_the_policy_line() -> None:
    assert rollout_line(endpoint_pb2.RolloutPolicy()) == (
        "rollout: steps deployer default; step deployer default; failure limit deployer default; "
        "canary deployer default"
    )
    line = rollout_line(endpoint_pb2.RolloutPolicy(steps=[1000, FULL_WEIGHT], failure_limit=2, p_value=0.05))
    assert line == "rollout: steps 10%,100%; step deployer default; failure limit 2; canary p_value=0.05"


def test_the_overrides_are_the_policys_fields_each_optional_with_the_same_bounds() -> None:
    assert RolloutOverrides.model_fields.keys() == RolloutPolicy.model_fields.keys()
    for name, info in RolloutPolicy.model_fields.items():
        assert RolloutOverrides.model_fields[name].metadata == info.metadata, name
        assert RolloutOverrides.model_fields[name].default is None


def test_a_rollout_record_of_the_previous_release_still_loads() -> None:
    stored = {
        "steps": [2000, 10000],
        "step_duration_s": 30.0,
        "max_holds": 4,
        "failure_limit": 1,
        "canary": {"min_requests": 12, "p_value": 0.05},
    }
    policy = RolloutPolicy.model_validate(stored)
    assert policy.failures_tolerated == 1 and policy.min_requests == 12 and policy.p_value == 0.05
    assert RolloutPolicy.model_validate(policy.model_dump(mode="json")) == policy
