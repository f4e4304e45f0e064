"""A trial's figures from its replay runs (pure): per rate pooled over repeats, headline, goodput.

- A rate's figures pool the requests of all its repeats ("percentiles are over all repeats"); the
  per-repeat summaries are kept for the reliability gate.
- Headline figures are those of the target rate.
- Goodput is the highest replayed rate whose pooled attainment met the SLO's share and that lies
  below the lowest failing rate (a pass above a fail, from noise, is ignored), as in
  `evertune.domain.replay.goodput`; 0 when no rate met it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from evertune.domain.replay import RequestResult, Summary, summarize
from evertune.domain.replay.goodput import bracket, probe_of
from evertune.domain.slo import Slo


@dataclass(frozen=True)
class RateFigures:
    """What was measured at one rate."""

    rate_rps: float  #: offered rate, requests per second
    runs: tuple[Summary, ...]  #: one summary per measured repeat, in order
    pooled: Summary  #: every repeat's requests together

    @property
    def meets(self) -> bool:
        """The pooled attainment met the SLO's share."""
        return bool(self.pooled.meets_slo)

    @property
    def client_fell_behind(self) -> bool:
        """Some repeat's client fell behind: its figures are partly the client's."""
        return any(run.lag.fell_behind for run in self.runs)


def rate_figures(
    rate_rps: float, runs: Sequence[tuple[Summary, Sequence[RequestResult]]], *, slo: Slo
) -> RateFigures:
    """The figures of one rate from its repeats: (summary, results) of each."""
    pooled = summarize([r for _, results in runs for r in results], slo=slo)
    return RateFigures(rate_rps=rate_rps, runs=tuple(s for s, _ in runs), pooled=pooled)


def at_rate(rates: Sequence[RateFigures], rate_rps: float) -> RateFigures | None:
    """The figures measured at `rate_rps` (within a millionth), if it was replayed."""
    return next((r for r in rates if math.isclose(r.rate_rps, rate_rps, rel_tol=1e-6)), None)


def goodput_rps(rates: Sequence[RateFigures], *, slo: Slo) -> float:
    """Highest passing rate below the lowest failing one; 0.0 when none passed."""
    probes = [probe_of(r.pooled, rps=r.rate_rps, slo=slo) for r in rates]
    passing, _ = bracket(probes)
    return passing or 0.0


def skip_higher(figures: RateFigures, *, gate_rate_rps: float) -> bool:
    """Whether the rates above this one can be skipped: it is at or above the gate rate and missed
    the SLO, so higher rates only measure a queue growing."""
    return figures.rate_rps >= gate_rate_rps * (1 - 1e-6) and not figures.meets
