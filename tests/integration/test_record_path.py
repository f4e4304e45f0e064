"""The record path end to end, on real parts: an OpenAI SDK client streams through the gateway to an
upstream with a known delay; the gateway's record crosses NATS; the profiler's sink writes it to
ClickHouse, where the row has the client-observed TTFT and token counts and no text."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from nats.js import JetStreamContext
from openai import AsyncOpenAI

from evertune.gateway import GatewayService, GatewaySettings
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime.host import host_services
from evertune.infra.settings import SharedSettings, load_settings
from evertune.infra.store import open_store
from evertune.profiler import ProfilerService, ProfilerSettings
from tests.domain.replay.conftest import fake_url
from tests.gateway.conftest import put_routes

__all__ = ["fake_url"]


async def test_openai_stream_through_the_gateway_lands_as_one_row(
    nats_server: EmbeddedNats, js: JetStreamContext, store_url: str, fake_url: str, tmp_path: Path
) -> None:
    endpoint = f"e2e-{uuid.uuid4().hex[:8]}"
    database = f"e2e_{uuid.uuid4().hex[:8]}"
    shared = load_settings(
        SharedSettings, data_dir=tmp_path, clickhouse_url=store_url, clickhouse_database=database
    )
    gateway = GatewayService(GatewaySettings(port=0, batch_ms=5.0))
    profiler = ProfilerService(
        ProfilerSettings(
            sink_subject=f"evertune.telemetry.{endpoint}", sink_durable=f"sink-{endpoint}", sink_flush_ms=20.0
        )
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    hosting = asyncio.create_task(
        host_services(
            [profiler, gateway],
            shared=shared,
            nats_url=nats_server.url,
            stop=stop,
            on_ready=lambda _: ready.set(),
        )
    )
    store = None
    try:
        await asyncio.wait_for(ready.wait(), 60)
        await put_routes(js, gateway, endpoint, [("dep-e2e", fake_url, 10000)])

        client = AsyncOpenAI(
            base_url=f"http://127.0.0.1:{gateway.port}/v1",
            api_key="unused",
            default_headers={"X-Fake": "ttft_ms=40,itl_ms=5"},
        )
        try:
            stream = await client.chat.completions.create(
                model=endpoint,
                messages=[
                    {"role": "system", "content": "You are brief."},
                    {"role": "user", "content": "hello"},
                ],
                max_tokens=6,
                stream=True,
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        finally:
            await client.close()
        assert text == "t0 t1 t2 t3 t4 t5 "

        store = await open_store(store_url, database=database)
        rows = []
        for _ in range(200):
            rows = list(
                await store.query(
                    "SELECT deployment, ttft_ms, completion_tokens, prompt_tokens, length(itl_ms),"
                    " status_code, error_class, client_disconnected"
                    " FROM requests WHERE endpoint = {e:String}",
                    {"e": endpoint},
                )
            )
            if rows:
                break
            await asyncio.sleep(0.05)
        assert len(rows) == 1, rows
        deployment, ttft_ms, completion, prompt, gaps, status, error_class, disconnected = rows[0]
        assert deployment == "dep-e2e" and status == 200 and error_class == "" and not disconnected
        assert 40 <= ttft_ms <= 40 + 25  # client-observed: the upstream's 40 ms plus the proxy's share
        assert completion == 6 and prompt > 0 and gaps == 5
        columns = {r[0]: r[1] for r in await store.query("DESCRIBE TABLE requests")}
        text_columns = {name for name, kind in columns.items() if "String" in kind}
        assert text_columns == {
            "endpoint",
            "endpoint_uid",
            "deployment",
            "request_id",
            "api",
            "model",
            "error_class",
        }
    finally:
        stop.set()
        await asyncio.wait_for(hosting, 30)
        if store is not None:
            await store.close()
