"""Progressive rollouts through the real API, real NATS and real chDB: canary steps analysed over
telemetry rows written for each arm as the route table splits traffic, breaches, search winners,
and a deployer restarted in the middle of a canary."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
from google.protobuf.field_mask_pb2 import FieldMask
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError

from evertune.apps.harness.waiting import eventually
from evertune.deployer.state import State
from evertune.infra.bus import publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.runtime.tasks import cancel_and_wait
from evertune.infra.store import Store
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from evertune.v1 import events_pb2
from tests.deployer.conftest import FAST, Stack, purge_state, start_stack, stop_stack
from tests.deployer.helpers import create_request, insert_requests, new_name, request_row
from tests.deployer.test_api import deployments, endpoint_in, events_of, routes

#: Settings of these tests: short steps, 20 requests per arm to judge.
#: Rows written per arm with weight, every tick.
ROWS_PER_TICK = 20
TICK_S = 0.1


class Traffic:
    """Telemetry as the gateway would record it while the route table splits traffic: every tick,
    rows for each deployment with weight, TTFTs around `ttft_ms(deployment)`."""

    def __init__(self, stack: Stack, store: Store, name: str, ttft_ms: Callable[[str], float]) -> None:
        self.stack, self.store, self.name, self.ttft_ms = stack, store, name, ttft_ms
        self.rng = random.Random(7)
        self.weights_seen: list[dict[str, int]] = []  #: each distinct split of the route table

    async def run(self) -> None:
        while True:
            table = await routes(self.stack, self.name)
            weights = {r.deployment_id: r.weight for r in table.routes} if table else {}
            if not self.weights_seen or self.weights_seen[-1] != weights:
                self.weights_seen.append(weights)
            now = datetime.now(UTC)
            rows = [
                request_row(
                    self.name,
                    deployment,
                    ts=now,
                    ttft_ms=self.rng.gauss(self.ttft_ms(deployment), 4.0),
                    itl_ms=[self.rng.uniform(4.0, 6.0) for _ in range(5)],
                )
                for deployment, weight in weights.items()
                if weight > 0
                for _ in range(ROWS_PER_TICK)
            ]
            if rows:
                await insert_requests(self.store, rows)
            await asyncio.sleep(TICK_S)

    def canary_weights(self, canary: str) -> list[int]:
        """The canary's weights in the order the route table had them (0 and absent left out)."""
        out: list[int] = []
        for weights in self.weights_seen:
            weight = weights.get(canary, 0)
            if weight and (not out or out[-1] != weight):
                out.append(weight)
        return out


@contextlib.asynccontextmanager
async def traffic(
    stack: Stack, store: Store, name: str, ttft_ms: Callable[[str], float]
) -> AsyncIterator[Traffic]:
    running = Traffic(stack, store, name, ttft_ms)
    task = asyncio.create_task(running.run())
    try:
        yield running
    finally:
        await cancel_and_wait([task])  # (a plain cancel can be lost in its KV reads)
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error


async def _ready_endpoint(stack: Stack, **spec: object) -> tuple[str, str]:
    name = new_name()
    created = await stack.stub.CreateEndpoint(create_request(name, max_num_seqs=1, **spec), metadata=stack.a)
    await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    return name, created.deployment.id


async def _promote(stack: Stack, name: str, max_num_seqs: int) -> str:
    request = pb.PromoteRequest(
        endpoint=name, request_id=uuid.uuid4().hex, engine_config=D.EngineConfig(max_num_seqs=max_num_seqs)
    )
    reply = await stack.stub.Promote(request, metadata=stack.a)
    return str(reply.deployment.id)


async def _states(stack: Stack, name: str, expected: Mapping[str, int]) -> bool:
    return {d.id: d.state for d in await deployments(stack, name)} == expected


async def test_a_healthy_canary_is_promoted_through_every_step(canary_stack: Stack, store: Store) -> None:
    stack = canary_stack
    name, first = await _ready_endpoint(stack)
    async with traffic(stack, store, name, lambda deployment: 50.0) as running:
        canary = await _promote(stack, name, max_num_seqs=2)
        expected = {canary: D.DEPLOYMENT_STATE_ACTIVE, first: D.DEPLOYMENT_STATE_RETIRED}
        await eventually(lambda: _states(stack, name, expected), timeout_s=30, what="the canary promoted")
    assert running.canary_weights(canary) == [1000, 5000, 10000]
    for weights in running.weights_seen:  # every split the gateway saw summed to 100%
        assert sum(weights.values()) in (0, 10_000), weights
    events = await events_of(stack, name)
    started = next(
        e.deploy_started
        for e in events
        if e.kind == "deploy.started" and e.deploy_started.deployment_id == canary
    )
    assert list(started.canary_steps) == [1000, 5000, 10000]
    # (a slow machine may hold a step once for want of requests: that is not a verdict)
    steps = [
        e.deploy_canary_step
        for e in events
        if e.kind == "deploy.canary_step" and e.deploy_canary_step.verdict != events_pb2.CANARY_VERDICT_HOLD
    ]
    assert [(s.step, s.weight, s.verdict) for s in steps] == [
        (0, 5000, events_pb2.CANARY_VERDICT_PROCEED),
        (1, 10000, events_pb2.CANARY_VERDICT_PROCEED),
        (2, 10000, events_pb2.CANARY_VERDICT_PROCEED),
    ]
    assert all(s.canary_requests >= 20 and 30 < s.canary_ttft_p99_ms < 80 for s in steps)
    assert all(s.stable_deployment_id == first and s.steps == 3 for s in steps)
    promoted = [e.deploy_promoted for e in events if e.kind == "deploy.promoted"]
    assert promoted[-1].deployment_id == canary and promoted[-1].previous_deployment_id == first
    table = await routes(stack, name)
    assert table is not None and [(r.deployment_id, r.weight) for r in table.routes] == [(canary, 10_000)]


async def test_a_slow_canary_is_rolled_back_at_the_first_step(canary_stack: Stack, store: Store) -> None:
    stack = canary_stack
    name, first = await _ready_endpoint(stack)
    canary_id: list[str] = []
    async with traffic(stack, store, name, lambda d: 150.0 if d in canary_id else 50.0) as running:
        canary_id.append(await _promote(stack, name, max_num_seqs=2))
        canary = canary_id[0]
        expected = {canary: D.DEPLOYMENT_STATE_ROLLED_BACK, first: D.DEPLOYMENT_STATE_ACTIVE}
        await eventually(lambda: _states(stack, name, expected), timeout_s=30, what="the canary rolled back")
    assert running.canary_weights(canary) == [1000]
    events = await events_of(stack, name)
    steps = [
        e.deploy_canary_step
        for e in events
        if e.kind == "deploy.canary_step" and e.deploy_canary_step.verdict != events_pb2.CANARY_VERDICT_HOLD
    ]
    assert len(steps) == 1 and steps[0].verdict == events_pb2.CANARY_VERDICT_ROLL_BACK
    assert steps[0].weight == 0 and steps[0].canary_ttft_p99_ms > 2 * steps[0].stable_ttft_p99_ms
    back = [e.deploy_rolled_back for e in events if e.kind == "deploy.rolled_back"]
    assert len(back) == 1 and back[0].trigger == events_pb2.DEPLOY_TRIGGER_CANARY_ANALYSIS
    assert back[0].deployment_id == canary and back[0].restored_deployment_id == first and back[0].step == 0
    assert back[0].reason.startswith("ttft_p50")
    table = await routes(stack, name)
    assert table is not None and [(r.deployment_id, r.weight) for r in table.routes] == [(first, 10_000)]
    assert len(stack.factory.live()) == 1  # the canary's engine stopped
    assert not any(e.kind == "deploy.promoted" and e.deploy_promoted.deployment_id == canary for e in events)


async def _breach(js: JetStreamContext, name: str, deployment: str) -> str:
    breach_id = uuid.uuid4().hex
    payload = events_pb2.SlaBreach(breach_id=breach_id, deployment=deployment, burn_rate=20.0)
    await publish_event(
        js, new_event(EventKind.SLA_BREACH, endpoint=name, source="test", payload_message=payload)
    )
    return breach_id


async def test_an_sla_breach_of_the_canary_rolls_it_back(nc: Client, tmp_path: Path, store: Store) -> None:
    # long steps: only the breach can end this rollout
    stack = await start_stack(nc, tmp_path, store=store, rollout={"step_duration_s": 30.0})
    try:
        name, first = await _ready_endpoint(stack)
        canary = await _promote(stack, name, max_num_seqs=2)

        async def at_first_step() -> bool:
            table = await routes(stack, name)
            return table is not None and {r.deployment_id: r.weight for r in table.routes}.get(canary) == 1000

        await eventually(at_first_step, what="the canary at 10%")
        await _breach(stack.ctx.js, name, deployment=first)  # the stable's own breach: the canary stays
        breach_id = await _breach(stack.ctx.js, name, deployment=canary)
        expected = {canary: D.DEPLOYMENT_STATE_ROLLED_BACK, first: D.DEPLOYMENT_STATE_ACTIVE}
        await eventually(lambda: _states(stack, name, expected), what="the canary rolled back on the breach")
        back = [e.deploy_rolled_back for e in await events_of(stack, name) if e.kind == "deploy.rolled_back"]
        assert len(back) == 1 and back[0].trigger == events_pb2.DEPLOY_TRIGGER_BREACH
        assert back[0].breach_id == breach_id and back[0].step == 0
    finally:
        await stop_stack(stack)


async def _uid_of(js: JetStreamContext, name: str) -> str:
    """The stored endpoint's immutable id ("" when there is none): a search is started on it."""
    try:
        entry = await (await js.key_value("endpoints")).get(name)
    except KeyNotFoundError:
        return ""
    return D.Endpoint.FromString(entry.value or b"").uid


async def _search_completed(
    js: JetStreamContext,
    name: str,
    *,
    winner: bool = True,
    verified: bool = True,
    store: Store | None = None,
    stored_for: str = "",
) -> events_pb2.Event:
    """Publish a search.completed about `name` (the event). With `store`, first write the rows the
    searcher and the runner write before theirs (for endpoint `stored_for`, default `name`): the
    deployer rolls out only a winner the store confirms."""
    search_id = f"search-{uuid.uuid4().hex[:8]}"
    trial_id = f"trial-{uuid.uuid4().hex[:8]}"
    config = D.EngineConfig(engine="vllm", model="tiny-model", max_num_seqs=7)
    payload = events_pb2.SearchCompleted(
        search_id=search_id,
        outcome=events_pb2.SEARCH_OUTCOME_WINNER if winner else events_pb2.SEARCH_OUTCOME_NO_IMPROVEMENT,
        winner_trial_id=trial_id if winner else "",
        winner_hardware_class="cpu",
        verified=verified,
    )
    if winner:
        payload.winner.CopyFrom(config)
    if store is not None:
        owner = stored_for or name
        await store.insert(
            "searches",
            [[search_id, 1, owner, await _uid_of(js, owner), "winner" if winner else "no_improvement"]],
            ["search_id", "revision", "endpoint", "endpoint_uid", "outcome"],
            dedup_token=f"test-{search_id}",
        )
        completed = events_pb2.TrialCompleted(
            search_id=search_id, trial_id=trial_id, engine_config=config, passed=True
        )
        report = base64.b64encode(completed.SerializeToString()).decode()
        await store.insert(
            "trials",
            [[trial_id, f"job-{trial_id}", search_id, owner, True, not verified, report]],
            ["trial_id", "job_id", "search_id", "endpoint", "passed", "simulated", "completed_pb"],
            dedup_token=f"test-{trial_id}",
        )
    event = new_event(EventKind.SEARCH_COMPLETED, endpoint=name, source="searcher", payload_message=payload)
    await publish_event(js, event)
    # published twice (a redelivery): rolled out once
    await publish_event(js, event.__class__.FromString(event.SerializeToString()))
    return event


async def test_search_winners_roll_out_under_policy_auto_only(canary_stack: Stack, store: Store) -> None:
    stack = canary_stack
    auto, auto_first = await _ready_endpoint(stack)
    advisory, _ = await _ready_endpoint(stack)
    await stack.stub.UpdateEndpoint(
        pb.UpdateEndpointRequest(
            name=advisory,
            spec=D.EndpointSpec(search_policy=D.SEARCH_POLICY_ADVISORY),
            update_mask=FieldMask(paths=["search_policy"]),
        ),
        metadata=stack.a,
    )
    js = stack.ctx.js
    await _search_completed(js, auto, winner=False, store=store)
    await _search_completed(js, auto, verified=False, store=store)  # modelled only: not rolled out
    await _search_completed(js, advisory, store=store)
    await _search_completed(js, auto)  # forged: nothing in the store says so
    await _search_completed(js, auto, store=store, stored_for=advisory)  # the store says: another endpoint's
    search_id = (await _search_completed(js, auto, store=store)).search_completed.search_id

    async def winner() -> D.Deployment | None:
        found = [d for d in await deployments(stack, auto) if d.origin == D.DEPLOYMENT_ORIGIN_SEARCH]
        return found[0] if found else None

    async with traffic(stack, store, auto, lambda d: 50.0):
        deployment = await eventually(winner, what="the auto endpoint's winner deployed")
        assert deployment.origin_search_id == search_id and deployment.origin_trial_id.startswith("trial-")
        assert deployment.engine_config.max_num_seqs == 7
        expected = {deployment.id: D.DEPLOYMENT_STATE_ACTIVE, auto_first: D.DEPLOYMENT_STATE_RETIRED}
        await eventually(lambda: _states(stack, auto, expected), timeout_s=30, what="the winner promoted")
    started = [e.deploy_started for e in await events_of(stack, auto) if e.kind == "deploy.started"]
    assert [s.trigger for s in started] == [
        events_pb2.DEPLOY_TRIGGER_INITIAL,
        events_pb2.DEPLOY_TRIGGER_SEARCH,
    ]
    assert [d.origin_search_id for d in await deployments(stack, auto) if d.origin_search_id] == [search_id]
    assert len(await deployments(stack, advisory)) == 1  # advisory: nothing rolled out


async def test_a_deployer_restarted_mid_canary_carries_it_on(
    nc: Client, tmp_path: Path, store: Store
) -> None:
    # the first deployer holds each step for 3 s, so the test cannot miss the 50% step (at 0.6 s a
    # busy CI machine did); the second one resumes at FAST pace
    first_stack = await start_stack(
        nc, tmp_path / "one", store=store, rollout={**FAST["rollout"], "step_duration_s": 3.0}
    )
    second_stack: Stack | None = None
    first_stopped = False
    canary_id: list[str] = []
    try:
        async with asyncio.timeout(150):  # a hang fails here, with the stack of where it waits
            name, first = await _ready_endpoint(first_stack)
            async with traffic(first_stack, store, name, lambda d: 50.0):
                canary_id.append(await _promote(first_stack, name, max_num_seqs=2))

                async def at_half() -> bool:
                    table = await routes(first_stack, name)
                    weights = {r.deployment_id: r.weight for r in table.routes} if table else {}
                    return weights.get(canary_id[0]) == 5000

                await eventually(at_half, what="the canary at 50%")
            await stop_stack(first_stack, purge=False)
            first_stopped = True
            # where the first deployer left it: 50%, or 100% when it got one more step in while stopping
            left = await State.open(first_stack.ctx.js)
            record = await left.get_rollout(name)
            assert record is not None and record.deployment_id == canary_id[0] and record.step in (1, 2)
            second_stack = await start_stack(nc, tmp_path / "two", store=store, **FAST)
            async with traffic(second_stack, store, name, lambda d: 50.0) as running:
                expected = {canary_id[0]: D.DEPLOYMENT_STATE_ACTIVE, first: D.DEPLOYMENT_STATE_RETIRED}
                await eventually(lambda: _states(second_stack, name, expected), timeout_s=30, what="promoted")
            # back at its step with its restarted engine (the URL changed), then on to 100%
            assert running.canary_weights(canary_id[0]) == [5000, 10000][record.step - 1 :]
            steps = [
                e.deploy_canary_step
                for e in await events_of(second_stack, name)
                if e.kind == "deploy.canary_step"
                and e.deploy_canary_step.verdict != events_pb2.CANARY_VERDICT_HOLD
            ]
            assert [(s.step, s.weight) for s in steps][-2:] == [(1, 10000), (2, 10000)]
            assert steps[-1].verdict == events_pb2.CANARY_VERDICT_PROCEED
    finally:
        if second_stack is not None:
            await stop_stack(second_stack)
        elif not first_stopped:
            await stop_stack(first_stack)
        else:
            await purge_state(nc.jetstream())


async def test_rollback_during_a_canary_gives_the_stable_its_full_weight(
    nc: Client, tmp_path: Path, store: Store
) -> None:
    stack = await start_stack(nc, tmp_path, store=store, rollout={"step_duration_s": 30.0})
    try:
        name, first = await _ready_endpoint(stack)
        canary = await _promote(stack, name, max_num_seqs=2)

        async def at_first_step() -> bool:
            table = await routes(stack, name)
            return table is not None and {r.deployment_id: r.weight for r in table.routes}.get(canary) == 1000

        await eventually(at_first_step, what="the canary at 10%")
        reply = await stack.stub.Rollback(
            pb.RollbackRequest(endpoint=name, request_id=uuid.uuid4().hex), metadata=stack.a
        )
        assert reply.deployment.id == first
        table = await routes(stack, name)
        assert table is not None and {r.deployment_id: r.weight for r in table.routes}[first] == 10_000
        expected = {canary: D.DEPLOYMENT_STATE_ROLLED_BACK, first: D.DEPLOYMENT_STATE_ACTIVE}
        await eventually(lambda: _states(stack, name, expected), what="the canary drained and stopped")
        table = await routes(stack, name)
        assert table is not None and [(r.deployment_id, r.weight) for r in table.routes] == [(first, 10_000)]
        assert len(stack.factory.live()) == 1
    finally:
        await stop_stack(stack)


async def test_a_canary_whose_engine_fails_is_rolled_back(nc: Client, tmp_path: Path, store: Store) -> None:
    stack = await start_stack(nc, tmp_path, store=store, rollout={"step_duration_s": 30.0}, max_restarts=0)
    try:
        name, first = await _ready_endpoint(stack)
        canary = await _promote(stack, name, max_num_seqs=2)

        async def canary_url() -> str | None:
            table = await routes(stack, name)
            urls = {r.deployment_id: r.upstream_url for r in table.routes if r.weight} if table else {}
            return urls.get(canary)

        url = await eventually(canary_url, what="the canary taking traffic")
        async with aiohttp.ClientSession() as session, session.post(f"{url}/fixture/exit") as response:
            assert response.status == 200
        expected = {canary: D.DEPLOYMENT_STATE_ROLLED_BACK, first: D.DEPLOYMENT_STATE_ACTIVE}
        await eventually(lambda: _states(stack, name, expected), what="the failed canary rolled back")
        back = [e.deploy_rolled_back for e in await events_of(stack, name) if e.kind == "deploy.rolled_back"]
        assert len(back) == 1 and back[0].trigger == events_pb2.DEPLOY_TRIGGER_FAILURE
        assert "engine failed" in back[0].reason
    finally:
        await stop_stack(stack)
