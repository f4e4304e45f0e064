"""The knee measurement on the fake engine (about 20 ms to a first token whatever the load)."""

from __future__ import annotations

from evertune.apps.benchmarks.knee import Knee, knee_spread, measure_knee
from evertune.domain.slo import Slo
from evertune.domain.workloads import PlannedRequest
from tests.domain.replay.helpers import chat_plan

SECONDS = 1.0


def plan_at(rps: float, run: str) -> tuple[list[PlannedRequest], float]:
    """`SECONDS` of requests at `rps`, their ids by run (the fake engine keeps one record per id)."""
    count = max(2, round(rps * SECONDS))
    return chat_plan(count, every_s=1.0 / rps, prefix=f"knee-{run}"), 1.0


async def test_an_engine_that_keeps_up_at_every_rate_gives_a_lower_bound_and_a_floor_near_one(
    fake_url: str,
) -> None:
    knee = await measure_knee(
        fake_url, plan_at=plan_at, slo=Slo(ttft_ms=500.0, share=0.9), low_rps=4.0, high_rps=8.0, max_runs=3
    )
    assert knee.rps == 16.0 and knee.failing_rps is None and knee.probes == 3  # 4, 8, 16: all met
    assert knee.requests == 16 and knee.attainment == 1.0
    assert knee.alone_p50_ms is not None and knee.alone_p50_ms >= 20.0  # the fake engine's TTFT
    # at 16 requests/s a 20 ms engine is hardly loaded: at load as alone, give or take the machine
    assert knee.floor_ratio is not None and 0.5 < knee.floor_ratio < 2.0


async def test_an_slo_no_rate_meets_has_no_knee_and_no_floor(fake_url: str) -> None:
    knee = await measure_knee(
        fake_url, plan_at=plan_at, slo=Slo(ttft_ms=5.0, share=0.9), low_rps=4.0, high_rps=8.0, max_runs=2
    )
    assert knee.rps == 0.0 and knee.failing_rps == 2.0  # 4 failed, then 2
    assert knee.alone_p50_ms is None and knee.floor_ratio is None


def test_the_spread_is_over_the_repeats() -> None:
    def knee(rps: float, ratio: float | None) -> Knee:
        return Knee(
            rps=rps, failing_rps=None, ttft_p50_ms=None, ttft_p90_ms=None, attainment=None, requests=0,
            alone_p50_ms=None, floor_ratio=ratio, probes=3, stopped="",
        )  # fmt: skip

    spread = knee_spread([knee(3.0, 1.2), knee(4.0, None), knee(3.5, 1.4)])
    assert spread == {"knee_rps": 3.5, "knee_rps_min": 3.0, "knee_rps_max": 4.0, "floor_ratio": 1.3}
