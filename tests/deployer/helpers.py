"""Test helpers of the deployer: a stand-in engine process (`tests/fake_engine.py`), wire builders,
waiting on KV state."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import aiohttp

from evertune.deployer.kubernetes import KubernetesTarget, Rendered, deployment_manifests
from evertune.domain.engines import EngineMetrics, EngineSpec, HardwareProfile, get_profile
from evertune.domain.engines.metrics import fetch_metrics, parse_metrics
from evertune.domain.engines.process import ProcessEngine
from evertune.infra.store import Store
from evertune.profiler import sink
from evertune.v1 import endpoint_pb2, telemetry_pb2
from evertune.v1 import endpoint_service_pb2 as pb
from tests.fake_engine import SCRIPT as FAKE_ENGINE

#: Endpoint model that makes the stand-in exit at start (a config that cannot run).
BROKEN_MODEL = "broken-model"
#: Endpoint model whose stand-in becomes ready only after SLOW_READY_S.
SLOW_MODEL = "slow-model"
SLOW_READY_S = 1.5

T = TypeVar("T")


class StandInEngine(ProcessEngine):
    """A stand-in engine: `tests/fake_engine.py` in evertune's engine shell (the `Engine` protocol).

    It streams 5 tokens 5 ms apart, each its tag `s<max_num_seqs>`, so tests can tell configurations
    apart; the first at once, unless the request's `X-Fake: ttft_ms=...` holds it.
    """

    name = "stand-in"

    def __init__(
        self, spec: EngineSpec, *, log_dir: Path, port: int | None, served_model_name: str | None
    ) -> None:
        super().__init__(
            spec, log_dir=log_dir, hardware=get_profile("cpu"), port=port, served_model_name=served_model_name
        )
        self.tag = f"s{spec.max_num_seqs or 0}"

    def command(self) -> tuple[list[str], dict[str, str]]:
        argv = [
            sys.executable,
            str(FAKE_ENGINE),
            "--port",
            str(self.port),
            "--model",
            self.model_name,
            "--tag",
            self.tag,
            "--ttft-ms",
            "0",
            "--itl-ms",
            "5",
            "--tokens",
            "5",
        ]
        if self.spec.model == BROKEN_MODEL:
            argv += ["--exit-at-start", "1"]
        if self.spec.model == SLOW_MODEL:
            argv += ["--ready-after", str(SLOW_READY_S)]
        return argv, dict(os.environ)

    def parse_metrics(self, text: str, *, scraped_at: float) -> EngineMetrics:
        return parse_metrics(text, scraped_at=scraped_at)


class StandInFactory:
    """The local backend's engine factory for tests; remembers every engine it made."""

    def __init__(self) -> None:
        self.engines: list[StandInEngine] = []
        self.cores: list[list[int]] = []  #: the CPU cores each engine made was given, in order

    def __call__(
        self,
        spec: EngineSpec,
        *,
        log_dir: Path,
        port: int | None = None,
        hardware: HardwareProfile | None = None,
        served_model_name: str | None = None,
        cpu_cores: Sequence[int] = (),
    ) -> StandInEngine:
        engine = StandInEngine(spec, log_dir=log_dir, port=port, served_model_name=served_model_name)
        if port != 0:  # port 0: the backend only validates the config
            self.engines.append(engine)
            self.cores.append(list(cpu_cores))
        return engine

    def live(self) -> list[StandInEngine]:
        return [e for e in self.engines if e.running]

    async def stop_all(self) -> None:
        for engine in self.engines:
            await engine.stop()


async def requests_running(engine_url: str) -> float:
    """How many requests the engine at `engine_url` has in flight now (its `/metrics`)."""
    async with aiohttp.ClientSession() as session:
        return (await fetch_metrics(session, engine_url)).requests_running


def new_name() -> str:
    return f"ep-{uuid.uuid4().hex[:10]}"


def spec(
    name: str,
    *,
    tenant: str = "",
    model: str = "tiny-model",
    max_num_seqs: int | None = None,
    ttft_p99_ms: float = 500.0,
) -> endpoint_pb2.EndpointSpec:
    """A valid EndpointSpec (stand-in engines, cpu pool)."""
    config = endpoint_pb2.EngineConfig(engine="vllm")
    if max_num_seqs is not None:
        config.max_num_seqs = max_num_seqs
    return endpoint_pb2.EndpointSpec(
        name=name,
        tenant=tenant,
        model=model,
        slo=endpoint_pb2.Slo(ttft_p99_ms=ttft_p99_ms),
        hardware_pool=endpoint_pb2.HardwarePool(hardware_class="cpu"),
        initial_engine_config=config,
    )


def create_request(name: str, **kwargs: object) -> pb.CreateEndpointRequest:
    return pb.CreateEndpointRequest(request_id=uuid.uuid4().hex, spec=spec(name, **kwargs))  # type: ignore[arg-type]


# --- telemetry rows ---------------------------------------------------------------------------------


def request_row(
    endpoint: str,
    deployment: str,
    *,
    ts: datetime,
    ttft_ms: float,
    itl_ms: Sequence[float] | None = None,
    status_code: int = 200,
    error_class: str = "",
) -> list[object]:
    """One `requests` row, made by the profiler's sink from a gateway record (no text, as always)."""
    gaps = list(itl_ms or [])
    record = telemetry_pb2.RequestRecord(
        endpoint=endpoint,
        deployment=deployment,
        request_id=uuid.uuid4().hex,
        start_time_unix_ns=int(ts.timestamp() * 1e9),
        api=telemetry_pb2.API_CHAT,
        model=endpoint,
        stream=True,
        status_code=status_code,
        error_class=error_class,
        ttft_ms=float(ttft_ms),
        e2e_ms=float(ttft_ms + sum(gaps)),
        upstream_ttft_ms=float(ttft_ms),
        itl_ms=gaps,
        prompt_tokens=100,
        completion_tokens=len(gaps) + 1,
        client_disconnected=error_class == "client_disconnect",
    )
    (row,) = sink.rows_of(telemetry_pb2.RequestRecordBatch(records=[record]))
    return row


async def insert_requests(store: Store, rows: list[list[object]]) -> None:
    await store.insert(sink.TABLE, rows, sink.COLUMNS, dedup_token=uuid.uuid4().hex)


def gpu_rendered(target: KubernetesTarget, **knobs: object) -> Rendered:
    """The manifests of a llama-8b deployment of endpoint "voice" on an H200, with `knobs`."""
    return deployment_manifests(
        endpoint="voice",
        deployment_id="dep-0a1b2c3d4e5f",
        spec=EngineSpec(model="/models/llama-8b", **knobs),  # type: ignore[arg-type]
        hardware=get_profile("h200"),
        target=target,
    )
