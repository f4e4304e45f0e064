"""The gateway end to end: a real NATS, the fake engine upstream, a real HTTP client."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import openai
import pytest
from nats.js import JetStreamContext
from openai import AsyncOpenAI

from evertune.domain.replay.sse import SseDecoder
from evertune.gateway import GatewayService
from evertune.gateway.proxy import Proxy
from evertune.gateway.routing import RouteBook
from evertune.gateway.settings import GatewaySettings
from evertune.infra.nats_server import free_port
from evertune.v1 import telemetry_pb2
from tests.closing_server import closing_server
from tests.gateway.conftest import base_url, new_endpoint, put_routes, read_records

WORDS = "the quick brown fox jumps over the lazy dog while seven tired sailors sing".split()
ALLOWED_TEXT_FIELDS = {"request_id", "endpoint", "deployment", "model", "error_class"}


async def _stream(url: str, body: dict[str, Any], fake: str) -> tuple[list[str], float, str, int]:
    """POST a streamed request; the payloads, the client's TTFT (ms), x-request-id and status."""
    payloads: list[str] = []
    ttft = 0.0
    async with aiohttp.ClientSession() as session:
        sent = time.perf_counter()
        async with session.post(url, json=body, headers={"X-Fake": fake}) as response:
            decoder = SseDecoder()
            async for data in response.content.iter_any():
                for payload in decoder.feed(data):
                    if not ttft and ('"content": "t' in payload or '"text": "t' in payload):
                        ttft = (time.perf_counter() - sent) * 1000.0
                    payloads.append(payload)
            return payloads, ttft, response.headers.get("x-request-id", ""), response.status


async def _truth(fake_url: str, request_id: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(fake_url + "/fixture/truth") as response:
        truth: dict[str, Any] = (await response.json())[request_id]
        return truth


def _no_text(record: telemetry_pb2.RequestRecord, *secrets: str) -> None:
    strings = {f.name for f, _ in record.ListFields() if f.type == f.TYPE_STRING}
    assert strings <= ALLOWED_TEXT_FIELDS
    data = record.SerializeToString()
    for secret in secrets:
        assert secret.encode() not in data


async def test_stream_passes_through_and_records_client_timing(
    gateway: GatewayService, js: JetStreamContext, fake_url: str
) -> None:
    endpoint = new_endpoint()
    await put_routes(js, gateway, endpoint, [("dep-a", fake_url, 10000)])
    system = " ".join(WORDS[i % len(WORDS)] for i in range(700))
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "zebra crossing"}]
    body = {"model": endpoint, "messages": messages, "max_tokens": 6, "stream": True}
    fake = "ttft_ms=80,itl_ms=10"
    payloads, client_ttft, request_id, status = await _stream(
        base_url(gateway) + "/v1/chat/completions", body, fake
    )
    direct, _, _, _ = await _stream(fake_url + "/v1/chat/completions", {**body, "model": "fake"}, fake)
    assert status == 200
    assert payloads == [p for p in direct if '"usage"' not in p]  # the same stream, usage stripped
    assert payloads[-1] == "[DONE]"

    (record,) = await read_records(js, f"evertune.telemetry.{endpoint}", request_ids={request_id})
    truth = await _truth(fake_url, request_id)
    assert record.endpoint == endpoint and record.deployment == "dep-a" and record.model == endpoint
    assert record.api == telemetry_pb2.API_CHAT and record.stream and record.status_code == 200
    assert record.error_class == "" and not record.client_disconnected
    print(f"ttft: record {record.ttft_ms:.2f} truth {truth['ttft_ms']:.2f} client {client_ttft:.2f} ms")
    assert 0.0 <= record.ttft_ms - truth["ttft_ms"] < 10.0, (record.ttft_ms, truth["ttft_ms"])
    assert record.ttft_ms <= client_ttft + 1.0
    assert 0.0 < record.upstream_ttft_ms <= record.ttft_ms
    assert record.completion_tokens == 6 and record.prompt_tokens > 0
    # The fake sends a token every 10 ms: five gaps whose sum cannot be under ~50 ms. Single gaps
    # are not bounded: on a loaded machine two tokens can leave in one burst (a gap near 0).
    assert len(record.itl_ms) == 5 and all(gap >= 0.0 for gap in record.itl_ms)
    assert sum(record.itl_ms) >= 45.0, record.itl_ms
    assert record.e2e_ms >= record.ttft_ms + sum(record.itl_ms) - 1.0
    assert record.prefix_block_tokens == 128 and len(record.prefix_hashes) >= 3
    _no_text(record, "quick brown", "zebra")


async def test_usage_kept_when_the_client_asks(
    gateway: GatewayService, js: JetStreamContext, fake_url: str
) -> None:
    endpoint = new_endpoint()
    await put_routes(js, gateway, endpoint, [("dep-a", fake_url, 10000)])
    body = {
        "model": endpoint,
        "prompt": "hello",
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    payloads, _, request_id, _ = await _stream(
        base_url(gateway) + "/v1/completions", body, "ttft_ms=5,itl_ms=1"
    )
    assert json.loads(payloads[-2])["usage"]["completion_tokens"] == 3
    (record,) = await read_records(js, f"evertune.telemetry.{endpoint}", request_ids={request_id})
    assert record.api == telemetry_pb2.API_COMPLETIONS and record.completion_tokens == 3


async def test_openai_sdk_streams_through_the_gateway(
    gateway: GatewayService, js: JetStreamContext, fake_url: str
) -> None:
    endpoint = new_endpoint()
    await put_routes(js, gateway, endpoint, [("dep-sdk", fake_url, 10000)])
    client = AsyncOpenAI(
        base_url=base_url(gateway) + "/v1", api_key="unused", default_headers={"X-Fake": "ttft_ms=5"}
    )
    try:
        models = await client.models.list()
        (model,) = [m for m in models.data if m.id == endpoint]
        assert abs(model.created - time.time()) < 600
        stream = await client.chat.completions.create(
            model=endpoint, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
        )
        texts = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
        whole = await client.completions.create(
            model=endpoint, prompt="hi", max_tokens=2, extra_headers={"X-Fake": "ttft_ms=5,whole=1"}
        )
    finally:
        await client.close()
    assert "".join(t or "" for t in texts) == "t0 t1 t2 t3 "
    assert whole.choices[0].text == "t0 t1 "


@pytest.mark.parametrize(
    ("fake", "error_class"),
    [
        ("drop_after=2", "upstream_disconnect"),  # the connection is cut
        ("no_done=1", "upstream_incomplete"),  # the stream ends without [DONE]
        ("error_after=2", "upstream_stream_error"),  # the upstream's own error event
    ],
)
async def test_mid_stream_failure_raises_in_the_sdk_and_counts_as_an_error(
    gateway: GatewayService, js: JetStreamContext, fake_url: str, fake: str, error_class: str
) -> None:
    endpoint = new_endpoint()
    await put_routes(js, gateway, endpoint, [("dep-cut", fake_url, 10000)])
    client = AsyncOpenAI(
        base_url=base_url(gateway) + "/v1", api_key="unused", default_headers={"X-Fake": f"ttft_ms=5,{fake}"}
    )
    texts: list[str] = []
    try:
        stream = await client.chat.completions.create(
            model=endpoint, messages=[{"role": "user", "content": "hi"}], max_tokens=6, stream=True
        )
        with pytest.raises(openai.APIError, match=r"fixture error|mid-stream"):
            async for chunk in stream:
                texts += [c.delta.content or "" for c in chunk.choices]
    finally:
        await client.close()
    if error_class != "upstream_incomplete":
        assert "".join(texts) == "t0 t1 "  # what came before the failure was passed on
    (record,) = await read_records(js, f"evertune.telemetry.{endpoint}")
    assert (record.status_code, record.error_class) == (502, error_class)
    counted = gateway.metrics_registry.get_sample_value(
        "evertune_gateway_requests_total",
        {"endpoint": endpoint, "deployment": "dep-cut", "status_class": "5xx"},
    )
    assert counted == 1


async def test_the_clients_request_id_comes_back(
    gateway: GatewayService, js: JetStreamContext, fake_url: str
) -> None:
    endpoint = new_endpoint()
    await put_routes(js, gateway, endpoint, [("dep-a", fake_url, 10000)])
    good = {"model": endpoint, "prompt": "x", "max_tokens": 1, "stream": True}
    missing = {"model": "no-such-endpoint", "prompt": "x"}
    async with aiohttp.ClientSession() as session:
        for body, sent, kept in [
            (good, "call-42.turn-3", True),
            (missing, "call-42.turn-4", True),  # errors too
            (good, "has a space", False),
            (good, "x" * 129, False),
        ]:
            headers = {"X-Request-Id": sent, "X-Fake": "ttft_ms=1"}
            async with session.post(
                base_url(gateway) + "/v1/completions", json=body, headers=headers
            ) as response:
                await response.read()
                got = response.headers["x-request-id"]
            assert (got == sent) is kept
            if not kept:
                assert len(got) == 32 and int(got, 16) >= 0  # the gateway's own id instead


async def test_health_ready_and_json_for_unknown_paths_and_methods(gateway: GatewayService) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url(gateway) + "/health") as response:
            assert (response.status, await response.json()) == (200, {"status": "ok"})
        async with session.get(base_url(gateway) + "/ready") as response:
            assert (response.status, await response.json()) == (200, {"status": "ready"})
        async with session.post(base_url(gateway) + "/v1/embeddings", json={}) as response:
            body = await response.json()
            assert response.status == 404 and body["error"]["type"] == "invalid_request_error"
            assert body["error"]["message"] == "Invalid URL (POST /v1/embeddings)"
        async with session.get(base_url(gateway) + "/v1/chat/completions") as response:
            body = await response.json()
            assert response.status == 405 and "POST" in response.headers["Allow"]
            assert body["error"]["type"] == "invalid_request_error"


async def test_not_ready_is_503_with_the_reason() -> None:
    proxy = Proxy(
        GatewaySettings(port=0, retry_after_s=3), RouteBook(), lambda _: None, ready=lambda: "draining"
    )
    runner = aiohttp.web.AppRunner(proxy.app)
    await runner.setup()
    port = free_port()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/ready") as response,
        ):
            body = await response.json()
            assert (response.status, response.headers["Retry-After"]) == (503, "3")
            assert body["error"] == {
                "message": "draining",
                "type": "server_error",
                "param": None,
                "code": "not_ready",
            }
    finally:
        await runner.cleanup()


async def _post(
    gateway: GatewayService, data: bytes, path: str = "/v1/chat/completions"
) -> tuple[int, dict[str, Any], str]:
    async with aiohttp.ClientSession() as session:
        headers = {"Content-Type": "application/json"}
        async with session.post(base_url(gateway) + path, data=data, headers=headers) as response:
            return response.status, await response.json(), response.headers.get("x-request-id", "")


async def test_bad_input_gets_4xx_and_a_record(gateway: GatewayService, js: JetStreamContext) -> None:
    cases = [
        (b"{not json", 400, "bad_json"),
        (b'["a list"]', 400, "bad_json"),
        (b'{"messages": []}', 400, "missing_model"),
        (json.dumps({"model": "x", "prompt": "a" * 70_000}).encode(), 413, "body_too_large"),
        (json.dumps({"model": "no-such-endpoint", "messages": []}).encode(), 404, "model_not_found"),
    ]
    ids = {}
    for data, status, code in cases:
        got, body, request_id = await _post(gateway, data)
        assert (got, body["error"]["code"]) == (status, code)
        assert body["error"]["message"]
        ids[request_id] = (status, code)
    records = await read_records(js, "evertune.telemetry._unrouted", count=len(ids), request_ids=set(ids))
    assert {r.request_id: (r.status_code, r.error_class) for r in records} == ids
    assert all(r.endpoint == "" and r.deployment == "" for r in records)
    assert all(r.model == "" for r in records)  # a name that matched no endpoint is not stored


async def test_upstream_down_is_502_and_recorded(gateway: GatewayService, js: JetStreamContext) -> None:
    endpoint = new_endpoint()
    await put_routes(js, gateway, endpoint, [("dep-down", f"http://127.0.0.1:{free_port()}", 10000)])
    status, body, request_id = await _post(
        gateway, json.dumps({"model": endpoint, "prompt": "x", "stream": True}).encode()
    )
    assert status == 502 and body["error"]["code"] == "upstream_connect"
    (record,) = await read_records(js, f"evertune.telemetry.{endpoint}", request_ids={request_id})
    assert (record.status_code, record.error_class, record.deployment) == (
        502,
        "upstream_connect",
        "dep-down",
    )


async def test_no_deployment_is_503(gateway: GatewayService, js: JetStreamContext, fake_url: str) -> None:
    endpoint = new_endpoint()
    await put_routes(js, gateway, endpoint, [("dep-a", fake_url, 0)])
    status, body, _ = await _post(
        gateway, json.dumps({"model": endpoint, "prompt": "x"}).encode(), "/v1/completions"
    )
    assert status == 503 and body["error"]["code"] == "no_deployment"
    assert body["error"]["type"] == "server_error"
    async with aiohttp.ClientSession() as session:
        data = {"model": endpoint, "prompt": "x"}
        async with session.post(base_url(gateway) + "/v1/completions", json=data) as response:
            assert response.headers["Retry-After"] == str(gateway.settings.retry_after_s)


async def test_upstream_error_status_passes_through(
    gateway: GatewayService, js: JetStreamContext, fake_url: str
) -> None:
    endpoint = new_endpoint()
    await put_routes(js, gateway, endpoint, [("dep-a", fake_url, 10000)])
    async with aiohttp.ClientSession() as session:
        body = {"model": endpoint, "prompt": "x", "stream": True}
        async with session.post(
            base_url(gateway) + "/v1/completions", json=body, headers={"X-Fake": "status=500"}
        ) as response:
            assert response.status == 500
            request_id = response.headers["x-request-id"]
    (record,) = await read_records(js, f"evertune.telemetry.{endpoint}", request_ids={request_id})
    assert (record.status_code, record.error_class) == (500, "upstream_5xx")


async def test_client_disconnect_cancels_upstream_and_is_recorded(
    gateway: GatewayService, js: JetStreamContext, fake_url: str
) -> None:
    endpoint = new_endpoint()
    await put_routes(js, gateway, endpoint, [("dep-a", fake_url, 10000)])
    body = {"model": endpoint, "prompt": "x", "max_tokens": 40, "stream": True}
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            base_url(gateway) + "/v1/completions", json=body, headers={"X-Fake": "ttft_ms=10,itl_ms=30"}
        )
        request_id = response.headers["x-request-id"]
        await response.content.readline()
        response.close()  # the client goes away mid-stream
    (record,) = await read_records(js, f"evertune.telemetry.{endpoint}", request_ids={request_id})
    assert record.client_disconnected and record.error_class == "client_disconnect"
    await asyncio.sleep(0.3)
    truth = await _truth(fake_url, request_id)
    assert len(truth["gaps_ms"]) < 20  # the upstream stopped too


async def test_route_change_applies_to_new_requests(
    gateway: GatewayService, js: JetStreamContext, fake_url: str
) -> None:
    endpoint = new_endpoint()
    seen = []
    for deployment in ("dep-old", "dep-new"):
        await put_routes(js, gateway, endpoint, [(deployment, fake_url, 10000)])
        body = {"model": endpoint, "prompt": "x", "max_tokens": 1, "stream": True}
        _, _, request_id, _ = await _stream(base_url(gateway) + "/v1/completions", body, "ttft_ms=1")
        (record,) = await read_records(js, f"evertune.telemetry.{endpoint}", request_ids={request_id})
        seen.append(record.deployment)
    assert seen == ["dep-old", "dep-new"]


async def test_streams_back_to_back_to_an_engine_that_closes_after_each_all_arrive(
    gateway: GatewayService, js: JetStreamContext
) -> None:
    """llama.cpp closes its connection after every streamed answer though it says keep-alive: the
    gateway's next request on that pooled connection goes out again on a fresh one, not as a 502."""
    async with closing_server() as (url, answered):
        endpoint = new_endpoint()
        await put_routes(js, gateway, endpoint, [("dep-closing", url, 10000)])
        body = {"model": endpoint, "prompt": "hello", "max_tokens": 2, "stream": True}
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                async with session.post(base_url(gateway) + "/v1/completions", json=body) as response:
                    assert response.status == 200, await response.text()
                    assert (await response.read()).endswith(b"data: [DONE]\n\n")
        assert len(answered) == 3  # each request reached the engine once
