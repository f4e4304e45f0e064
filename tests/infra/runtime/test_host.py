"""The service lifecycle, hosted for real: NATS micro API, gRPC health and reflection, the store,
graceful stop with in-flight work, and a failed start that leaves nothing running."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, ClassVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from nats.aio.client import Client

from evertune.errors import Unavailable
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime import GrpcService, Service, ServiceContext
from evertune.infra.runtime.host import host_services
from evertune.infra.runtime.micro import discover
from evertune.infra.settings import SharedSettings, load_settings


class Worker(Service):
    """Takes one unit of work at a time from a queue until stopped; finishes the unit in hand."""

    name: ClassVar[str] = "test-worker"
    description: ClassVar[str] = "test worker"
    needs_store: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.work: asyncio.Queue[float] = asyncio.Queue()
        self.started_unit = asyncio.Event()
        self.done: list[float] = []
        self.tables: list[str] = []

    async def on_start(self, ctx: ServiceContext) -> None:
        assert ctx.store is not None
        self.tables = [r[0] for r in await ctx.store.query("SHOW TABLES")]
        self.spawn(self._loop(), name="work")

    async def _loop(self) -> None:
        stopping = asyncio.create_task(self.stopping.wait())
        while not self.stopping.is_set():
            getting = asyncio.create_task(self.work.get())
            await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()
                break
            self.started_unit.set()
            await asyncio.sleep(getting.result())
            self.done.append(getting.result())

    def details(self) -> dict[str, Any]:
        return {"done": len(self.done)}


class Api(GrpcService):
    name: ClassVar[str] = "test-api"
    description: ClassVar[str] = "test gRPC service"
    grace_s = 1.0

    def __init__(self, port: int = 0) -> None:
        super().__init__(host="127.0.0.1", port=port)


@pytest.fixture
def shared(store_url: str) -> SharedSettings:
    return load_settings(
        SharedSettings,
        clickhouse_url=store_url,
        clickhouse_database=f"host_{uuid.uuid4().hex[:10]}",
        shutdown_timeout_s=5.0,
    )


async def test_hosted_services_answer_micro_and_grpc_and_stop_gracefully(
    nats_server: EmbeddedNats, nc: Client, shared: SharedSettings
) -> None:
    worker, api = Worker(), Api()
    stop = asyncio.Event()
    ready = asyncio.Event()
    hosting = asyncio.create_task(
        host_services(
            [worker, api], shared=shared, nats_url=nats_server.url, stop=stop, on_ready=lambda _: ready.set()
        )
    )
    await asyncio.wait_for(ready.wait(), 30)
    assert "requests" in worker.tables  # the host migrated the store before starting the service

    found = {s.name: s for s in await discover(nc, wait_s=2.0) if s.name.startswith("test-")}
    assert set(found) == {"test-worker", "test-api"}
    assert found["test-worker"].state == "running" and found["test-worker"].details["done"] == 0
    assert found["test-api"].details["listen"]["grpc"] == api.grpc.address

    ping = await nc.request("$SRV.PING.test-api", b"", timeout=2)
    assert json.loads(ping.data)["name"] == "test-api"
    status = await nc.request("evertune.svc.test-worker.status", b"", timeout=2)
    assert json.loads(status.data)["state"] == "running"

    async with grpc.aio.insecure_channel(api.grpc.address) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        responses = [r async for r in stub.ServerReflectionInfo(iter([request]))]
        names = {s.name for s in responses[0].list_services_response.service}
        assert "grpc.health.v1.Health" in names

    await worker.work.put(0.5)  # a unit of work in flight when stop comes
    await asyncio.wait_for(worker.started_unit.wait(), 5)
    stop.set()
    await asyncio.wait_for(hosting, 15)
    assert worker.done == [0.5]
    assert worker.state == "stopped" and api.state == "stopped"
    assert [s for s in await discover(nc, wait_s=0.5) if s.name.startswith("test-")] == []


async def test_failed_start_stops_what_started_and_raises(
    nats_server: EmbeddedNats, nc: Client, shared: SharedSettings
) -> None:
    first = Api()
    await first.grpc.start()
    taken = first.grpc.port
    worker, clash = Worker(), Api(port=taken)
    try:
        with pytest.raises(Unavailable, match=str(taken)):
            await asyncio.wait_for(
                host_services([worker, clash], shared=shared, nats_url=nats_server.url, stop=asyncio.Event()),
                30,
            )
    finally:
        await first.grpc.stop(grace_s=0)
    assert worker.state == "stopped"
    assert [s for s in await discover(nc, wait_s=0.5) if s.name.startswith("test-")] == []
