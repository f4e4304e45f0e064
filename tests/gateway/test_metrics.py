"""The gateway's /metrics, scraped for real from the session's gateway after real requests."""

from __future__ import annotations

import asyncio

import aiohttp
from nats.js import JetStreamContext
from prometheus_client.parser import text_string_to_metric_families

from evertune.gateway import GatewayService
from tests.gateway.conftest import base_url, new_endpoint, put_routes


async def _scrape(gateway: GatewayService) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with aiohttp.ClientSession() as http, http.get(base_url(gateway) + "/metrics") as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_requests_ttft_and_publisher_figures_are_scraped(
    gateway: GatewayService, js: JetStreamContext, fake_url: str
) -> None:
    endpoint = new_endpoint()
    await put_routes(js, gateway, endpoint, [("dep-m", fake_url, 10000)])
    url = base_url(gateway) + "/v1/chat/completions"
    body = {"model": endpoint, "stream": True, "messages": [{"role": "user", "content": "hello there"}]}
    async with aiohttp.ClientSession() as http:
        for _ in range(3):
            async with http.post(url, json=body, headers={"X-Fake": "ttft_ms=30,itl_ms=2"}) as resp:
                assert resp.status == 200
                await resp.read()
        async with http.post(url, json=body, headers={"X-Fake": "status=500"}) as resp:
            assert resp.status == 500
    before = gateway.publisher.stats.published_records if gateway.publisher else 0
    for _ in range(100):  # records reach JetStream off the response path
        if gateway.publisher is not None and gateway.publisher.stats.queue_depth == 0:
            break
        await asyncio.sleep(0.02)

    samples = await _scrape(gateway)
    ok = (("deployment", "dep-m"), ("endpoint", endpoint), ("status_class", "2xx"))
    failed = (("deployment", "dep-m"), ("endpoint", endpoint), ("status_class", "5xx"))
    assert samples[("evertune_gateway_requests_total", ok)] == 3
    assert samples[("evertune_gateway_requests_total", failed)] == 1
    scope = (("deployment", "dep-m"), ("endpoint", endpoint))
    assert samples[("evertune_gateway_ttft_seconds_count", scope)] == 3  # the 500 sent no token
    ttft_sum = samples[("evertune_gateway_ttft_seconds_sum", scope)]
    assert 3 * 0.03 <= ttft_sum < 3 * 1.0  # the fake's 30 ms TTFT, plus the proxy's share
    le_25ms = samples[("evertune_gateway_ttft_seconds_bucket", (*scope, ("le", "0.025")))]
    le_1s = samples[("evertune_gateway_ttft_seconds_bucket", (*scope, ("le", "1.0")))]
    assert le_25ms == 0 and le_1s == 3
    assert samples[("evertune_gateway_records_published_total", ())] >= before
    assert ("evertune_gateway_records_spooled_total", ()) in samples
    assert ("evertune_gateway_spool_bytes", ()) in samples
    assert ("evertune_gateway_telemetry_queue_records", ()) in samples


async def test_in_flight_counts_an_open_stream(
    gateway: GatewayService, js: JetStreamContext, fake_url: str
) -> None:
    endpoint = new_endpoint()
    await put_routes(js, gateway, endpoint, [("dep-s", fake_url, 10000)])
    body = {"model": endpoint, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as http:
        headers = {"X-Fake": "ttft_ms=5,itl_ms=100,tokens=10"}  # ~1 s of stream
        async with http.post(base_url(gateway) + "/v1/chat/completions", json=body, headers=headers) as resp:
            await resp.content.readany()  # the stream is open
            samples = await _scrape(gateway)
            assert samples[("evertune_gateway_in_flight_requests", ())] >= 1
            await resp.read()
