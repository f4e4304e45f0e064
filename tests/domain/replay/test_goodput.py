from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from evertune.domain.replay.goodput import Probe, bracket, conclude, find_goodput, next_rate
from evertune.domain.replay.summary import Summary, summarize
from evertune.domain.slo import Slo
from evertune.errors import InvalidArgument

from .results import result

SLO = Slo(ttft_ms=200, itl_ms=50, share=0.9)


def probe(rps: float, attainment: float) -> Probe:
    return Probe(
        rps=rps,
        attainment=attainment,
        meets=attainment >= SLO.share,
        ttft_p99_ms=0.0,
        itl_p99_ms=0.0,
        requests=100,
        errors=0,
        fell_behind=False,
    )


def knee(at: float) -> Callable[[float], float]:
    """A monotone attainment curve: 1 up to `at`, then falling; it crosses 0.9 at 1.1 * at."""
    return lambda rps: min(1.0, max(0.0, 1.0 - (rps - at) / at))


def search(
    curve: Callable[[float], float], *, low: float, high: float, tolerance: float = 0.1, max_runs: int = 8
) -> list[Probe]:
    probes: list[Probe] = []
    while (
        rps := next_rate(probes, low_rps=low, high_rps=high, tolerance=tolerance, max_runs=max_runs)
    ) is not None:
        probes.append(probe(rps, curve(rps)))
    return probes


@pytest.mark.parametrize("at", [3.0, 7.3, 12.0, 17.9])
def test_finds_knee_within_tolerance_inside_bracket(at: float) -> None:
    goodput = 1.1 * at
    probes = search(knee(at), low=1.0, high=20.0, max_runs=12)
    result = conclude(probes, slo=SLO, tolerance=0.1, max_runs=12)
    assert result.converged, result.stopped
    assert result.failing_rps is not None
    assert result.goodput_rps <= goodput < result.failing_rps  # the knee is inside the final bracket
    assert result.failing_rps - result.goodput_rps <= 0.1 * result.goodput_rps
    assert [p.rps for p in probes[:2]] == [1.0, 20.0]  # low first, then high
    assert len(probes) <= 8


def test_brackets_up_when_high_passes() -> None:
    probes = search(knee(70.0), low=1.0, high=10.0, max_runs=12)
    assert [p.rps for p in probes[:5]] == [1.0, 10.0, 20.0, 40.0, 80.0]
    result = conclude(probes, slo=SLO, tolerance=0.1, max_runs=12)
    assert result.converged and result.goodput_rps <= 77.0 < (result.failing_rps or 0)


def test_brackets_down_when_low_fails() -> None:
    probes = search(knee(0.3), low=1.0, high=10.0, max_runs=12)
    assert [p.rps for p in probes[:3]] == [1.0, 0.5, 0.25]
    result = conclude(probes, slo=SLO, tolerance=0.1, max_runs=12)
    assert result.converged and result.goodput_rps <= 0.33 < (result.failing_rps or 0)


def test_stops_at_max_runs_and_says_so() -> None:
    probes = search(knee(5.0), low=1.0, high=1000.0, max_runs=4)
    assert len(probes) == 4
    result = conclude(probes, slo=SLO, tolerance=0.1, max_runs=4)
    assert not result.converged and "max_runs (4)" in result.stopped
    nothing = conclude(
        search(lambda rps: 0.0, low=1.0, high=2.0, max_runs=3), slo=SLO, tolerance=0.1, max_runs=3
    )
    assert nothing.goodput_rps == 0.0 and "no rate down to 0.25" in nothing.stopped
    everything = conclude(
        search(lambda rps: 1.0, low=1.0, high=2.0, max_runs=3), slo=SLO, tolerance=0.1, max_runs=3
    )
    assert everything.goodput_rps == 4.0 and everything.failing_rps is None and "higher" in everything.stopped


def test_noisy_pass_above_a_fail_is_ignored() -> None:
    probes = [probe(1.0, 1.0), probe(10.0, 0.5), probe(5.0, 0.5), probe(7.0, 0.95)]
    assert bracket(probes) == (1.0, 5.0)
    assert next_rate(probes, low_rps=1.0, high_rps=10.0, tolerance=0.1, max_runs=8) == 3.0


def _summary_at(rps: float, slo: Slo) -> Summary:
    """A run whose TTFT grows with the rate: 100 requests, TTFT = 10 ms * rps, spread +-10 %."""
    ttfts = [10.0 * rps * (0.9 + 0.2 * i / 99) for i in range(100)]
    return summarize([result(ttft_ms=t) for t in ttfts], slo=slo, duration_s=1.0)


async def test_find_goodput_drives_run_at_and_keeps_every_probe() -> None:
    calls: list[float] = []
    seen: list[Probe] = []

    async def run_at(rps: float) -> Summary:
        calls.append(rps)
        return _summary_at(rps, SLO)

    result = await find_goodput(
        run_at, slo=SLO, low_rps=2.0, high_rps=40.0, max_runs=10, on_probe=seen.append
    )
    # 90 % of requests have TTFT <= 200 ms while 10 * rps * (0.9 + 0.2 * 0.9) <= 200: rps <= 18.5.
    knee_rps = 200.0 / (10.0 * (0.9 + 0.2 * 89.1 / 99))
    assert result.converged
    assert result.goodput_rps <= knee_rps < (result.failing_rps or math.inf)
    assert [p.rps for p in result.probes] == calls and list(result.probes) == seen
    assert result.probes[0].ttft_p99_ms == pytest.approx(_summary_at(2.0, SLO).ttft_ms.p99)
    assert not result.client_limited


async def test_find_goodput_refuses_bad_arguments() -> None:
    async def run_at(rps: float) -> Summary:
        return _summary_at(rps, Slo(ttft_ms=1, itl_ms=1))  # not the search's SLO

    with pytest.raises(InvalidArgument):
        await find_goodput(run_at, slo=SLO, low_rps=1.0, high_rps=2.0)
    with pytest.raises(InvalidArgument):
        await find_goodput(run_at, slo=SLO, low_rps=3.0, high_rps=2.0)
