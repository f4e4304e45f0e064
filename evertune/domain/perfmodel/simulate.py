"""What the searcher asks the model: the figures of (workload, engine config, hardware, model).

`simulate` runs the discrete-event simulation once and summarises it with the replay client's own
`summarize` (same percentile and attainment definitions as a measured run). `sim_goodput` searches
the highest rate meeting an SLO with the replay's `next_rate` / `conclude` (same search as
`evertune replay --find-goodput`), each probe a simulation.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.perfmodel.arch import ModelArch
from evertune.domain.perfmodel.des import World, run
from evertune.domain.perfmodel.scheduler import Scheduler, SchedulerConfig, SimRequest
from evertune.domain.perfmodel.steptime import Efficiency, StepCost
from evertune.domain.perfmodel.workload import PromptTokens, SimInput, prepare
from evertune.domain.replay.goodput import GoodputResult, Probe, check_search, conclude, next_rate, probe_of
from evertune.domain.replay.lag import assess_lag
from evertune.domain.replay.results import RequestResult
from evertune.domain.replay.summary import Summary, summarize
from evertune.domain.slo import Slo
from evertune.domain.workloads.plan import PlannedRequest
from evertune.errors import InvalidArgument

GIB = 2**30
#: Seconds between warming requests and what they warm, in simulated time (each finishes long before).
WARM_GAP_S = 10.0
#: Share of device memory vLLM takes when no KV space is set (`--gpu-memory-utilization`).
MEMORY_UTILIZATION = 0.9


def block_size_of(spec: EngineSpec, hardware: HardwareProfile) -> int:
    """The KV block size the engine runs with (unset: vLLM's default there, 128 on CPU, 16 on GPUs)."""
    return spec.block_size or hardware.default_block_size


def resolve(spec: EngineSpec, hardware: HardwareProfile, arch: ModelArch) -> SchedulerConfig:
    """The scheduler knobs of `spec` on `hardware`, vLLM's defaults applied.

    KV capacity: `kv_cache_space_gib` (per device, times the tensor-parallel degree), else
    `MEMORY_UTILIZATION` of the memory less the weights. Refused when not one block fits.
    """
    tp = spec.tensor_parallel_size or 1
    block_size = block_size_of(spec, hardware)
    if spec.kv_cache_space_gib is not None:
        kv_bytes = spec.kv_cache_space_gib * GIB * tp
    else:
        devices = 1 if hardware.is_cpu else tp
        kv_bytes = hardware.memory_gib * GIB * devices * MEMORY_UTILIZATION - arch.weight_bytes
    num_blocks = int(kv_bytes // (block_size * arch.kv_bytes_per_token))
    if num_blocks < 1:
        raise InvalidArgument(f"no KV block fits: the model's weights fill {hardware.name}'s memory")
    return SchedulerConfig(
        max_num_seqs=spec.max_num_seqs or hardware.default_max_num_seqs,
        max_num_batched_tokens=spec.max_num_batched_tokens or hardware.default_max_num_batched_tokens,
        block_size=block_size,
        num_blocks=num_blocks,
        chunked_prefill=spec.enable_chunked_prefill is not False,
        prefix_caching=spec.enable_prefix_caching is not False,
    )


@dataclass(frozen=True)
class SimFigures:
    """The predicted figures of one simulated run."""

    summary: Summary  #: TTFT / ITL / e2e percentiles, throughput, attainment (replay's definitions)
    results: tuple[RequestResult, ...]  #: one per request, in workload order, as a replay would see them
    steps: int  #: engine steps simulated
    busy_share: float  #: share of the run the engine was computing a step
    preemptions: int  #: recompute preemptions
    prefix_hit_rate: float  #: cached share of prompt tokens looked up (NaN with caching off)
    unfinished: int  #: requests that never finished (a prompt larger than the whole KV cache)
    config: SchedulerConfig  #: the resolved scheduler knobs
    wall_s: float  #: wall-clock seconds the simulation took

    @property
    def requests_per_wall_s(self) -> float:
        """Simulated requests per second of wall time."""
        return len(self.results) / self.wall_s if self.wall_s > 0 else float("inf")

    def goodput_share(self) -> float | None:
        """Share of requests meeting the SLO the summary was computed with."""
        return self.summary.attainment


def as_inputs(
    workload: Sequence[SimInput] | Sequence[PlannedRequest],
    *,
    tokens: PromptTokens | None,
    block_size: int,
) -> Sequence[SimInput]:
    """The simulator's inputs of a workload: prepared already, or a plan prepared with `tokens`."""
    if workload and isinstance(workload[0], PlannedRequest):
        if tokens is None:
            raise InvalidArgument("simulating planned requests needs tokens=PromptTokens(tokenizer)")
        return prepare([r for r in workload if isinstance(r, PlannedRequest)], tokens, block_size=block_size)
    return [w for w in workload if isinstance(w, SimInput)]


def simulate(
    workload: Sequence[SimInput] | Sequence[PlannedRequest],
    config: EngineSpec,
    hardware: HardwareProfile,
    model: ModelArch,
    *,
    tokens: PromptTokens | None = None,
    efficiency: Efficiency | None = None,
    slo: Slo | None = None,
    rate: float = 1.0,
    check_invariants: bool = False,
    fast_forward: bool = True,
    warm: Sequence[SimInput] = (),
) -> SimFigures:
    """Simulate `workload` on one engine of `config` on `hardware` serving `model`; arrivals are
    divided by `rate` (2.0 = twice the load). The workload is `SimInput`s (`workload.prepare`,
    `synthetic`), or a plan of `PlannedRequest`s (voice, trace) with `tokens` to size its prompts.
    `check_invariants` asserts the block pool after every step (slow; tests); `fast_forward=False`
    runs pure-decode stretches step by step (same results, slower).

    `warm`: requests the engine served before the workload, whose blocks may still be in its prefix
    cache (primers, an earlier run): simulated first, one at a time `WARM_GAP_S` apart, the workload
    `WARM_GAP_S` after the last of them, and not scored (`results`, `summary` and `unfinished` are
    the workload's alone; their times are on the shifted clock)."""
    if not rate > 0:
        raise InvalidArgument(f"rate must be positive, got {rate}")
    if not workload:
        raise InvalidArgument("nothing to simulate: the workload has no request")
    started = time.perf_counter()
    sched_config = resolve(config, hardware, model)
    workload = as_inputs(workload, tokens=tokens, block_size=sched_config.block_size)
    if warm:
        # Arrivals are divided by the rate: place the warming requests after that division.
        lead = [replace(w, arrival_s=i * WARM_GAP_S * rate) for i, w in enumerate(warm)]
        offset = (len(lead) + 1) * WARM_GAP_S * rate
        workload = [*lead, *(replace(x, arrival_s=x.arrival_s + offset) for x in workload)]
    efficiency = efficiency or Efficiency()
    cost = StepCost.of(model, hardware, efficiency, tp=config.tensor_parallel_size or 1)
    delay = efficiency.request_overhead_s
    per_token = efficiency.request_overhead_per_token_s
    requests = [
        SimRequest(
            index=i,
            arrival_s=item.arrival_s / rate + _overhead(delay, per_token, item.prompt_tokens),
            prompt_tokens=item.prompt_tokens,
            max_tokens=item.max_tokens,
            hashes=item.hashes,
        )
        for i, item in enumerate(workload)
    ]
    scheduler = Scheduler(sched_config, check_invariants=check_invariants)
    world = run(World(scheduler=scheduler, cost=cost, fast_forward=fast_forward), requests)
    workload, requests = workload[len(warm) :], requests[len(warm) :]
    results = tuple(
        _result(item, request, sent_s=item.arrival_s / rate)
        for item, request in zip(workload, requests, strict=True)
    )
    first = min(item.arrival_s for item in workload) / rate
    last = max((r.finished_s for r in requests if r.finished_s >= 0), default=first)
    duration = max(last - first, 0.0)
    summary = summarize(results, slo=slo, lag=assess_lag([0.0]), duration_s=duration)
    return SimFigures(
        summary=summary,
        results=results,
        steps=world.steps,
        busy_share=world.busy_s / duration if duration > 0 else 0.0,
        preemptions=scheduler.preemptions,
        prefix_hit_rate=(
            scheduler.prefix_hits / scheduler.prefix_queries if scheduler.prefix_queries else float("nan")
        ),
        unfinished=sum(1 for r in requests if r.finished_s < 0),
        config=sched_config,
        wall_s=time.perf_counter() - started,
    )


def _overhead(delay: float, per_token: float, prompt_tokens: int) -> float:
    """Seconds a request spends before the engine sees it (exactly `delay` without a per-token term)."""
    return delay + per_token * prompt_tokens if per_token else delay


def _result(item: SimInput, request: SimRequest, *, sent_s: float) -> RequestResult:
    """What a replay client would have recorded for a simulated request sent at `sent_s`."""
    done = request.finished_s >= 0
    return RequestResult(
        request_id=item.request_id,
        conversation_id=item.conversation_id,
        scheduled_s=sent_s,
        sent_s=sent_s,
        lag_ms=0.0,
        ttft_ms=(request.first_token_s - sent_s) * 1000.0 if request.first_token_s >= 0 else None,
        itl_ms=tuple(g * 1000.0 for g in request.gaps),
        e2e_ms=(request.finished_s - sent_s) * 1000.0 if done else None,
        prompt_tokens=request.prompt_tokens,
        completion_tokens=request.output_tokens,
        chunks=request.output_tokens,
        status=200 if done else 0,
        error_class="" if done else "timeout",
        error="" if done else "never finished in the simulation (prompt larger than the KV cache?)",
    )


def workload_rps(workload: Sequence[SimInput]) -> float:
    """Mean request rate of a workload at rate 1 (requests over its arrival span)."""
    if len(workload) < 2:
        raise InvalidArgument("a workload needs at least two requests to have a rate")
    times = [w.arrival_s for w in workload]
    span = max(times) - min(times)
    if span <= 0:
        raise InvalidArgument("every request arrives at the same time: the workload has no rate")
    return (len(workload) - 1) / span


def sim_goodput(
    workload: Sequence[SimInput] | Sequence[PlannedRequest],
    config: EngineSpec,
    hardware: HardwareProfile,
    model: ModelArch,
    *,
    slo: Slo,
    tokens: PromptTokens | None = None,
    low_rps: float,
    high_rps: float,
    efficiency: Efficiency | None = None,
    tolerance: float = 0.05,
    max_runs: int = 12,
) -> GoodputResult:
    """The highest request rate at which `slo.share` of requests meet the SLO, by simulation."""
    check_search(low_rps=low_rps, high_rps=high_rps, tolerance=tolerance, max_runs=max_runs)
    workload = as_inputs(workload, tokens=tokens, block_size=block_size_of(config, hardware))
    base = workload_rps(workload)
    probes: list[Probe] = []
    while (
        rps := next_rate(probes, low_rps=low_rps, high_rps=high_rps, tolerance=tolerance, max_runs=max_runs)
    ) is not None:
        figures = simulate(workload, config, hardware, model, efficiency=efficiency, slo=slo, rate=rps / base)
        probes.append(probe_of(figures.summary, rps=rps, slo=slo))
    return conclude(probes, slo=slo, tolerance=tolerance, max_runs=max_runs)
