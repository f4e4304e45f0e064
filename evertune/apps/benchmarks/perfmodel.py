"""`evertune bench sim-speed` (also `perfmodel`): how fast the model simulates a long voice replay.

The voice workload (defaults: 4 agents with ~1,000-token system prompts, short answers) over
`duration` at a peak of 2 calls/s, on the local tiny model's architecture and tokenizer, one
vLLM-CPU engine with 2 GiB of KV cache and the stored CPU calibration (model defaults when
there is none). Three timings, each the median of `repeats` (5) runs:

- `prepare_requests_per_s`: planned requests turned into simulator inputs (tokenizing each new
  message, hashing prompt blocks) per second;
- `sim_requests_per_s`: requests simulated (events, scheduler, step times) per second of wall
  time, from prepared inputs; the issue's goal is >= 50,000 on one core. `sim_requests_per_cpu_s`
  is the same per second of this process's CPU time: on a shared machine it is the steadier figure;
- `summary_requests_per_s`: the simulated results summarised (percentiles, attainment).

Also what was simulated: requests, steps, prefix hit rate, TTFT p50/p99 and ITL p50 predicted.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from evertune.apps.benchmarks import Figures
from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.hardware import detect_local
from evertune.domain.model import ensure_model
from evertune.domain.perfmodel.arch import load_arch
from evertune.domain.perfmodel.calibration import default_data_dir, load_efficiency
from evertune.domain.perfmodel.des import World
from evertune.domain.perfmodel.des import run as run_events
from evertune.domain.perfmodel.scheduler import Scheduler, SimRequest
from evertune.domain.perfmodel.simulate import resolve, simulate
from evertune.domain.perfmodel.steptime import Efficiency, StepCost
from evertune.domain.perfmodel.workload import PromptTokens, prepare
from evertune.domain.workloads import VoiceWorkload, plan_voice
from evertune.domain.workloads.source import CorpusText


async def run(quick: bool) -> Figures:
    data_dir = default_data_dir()
    model_dir = await asyncio.to_thread(ensure_model, data_dir)
    return await asyncio.to_thread(_measure, quick, model_dir, data_dir)


def _measure(quick: bool, model_dir: Path, data_dir: Path) -> Figures:
    duration_s = 600.0 if quick else 3600.0
    repeats = 5
    arch = load_arch(model_dir)
    hardware = detect_local()
    stored = load_efficiency(data_dir, hardware.name)
    efficiency = stored or Efficiency()
    spec = EngineSpec(model=str(model_dir), kv_cache_space_gib=2)
    config = resolve(spec, hardware, arch)
    plan = plan_voice(VoiceWorkload(duration_s=duration_s, peak_calls_per_s=2.0, seed=0), text=CorpusText())

    prep_s: list[float] = []
    inputs = []
    for _ in range(repeats):
        tokens = PromptTokens.of_folder(model_dir)
        started = time.perf_counter()
        inputs = prepare(plan, tokens, block_size=config.block_size)
        prep_s.append(time.perf_counter() - started)

    cost = StepCost.of(arch, hardware, efficiency)
    sim_s: list[float] = []
    sim_cpu_s: list[float] = []
    steps = 0
    for _ in range(repeats):
        requests = [
            SimRequest(
                index=i,
                arrival_s=x.arrival_s,
                prompt_tokens=x.prompt_tokens,
                max_tokens=x.max_tokens,
                hashes=x.hashes,
            )
            for i, x in enumerate(inputs)
        ]
        started, started_cpu = time.perf_counter(), time.process_time()
        world = run_events(World(scheduler=Scheduler(config), cost=cost), requests)
        sim_s.append(time.perf_counter() - started)
        sim_cpu_s.append(time.process_time() - started_cpu)
        steps = world.steps

    full_s: list[float] = []
    figures = None
    for _ in range(repeats):
        figures = simulate(inputs, spec, hardware, arch, efficiency=efficiency)
        full_s.append(figures.wall_s)
    assert figures is not None
    n = len(inputs)
    sim_median = statistics.median(sim_s)
    full_median = statistics.median(full_s)
    return {
        "benchmark": "sim-speed",
        "quick": quick,
        "workload": f"voice {duration_s:g} s, peak 2 calls/s",
        "requests": n,
        "steps": steps,
        "calibrated": stored is not None,
        "prepare_requests_per_s": round(n / statistics.median(prep_s)),
        "sim_requests_per_s": round(n / sim_median),
        "sim_requests_per_cpu_s": round(n / statistics.median(sim_cpu_s)),
        "sim_steps_per_s": round(steps / sim_median),
        "simulate_with_summary_requests_per_s": round(n / full_median),
        "prefix_hit_rate": round(figures.prefix_hit_rate, 4),
        "ttft_p50_ms": round(figures.summary.ttft_ms.p50, 2),
        "ttft_p99_ms": round(figures.summary.ttft_ms.p99, 2),
        "itl_p50_ms": round(figures.summary.itl_ms.p50, 2),
        "goal_sim_requests_per_s": 50_000,
    }
