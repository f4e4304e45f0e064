"""The reliability gate (`stability` on the wire): no errors, and p99 figures that hold still.

- Errors: failed requests (any error class) over every run at or below the gate rate, as a share
  of their requests, must not exceed the threshold (GateSpec.threshold; 0 = none allowed). Rates
  above the gate rate are overload probes: their timeouts are expected and not counted. An engine
  that crashes ends the trial as an error before any gate runs.
- Stable p99: at the gate rate, each repeat's TTFT p99 and ITL p99 (pooled gaps) are compared.
  Stable means spread = max - min <= max(tolerance x median, floor_ms): with the defaults a 30%
  relative spread, and any spread under 20 ms (a short run's p99 moves that much from nothing).
  At least two repeats are needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from evertune.domain.gate_result import GateResult
from evertune.domain.percentiles import percentile
from evertune.runner.measure import RateFigures

NAME = "stability"


@dataclass(frozen=True)
class Spread:
    """How far one p99 figure moved across repeats."""

    values_ms: tuple[float, ...]  #: the figure of each repeat, ms
    spread_ms: float  #: max - min, ms (NaN when a repeat measured nothing)
    allowed_ms: float  #: max(tolerance x median, floor), ms
    stable: bool  #: spread_ms <= allowed_ms (False with fewer than 2 repeats or a NaN)


def p99_spread(values_ms: Sequence[float], *, tolerance: float, floor_ms: float) -> Spread:
    """The spread of one p99 figure over repeats (see the module doc for "stable")."""
    values = tuple(values_ms)
    if len(values) < 2 or any(math.isnan(v) for v in values):
        return Spread(values_ms=values, spread_ms=math.nan, allowed_ms=math.nan, stable=False)
    spread = max(values) - min(values)
    allowed = max(tolerance * percentile(values, 50), floor_ms)
    return Spread(values_ms=values, spread_ms=spread, allowed_ms=allowed, stable=spread <= allowed)


def stability_gate(
    *,
    rates: Sequence[RateFigures],
    gate_rate_rps: float,
    threshold: float,
    tolerance: float,
    floor_ms: float,
) -> GateResult:
    """The verdict from every measured rate (see the module doc)."""
    counted = [r for r in rates if r.rate_rps <= gate_rate_rps * (1 + 1e-6)]
    requests = sum(r.pooled.requests for r in counted)
    errors = sum(r.pooled.errors for r in counted)
    share = errors / requests if requests else 1.0
    gate = next((r for r in rates if math.isclose(r.rate_rps, gate_rate_rps, rel_tol=1e-6)), None)
    problems: list[str] = []
    if not requests:
        problems.append("no request measured")
    if share > threshold:
        problems.append(f"{errors} of {requests} requests failed")
    if gate is None:
        problems.append(f"gate rate {gate_rate_rps:g} rps not measured")
        ttft = itl = None
    else:
        ttft = p99_spread([s.ttft_ms.p99 for s in gate.runs], tolerance=tolerance, floor_ms=floor_ms)
        itl = p99_spread([s.itl_ms.p99 for s in gate.runs], tolerance=tolerance, floor_ms=floor_ms)
        if len(gate.runs) < 2:
            problems.append(f"{len(gate.runs)} repeat at the gate rate (2 needed)")
        else:
            for label, spread in (("TTFT p99", ttft), ("ITL p99", itl)):
                if not spread.stable:
                    problems.append(
                        f"{label} unstable: {_values(spread)} "
                        f"(spread {spread.spread_ms:.1f} > {spread.allowed_ms:.1f} ms)"
                    )
    figures = f"{errors}/{requests} errors"
    if ttft is not None and itl is not None:
        figures += f"; TTFT p99 {_values(ttft)}; ITL p99 {_values(itl)}"
    detail = ("; ".join(problems) if problems else "stable") + f" ({figures})"
    return GateResult(name=NAME, passed=not problems, value=share, threshold=threshold, detail=detail)


def _values(spread: Spread) -> str:
    return "/".join(f"{v:.1f}" for v in spread.values_ms) + " ms"
