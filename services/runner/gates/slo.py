"""The SLO gate: the endpoint's SLO met at the gate rate (the profile's peak x headroom).

Met when the share of requests (errors count as misses) with TTFT <= the SLO's ttft_p99_ms and their
own p99 gap <= itl_p99_ms reaches the threshold (GateSpec.threshold; 0 = the SLO's attainment
target), and, when the SLO sets ttft_p50_ms, the median TTFT is within it. The value is the
attainment; the detail names the gate rate and the headroom it came from (the job's
`slo_headroom`, or the runner's default).
"""

from __future__ import annotations

import math

from evertune.domain.gate_result import GateResult
from evertune.domain.slo import Slo
from evertune.runner.measure import RateFigures

NAME = "slo"


def slo_gate(
    *,
    figures: RateFigures | None,
    slo: Slo,
    p50_target_ms: float,
    threshold: float,
    rate_rps: float,
    headroom: float,
) -> GateResult:
    """The verdict at the gate rate `rate_rps` = target x `headroom` (`figures` None: that rate was
    not measured)."""
    needed = threshold or slo.share
    rate = f"{rate_rps:g} rps (target x {headroom:g})"
    if figures is None:
        return GateResult(
            name=NAME,
            passed=False,
            value=0.0,
            threshold=needed,
            detail=f"gate rate {rate} was not measured",
        )
    pooled = figures.pooled
    attainment = pooled.attainment or 0.0
    problems: list[str] = []
    if attainment < needed:
        problems.append(f"attainment {attainment:.3f} < {needed:.3f}")
    p50 = pooled.ttft_ms.p50
    if p50_target_ms > 0 and not (p50 <= p50_target_ms):
        problems.append(f"TTFT p50 {p50:.1f} ms > {p50_target_ms:g} ms")
    itl = "" if math.isinf(slo.itl_ms) else f", gap <= {slo.itl_ms:g} ms"
    figures_text = (
        f"at {rate}: attainment {attainment:.3f} (TTFT <= {slo.ttft_ms:g} ms{itl}), "
        f"TTFT p50/p99 {p50:.1f}/{pooled.ttft_ms.p99:.1f} ms, {pooled.errors}/{pooled.requests} errors"
    )
    if figures.client_fell_behind:
        figures_text += ", client fell behind"
    detail = ("; ".join(problems) + "; " if problems else "met ") + figures_text
    return GateResult(name=NAME, passed=not problems, value=attainment, threshold=needed, detail=detail)
