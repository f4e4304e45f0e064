"""The gateway authenticates inference clients with per-tenant API keys and serves each only its
tenant's endpoints (hole 7 of the security issue): the OpenAI SDK's key is the credential; another
tenant's endpoint is an unknown model; `/v1/models` lists the caller's endpoints; `/metrics`, which
names every tenant's endpoints, needs an operator's key; without keys the gateway serves on
loopback only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import openai
import pytest
from nats.aio.client import Client
from openai import AsyncOpenAI
from pydantic import SecretStr

from evertune.errors import SettingsError
from evertune.gateway import GatewayService, GatewaySettings
from evertune.infra.bus import Bucket
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings
from evertune.v1 import endpoint_pb2

KEY_A = "sk-tenant-a-0123456789abcdef"
KEY_B = "sk-tenant-b-0123456789abcdef"
KEY_OPERATOR = "sk-operator-0123456789abcdef"


def _always(value: bytes) -> Callable[[bytes | None], bytes]:
    return lambda _: value


@pytest.fixture
async def gateway(nc: Client, tmp_path: Path, fake_url: str) -> AsyncIterator[str]:
    """A gateway with keys for tenants a and b and an operator; endpoints keys-a and keys-b."""
    routes = await Bucket.open(nc.jetstream(), "routes")
    for tenant in ("a", "b"):
        table = endpoint_pb2.RouteTable(
            endpoint=f"keys-{tenant}",
            tenant=tenant,
            routes=[endpoint_pb2.Route(deployment_id=f"d-{tenant}", upstream_url=fake_url, weight=1)],
        )
        await routes.mutate(f"keys-{tenant}", _always(table.SerializeToString()))
    keys = SecretStr(f"{KEY_A} a, {KEY_B} b, {KEY_OPERATOR} *")
    service = GatewayService(GatewaySettings(port=0, api_keys=keys, spool_path=tmp_path / "spool.bin"))
    ctx = ServiceContext(shared=SharedSettings(data_dir=tmp_path), nc=nc, js=nc.jetstream(), store=None)
    await service.start(ctx)
    try:
        yield f"http://127.0.0.1:{service.port}"
    finally:
        await service.stop(5.0)


def _client(url: str, key: str) -> AsyncOpenAI:
    return AsyncOpenAI(
        base_url=url + "/v1", api_key=key, default_headers={"X-Fake": "ttft_ms=1"}, max_retries=0
    )


async def test_keys_reach_their_tenants_endpoints_only(gateway: str) -> None:
    a, b, nobody = (
        _client(gateway, KEY_A),
        _client(gateway, KEY_B),
        _client(gateway, "sk-not-a-key-0123456789"),
    )
    try:
        stream = await a.chat.completions.create(
            model="keys-a", messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True
        )
        assert [c async for c in stream]
        with pytest.raises(openai.NotFoundError, match="The model `keys-b` does not exist"):
            await a.chat.completions.create(model="keys-b", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.AuthenticationError):
            await nobody.chat.completions.create(model="keys-a", messages=[{"role": "user", "content": "hi"}])
        assert {m.id for m in (await a.models.list()).data} >= {"keys-a"}
        assert "keys-b" not in {m.id for m in (await a.models.list()).data}
        assert "keys-a" not in {m.id for m in (await b.models.list()).data}
        operator = {m.id for m in (await _client(gateway, KEY_OPERATOR).models.list()).data}
        assert {"keys-a", "keys-b"} <= operator
    finally:
        for client in (a, b, nobody):
            await client.close()


async def test_metrics_need_an_operators_key(gateway: str) -> None:
    async with aiohttp.ClientSession() as session:
        statuses = []
        for key in (None, KEY_A, KEY_OPERATOR):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            async with session.get(gateway + "/metrics", headers=headers) as response:
                statuses.append(response.status)
                if response.status == 200:
                    assert "evertune_gateway_requests_total" in await response.text()
        assert statuses == [401, 403, 200]
        async with session.get(gateway + "/health") as response:
            assert response.status == 200  # liveness stays open


async def test_no_keys_off_loopback_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="EVERTUNE_GATEWAY_API_KEY_FILE: no API keys configured"):
        GatewayService(GatewaySettings(host="0.0.0.0", port=0))
    assert GatewayService(GatewaySettings(host="0.0.0.0", port=0, allow_unauthenticated=True)).keys is None
    await asyncio.sleep(0)
