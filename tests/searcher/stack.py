"""The searcher's hosted stack for service tests: an endpoint in the `endpoints` KV, a stored voice
profile (as the profiler writes it), a searcher on a free gRPC port, and a runner on the `sim-cpu`
class (the performance model served as an engine), each started on the session's NATS and chDB.

Endpoints have an immutable id (`Endpoint.uid`) as the deployer gives them; a profile is stored
under the id `make_endpoint` last gave its name (`uid_of`), or the one named."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from google.protobuf.json_format import MessageToJson
from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.domain.model import load_tokenizer
from evertune.domain.workloads import DailyCurve, VoiceWorkload, plan_voice
from evertune.domain.workloads.jsonl import format_records, records_of_plan
from evertune.domain.workloads.source import CorpusText
from evertune.infra.bus import Bucket
from evertune.infra.runtime import Service, ServiceContext
from evertune.infra.settings import SharedSettings, load_settings
from evertune.infra.store import Store
from evertune.profiler import catalog
from evertune.runner import RunnerService, RunnerSettings
from evertune.searcher import SearcherService, SearcherSettings
from evertune.searcher.model import scaled
from evertune.searcher.space import SpaceLimits
from evertune.v1 import endpoint_pb2, events_pb2

from .helpers import CPU_TRUTH

LIMITS = SpaceLimits(
    max_num_seqs=(8,),
    max_num_batched_tokens=(256, 1024),
    enable_chunked_prefill=(True,),
    enable_prefix_caching=(True, False),
    tensor_parallel_size=(1,),
    quantization=(),
)
PEAK = 6.0
#: The id `make_endpoint` last gave each name (endpoints written otherwise have none: "").
_UIDS: dict[str, str] = {}


def new_uid() -> str:
    """A fresh endpoint id, as the deployer makes them."""
    return f"ep-{uuid.uuid4().hex[:24]}"


def uid_of(name: str) -> str:
    """The id `make_endpoint` last gave `name` ("" when it made none)."""
    return _UIDS.get(name, "")


@contextlib.asynccontextmanager
async def running(service: Service, nc: Client, store: Store) -> AsyncIterator[Service]:
    ctx = ServiceContext(shared=load_settings(SharedSettings), nc=nc, js=nc.jetstream(), store=store)
    await service.start(ctx)
    try:
        yield service
    finally:
        await service.stop(10.0)


async def make_endpoint(
    js: JetStreamContext,
    *,
    policy: int,
    hardware: str = "sim-cpu",
    objective: int = 0,
    name: str = "",
    tenant: str = "t",
    uid: str = "",
) -> str:
    """An endpoint in the `endpoints` KV (a fresh name unless given, which must be free), with an id
    (`uid`, else a fresh one); its name."""
    name = name or f"ep-{uuid.uuid4().hex[:10]}"
    spec = endpoint_pb2.EndpointSpec(
        name=name,
        tenant=tenant,
        model="",
        slo=endpoint_pb2.Slo(ttft_p99_ms=150.0),
        hardware_pool=endpoint_pb2.HardwarePool(hardware_class=hardware, max_replicas=1),
        # A poor live configuration: no prefix caching on a voice workload that resends its prompts.
        initial_engine_config=endpoint_pb2.EngineConfig(
            engine="vllm",
            max_num_seqs=8,
            max_num_batched_tokens=256,
            enable_chunked_prefill=True,
            enable_prefix_caching=False,
            kv_cache_space_gib=2,
        ),
        search_policy=policy,  # type: ignore[arg-type]
        objective=objective,  # type: ignore[arg-type]
    )
    endpoint = endpoint_pb2.Endpoint(spec=spec, revision=1, uid=uid or new_uid())
    endpoint.create_time.FromDatetime(datetime.now(UTC))
    bucket = await Bucket.open(js, "endpoints")
    await bucket.create(name, endpoint.SerializeToString())
    _UIDS[name] = endpoint.uid
    return name


async def delete_endpoint(js: JetStreamContext, name: str) -> None:
    """The endpoint's record gone from the `endpoints` KV, as the deployer leaves a deleted one."""
    bucket = await Bucket.open(js, "endpoints")
    await bucket.delete(name)
    _UIDS.pop(name, None)


async def store_profile(
    store: Store,
    endpoint: str,
    model_dir: Path,
    *,
    peak_rps: float = PEAK,
    uid: str | None = None,
    version: int = 1,
) -> events_pb2.ProfileReady:
    """A stored profile of voice traffic (the profiler's table, written as the profiler writes it),
    its peak `peak_rps`, of the endpoint with id `uid` (None: `uid_of(endpoint)`)."""
    plan = plan_voice(
        VoiceWorkload(duration_s=90, peak_calls_per_s=1.5, seed=5, curve=DailyCurve(shape="flat")),
        text=CorpusText(),
    )
    tokenizer = load_tokenizer(model_dir)
    records = records_of_plan(plan, count_tokens=lambda text: len(tokenizer.encode(text).ids))
    trace = "".join(format_records(records))
    profile_id = f"prof-{uuid.uuid4().hex[:12]}"
    ready = events_pb2.ProfileReady(
        profile_id=profile_id,
        request_count=len(records),
        summary=events_pb2.WorkloadSummary(rate_rps=peak_rps * 0.8, peak_rate_rps=peak_rps),
        trace_uri=catalog.trace_uri(store.database, profile_id),
        trigger="schedule",
        version=version,
    )
    now = datetime.now(UTC)
    values = {
        "endpoint": endpoint,
        "endpoint_uid": uid_of(endpoint) if uid is None else uid,
        "version": version,
        "profile_id": profile_id,
        "created": now,
        "window_start": now,
        "window_end": now,
        "trigger": "schedule",
        "cause_id": "",
        "request_count": len(records),
        "ready_json": MessageToJson(ready),
        "profile_json": "{}",
        "trace_jsonl": trace,
        "trace_sha256": "",
    }
    columns = tuple(dict.fromkeys((*catalog.COLUMNS, "endpoint_uid")))
    await store.insert(catalog.TABLE, [[values[c] for c in columns]], columns, dedup_token=profile_id)
    return ready


def make_searcher(tmp_path: Path, **overrides: object) -> SearcherService:
    settings = load_settings(
        SearcherSettings,
        **{
            "grpc_port": 0,
            "trial_duration_s": 1.5,
            "rate_ladder": (1.0, 2.0),
            "gates": ("slo",),
            "default_budget": 3,
            "model_horizon_s": 45.0,
            "trace_dir": tmp_path / "traces",
            **overrides,
        },
    )
    # The searcher believes the hardware twice as fast as the sim runner makes it.
    return SearcherService(
        settings,
        limits=LIMITS,
        efficiency={"sim-cpu": scaled(CPU_TRUTH, 2.0), "sim-h200": CPU_TRUTH},
        durable_prefix=f"searcher-{uuid.uuid4().hex[:6]}",
    )


def sim_runner(model_dir: Path) -> RunnerService:
    """A runner of the `sim-cpu` class: trials answered by the performance model, replayed in real time."""
    return RunnerService(
        load_settings(
            RunnerSettings,
            hardware="sim-cpu",
            ack_wait_s=10.0,
            fetch_timeout_s=0.5,
            warmup_turns=1,
            engine_ready_timeout_s=30.0,
        ),
        model_dir=model_dir,
    )
