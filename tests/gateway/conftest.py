"""A gateway on the session's NATS, the fake engine as its upstream, and record readers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.gateway import GatewayService, GatewaySettings
from evertune.infra.bus import Bucket
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings
from evertune.v1 import endpoint_pb2, telemetry_pb2
from tests.domain.replay.conftest import fake_url

__all__ = ["fake_url"]


@pytest.fixture(scope="session")
async def gateway(nc: Client, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[GatewayService]:
    """A running gateway (free port, 5 ms batches) for the whole session."""
    data_dir = Path(tmp_path_factory.mktemp("gateway-data"))
    settings = GatewaySettings(port=0, batch_ms=5.0, max_body_bytes=64 * 1024, upstream_read_timeout_s=10.0)
    service = GatewayService(settings)
    ctx = ServiceContext(shared=SharedSettings(data_dir=data_dir), nc=nc, js=nc.jetstream(), store=None)
    await service.start(ctx)
    try:
        yield service
    finally:
        await service.stop(5.0)


def base_url(gateway: GatewayService) -> str:
    return f"http://127.0.0.1:{gateway.port}"


async def put_routes(
    js: JetStreamContext, gateway: GatewayService, endpoint: str, routes: list[tuple[str, str, int]]
) -> None:
    """Write an endpoint's route table and wait until the gateway has it."""
    table = endpoint_pb2.RouteTable(
        endpoint=endpoint,
        routes=[endpoint_pb2.Route(deployment_id=d, upstream_url=u, weight=w) for d, u, w in routes],
    )
    bucket = await Bucket.open(js, "routes")
    await bucket.mutate(endpoint, lambda _: table.SerializeToString())
    for _ in range(200):
        if gateway.book.tables.get(endpoint) == table:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"gateway never saw the routes of {endpoint}")


def new_endpoint() -> str:
    return f"ep-{uuid.uuid4().hex[:10]}"


async def read_records(
    js: JetStreamContext,
    subject: str,
    *,
    count: int = 1,
    request_ids: set[str] | None = None,
    timeout_s: float = 5.0,
) -> list[telemetry_pb2.RequestRecord]:
    """Records on `subject` (from the TELEMETRY stream), optionally only the given request ids."""
    sub = await js.subscribe(subject, ordered_consumer=True)
    found: list[telemetry_pb2.RequestRecord] = []
    try:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(found) < count:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            try:
                msg = await sub.next_msg(timeout=left)
            except Exception:
                break
            batch = telemetry_pb2.RequestRecordBatch()
            batch.ParseFromString(msg.data)
            found.extend(r for r in batch.records if request_ids is None or r.request_id in request_ids)
    finally:
        await sub.unsubscribe()
    return found
