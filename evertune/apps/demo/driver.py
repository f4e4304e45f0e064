"""The demo's driver: provision an endpoint through the deployer's gRPC API, drive the voice
workload through the gateway open-loop, show the SLO panel and the loop's events as they happen,
then count the telemetry and hand everything to the report.

It is a client of the running stack, like a person with the CLI: it talks to the deployer over
gRPC, to the gateway over HTTP, to the sla-monitor and the profiler over NATS, and reads the
store with SQL. It never plays a stage of the loop itself; what the loop did is read from the
events it published (see `panel.stage_verdicts`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import math
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import grpc
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from rich.console import RenderableType

from evertune.apps.cli.console import out_console
from evertune.apps.cli.slo import SLA_MONITOR, SloRow, rows_from_status
from evertune.apps.demo.launch_dtype import DtypeChoice, measure_launch_dtype
from evertune.apps.demo.panel import DemoEvent, demo_event, event_line, loop_events, slo_panel
from evertune.apps.demo.sizing import (
    LoadSizing,
    PromptScaling,
    probe_requests,
    requests_per_call_s,
    size_load,
    text_scale,
)
from evertune.apps.demo.traffic import BASELINE, TrafficPlan, phase_of
from evertune.apps.demo.webhook import AlertReceiver, Delivered
from evertune.domain.model import Size, ensure_model
from evertune.domain.replay import RequestResult, replay, replay_alone
from evertune.domain.replay.client import list_models
from evertune.domain.slo import Slo, describe_slo
from evertune.domain.workloads.plan import PlannedRequest
from evertune.errors import EvertuneError, FailedPrecondition, Unavailable
from evertune.infra.bus import connect
from evertune.infra.events import event_filter_subject
from evertune.infra.logging import get_logger
from evertune.infra.runtime.micro import STATUS_ENDPOINT, InstanceStatus
from evertune.infra.store import open_store
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from evertune.v1 import endpoint_service_pb2_grpc as pb_grpc
from evertune.v1 import events_pb2

log = get_logger("evertune.apps.demo")

Engine = Literal["vllm", "sim"]
#: Where the demo writes for people: lines (str) and the SLO panel.
Printer = Callable[[RenderableType], None]

#: Request subject of the profiler (EVERTUNE_PROFILER_REQUEST_SUBJECT's default).
PROFILER_SUBJECT = "evertune.svc.profiler.profile"


@dataclass(frozen=True)
class EndpointPlan:
    """The demo endpoint, as provisioned through the deployer."""

    name: str  #: endpoint name (clients send it as `model`)
    engine: Engine  #: engine kind of the first deployment
    hardware_class: (
        str  #: hardware pool ("cpu" for vLLM-CPU, "sim-cpu" for the performance model of this CPU)
    )
    slo: Slo  #: the endpoint's SLO (a good request's TTFT and gap, the share, the median target)
    kv_cache_space_gib: float | None  #: KV cache of a vLLM-CPU engine, GiB (None: not set)
    ready_timeout_s: float  #: how long the first deployment may take to become ready
    search_policy: int = D.SEARCH_POLICY_AUTO  #: what the loop may do (OFF: the configuration stays)
    objective: int = D.SEARCH_OBJECTIVE_GOODPUT  #: what the endpoint's searches optimise
    #: prefix caching of the first deployment (None: the engine's default, on); False starts the
    #: endpoint from a hand-set configuration the loop can improve on
    prefix_caching: bool | None = None
    #: eager mode of the first deployment (None: the engine's default, compiled)
    enforce_eager: bool | None = None
    model_size: Size = "tiny"  #: size of the local model served (see `evertune.domain.model`)
    start_note: str = ""  #: where the first configuration came from, for the report (one line)
    #: the whole first configuration (engine filled in from `engine`), replacing the KV cache and
    #: prefix caching fields above; None: those fields and the engine's defaults
    engine_config: D.EngineConfig | None = None
    #: dtypes the first configuration chooses from by timing them on this CPU before it is created
    #: (`evertune.apps.demo.launch_dtype`); empty: `dtype` as it is
    launch_dtypes: tuple[str, ...] = ()
    dtype: str | None = None  #: dtype of the first deployment (None: the engine's default)


@dataclass(frozen=True)
class Where:
    """Where the running stack listens (from `evertune up`)."""

    nats_url: str  #: NATS server URL
    store_url: str  #: ClickHouse URL (chdb:///... embedded)
    database: str  #: ClickHouse database
    gateway_url: str  #: base URL of the gateway, e.g. http://127.0.0.1:8080
    deployer_address: str  #: host:port of the deployer's gRPC EndpointService
    data_dir: Path  #: the data dir (model folder, reports)


@dataclass(frozen=True)
class RequestPoint:
    """One request as the client saw it, on the demo's clock."""

    sent_t_s: float  #: when it left, seconds after the demo's clock started (NaN if never sent)
    phase: str  #: traffic phase ("baseline" or "shifted")
    ttft_ms: float | None  #: time to first token, ms (None: no token came)
    ok: bool  #: completed without error
    sent: bool  #: it left the client (the gateway saw it)
    error_class: str  #: "" or the replay's error class


@dataclass(frozen=True)
class Sizer:
    """How the demo sizes its call rate to the machine before the traffic (`evertune.apps.demo.sizing`)."""

    busy_share: float  #: share of time the first configuration's prefill is to be busy after the shift
    probes: int  #: probe requests, sent one at a time
    shift_calls: float  #: the shift's factor on the call rate
    bounds: tuple[float, float]  #: allowed factors on the default rate (lowest, highest)
    #: the traffic for a call rate before the shift and a factor on every text's length
    replan: Callable[[float, float], TrafficPlan]
    #: the slowest grown-traffic prefill the story holds at its TTFT target, ms: a slower one
    #: shortens the traffic's texts first (None: never)
    max_prefill_ms: float | None = None


@dataclass
class DemoRun:
    """Everything the demo observed (filled in as it runs; read by the report and the benchmark)."""

    engine: Engine  #: engine kind of the demo endpoint
    endpoint: str  #: endpoint name
    started_at: float  #: Unix time of the demo clock's zero (stack ready)
    ttft_target_ms: float  #: SLO TTFT target of a good request, ms
    attainment_target: float  #: SLO attainment target
    ttft_p50_target_ms: float = 0.0  #: SLO median TTFT target, ms (0: none)
    traffic: TrafficPlan | None = None  #: the planned traffic
    traffic_start_s: float | None = None  #: demo time the traffic started
    traffic_end_s: float | None = None  #: demo time the last request finished
    profile_asked_s: float | None = None  #: demo time the first profile was asked for
    profile_answer: str = ""  #: the profiler's one-line answer to that request
    points: list[RequestPoint] = field(default_factory=list)  #: one per planned request
    events: list[DemoEvent] = field(default_factory=list)  #: loop events seen, in order
    panels: int = 0  #: SLO panels printed
    last_rows: list[SloRow] = field(default_factory=list)  #: the last panel's rows
    telemetry_rows: int | None = None  #: rows stored for the endpoint's requests (None: not read)
    initial_deployment: str = ""  #: id of the endpoint's first deployment (provisioning, not the loop)
    notes: list[str] = field(default_factory=list)  #: things the report must say (one line each)
    alerts: list[Delivered] = field(default_factory=list)  #: alerts the local webhook received
    start_note: str = ""  #: where the endpoint's first configuration came from (one line)
    sizing: LoadSizing | None = None  #: how the call rate was sized to the machine (None: not sized)
    #: how the first configuration's dtype was chosen on this CPU (None: not chosen, engine default)
    launch_dtype: DtypeChoice | None = None

    sent_count: int = 0  #: requests that left the client (each one reached the gateway)

    @property
    def sent(self) -> int:
        """Requests that left the client (so reached the gateway), finished or not."""
        return self.sent_count

    @property
    def loop_events(self) -> list[DemoEvent]:
        """The events of the loop (see `panel.loop_events`)."""
        since = self.traffic_start_s if self.traffic_start_s is not None else math.inf
        return loop_events(self.events, since_s=since, initial_deployment=self.initial_deployment)

    @property
    def lost_records(self) -> int | None:
        """Requests sent without a telemetry row (None: rows not read)."""
        return None if self.telemetry_rows is None else self.sent - self.telemetry_rows


def _objective_name(objective: int) -> str:
    return D.SearchObjective.Name(objective).removeprefix("SEARCH_OBJECTIVE_").lower()


def endpoint_spec(plan: EndpointPlan, model: Path, *, alert_url: str = "") -> D.EndpointSpec:
    """The EndpointSpec the demo creates: the engine's defaults, except a bounded KV cache on CPU,
    prefix caching and eager mode when the plan sets them; breach and resolve alerts go to
    `alert_url` (a webhook) when given."""
    config = D.EngineConfig(engine=plan.engine)
    if plan.engine_config is not None:
        config.CopyFrom(plan.engine_config)
        config.engine, config.model = plan.engine, ""
    else:
        if plan.kv_cache_space_gib is not None:
            config.kv_cache_space_gib = plan.kv_cache_space_gib
        if plan.prefix_caching is not None:
            config.enable_prefix_caching = plan.prefix_caching
        if plan.enforce_eager is not None:
            config.enforce_eager = plan.enforce_eager
        if plan.dtype is not None:
            config.dtype = plan.dtype
    return D.EndpointSpec(
        name=plan.name,
        model=str(model),
        slo=plan.slo.to_proto(),
        hardware_pool=D.HardwarePool(hardware_class=plan.hardware_class),
        initial_engine_config=config,
        search_policy=plan.search_policy,  # type: ignore[arg-type]
        objective=plan.objective,  # type: ignore[arg-type]
        alert_routes=[
            D.AlertRoute(
                name="demo-webhook",
                kind=D.ALERT_ROUTE_KIND_WEBHOOK,
                url=alert_url,
                event_kinds=["sla.breach", "sla.resolved"],
            )
        ]
        if alert_url
        else [],
    )


class Demo:
    """One run of the demo against a running stack (see the module doc)."""

    def __init__(
        self,
        *,
        where: Where,
        endpoint: EndpointPlan,
        traffic: TrafficPlan,
        profile_at_s: float | None,
        settle_s: float = 0.0,
        panel_interval_s: float = 5.0,
        sizer: Sizer | None = None,
        out: Printer | None = None,
        one_at_a_time: bool = False,
    ) -> None:
        """`sizer`: size the call rate to the machine before the traffic, replacing `traffic`;
        `out`: where it writes (default: a rich console on stdout); `one_at_a_time`: send the
        traffic's requests one at a time, answers cut to one token (`evertune.domain.replay.floor`:
        the floor window of `bench loop`)."""
        self.where = where
        self.one_at_a_time = one_at_a_time
        self.sizer = sizer
        self.endpoint = endpoint
        self.traffic = traffic
        self.profile_at_s = profile_at_s
        self.settle_s = settle_s
        self.panel_interval_s = panel_interval_s
        self.out = out or out_console().print
        self.t0 = time.time()
        self.run = DemoRun(
            engine=endpoint.engine,
            endpoint=endpoint.name,
            started_at=self.t0,
            ttft_target_ms=endpoint.slo.ttft_ms,
            attainment_target=endpoint.slo.share,
            ttft_p50_target_ms=endpoint.slo.ttft_p50_ms,
            traffic=traffic,
        )
        self._sent = 0
        self._done = 0
        self._errors = 0
        self._phase_by_id = {r.request_id: phase_of(r) for r in traffic.requests}
        self._phase = "setup"
        self._start = 0.0
        self._engine_url = ""  #: the first deployment's engine (probes go there, not to the gateway)
        #: Set by the caller to end the traffic before its plan does (in-flight requests are cut).
        self.end_traffic = asyncio.Event()
        #: Set when the traffic starts (`run.traffic_start_s` is then known).
        self.traffic_started = asyncio.Event()

    def now_s(self) -> float:
        """Seconds on the demo's clock."""
        return time.time() - self.t0

    def say(self, line: str) -> None:
        """A line of the demo's own narration."""
        self.out(f"[{self.now_s():+7.1f}s] demo: {line}")

    async def __call__(self) -> DemoRun:
        """Run the demo; returns what was observed. A step that fails (the endpoint does not start,
        the gateway does not route it) raises a one-line EvertuneError; the endpoint is deleted."""
        async with AlertReceiver(t0=self.t0, on_delivered=self._on_alert) as receiver:
            self.run.alerts = receiver.delivered
            return await self._run(receiver)

    async def _run(self, receiver: AlertReceiver) -> DemoRun:
        nc = await connect(self.where.nats_url, name="evertune-demo", connect_timeout_s=5.0)
        channel = grpc.aio.insecure_channel(self.where.deployer_address)
        stub = pb_grpc.EndpointServiceStub(channel)  # type: ignore[no-untyped-call]
        tasks: list[asyncio.Task[None]] = []
        try:
            sub = await nc.jetstream().subscribe(  # before anything happens, so nothing is missed
                event_filter_subject(endpoint=self.endpoint.name),
                stream="EVENTS",
                ordered_consumer=True,
                config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
            )
            tasks.append(asyncio.create_task(self._watch_events(sub), name="demo-events"))
            model = await asyncio.to_thread(ensure_model, self.where.data_dir, size=self.endpoint.model_size)
            if self.endpoint.launch_dtypes:
                await self._choose_dtype(model)
            await self._provision(stub, model, alert_url=receiver.url)
            await self._wait_routed()
            if self.sizer is not None:
                await self._size_load(self.sizer)
            tasks.append(asyncio.create_task(self._panel(nc), name="demo-panel"))
            await self._drive(nc)
            if self.settle_s > 0:
                self.say(f"traffic done; waiting {self.settle_s:g} s for the loop's last events")
                await asyncio.sleep(self.settle_s)
            await self._print_panel(nc)
            self.run.telemetry_rows = await self._telemetry_rows()
        finally:
            for task in tasks:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                except Exception as err:  # it failed before the end: the run may lack what it did
                    self.say(f"{task.get_name()} failed: {err!r}")
            try:
                await self._delete(stub)
            except Exception as err:  # its engines may still run
                self.say(f"could not delete the endpoint {self.endpoint.name!r}: {err!r}")
            await channel.close()
            with contextlib.suppress(NatsError):  # closing at the end
                await nc.close()
        return self.run

    def _on_alert(self, alert: Delivered) -> None:
        self.out(f"[{alert.t_s:+7.1f}s] {alert.line}")

    # --- the endpoint -----------------------------------------------------------------------

    async def _choose_dtype(self, model: Path) -> None:
        """Set the first configuration's dtype to the faster of the plan's on this CPU."""
        self.say(
            f"timing {' and '.join(self.endpoint.launch_dtypes)} on this CPU for the first configuration"
        )
        choice = await measure_launch_dtype(self.endpoint.launch_dtypes, model_dir=model)
        note = f"{self.endpoint.start_note}; {choice.line}" if self.endpoint.start_note else choice.line
        self.endpoint = dataclasses.replace(self.endpoint, dtype=choice.dtype, start_note=note)
        self.run.launch_dtype = choice

    async def _provision(self, stub: pb_grpc.EndpointServiceStub, model: Path, *, alert_url: str) -> None:
        name = self.endpoint.name
        await self._delete(stub, quiet=False)  # a leftover of an interrupted run
        spec = endpoint_spec(self.endpoint, model, alert_url=alert_url)
        config = json.dumps(
            {k: v for k, v in _config_dict(spec.initial_engine_config).items() if k != "engine"}
        )
        self.say(
            f"creating endpoint {name!r} through the deployer's gRPC API: engine {self.endpoint.engine} "
            f"on {self.endpoint.hardware_class}, engine defaults except {config}, "
            f"SLO {describe_slo(self.endpoint.slo)}, search policy "
            f"{D.SearchPolicy.Name(self.endpoint.search_policy).removeprefix('SEARCH_POLICY_').lower()}, "
            f"objective {_objective_name(self.endpoint.objective)}"
        )
        self.run.start_note = self.endpoint.start_note
        if self.endpoint.start_note:
            self.say(f"first configuration: {self.endpoint.start_note}")
        await stub.CreateEndpoint(pb.CreateEndpointRequest(request_id=uuid.uuid4().hex, spec=spec))
        deadline = time.monotonic() + self.endpoint.ready_timeout_s
        next_note = time.monotonic() + 15.0
        while True:
            got = (await stub.GetEndpoint(pb.GetEndpointRequest(name=name))).endpoint
            if got.state == D.ENDPOINT_STATE_READY:
                break
            if got.state == D.ENDPOINT_STATE_FAILED:
                raise FailedPrecondition(f"the demo endpoint failed to start: {got.state_message}")
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"the demo endpoint was not ready within {self.endpoint.ready_timeout_s:g} s "
                    f"(state {D.EndpointState.Name(got.state)})"
                )
            if time.monotonic() > next_note:
                self.say(f"waiting for the engine to start ({D.EndpointState.Name(got.state)})")
                next_note = time.monotonic() + 15.0
            await asyncio.sleep(0.5)
        self.run.initial_deployment = got.stable_deployment_id
        listed = await stub.ListDeployments(pb.ListDeploymentsRequest(endpoint=name))
        self._engine_url = next(
            (d.upstream_url for d in listed.deployments if d.id == got.stable_deployment_id), ""
        )
        self.say(f"endpoint {name!r} is ready (stable deployment {got.stable_deployment_id})")

    async def _delete(self, stub: pb_grpc.EndpointServiceStub, *, quiet: bool = True) -> None:
        """Delete the demo endpoint if it exists and wait until it is gone (engines stopped)."""
        name = self.endpoint.name
        try:
            await stub.DeleteEndpoint(pb.DeleteEndpointRequest(name=name), timeout=10)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                return
            raise
        if not quiet:
            self.say(f"deleting a leftover endpoint {name!r} of an earlier run")
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            try:
                await stub.GetEndpoint(pb.GetEndpointRequest(name=name), timeout=5)
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.NOT_FOUND:
                    return
                raise
            await asyncio.sleep(0.5)

    async def _wait_routed(self) -> None:
        """Until the gateway serves the endpoint (its route table arrived over KV)."""
        deadline = time.monotonic() + 30.0
        while self.endpoint.name not in await _served(self.where.gateway_url):
            if time.monotonic() > deadline:
                raise Unavailable(f"the gateway did not route {self.endpoint.name!r} within 30 s")
            await asyncio.sleep(0.2)

    # --- traffic ----------------------------------------------------------------------------

    async def _size_load(self, sizer: Sizer) -> None:
        """Probe the endpoint's engine with grown-traffic prompts one at a time and re-plan the
        traffic at the rate `evertune.apps.demo.sizing` gives; keep the plan when no probe completes.

        The probes go to the stable deployment's engine itself, not through the gateway: they are
        slower than the SLO by design (the grown traffic's prompts) and must not count in the
        endpoint's telemetry, burn rates or drift reference, as the deployer's own warm-up does not.
        As many others first go out unmeasured, with a few output tokens: a new engine compiles for
        the prompt and batch shapes it first meets, and the measured probes should not wait for
        that (other requests, so a configuration with prefix caching on does not measure a cache
        hit of its own warm-up). When their prefill is slower than `sizer.max_prefill_ms`, every
        text of the traffic is shortened first and the probes are sent again on the new plan."""
        default = self.traffic.baseline.peak_calls_per_s
        if not self._engine_url:
            self.run.notes.append(f"the engine's URL is unknown: the load stays at {default:g} calls/s")
            self.say(self.run.notes[-1])
            return
        ttfts = await self._prefill_probes(sizer, warm=sizer.probes)
        scaling: PromptScaling | None = None
        scale = 1.0
        if ttfts and sizer.max_prefill_ms is not None:
            prefill_ms = statistics.median(ttfts)
            scale = text_scale(prefill_ms=prefill_ms, max_prefill_ms=sizer.max_prefill_ms)
            if scale != 1.0:
                scaling = PromptScaling(
                    prefill_ms=prefill_ms, max_prefill_ms=sizer.max_prefill_ms, scale=scale
                )
                self.traffic = sizer.replan(default, scale)
                ttfts = await self._prefill_probes(sizer, warm=2)
        if not ttfts:
            self.run.notes.append(f"no probe request completed: the load stays at {default:g} calls/s")
            self.say(self.run.notes[-1])
            return
        sizing = size_load(
            probe_ttft_ms=ttfts,
            requests_per_call=requests_per_call_s(self.traffic),
            shift_calls=sizer.shift_calls,
            busy_share=sizer.busy_share,
            default_calls_per_s=default,
            bounds=sizer.bounds,
        )
        sizing = dataclasses.replace(sizing, prompt=scaling)
        self.run.sizing = sizing
        self.say(sizing.line())
        self.traffic = sizer.replan(sizing.calls_per_s, scale)
        self.run.traffic = self.traffic
        self._phase_by_id = {r.request_id: phase_of(r) for r in self.traffic.requests}

    async def _prefill_probes(self, sizer: Sizer, *, warm: int) -> list[float]:
        """TTFTs of `sizer.probes` grown-traffic prompts of the current plan, sent one at a time
        with `max_tokens` 1 (the prefill alone), after `warm` others unmeasured."""
        requests = probe_requests(self.traffic, count=warm + sizer.probes)
        for i, request in enumerate(requests[:warm]):  # warm-up: compiles, not measured
            await self._probe(request, max_tokens=16, request_id=f"probe-warm-{i}")
        ttfts: list[float] = []
        for i, request in enumerate(requests[warm:]):  # measured: the prefill alone
            ttfts += await self._probe(request, max_tokens=1, request_id=f"probe-{i}")
        return ttfts

    async def _probe(self, request: PlannedRequest, *, max_tokens: int, request_id: str) -> list[float]:
        """Send one probe to the engine itself, alone; its TTFT (empty when it failed)."""
        probe = dataclasses.replace(request, at_s=0.0, max_tokens=max_tokens, request_id=request_id)
        done = await replay([probe], target=self._engine_url, model=self.endpoint.name)
        return [r.ttft_ms for r in done.results if r.ok and r.ttft_ms is not None]

    async def _drive(self, nc: Client) -> None:
        traffic = self.traffic
        shift = f", shifting at +{traffic.shift_at_s:g} s" if traffic.shift_at_s is not None else ""
        self.say(
            f"voice traffic through the gateway {self.where.gateway_url}: {len(traffic.requests)} requests "
            f"over {traffic.duration_s:g} s, {traffic.baseline.peak_calls_per_s:g} calls/s, "
            f"{traffic.baseline.system_prompt_words} prompt words{shift}"
        )
        start = self.now_s()
        self.run.traffic_start_s = start
        self._start = start
        self._phase = BASELINE
        self.traffic_started.set()
        announcer = asyncio.create_task(self._announce(nc, start))
        send = replay_alone if self.one_at_a_time else functools.partial(replay, timeout_s=120.0)
        replaying = asyncio.create_task(
            send(
                traffic.requests,
                target=self.where.gateway_url,
                model=self.endpoint.name,
                on_sent=self._on_sent,
                on_result=self._on_result,
            )
        )
        ending = asyncio.create_task(self.end_traffic.wait())
        try:
            await asyncio.wait({replaying, ending}, return_when=asyncio.FIRST_COMPLETED)
            if not replaying.done():  # ended early (the benchmark has what it needs)
                replaying.cancel()
                self.say(f"traffic ended early by the caller after {self.now_s() - start:.0f} s")
            with contextlib.suppress(asyncio.CancelledError):
                result = await replaying
                if result.fell_behind:
                    self.run.notes.append(f"the load generator fell behind its schedule: {result.lag.reason}")
        finally:
            for task in (announcer, ending, replaying):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self.run.traffic_end_s = self.now_s()
        self.say(
            f"traffic done: {self._sent} sent, {self._done - self._errors} completed, {self._errors} errors"
        )

    async def _announce(self, nc: Client, start: float) -> None:
        """Ask for the first profile at `profile_at_s`; say when the traffic shifts."""
        moments: list[tuple[float, str]] = (
            [] if self.profile_at_s is None else [(self.profile_at_s, "profile")]
        )
        if self.traffic.shift_at_s is not None:
            moments.append((self.traffic.shift_at_s, "shift"))
        for at_s, what in sorted(moments):
            await asyncio.sleep(max(0.0, start + at_s - self.now_s()))
            if what == "shift":
                self._phase = "shifted"
                shifted = self.traffic.shifted
                assert shifted is not None
                self.say(
                    f"traffic shifts: shared prompt {self.traffic.baseline.system_prompt_words} -> "
                    f"{shifted.system_prompt_words} words, "
                    f"calls {self.traffic.baseline.peak_calls_per_s:g} -> {shifted.peak_calls_per_s:g}/s"
                )
            else:
                await self._ask_profile(nc, window_s=at_s)

    async def _ask_profile(self, nc: Client, *, window_s: float) -> None:
        """Ask the profiler for the endpoint's first profile (as `evertune profile show` can)."""
        self.run.profile_asked_s = self.now_s()
        self.say(f"asking the profiler for a first profile of the last {window_s:.0f} s")
        request = {"endpoint": self.endpoint.name, "action": "build", "window_s": window_s}
        try:
            msg = await nc.request(PROFILER_SUBJECT, json.dumps(request).encode(), timeout=30.0)
            reply = json.loads(msg.data)
        except Exception as err:  # the run goes on; the report says the profile did not come
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        if reply.get("ok"):
            stored = reply.get("stored") or {}
            self.run.profile_answer = f"profile {stored.get('profile_id', '?')} built"
        else:
            self.run.profile_answer = f"the profiler refused: {reply.get('error', reply)}"
            self.run.notes.append(f"first profile request: {self.run.profile_answer}")
        self.say(self.run.profile_answer)

    def _on_sent(self, request_id: str) -> None:
        self._sent += 1
        self.run.sent_count = self._sent

    def _on_result(self, result: RequestResult) -> None:
        self._done += 1
        if not result.ok:
            self._errors += 1
        sent = result.sent_s == result.sent_s and result.error_class != "client_lag"  # NaN: never sent
        self.run.points.append(
            RequestPoint(
                sent_t_s=self._start + result.sent_s if sent else math.nan,
                phase=self._phase_by_id.get(result.request_id, BASELINE),
                ttft_ms=result.ttft_ms,
                ok=result.ok,
                sent=sent,
                error_class=result.error_class,
            )
        )

    # --- what the loop does -----------------------------------------------------------------

    async def _watch_events(self, sub: JetStreamContext.PushSubscription) -> None:
        try:
            async for msg in sub.messages:
                try:
                    event = demo_event(events_pb2.Event.FromString(msg.data), t0=self.t0)
                except Exception as err:  # a bad message is shown, not fatal
                    self.say(f"undecodable event on {msg.subject}: {err}")
                    continue
                self.run.events.append(event)
                self.out(event_line(event))
        finally:
            with contextlib.suppress(NatsError):  # the connection closes at the end
                await sub.unsubscribe()

    async def _panel(self, nc: Client) -> None:
        while True:
            await asyncio.sleep(self.panel_interval_s)
            await self._print_panel(nc)

    async def _print_panel(self, nc: Client) -> None:
        try:
            msg = await nc.request(f"evertune.svc.{SLA_MONITOR}.{STATUS_ENDPOINT}", b"", timeout=2.0)
            data = json.loads(msg.data)
        except Exception as err:  # the panel is best effort; the run goes on
            self.say(f"SLO panel unavailable: {type(err).__name__}: {err}")
            return
        instance = InstanceStatus(
            name=SLA_MONITOR,
            id="",
            version="",
            started="",
            state=str(data.pop("state", "")),
            pid="",
            details=data,
        )
        rows = rows_from_status([instance], self.endpoint.name)
        self.run.last_rows = rows
        if rows and rows[0].attainment_target is not None:
            self.run.attainment_target = rows[0].attainment_target
        self.run.panels += 1
        counts = {"sent": self._sent, "done": self._done, "errors": self._errors}
        self.out(slo_panel(rows, t_s=self.now_s(), phase=self._phase, **counts))

    async def _telemetry_rows(self) -> int | None:
        """Rows the store holds for the endpoint's requests of this run (sent since the demo's
        clock started: an interrupted run's rows under the same name do not count), once the sink
        has caught up (or 20 s)."""
        try:
            store = await open_store(self.where.store_url, database=self.where.database)
        except EvertuneError as err:
            self.run.notes.append(f"telemetry rows not counted: {err}")
            return None
        try:
            deadline = time.monotonic() + 20.0
            rows = 0
            while True:
                result = await store.query(
                    "SELECT count() FROM requests WHERE endpoint = {e:String} "
                    "AND ts >= {since:DateTime64(6, 'UTC')}",
                    {"e": self.endpoint.name, "since": datetime.fromtimestamp(self.t0, tz=UTC)},
                )
                rows = int(result.scalar())
                if rows >= self.run.sent or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            self.say(f"telemetry: {rows} rows stored for {self.run.sent} requests sent")
            return rows
        finally:
            await store.close()


def _config_dict(config: D.EngineConfig) -> dict[str, object]:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(config, preserving_proto_field_name=True)


async def _served(gateway_url: str) -> list[str]:
    try:
        return await list_models(gateway_url, timeout_s=2.0)
    except EvertuneError:
        return []
