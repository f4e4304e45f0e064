"""The knee of an engine configuration: the highest request rate at which it still meets the SLO,
and how close its TTFT there comes to the floor.

`measure_knee` brackets and bisects the rate (`evertune.domain.replay.find_goodput`) on a running
engine, each probe a primed replay of the workload at that rate (`PlanAt`: the plan and the replay
rate multiplier for a rate and a run name). At the knee it then replays the knee's requests one at
a time (`evertune.domain.replay.floor`), their text drawn for another run name: the same shapes,
prefix structure and timing, none of it in the engine's prefix cache, so the engine holds what a
fresh engine primed the same way would (every probe draws its own text for the same reason). The
figures: the knee, the TTFT at it, and `floor_ratio` = p50 at the knee / p50 alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evertune.domain.replay import Summary, find_goodput, floor_ratio, replay, replay_alone, summarize_run
from evertune.domain.slo import Slo
from evertune.domain.workloads import PlannedRequest

#: (rate in requests/s, run name) -> (the run's requests, the `replay` rate multiplier reaching it).
PlanAt = Callable[[float, str], tuple[list[PlannedRequest], float]]


@dataclass(frozen=True)
class Knee:
    """One knee measurement of one configuration."""

    rps: float  #: highest rate that met the SLO below the lowest failing one, requests/s (0: none)
    failing_rps: float | None  #: lowest rate that failed (None: none did; the knee is a lower bound)
    ttft_p50_ms: float | None  #: p50 TTFT of the run at the knee, ms
    ttft_p90_ms: float | None  #: p90 TTFT of the run at the knee, ms
    attainment: float | None  #: share of the knee run's requests within the SLO
    requests: int  #: requests of the run at the knee
    alone_p50_ms: float | None  #: p50 TTFT of the same requests sent one at a time, ms
    floor_ratio: float | None  #: ttft_p50_ms / alone_p50_ms (1.0: the physical floor)
    probes: int  #: replays the search made
    stopped: str  #: why the search ended


async def measure_knee(
    engine_url: str,
    *,
    plan_at: PlanAt,
    slo: Slo,
    low_rps: float,
    high_rps: float,
    max_runs: int,
    tolerance: float = 0.1,
) -> Knee:
    """The knee of the engine at `engine_url` on `plan_at`'s workload (see the module doc)."""
    summaries: dict[float, Summary] = {}

    async def run_at(rps: float) -> Summary:
        plan, multiplier = plan_at(rps, f"knee-{rps:.4f}")
        run = await replay(plan, target=engine_url, rate=multiplier, prime=True)
        summaries[rps] = summary = summarize_run(run, slo=slo)
        return summary

    result = await find_goodput(
        run_at, slo=slo, low_rps=low_rps, high_rps=high_rps, max_runs=max_runs, tolerance=tolerance
    )
    at = summaries.get(result.goodput_rps) if result.goodput_rps else None
    alone_p50 = None
    if at is not None:
        plan, multiplier = plan_at(result.goodput_rps, "floor")
        alone = summarize_run(await replay_alone(plan, target=engine_url, rate=multiplier, prime=True))
        alone_p50 = alone.ttft_ms.p50 if alone.completed else None
    p50 = at.ttft_ms.p50 if at is not None and at.completed else None
    return Knee(
        rps=round(result.goodput_rps, 3),
        failing_rps=None if result.failing_rps is None else round(result.failing_rps, 3),
        ttft_p50_ms=_ms(p50),
        ttft_p90_ms=_ms(at.ttft_ms.p90 if at is not None and at.completed else None),
        attainment=None if at is None or at.attainment is None else round(at.attainment, 3),
        requests=0 if at is None else at.requests,
        alone_p50_ms=_ms(alone_p50),
        floor_ratio=floor_ratio(p50, alone_p50),
        probes=len(result.probes),
        stopped=result.stopped,
    )


def knee_spread(knees: Sequence[Knee]) -> dict[str, float | None]:
    """Median, lowest and highest knee over repeats, and the median floor ratio."""
    rates = [k.rps for k in knees]
    ratios = [k.floor_ratio for k in knees if k.floor_ratio is not None]
    return {
        "knee_rps": round(statistics.median(rates), 3) if rates else None,
        "knee_rps_min": min(rates, default=None),
        "knee_rps_max": max(rates, default=None),
        "floor_ratio": round(statistics.median(ratios), 3) if ratios else None,
    }


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
