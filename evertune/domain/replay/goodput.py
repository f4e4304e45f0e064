"""Goodput: the highest request rate at which a share of requests meets both the TTFT and ITL targets
(and the median TTFT its median target, where the SLO sets one).

Rates are absolute requests per second. The caller's `run_at(rps)` replays at that rate (for a
plan, `replay(plan, rate=rps / plan_rps(plan), ...)`) and returns the run's `Summary` computed with
the same `Slo`. The search (`next_rate`, pure) works from the probes so far:

1. probe `low_rps`; while the lowest probe fails, halve it (bracketing down);
2. probe `high_rps`; while the highest probe passes, double it (bracketing up);
3. bisect between the highest passing rate below the lowest failing rate and that failing rate,
   until they are within `tolerance` of the passing rate (relative: 0.1 = 10 %), or `max_runs`.

Goodput is the highest passing rate below the lowest failing one (a pass above a fail, from noise,
is ignored: the conservative reading). Every probe is kept in the result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from evertune.domain.replay.summary import Summary
from evertune.domain.slo import Slo
from evertune.errors import InvalidArgument


@dataclass(frozen=True)
class Probe:
    """One run of the search, at one rate."""

    rps: float  #: requests per second asked for
    attainment: float  #: share of its requests that met both targets
    meets: bool  #: attainment >= the SLO's share, and the median TTFT within its median target (if any)
    ttft_p99_ms: float  #: its TTFT p99
    itl_p99_ms: float  #: its ITL p99 over all gaps
    requests: int  #: requests in the run
    errors: int  #: requests with an error
    fell_behind: bool  #: the client fell behind during it (its figures are partly the client's)


@dataclass(frozen=True)
class GoodputResult:
    """The outcome of a goodput search."""

    goodput_rps: float  #: highest passing rate below the lowest failing one (0.0 if none passed)
    failing_rps: float | None  #: lowest failing rate (None: no rate failed; goodput is a lower bound)
    converged: bool  #: passing and failing rates ended within the tolerance
    stopped: str  #: one line on why the search ended
    slo: Slo  #: the targets searched against
    probes: tuple[Probe, ...]  #: every run, in the order made
    client_limited: bool  #: some probe's client fell behind: check `probes` before trusting goodput


def bracket(probes: Sequence[Probe]) -> tuple[float | None, float | None]:
    """(highest passing rate below the lowest failing rate, lowest failing rate), None where absent."""
    fails = [p.rps for p in probes if not p.meets]
    failing = min(fails) if fails else None
    passes = [p.rps for p in probes if p.meets and (failing is None or p.rps < failing)]
    return (max(passes) if passes else None), failing


def next_rate(
    probes: Sequence[Probe], *, low_rps: float, high_rps: float, tolerance: float, max_runs: int
) -> float | None:
    """The next rate to probe, or None when the search is done (converged or out of runs)."""
    if len(probes) >= max_runs:
        return None
    if not probes:
        return low_rps
    passing, failing = bracket(probes)
    if passing is None:
        assert failing is not None
        return failing / 2.0
    if failing is None:
        highest = max(p.rps for p in probes)
        return high_rps if highest < high_rps else highest * 2.0
    if failing - passing <= tolerance * passing:
        return None
    return (passing + failing) / 2.0


def probe_of(summary: Summary, *, rps: float, slo: Slo) -> Probe:
    """A `Probe` from a run's summary; the summary must carry attainment for this `slo`."""
    if summary.attainment is None or summary.slo != slo:
        raise InvalidArgument("run_at must return a Summary computed with the search's Slo")
    return Probe(
        rps=rps,
        attainment=summary.attainment,
        meets=summary.attainment >= slo.share and slo.median_met(summary.ttft_ms.p50),
        ttft_p99_ms=summary.ttft_ms.p99,
        itl_p99_ms=summary.itl_ms.p99,
        requests=summary.requests,
        errors=summary.errors,
        fell_behind=summary.lag.fell_behind,
    )


def conclude(probes: Sequence[Probe], *, slo: Slo, tolerance: float, max_runs: int) -> GoodputResult:
    """The result of a finished search."""
    passing, failing = bracket(probes)
    converged = passing is not None and failing is not None and failing - passing <= tolerance * passing
    if converged:
        stopped = f"converged within {tolerance:.0%}"
    elif passing is None:
        stopped = f"no rate down to {min(p.rps for p in probes):g} rps met the SLO in {len(probes)} runs"
    elif failing is None:
        stopped = f"every rate up to {passing:g} rps met the SLO in {len(probes)} runs: goodput is higher"
    else:
        stopped = f"max_runs ({max_runs}) reached between {passing:g} and {failing:g} rps"
    return GoodputResult(
        goodput_rps=passing or 0.0,
        failing_rps=failing,
        converged=converged,
        stopped=stopped,
        slo=slo,
        probes=tuple(probes),
        client_limited=any(p.fell_behind for p in probes),
    )


def check_search(*, low_rps: float, high_rps: float, tolerance: float, max_runs: int) -> None:
    if not 0 < low_rps < high_rps:
        raise InvalidArgument(f"need 0 < low_rps < high_rps, got {low_rps:g} and {high_rps:g}")
    if not tolerance > 0:
        raise InvalidArgument(f"tolerance must be positive, got {tolerance:g}")
    if max_runs < 2:
        raise InvalidArgument(f"max_runs must be at least 2, got {max_runs}")


async def find_goodput(
    run_at: Callable[[float], Awaitable[Summary]],
    *,
    slo: Slo,
    low_rps: float,
    high_rps: float,
    tolerance: float = 0.1,
    max_runs: int = 8,
    on_probe: Callable[[Probe], None] | None = None,
) -> GoodputResult:
    """Bracket and bisect on the request rate (absolute rps) with `run_at`; see the module doc."""
    check_search(low_rps=low_rps, high_rps=high_rps, tolerance=tolerance, max_runs=max_runs)
    probes: list[Probe] = []
    while (
        rps := next_rate(probes, low_rps=low_rps, high_rps=high_rps, tolerance=tolerance, max_runs=max_runs)
    ) is not None:
        probe = probe_of(await run_at(rps), rps=rps, slo=slo)
        probes.append(probe)
        if on_probe is not None:
            on_probe(probe)
    return conclude(probes, slo=slo, tolerance=tolerance, max_runs=max_runs)
