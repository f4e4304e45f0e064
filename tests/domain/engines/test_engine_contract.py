"""The contract every registered engine passes, served for real on the tiny model: ready and
healthy, its model listed under the endpoint's name, chat streamed, completions with the top-k
logprobs its registration promises, its /metrics read into the same `EngineMetrics`, and nothing
left running after it stops. vLLM's run is an `engine` test (about 40 s); the sim engine and
llama.cpp start in about a second.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import aiohttp
import pytest

from evertune.domain.engines import ENGINES, EngineSpec, make_engine
from evertune.domain.engines.logprobs import completion_logprobs
from evertune.domain.engines.process import process_group_pids
from evertune.infra import engine_http

#: The spec each kind is tried with (small KV space for vLLM; the tiny model's float GGUF for
#: llama.cpp, made from the folder when the engine starts).
SPECS: dict[str, dict[str, object]] = {
    "vllm": {"kv_cache_space_gib": 1, "enforce_eager": True, "max_model_len": 512},
    "sim": {},
    "llama.cpp": {"quantization": "f32", "max_num_seqs": 2, "max_model_len": 512},
}
KINDS = [pytest.param(kind, marks=[pytest.mark.engine] if kind == "vllm" else []) for kind in sorted(ENGINES)]


def test_every_registered_kind_is_tried() -> None:
    assert set(SPECS) == set(ENGINES)


async def _stream(response: aiohttp.ClientResponse) -> list[dict[str, object] | str]:
    events: list[dict[str, object] | str] = []
    async for raw in response.content:
        line = raw.decode().strip()
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def _post(
    http: aiohttp.ClientSession, url: str, body: dict[str, object], fresh: aiohttp.ClientSession
) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
    headers = {"Content-Type": "application/json"}
    return engine_http.post(http, url, data=json.dumps(body).encode(), headers=headers, fresh=fresh)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_registered_engine_serves_the_openai_routes_and_its_metrics(
    kind: str, tmp_path: Path, tiny_model_dir: Path
) -> None:
    registered = ENGINES[kind]
    spec = EngineSpec.parse({"kind": kind, "model": str(tiny_model_dir), **SPECS[kind]})
    engine = make_engine(spec, log_dir=tmp_path, served_model_name="contract")
    # POSTs as evertune's clients send them (`engine_http`): llama.cpp's server closes the pooled
    # connection after a streamed answer though it says keep-alive.
    async with engine, aiohttp.ClientSession() as http, engine_http.fresh_session(http) as fresh:
        assert await engine.health() and engine.startup_s is not None
        async with http.get(f"{engine.base_url}/v1/models") as r:
            assert "contract" in [m["id"] for m in (await r.json())["data"]]
        chat = {
            "model": "contract",
            "messages": [{"role": "user", "content": "Where is my parcel today?"}],
            "max_tokens": 4,
            "temperature": 0,
            "stream": True,
        }
        async with _post(http, f"{engine.base_url}/v1/chat/completions", chat, fresh) as r:
            assert r.status == 200, await r.text()
            events = await _stream(r)
        assert events[-1] == "[DONE]" and len(events) >= 3
        completion: dict[str, object] = {
            "model": "contract",
            "prompt": "the clinic opens at nine",
            "max_tokens": 3,
            "temperature": 0,
        }
        if registered.top_logprobs:
            completion["logprobs"] = 3
        async with _post(http, f"{engine.base_url}/v1/completions", completion, fresh) as r:
            assert r.status == 200, await r.text()
            choice = (await r.json())["choices"][0]
        if registered.top_logprobs:
            positions = completion_logprobs(choice)
            assert len(positions) == 3 and all(len(p.top) == 3 for p in positions), choice["logprobs"]
            # greedy: each token is its position's most likely one
            assert all(p.top[0][0] == p.token and p.top[0][1] == pytest.approx(p.logprob) for p in positions)
        metrics = await engine.scrape_metrics()
        assert metrics.prompt_tokens > 0 and metrics.generation_tokens >= 7, metrics
        group = engine.pid
    assert group is not None and process_group_pids(group) == []
    assert not engine.running and not await engine.health()
