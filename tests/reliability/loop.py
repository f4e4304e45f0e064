"""The loop's data and control path for the reliability tests, on the sim engine.

A private nats-server (so a test can kill it), and the gateway, the profiler's telemetry sink and
the deployer hosted in this process as `evertune up` hosts them (the sink and the deployer share the
session's chDB engine, each test in a database of its own). The deployer serves an endpoint on the
`sim` engine (hardware pool `sim-cpu`), so an engine starts in about a second and a canary rollout
takes seconds. `Traffic` drives chat requests through the gateway in the open loop and keeps every
result; `check_consistent` is the endpoint-state check every test ends with.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from evertune.apps.harness.loop_stack import LoopStack, loop_stack
from evertune.apps.harness.waiting import eventually
from evertune.deployer import DeployerSettings
from evertune.deployer.rollout_policy import RolloutPolicy
from evertune.deployer.state import State
from evertune.domain.engines.sim import SIM_SERVER_MODULE
from evertune.domain.replay import RequestResult, replay
from evertune.gateway import GatewaySettings
from evertune.infra.bus import connect
from evertune.infra.store import Store, open_store
from evertune.profiler import ProfilerSettings
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from evertune.v1 import endpoint_service_pb2_grpc as pb_grpc
from evertune.v1 import events_pb2
from tests.domain.replay.helpers import chat_plan

#: The rollout of the loop tests: a three-step canary of 2 s steps judged on 5 requests an arm.
FAST_ROLLOUT = RolloutPolicy(steps=(2000, 5000, 10000), step_duration_s=2.0, min_requests=5)
#: The other deployer settings of the loop tests: short waits, one warm-up request.
FAST_DEPLOYER: dict[str, Any] = {
    "rollout": FAST_ROLLOUT,
    "telemetry_lag_s": 1.0,
    "drain_timeout_s": 2.0,
    "ready_timeout_s": 60.0,
    "health_interval_s": 0.5,
    "warmup_requests": 1,
}
#: Deployment states a finished rollout leaves behind for a deployment that is not the stable one.
FINISHED = (D.DEPLOYMENT_STATE_RETIRED, D.DEPLOYMENT_STATE_ROLLED_BACK)
#: How long `check_consistent` waits for the replaced deployments to finish draining.
SETTLE_S = 30.0


def deployer_settings(tmp_path: Path, **overrides: object) -> DeployerSettings:
    values: dict[str, object] = {"grpc_port": 0, "engine_log_dir": tmp_path / "engines", **FAST_DEPLOYER}
    values.update(overrides)
    return DeployerSettings(**values)  # type: ignore[arg-type]


@dataclass
class Loop:
    """A running loop (`harness.loop_stack`) and what the tests need around it."""

    stack: LoopStack  #: NATS, the gateway, the profiler and the deployer, hosted here
    store: Store  #: this test's database on the session's engine
    stub: pb_grpc.EndpointServiceStub
    model_dir: Path
    nc: Client  #: the test's own connection to the loop's NATS

    @property
    def js(self) -> JetStreamContext:
        return self.nc.jetstream()


@contextlib.asynccontextmanager
async def running_loop(
    tmp_path: Path, *, store_url: str, model_dir: Path, **deployer_overrides: object
) -> AsyncIterator[Loop]:
    """Start NATS and the hosted services; stop them all (and NATS, by its pid) afterwards."""
    async with loop_stack(
        tmp_path,
        gateway=GatewaySettings(
            port=0, tokenizer_dir=model_dir, batch_ms=20.0, publish_timeout_s=0.5, spool_retry_s=0.2
        ),
        profiler=ProfilerSettings(schedule_interval_s=0, sink_flush_ms=50.0, sink_ack_wait_s=2.0),
        deployer=deployer_settings(tmp_path, **deployer_overrides),
        store_url=store_url,
        name="reliability-loop",
    ) as stack:
        store = await open_store(store_url, database=stack.database)
        nc = await connect(stack.nats.url, name="reliability-loop-test")
        channel = grpc.aio.insecure_channel(stack.deployer.server.address)
        try:
            yield Loop(
                stack=stack,
                store=store,
                stub=pb_grpc.EndpointServiceStub(channel),  # type: ignore[no-untyped-call]
                model_dir=model_dir,
                nc=nc,
            )
        finally:
            await nc.close()
            await channel.close()
            await store.close()


def sim_spec(name: str, model_dir: Path, *, ttft_p99_ms: float = 1000.0) -> D.EndpointSpec:
    """An endpoint on the sim engine (pool `sim-cpu`), search policy off: rollouts come from Promote."""
    return D.EndpointSpec(
        name=name,
        model=str(model_dir),
        slo=D.Slo(ttft_p99_ms=ttft_p99_ms),
        hardware_pool=D.HardwarePool(hardware_class="sim-cpu"),
        initial_engine_config=D.EngineConfig(engine="sim", max_num_seqs=64),
        search_policy=D.SEARCH_POLICY_OFF,
    )


async def create_endpoint(stub: pb_grpc.EndpointServiceStub, spec: D.EndpointSpec) -> str:
    """Create the endpoint and wait until it is READY; its stable deployment's id."""
    await stub.CreateEndpoint(pb.CreateEndpointRequest(request_id=uuid.uuid4().hex, spec=spec))
    got: list[D.Endpoint] = []

    async def is_ready() -> bool:
        endpoint: D.Endpoint = (await stub.GetEndpoint(pb.GetEndpointRequest(name=spec.name))).endpoint
        assert endpoint.state != D.ENDPOINT_STATE_FAILED, endpoint.state_message
        got[:] = [endpoint]
        return bool(endpoint.state == D.ENDPOINT_STATE_READY)

    await eventually(is_ready, timeout_s=60, what=f"{spec.name} READY")
    return str(got[0].stable_deployment_id)


async def promote(stub: pb_grpc.EndpointServiceStub, name: str, *, max_num_seqs: int) -> str:
    """Start a canary rollout of a changed configuration; the new deployment's id."""
    reply = await stub.Promote(
        pb.PromoteRequest(
            endpoint=name,
            request_id=uuid.uuid4().hex,
            engine_config=D.EngineConfig(engine="sim", max_num_seqs=max_num_seqs),
            reason="reliability test",
        )
    )
    return str(reply.deployment.id)


async def weight_of(state: State, name: str, deployment_id: str) -> int:
    """The deployment's share of the endpoint's route table, basis points."""
    table = await state.get_routes(name)
    return sum(r.weight for r in table.routes if r.deployment_id == deployment_id) if table else 0


@dataclass
class Traffic:
    """Chat requests through the gateway, open loop, one every `every_s`; every result kept."""

    url: str
    endpoint: str
    every_s: float
    requests: int
    results: list[RequestResult] = field(default_factory=list)
    sent: set[str] = field(default_factory=set)  #: request ids that left the client

    async def run(self) -> None:
        """Send `requests` requests and wait for every answer."""
        await self._send(self.requests)

    async def run_until(self, stop: asyncio.Event) -> None:
        """Send `requests` at a time, again and again, until `stop` is set (each round is waited
        for, so every request sent has its result)."""
        while not stop.is_set():
            await self._send(self.requests)

    async def _send(self, n: int) -> None:
        plan = chat_plan(
            n, every_s=self.every_s, prefix=f"{self.endpoint}-{uuid.uuid4().hex[:6]}", max_tokens=4
        )
        await replay(
            plan,
            target=self.url,
            model=self.endpoint,
            on_sent=self.sent.add,
            on_result=self.results.append,
            timeout_s=30.0,
        )

    @property
    def failures(self) -> list[tuple[str, str, int]]:
        """(request id, error class, status) of every request that did not succeed."""
        return [(r.request_id, r.error_class, r.status) for r in self.results if not r.ok]


async def rollout_finished(state: State, name: str, canary: str, *, timeout_s: float) -> int:
    """Wait until the rollout of `canary` ended (no rollout record, the canary ACTIVE or finished);
    the canary's final state."""
    final: list[int] = []

    async def ended() -> bool:
        if await state.get_rollout(name) is not None:
            return False
        deployment = await state.get_deployment(name, canary)
        assert deployment is not None
        final[:] = [deployment.state]
        return deployment.state in (D.DEPLOYMENT_STATE_ACTIVE, *FINISHED)

    await eventually(ended, timeout_s=timeout_s, what=f"the rollout of {canary} finished")
    return final[0]


@dataclass
class Consistency:
    """What `check_consistent` found."""

    stable: str  #: the endpoint's stable deployment
    engine_pids: list[int]  #: its live engine processes


async def check_consistent(state: State, name: str) -> Consistency:
    """The endpoint's state after the chaos: READY, its stable deployment ACTIVE and alone in the
    route table at 10000, every other deployment finished, no rollout record, and engine processes
    alive for the stable deployment only.

    A replaced deployment is still draining for a moment after its rollout ended (the deployer
    stops its engines, then rewrites the routes, then records its final state), so the check first
    waits up to `SETTLE_S` for no deployment to be DRAINING."""

    async def settled() -> bool:
        return all(d.state != D.DEPLOYMENT_STATE_DRAINING for d in await state.list_deployments(name))

    await eventually(settled, timeout_s=SETTLE_S, what=f"the replaced deployments of {name} drained")
    endpoint = await state.get_endpoint(name)
    assert endpoint is not None and endpoint.state == D.ENDPOINT_STATE_READY, endpoint
    stable = endpoint.stable_deployment_id
    by_id = {d.id: d for d in await state.list_deployments(name)}
    assert by_id[stable].state == D.DEPLOYMENT_STATE_ACTIVE
    assert all(d.state in FINISHED for i, d in by_id.items() if i != stable), {
        i: D.DeploymentState.Name(d.state) for i, d in by_id.items()
    }
    assert await state.get_rollout(name) is None
    table = await state.get_routes(name)
    assert table is not None
    assert sum(r.weight for r in table.routes) == 10_000
    assert {r.deployment_id for r in table.routes if r.weight} == {stable}
    ports = {int(url.rsplit(":", 1)[1].split("/")[0]) for url in by_id[stable].upstream_url.split(",")}
    engines = engine_processes(name)
    assert set(engines.values()) == ports, (engines, ports)  # the stable's engines, and no orphan
    return Consistency(stable=stable, engine_pids=sorted(engines))


def engine_processes(endpoint: str) -> dict[int, int]:
    """Live sim engine processes serving `endpoint` on this machine: pid -> port (from /proc)."""
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if SIM_SERVER_MODULE in argv and endpoint in argv and "--port" in argv and alive(int(entry)):
            out[int(entry)] = int(argv[argv.index("--port") + 1])
    return out


def alive(pid: int) -> bool:
    """Whether process `pid` exists (and is not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def children_of(pid: int) -> set[int]:
    """Every descendant process of `pid`, from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().split(")")[-1].split()[1])
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        nxt = {child for child, parent in parents.items() if parent in frontier} - out
        out |= nxt
        frontier = nxt
    return out


class Seen:
    """Every event of one endpoint, as it arrives."""

    def __init__(self) -> None:
        self.events: list[events_pb2.Event] = []

    def of(self, kind: str) -> list[events_pb2.Event]:
        return [e for e in self.events if e.kind == kind]


@contextlib.asynccontextmanager
async def watching(js: JetStreamContext, endpoint: str) -> AsyncIterator[Seen]:
    seen = Seen()

    async def on_msg(msg) -> None:  # type: ignore[no-untyped-def]
        seen.events.append(events_pb2.Event.FromString(msg.data))

    sub = await js.subscribe(
        f"evertune.events.*.*.{endpoint}",
        stream="EVENTS",
        cb=on_msg,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
    )
    try:
        yield seen
    finally:
        await sub.unsubscribe()
