"""The `sim` engine kind: an OpenAI-compatible server streaming on the performance model's schedule.

One real sim server subprocess per test (about a second each), on the tiny model's config and
tokenizer; talked to over HTTP like any engine.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import aiohttp
import pytest

from evertune.domain.engines import EngineSpec, KnobRefused, SimEngine, make_engine
from evertune.domain.engines.metrics import parse_metrics
from evertune.domain.engines.process import process_group_pids
from evertune.domain.perfmodel.calibration import save_calibration


async def _sse(response: aiohttp.ClientResponse) -> list[dict[str, object] | str]:
    events: list[dict[str, object] | str] = []
    async for raw in response.content:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line.removeprefix("data: ")
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


async def test_sim_engine_serves_openai_streams_with_usage_and_metrics(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    spec = EngineSpec(kind="sim", model=str(tiny_model_dir), kv_cache_space_gib=2)
    engine = make_engine(spec, log_dir=tmp_path, served_model_name="tiny")
    assert isinstance(engine, SimEngine)
    async with engine, aiohttp.ClientSession() as http:
        assert await engine.health()
        async with http.get(f"{engine.base_url}/v1/models") as r:
            assert [m["id"] for m in (await r.json())["data"]] == ["tiny"]
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "Where is my parcel today?"}],
            "max_tokens": 5,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with http.post(f"{engine.base_url}/v1/chat/completions", json=body) as r:
            assert r.status == 200
            events = await _sse(r)
        assert events[-1] == "[DONE]"
        chunks = [e for e in events if isinstance(e, dict)]
        texts = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]  # type: ignore[index]
        assert texts[0] == "" and all(texts[1:]) and len(texts) == 6  # role chunk, then one word per token
        usage = chunks[-1]["usage"]
        assert chunks[-1]["choices"] == [] and usage["completion_tokens"] == 5  # type: ignore[index]
        async with http.post(
            f"{engine.base_url}/v1/completions",
            json={"model": "tiny", "prompt": "Hello there", "max_tokens": 3},
        ) as r:
            answer = await r.json()
        assert answer["usage"]["completion_tokens"] == 3 and answer["choices"][0]["finish_reason"] == "length"
        assert len(answer["choices"][0]["text"].split()) == 3
        async with http.post(
            f"{engine.base_url}/v1/completions", json={"model": "other", "prompt": "x"}
        ) as r:
            assert r.status == 404
        async with http.post(
            f"{engine.base_url}/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 0}
        ) as r:
            assert r.status == 400
        metrics = await engine.scrape_metrics()
        assert metrics.requests_succeeded == 2
        assert metrics.generation_tokens == 8
        assert metrics.ttft.count == 2
        async with http.get(f"{engine.base_url}/metrics") as r:
            assert parse_metrics(await r.text()).prompt_tokens > 0
        pid = engine.pid
    assert pid is not None and not process_group_pids(pid)


async def test_tokens_arrive_on_the_calibrated_schedule(tmp_path: Path, tiny_model_dir: Path) -> None:
    # Steps of 40 ms and a 100 ms request overhead: the stream must take that long in real time.
    calibration = save_calibration(
        tmp_path,
        "cpu",
        {
            "efficiency": {
                "compute": 1.0,
                "bandwidth": 1.0,
                "attention": 1.0,
                "step_overhead_s": 0.04,
                "request_overhead_s": 0.1,
            }
        },
    )
    spec = EngineSpec(kind="sim", model=str(tiny_model_dir))
    async with (
        SimEngine(spec, log_dir=tmp_path, calibration=calibration) as engine,
        aiohttp.ClientSession() as http,
    ):
        body = {"model": str(tiny_model_dir), "prompt": "Hello there", "max_tokens": 4, "stream": True}
        sent = time.monotonic()
        arrivals: list[float] = []
        async with http.post(f"{engine.base_url}/v1/completions", json=body) as r:
            async for raw in r.content:
                if raw.startswith(b"data: {"):
                    arrivals.append(time.monotonic() - sent)
    assert len(arrivals) == 4
    # The schedule is a floor: token k (from 0) cannot arrive before 100 ms + (k + 1) steps of 40 ms.
    # Late tokens may bunch on a loaded machine, so single gaps are not bounded from below.
    for k, arrival in enumerate(arrivals):
        assert arrival >= 0.1 + 0.04 * (k + 1) - 0.005, (k, arrivals)


def test_sim_refuses_what_it_does_not_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    with pytest.raises(KnobRefused, match="one replica"):
        SimEngine(EngineSpec(kind="sim", model=str(tiny_model_dir), replicas=2), log_dir=tmp_path)


async def test_the_live_sim_agrees_with_the_offline_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    # Measure shapes on the live sim engine as on vLLM, then predict them offline with the same
    # factors: the two must agree within the HTTP and event-loop noise (large overheads keep it small).
    # TTFT is compared for lone requests only: "concurrent" requests reach a live engine a few ms
    # apart and may split across prefill steps, where the offline shape has them arrive together.
    from evertune.domain.engines.hardware import detect_local
    from evertune.domain.perfmodel.arch import load_arch
    from evertune.domain.perfmodel.calibrate import predict
    from evertune.domain.perfmodel.measure import Shape, measure_on
    from evertune.domain.perfmodel.steptime import Efficiency

    efficiency = Efficiency(
        compute=0.01,
        bandwidth=0.1,
        attention=0.05,
        step_overhead_s=0.01,
        seq_overhead_s=0.001,
        request_overhead_s=0.02,
    )
    calibration = save_calibration(tmp_path, "cpu", {"efficiency": efficiency.__dict__})
    spec = EngineSpec(kind="sim", model=str(tiny_model_dir), kv_cache_space_gib=2)
    shapes = [Shape(1, 64, 6), Shape(1, 700, 4), Shape(4, 300, 6), Shape(3, 700, 4, prefix_tokens=512)]
    async with SimEngine(spec, log_dir=tmp_path, calibration=calibration) as engine:
        points = await measure_on(engine.base_url, shapes, tokenizer_dir=tiny_model_dir, repeats=1, knobs={})
        metrics = await engine.scrape_metrics()
    # The shared 512-token prefix (4 full blocks of 128) was computed once: the other two hit it.
    assert metrics.prefix_cache_hits >= 2 * 512
    assert [p.prefix_tokens for p in points] == [0, 0, 0, 512]
    arch, hardware = load_arch(tiny_model_dir), detect_local()
    # Tolerances: 15%, or a few ms of wall-clock lateness on a loaded 2-core machine (seen: a live
    # TTFT 17 ms over its prediction while other tests ran). A sim that ignored its schedule would
    # stream at once and miss by the whole step time (>= 10 ms per token, 20 ms per request here).
    for point in points:
        predicted = predict(point, model=arch, hardware=hardware, efficiency=efficiency, base=spec)
        if point.concurrency == 1:
            assert point.ttft_ms == pytest.approx(predicted["ttft_ms"], rel=0.15, abs=25.0), point.name
        assert point.itl_ms == pytest.approx(predicted["itl_ms"], rel=0.15, abs=4.0), point.name
