"""Per-endpoint rollout policies through the real API, real NATS and real chDB: an endpoint's own
steps walk its canary, a change during a rollout waits for the next one, the failure limit holds
one failed analysis, and the CLI sets and shows the policy."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping

import pytest
from google.protobuf.field_mask_pb2 import FieldMask

from evertune.apps.cli import main
from evertune.apps.harness.waiting import eventually
from evertune.infra.store import Store
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from evertune.v1 import events_pb2
from tests.deployer.conftest import TOKEN_A, Stack
from tests.deployer.helpers import new_name, spec
from tests.deployer.test_api import deployments, endpoint_in, events_of
from tests.deployer.test_progressive import traffic


async def _ready_endpoint(stack: Stack, rollout: D.RolloutPolicy) -> tuple[str, str]:
    name = new_name()
    wanted = spec(name, max_num_seqs=1)
    wanted.rollout.CopyFrom(rollout)
    created = await stack.stub.CreateEndpoint(
        pb.CreateEndpointRequest(request_id=uuid.uuid4().hex, spec=wanted), metadata=stack.a
    )
    await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    return name, created.deployment.id


async def _promote(stack: Stack, name: str) -> str:
    request = pb.PromoteRequest(
        endpoint=name, request_id=uuid.uuid4().hex, engine_config=D.EngineConfig(max_num_seqs=2)
    )
    return str((await stack.stub.Promote(request, metadata=stack.a)).deployment.id)


async def _in_states(stack: Stack, name: str, expected: Mapping[str, int]) -> bool:
    return {d.id: d.state for d in await deployments(stack, name)} == expected


def _judged(events: list[events_pb2.Event], canary: str) -> list[events_pb2.DeployCanaryStep]:
    """The canary's analyses that judged (holds for want of requests left out)."""
    return [
        e.deploy_canary_step
        for e in events
        if e.kind == "deploy.canary_step"
        and e.deploy_canary_step.deployment_id == canary
        and e.deploy_canary_step.verdict != events_pb2.CANARY_VERDICT_HOLD
    ]


async def test_an_endpoints_two_steps_walk_its_canary_and_a_change_waits_for_the_next_rollout(
    canary_stack: Stack, store: Store
) -> None:
    stack = canary_stack
    name, first = await _ready_endpoint(stack, D.RolloutPolicy(steps=[5000, 10000], step_duration_s=1.0))
    async with traffic(stack, store, name, lambda deployment: 50.0) as running:
        canary = await _promote(stack, name)
        await eventually(lambda: _canary_at(stack, name, canary), what="the canary taking traffic")
        # a change while the canary runs: stored at once, used by the next rollout only
        change = pb.UpdateEndpointRequest(
            name=name,
            spec=D.EndpointSpec(rollout=D.RolloutPolicy(steps=[2000, 10000])),
            update_mask=FieldMask(paths=["rollout.steps"]),
        )
        updated = (await stack.stub.UpdateEndpoint(change, metadata=stack.a)).endpoint
        assert list(updated.spec.rollout.steps) == [2000, 10000]
        assert updated.spec.rollout.step_duration_s == 1.0  # not in the mask: kept
        expected = {canary: D.DEPLOYMENT_STATE_ACTIVE, first: D.DEPLOYMENT_STATE_RETIRED}
        await eventually(lambda: _in_states(stack, name, expected), timeout_s=30, what="the canary promoted")
    assert running.canary_weights(canary) == [5000, 10000]
    events = await events_of(stack, name)
    started = [e.deploy_started for e in events if e.kind == "deploy.started"]
    assert list(started[-1].canary_steps) == [5000, 10000]
    steps = _judged(events, canary)
    assert [(s.step, s.steps, s.verdict) for s in steps] == [
        (0, 2, events_pb2.CANARY_VERDICT_PROCEED),
        (1, 2, events_pb2.CANARY_VERDICT_PROCEED),
    ]
    second = await _promote(stack, name)  # the next rollout takes the changed steps
    events = await events_of(stack, name)
    started_second = [
        e.deploy_started
        for e in events
        if e.kind == "deploy.started" and e.deploy_started.deployment_id == second
    ]
    assert [list(s.canary_steps) for s in started_second] == [[2000, 10000]]


async def _canary_at(stack: Stack, name: str, canary: str) -> bool:
    return any(d.id == canary and d.weight > 0 for d in await deployments(stack, name))


async def test_failure_limit_2_holds_the_first_failed_analysis_and_rolls_back_at_the_second(
    canary_stack: Stack, store: Store
) -> None:
    stack = canary_stack
    name, first = await _ready_endpoint(stack, D.RolloutPolicy(failure_limit=2))
    canary_id: list[str] = []
    async with traffic(stack, store, name, lambda d: 150.0 if d in canary_id else 50.0) as running:
        canary_id.append(await _promote(stack, name))
        canary = canary_id[0]
        expected = {canary: D.DEPLOYMENT_STATE_ROLLED_BACK, first: D.DEPLOYMENT_STATE_ACTIVE}
        await eventually(
            lambda: _in_states(stack, name, expected), timeout_s=30, what="the canary rolled back"
        )
    assert running.canary_weights(canary) == [1000]  # held at the first step, never beyond
    events = await events_of(stack, name)
    steps = _judged(events, canary)
    assert [(s.step, s.weight, s.verdict) for s in steps] == [
        (0, 1000, events_pb2.CANARY_VERDICT_ROLL_BACK),  # tolerated: the step holds
        (0, 0, events_pb2.CANARY_VERDICT_ROLL_BACK),  # the second: rolled back
    ]
    back = [e.deploy_rolled_back for e in events if e.kind == "deploy.rolled_back"]
    assert len(back) == 1 and back[0].trigger == events_pb2.DEPLOY_TRIGGER_CANARY_ANALYSIS
    assert back[0].deployment_id == canary and back[0].restored_deployment_id == first


async def test_the_cli_sets_changes_and_shows_the_policy(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    name = new_name()
    common = ["--address", stack.address, "--token", TOKEN_A]

    async def cli(*argv: str) -> str:
        assert await asyncio.to_thread(main, [*argv, *common]) == 0
        return capsys.readouterr().out

    create = ["endpoints", "create", name, "--model", "tiny-model", "--ttft-p99-ms", "400"]
    await cli(*create, "--canary-steps", "25,100", "--canary-step-s", "30", "--canary-failure-limit", "2")
    shown = await cli("endpoints", "get", name)
    assert "rollout: steps 25%,100%; step 30 s; failure limit 2; canary deployer default" in shown
    await cli("endpoints", "update", name, "--canary-steps", "default", "--canary-failure-limit", "3")
    shown = await cli("endpoints", "get", name)
    assert "rollout: steps deployer default; step 30 s; failure limit 3;" in shown
    assert (
        await asyncio.to_thread(main, ["endpoints", "update", name, "--canary-steps", "50,20", *common]) == 1
    )
    assert "evertune: INVALID_ARGUMENT: spec.rollout.steps: must strictly increase" in capsys.readouterr().err
    await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
