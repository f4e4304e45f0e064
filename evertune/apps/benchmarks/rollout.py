"""`evertune bench rollout`: a good swap and a planted bad canary, through the gateway under load.

Hosted in this process on a fresh temporary data dir: an embedded nats-server, chDB, and the
gateway, the profiler's telemetry sink and the deployer as `evertune up` hosts them. `bench rollout`
runs the endpoint on the `sim` engine (hardware pool `sim-cpu`, evertune's performance model), so an
engine starts in about a second; `bench rollout-vllm` runs it on real vLLM-CPU engines (pool `cpu`,
the local model, eager mode, a 2 GiB KV cache each) at a rate two engines sharing this machine's
cores can serve; the JSON says which in `engine` (see `SIM` and `VLLM`). Rollout settings are short
(canary steps 10% -> 50% -> 100% of `step_s` seconds each, judged on `min_requests` requests an arm;
see `QUICK` and `FULL`) so that a run takes a few minutes; they are reported in the JSON.

A steady open-loop replay of voice-like chat requests (a long shared system prompt, a short user
turn, a few output tokens) runs through the gateway for the whole benchmark:

1. **before**: `before_s` of traffic on the first deployment (vLLM defaults);
2. **good swap**: Promote of an equal-or-better configuration (more sequences, prefix caching on);
   the canary goes 10/50/100% and is promoted, the old deployment drains and stops;
3. **bad canary**: Promote of a deliberately slow configuration (prefix caching off and a tiny
   chunked-prefill token budget, so every long prompt is prefilled from scratch in many steps); the
   canary analysis must roll it back.

Figures:
- `failed_requests`: requests that did not complete, over the whole run (both rollouts);
- `cut_streams`: streams that broke off before their final chunk (`stream_broken`);
- `swap_ttft_p99_ratio`: client p99 TTFT of requests sent during the good swap (Promote to the old
  deployment retired) over the p99 of those sent in the before window;
- `rollback_s`: from the bad canary's first failed analysis (its `deploy.canary_step` event with
  verdict ROLL_BACK) to its weight 0 in the route table (polled every `POLL_S`);
- `bad_canary_requests`: requests the bad canary served (telemetry rows of its deployment).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from nats.js.api import ConsumerConfig, DeliverPolicy

from evertune.apps.harness.waiting import eventually
from evertune.domain.model import ensure_model
from evertune.domain.percentiles import percentile
from evertune.domain.replay import RequestResult, replay
from evertune.domain.workloads.plan import ChatMessage, PlannedRequest
from evertune.errors import DeadlineExceeded, Unavailable
from evertune.infra.bus import connect
from evertune.infra.events import event_filter_subject
from evertune.infra.settings import SharedSettings
from evertune.infra.store import open_store
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from evertune.v1 import endpoint_service_pb2_grpc as pb_grpc
from evertune.v1 import events_pb2

if TYPE_CHECKING:
    from nats.aio.client import Client

    from evertune.apps.harness.loop_stack import LoopStack
    from evertune.deployer import DeployerService
    from evertune.deployer.state import State


@dataclass(frozen=True)
class Mode:
    """Durations of one kind of run."""

    before_s: float  #: seconds of traffic measured before the good swap
    step_s: float  #: seconds of traffic at each canary step before it is analysed
    min_requests: int  #: requests each arm must have served in a step before it is judged
    #: analyses a step may stay undecided (too few canary requests) before it is rolled back
    max_holds: int = 5


QUICK = Mode(before_s=20.0, step_s=3.0, min_requests=5)
FULL = Mode(before_s=60.0, step_s=5.0, min_requests=10)
#: Route-table poll period while waiting for the roll back, seconds.
POLL_S = 0.02
#: Warm-up requests straight to each new deployment before it takes traffic: a freshly started
#: engine process serves its first requests slower, which a canary step of a few seconds would see.
WARMUP_REQUESTS = 20
#: Seconds of each replay round; rounds start back to back and overlap, so the load is steady.
ROUND_S = 5.0


@dataclass(frozen=True)
class Engines:
    """What the endpoint runs on, and the three configurations the benchmark deploys."""

    engine: str  #: the engine kind, as the JSON reports it
    hardware_class: str  #: the endpoint's hardware pool
    stable: D.EngineConfig  #: the first deployment (vLLM's defaults)
    good: D.EngineConfig  #: an equal-or-better configuration: the good swap
    bad: D.EngineConfig  #: a deliberately slow one: the planted bad canary
    rps: float  #: offered load, requests per second (open loop)
    ready_timeout_s: float  #: how long an engine may take to start
    ttft_slack_ms: float  #: the canary's absolute TTFT slack (noise of this engine on these cores)
    itl_slack_ms: float = 2.0  #: the canary's absolute slack on per-request p99 gaps (the deployer's default)


#: The performance model's engine: starts in a second; 20 requests/s.
SIM = Engines(
    engine="sim",
    hardware_class="sim-cpu",
    stable=D.EngineConfig(engine="sim", max_num_seqs=64),
    good=D.EngineConfig(engine="sim", max_num_seqs=128, enable_prefix_caching=True),
    # no prefix caching, and 32 prompt tokens a step: every long prompt prefilled in many steps
    bad=D.EngineConfig(
        engine="sim",
        max_num_seqs=64,
        enable_prefix_caching=False,
        enable_chunked_prefill=True,
        max_num_batched_tokens=32,
    ),
    rps=20.0,
    ready_timeout_s=60.0,
    ttft_slack_ms=5.0,
)
#: Real vLLM-CPU on the local model (eager: starts in 25-60 s instead of 50-230 s). Two engines share
#: the cores during a swap, with the client and the gateway, so the load is 4 requests/s (one engine
#: alone serves ~15/s, see `bench engine`) and the canary's TTFT slack 25 ms.
VLLM = Engines(
    engine="vllm",
    hardware_class="cpu",
    stable=D.EngineConfig(engine="vllm", enforce_eager=True, kv_cache_space_gib=2),
    good=D.EngineConfig(engine="vllm", enforce_eager=True, kv_cache_space_gib=2, enable_prefix_caching=True),
    bad=D.EngineConfig(
        engine="vllm",
        enforce_eager=True,
        kv_cache_space_gib=2,
        max_num_seqs=16,
        enable_prefix_caching=False,
        enable_chunked_prefill=True,
        max_num_batched_tokens=32,
    ),
    rps=4.0,
    ready_timeout_s=300.0,
    ttft_slack_ms=25.0,
)
_SYSTEM = (
    "You are the voice agent of a regional energy provider. Answer briefly and politely, in one or "
    "two short sentences suited to speech. Confirm account numbers digit by digit, never read out "
    "personal data, and offer to transfer the caller to a human when a question is about billing "
    "disputes, outages in progress or moving house. "
) * 6
_UTTERANCES = ("Hello, I have a question about my bill.", "Can you check my meter reading?", "Thanks, bye.")


def voice_plan(n: int, *, every_s: float, prefix: str) -> list[PlannedRequest]:
    """`n` chat turns one every `every_s` s: a long shared system prompt and a short utterance."""
    return [
        PlannedRequest(
            at_s=i * every_s,
            request_id=f"{prefix}-{i}",
            api="chat",
            max_tokens=8,
            messages=(ChatMessage("system", _SYSTEM), ChatMessage("user", _UTTERANCES[i % 3])),
            conversation_id=f"{prefix}-call-{i // 3}",
            turn=i % 3,
        )
        for i in range(n)
    ]


@dataclass
class Sample:
    """One finished request and when it left (wall clock)."""

    sent_at: float  #: epoch seconds when the request was sent
    result: RequestResult  #: what the client saw


@dataclass
class Load:
    """Open-loop traffic through the gateway until stopped; every result kept."""

    url: str  #: the gateway's base URL
    endpoint: str  #: the endpoint (the model name callers ask for)
    rps: float  #: requests per second
    samples: list[Sample] = field(default_factory=list)

    def _keep(self, result: RequestResult) -> None:
        self.samples.append(Sample(sent_at=time.time() - (result.e2e_ms or 0.0) / 1000, result=result))

    async def run_until(self, stop: asyncio.Event) -> None:
        rounds: list[asyncio.Task[Any]] = []
        n = int(ROUND_S * self.rps)
        while not stop.is_set():
            plan = voice_plan(n, every_s=1 / self.rps, prefix=f"{self.endpoint}-{uuid.uuid4().hex[:6]}")
            rounds.append(
                asyncio.create_task(
                    replay(plan, target=self.url, model=self.endpoint, on_result=self._keep, timeout_s=30.0)
                )
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), ROUND_S)
        await asyncio.gather(*rounds)

    def p99_ttft(self, lo: float, hi: float) -> float | None:
        ttfts = [
            s.result.ttft_ms for s in self.samples if lo <= s.sent_at < hi and s.result.ttft_ms is not None
        ]
        return percentile(ttfts, 99) if ttfts else None


class Events:
    """The endpoint's events as they arrive."""

    def __init__(self) -> None:
        self.seen: list[events_pb2.Event] = []
        self.changed = asyncio.Event()

    def add(self, event: events_pb2.Event) -> None:
        self.seen.append(event)
        self.changed.set()

    async def first(
        self, kind: str, match: Callable[[events_pb2.Event], bool], *, timeout_s: float
    ) -> events_pb2.Event:
        deadline = time.monotonic() + timeout_s
        while True:
            found = next((e for e in self.seen if e.kind == kind and match(e)), None)
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unavailable(f"no {kind} event within {timeout_s:g} s")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)


def _stack(
    folder: Path, model_dir: Path, mode: Mode, engines: Engines, store_url: str | None
) -> contextlib.AbstractAsyncContextManager[LoopStack]:
    """NATS and the gateway, profiler and deployer in this process, with the run's canary
    settings (`harness.loop_stack`). `store_url`: a store to use, with a fresh database (a process
    holds one chDB folder at most); None: a chDB folder in `folder`."""
    from evertune.apps.harness.loop_stack import loop_stack
    from evertune.deployer import DeployerSettings
    from evertune.deployer.rollout_policy import RolloutPolicy
    from evertune.gateway import GatewaySettings
    from evertune.profiler import ProfilerSettings

    return loop_stack(
        folder,
        gateway=GatewaySettings(port=0, tokenizer_dir=model_dir, batch_ms=20.0),
        profiler=ProfilerSettings(schedule_interval_s=0, sink_flush_ms=50.0, metrics_port=0),
        deployer=DeployerSettings(
            grpc_port=0,
            metrics_port=0,
            engine_log_dir=folder / "engines",
            rollout=RolloutPolicy(
                steps=(1000, 5000, 10000),
                step_duration_s=mode.step_s,
                min_requests=mode.min_requests,
                max_holds=mode.max_holds,
                ttft_slack_ms=engines.ttft_slack_ms,
                itl_slack_ms=engines.itl_slack_ms,
            ),
            telemetry_lag_s=1.0,
            drain_timeout_s=10.0,
            ready_timeout_s=engines.ready_timeout_s,
            health_interval_s=0.5,
            warmup_requests=WARMUP_REQUESTS,
        ),
        store_url=store_url,
        name="bench-rollout",
        start_timeout_s=120,
    )


def _state(deployer: DeployerService) -> State:
    assert deployer.work is not None, "the deployer is not running"
    return deployer.work.state


async def _weight(deployer: DeployerService, name: str, deployment_id: str) -> int:
    table = await _state(deployer).get_routes(name)
    return sum(r.weight for r in table.routes if r.deployment_id == deployment_id) if table else 0


async def _state_of(deployer: DeployerService, name: str, deployment_id: str) -> int:
    deployment = await _state(deployer).get_deployment(name, deployment_id)
    return int(deployment.state) if deployment is not None else 0


async def run(quick: bool) -> dict[str, Any]:
    """`bench rollout`: on the sim engine."""
    return await measure(QUICK if quick else FULL, SIM)


async def run_vllm(quick: bool) -> dict[str, Any]:
    """`bench rollout-vllm`: on real vLLM-CPU engines."""
    return await measure(QUICK if quick else FULL, VLLM)


async def measure(
    mode: Mode, engines: Engines, *, bad_canary: bool = True, store_url: str | None = None
) -> dict[str, Any]:
    """Host the services on a temporary data dir and run the rollouts; the figures. Without
    `bad_canary`, the good swap only (its keys about the bad canary are None); `store_url`: the
    store to use (a fresh database in it), else a chDB folder of the run's own."""
    with tempfile.TemporaryDirectory(prefix="evertune-bench-rollout-") as tmp:
        root = Path(tmp)
        model_dir = await asyncio.to_thread(ensure_model, root / "model")
        async with _stack(root, model_dir, mode, engines, store_url) as stack:
            run = _Run(
                deployer=stack.deployer, name=f"bench-rollout-{uuid.uuid4().hex[:6]}", mode=mode,
                engines=engines,
            )  # fmt: skip
            nc = await connect(stack.nats.url, name="bench-rollout")
            channel = grpc.aio.insecure_channel(stack.deployer.server.address)
            try:
                return await run.measure(
                    nc, channel, gateway_url=stack.gateway_url, shared=stack.shared, model_dir=model_dir,
                    bad_canary=bad_canary,
                )  # fmt: skip
            finally:
                await channel.close()
                await nc.close()


@dataclass
class _Run:
    """One benchmark run against the hosted services: the endpoint, its traffic and its events."""

    deployer: DeployerService
    name: str  #: the endpoint's name
    mode: Mode
    engines: Engines
    events: Events = field(default_factory=lambda: Events())

    async def measure(
        self,
        nc: Client,
        channel: grpc.aio.Channel,
        *,
        gateway_url: str,
        shared: SharedSettings,
        model_dir: Path,
        bad_canary: bool,
    ) -> dict[str, Any]:
        async def on_msg(msg: Any) -> None:
            self.events.add(events_pb2.Event.FromString(msg.data))

        sub = await nc.jetstream().subscribe(
            event_filter_subject(endpoint=self.name),
            stream="EVENTS",
            cb=on_msg,
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
        )
        stub = pb_grpc.EndpointServiceStub(channel)  # type: ignore[no-untyped-call]
        first = await self._create(stub, model_dir)
        load = Load(url=gateway_url, endpoint=self.name, rps=self.engines.rps)
        stop = asyncio.Event()
        traffic = asyncio.create_task(load.run_until(stop))
        try:
            await asyncio.sleep(2.0)  # warm: the first round's connections and prefix cache
            before_lo = time.time()
            await asyncio.sleep(self.mode.before_s)
            swap_lo = time.time()
            good_final = await self._good_swap(stub, first)
            swap_hi = time.time()
            await asyncio.sleep(2.0)
            bad = await self._bad_canary(stub) if bad_canary else None
        finally:
            stop.set()
            await traffic
        await sub.unsubscribe()
        results = [s.result for s in load.samples]
        before = load.p99_ttft(before_lo, swap_lo)
        during = load.p99_ttft(swap_lo, swap_hi)
        figures: dict[str, Any] = {
            "engine": self.engines.engine,
            "hardware_class": self.engines.hardware_class,
            "rollout_steps": "10/50/100",
            "step_duration_s": self.mode.step_s,
            "canary_min_requests": self.mode.min_requests,
            "canary_ttft_slack_ms": self.engines.ttft_slack_ms,
            "warmup_requests": WARMUP_REQUESTS,
            "before_s": self.mode.before_s,
            "offered_rps": self.engines.rps,
            "requests": len(results),
            "failed_requests": sum(1 for r in results if not r.ok),
            "cut_streams": sum(1 for r in results if r.error_class == "stream_broken"),
            "swap_ttft_p99_ratio": round(during / before, 4) if before and during else None,
            "before_ttft_p99_ms": round(before, 2) if before else None,
            "swap_ttft_p99_ms": round(during, 2) if during else None,
            "swap_s": round(swap_hi - swap_lo, 2),
            "good_swap_promoted": good_final == D.DEPLOYMENT_STATE_ACTIVE,
        }
        bad_requests = (
            await _rows_of(shared, self.name, bad.deployment_id, sent=len(results)) if bad else None
        )
        return figures | (bad.figures(bad_requests) if bad else _NO_BAD_CANARY)

    async def _create(self, stub: pb_grpc.EndpointServiceStub, model_dir: Path) -> str:
        """Create the endpoint on the stable configuration; its first deployment once READY."""
        spec = D.EndpointSpec(
            name=self.name,
            model=str(model_dir),
            slo=D.Slo(ttft_p99_ms=2000.0),
            hardware_pool=D.HardwarePool(hardware_class=self.engines.hardware_class),
            initial_engine_config=self.engines.stable,
            search_policy=D.SEARCH_POLICY_OFF,
        )
        await stub.CreateEndpoint(pb.CreateEndpointRequest(request_id=uuid.uuid4().hex, spec=spec))

        async def ready() -> bool:
            got = (await stub.GetEndpoint(pb.GetEndpointRequest(name=self.name))).endpoint
            if got.state == D.ENDPOINT_STATE_FAILED:
                raise Unavailable(f"endpoint failed: {got.state_message}")
            return bool(got.state == D.ENDPOINT_STATE_READY)

        await eventually(
            ready, timeout_s=self.engines.ready_timeout_s + 30, what="endpoint READY", every_s=0.1
        )
        return str(
            (await stub.GetEndpoint(pb.GetEndpointRequest(name=self.name))).endpoint.stable_deployment_id
        )

    async def _good_swap(self, stub: pb_grpc.EndpointServiceStub, first: str) -> int:
        """Promote the good configuration and wait until the rollout ended; the new deployment's state."""
        good = await _promote(stub, self.name, self.engines.good, reason="bench: good swap")

        async def swapped() -> bool:
            """The rollout ended: promoted and the old deployment stopped, or rolled back
            (a false roll back; the figures say so in `good_swap_promoted`) and stopped."""
            if await _state(self.deployer).get_rollout(self.name) is not None:
                return False
            now = await _state_of(self.deployer, self.name, good)
            if now == D.DEPLOYMENT_STATE_ACTIVE:
                return await _state_of(self.deployer, self.name, first) == D.DEPLOYMENT_STATE_RETIRED
            return now in (D.DEPLOYMENT_STATE_ROLLED_BACK, D.DEPLOYMENT_STATE_FAILED)

        await eventually(
            swapped, timeout_s=self.engines.ready_timeout_s + 180, what="the good swap finished", every_s=0.1
        )
        return await _state_of(self.deployer, self.name, good)

    async def _bad_canary(self, stub: pb_grpc.EndpointServiceStub) -> _BadCanary:
        """Promote the slow configuration and time its roll back."""
        bad = await _promote(stub, self.name, self.engines.bad, reason="bench: planted bad canary")
        started = time.time()

        async def carried() -> bool:
            return await _weight(self.deployer, self.name, bad) > 0

        await eventually(
            carried, timeout_s=self.engines.ready_timeout_s + 60, what="the bad canary taking traffic",
            every_s=POLL_S,
        )  # fmt: skip

        async def out() -> bool:
            return await _weight(self.deployer, self.name, bad) == 0

        await eventually(out, timeout_s=180, what="the bad canary back to weight 0", every_s=POLL_S)
        weight0_at = time.time()
        verdict = await self.events.first(
            "deploy.canary_step",
            lambda e: (
                e.deploy_canary_step.deployment_id == bad
                and e.deploy_canary_step.verdict == events_pb2.CANARY_VERDICT_ROLL_BACK
            ),
            timeout_s=10,
        )

        async def stopped() -> bool:
            return await _state_of(self.deployer, self.name, bad) == D.DEPLOYMENT_STATE_ROLLED_BACK

        await eventually(stopped, timeout_s=60, what="the bad canary stopped", every_s=0.1)
        await asyncio.sleep(2.0)
        steps = [
            e.deploy_canary_step
            for e in self.events.seen
            if e.kind == "deploy.canary_step" and e.deploy_canary_step.deployment_id == bad
        ]
        return _BadCanary(
            deployment_id=bad,
            started_at=started,
            analysis_at=verdict.time.seconds + verdict.time.nanos / 1e9,
            weight0_at=weight0_at,
            canary_ttft_p99_ms=max((s.canary_ttft_p99_ms for s in steps), default=0.0),
            stable_ttft_p99_ms=max((s.stable_ttft_p99_ms for s in steps), default=0.0),
        )


@dataclass(frozen=True)
class _BadCanary:
    """What the planted bad canary's rollout showed."""

    deployment_id: str  #: the bad canary's deployment
    started_at: float  #: epoch seconds of its Promote
    analysis_at: float  #: epoch seconds of its first ROLL_BACK analysis (the event's time)
    weight0_at: float  #: epoch seconds when the route table first gave it weight 0
    canary_ttft_p99_ms: float  #: the worst canary TTFT tail its analyses saw
    stable_ttft_p99_ms: float  #: the stable arm's, in the same analyses

    def figures(self, requests: int | None) -> dict[str, Any]:
        return {
            "rollback_s": round(self.weight0_at - self.analysis_at, 3),
            "bad_canary_detect_s": round(self.analysis_at - self.started_at, 2),
            "bad_canary_requests": requests,
            "bad_canary_ttft_p99_ms": round(self.canary_ttft_p99_ms, 2),
            "bad_canary_stable_ttft_p99_ms": round(self.stable_ttft_p99_ms, 2),
        }


#: The bad canary's keys when it did not run.
_NO_BAD_CANARY: dict[str, Any] = dict.fromkeys(
    (
        "rollback_s",
        "bad_canary_detect_s",
        "bad_canary_requests",
        "bad_canary_ttft_p99_ms",
        "bad_canary_stable_ttft_p99_ms",
    )
)


async def _promote(
    stub: pb_grpc.EndpointServiceStub, name: str, config: D.EngineConfig, *, reason: str
) -> str:
    reply = await stub.Promote(
        pb.PromoteRequest(endpoint=name, request_id=uuid.uuid4().hex, engine_config=config, reason=reason)
    )
    return str(reply.deployment.id)


async def _rows_of(shared: SharedSettings, name: str, deployment_id: str, *, sent: int) -> int:
    """Telemetry rows of `deployment_id`, once every request sent has its row (or 30 s passed)."""
    store = await open_store(shared.store_url, database=shared.clickhouse_database)
    try:

        async def landed() -> bool:
            rows = await store.query("SELECT count() FROM requests WHERE endpoint = {e:String}", {"e": name})
            return int(rows[0][0]) >= sent

        with contextlib.suppress(DeadlineExceeded):  # counted as they are
            await eventually(landed, timeout_s=30, what="telemetry rows", every_s=0.5)
        rows = await store.query(
            "SELECT count() FROM requests WHERE endpoint = {e:String} AND deployment = {d:String}",
            {"e": name, "d": deployment_id},
        )
        return int(rows[0][0])
    finally:
        await store.close()
