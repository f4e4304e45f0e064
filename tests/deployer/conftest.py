"""A deployer on the session's NATS with stand-in engines, and gRPC stubs for three callers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from pydantic import SecretStr

from evertune.deployer import DeployerService, DeployerSettings
from evertune.errors import NotFound
from evertune.infra.bus import Bucket
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings
from evertune.infra.store import Store, migrate
from evertune.v1 import endpoint_service_pb2_grpc as pb_grpc
from tests.deployer.helpers import StandInFactory
from tests.gateway.conftest import gateway

__all__ = ["gateway"]

TOKEN_A = "token-of-tenant-a-0123456789"
TOKEN_B = "token-of-tenant-b-0123456789"
TOKEN_OPERATOR = "token-of-the-operator-012345"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@dataclass
class Stack:
    """A running deployer and what tests need around it."""

    service: DeployerService
    factory: StandInFactory
    channel: grpc.aio.Channel
    stub: pb_grpc.EndpointServiceStub
    ctx: ServiceContext

    @property
    def address(self) -> str:
        return self.service.server.address

    @property
    def a(self) -> tuple[tuple[str, str], ...]:
        return bearer(TOKEN_A)

    @property
    def b(self) -> tuple[tuple[str, str], ...]:
        return bearer(TOKEN_B)

    @property
    def op(self) -> tuple[tuple[str, str], ...]:
        return bearer(TOKEN_OPERATOR)


def deployer_settings(tmp_path: Path, **overrides: object) -> DeployerSettings:
    values: dict[str, object] = {
        "grpc_port": 0,
        "tokens": SecretStr(f"{TOKEN_A} tenant-a, {TOKEN_B} tenant-b, {TOKEN_OPERATOR} *"),
        "engine_log_dir": tmp_path / "engines",
        "health_interval_s": 0.1,
        "drain_timeout_s": 3.0,
        "ready_timeout_s": 20.0,
        "restart_window_s": 60.0,
        "max_restarts": 2,
        "telemetry_lag_s": 0.0,
        "warmup_requests": 1,
    }
    rollout = {"step_duration_s": 0.3, **overrides.pop("rollout", {})}  # type: ignore[dict-item]
    values.update(overrides, rollout=rollout)
    return DeployerSettings(**values)  # type: ignore[arg-type]


async def start_stack(
    nc: Client,
    tmp_path: Path,
    *,
    real_engines: bool = False,
    store: Store | None = None,
    **overrides: object,
) -> Stack:
    """A started deployer: stand-in engines, or `make_engine`'s real ones with `real_engines`;
    canary analyses read `store` (migrated here), else every canary step holds."""
    factory = StandInFactory()
    settings = deployer_settings(tmp_path, **overrides)
    service = DeployerService(settings) if real_engines else DeployerService(settings, engine_factory=factory)
    if store is not None:
        await migrate(store)
    ctx = ServiceContext(shared=SharedSettings(data_dir=tmp_path), nc=nc, js=nc.jetstream(), store=store)
    await service.start(ctx)
    channel = grpc.aio.insecure_channel(service.server.address)
    return Stack(
        service=service,
        factory=factory,
        channel=channel,
        stub=pb_grpc.EndpointServiceStub(channel),  # type: ignore[no-untyped-call]
        ctx=ctx,
    )


async def stop_stack(stack: Stack, *, purge: bool = True) -> None:
    await stack.channel.close()
    await stack.service.stop(5.0)
    await stack.factory.stop_all()
    if purge:
        await purge_state(stack.ctx.js)


async def purge_state(js: JetStreamContext) -> None:
    """Forget every endpoint the deployer tests made, so the next deployer does not resume them."""
    buckets = {name: await Bucket.open(js, name) for name in ("endpoints", "deployments", "routes")}
    for name in await buckets["endpoints"].keys():
        for key in await buckets["deployments"].keys():
            if key.startswith(f"{name}."):
                with contextlib.suppress(NotFound):
                    await buckets["deployments"].delete(key)
        with contextlib.suppress(NotFound):
            await buckets["routes"].delete(name)
        with contextlib.suppress(NotFound):
            await buckets["endpoints"].delete(name)


@pytest.fixture
async def stack(nc: Client, tmp_path: Path) -> AsyncIterator[Stack]:
    running = await start_stack(nc, tmp_path)
    try:
        yield running
    finally:
        await stop_stack(running)


#: Short canary steps on few requests (the progressive-rollout tests).
FAST: dict[str, Any] = {"rollout": {"step_duration_s": 0.6, "min_requests": 20}}


@pytest.fixture
async def canary_stack(nc: Client, tmp_path: Path, store: Store) -> AsyncIterator[Stack]:
    running = await start_stack(nc, tmp_path, store=store, **FAST)
    try:
        yield running
    finally:
        await stop_stack(running)
