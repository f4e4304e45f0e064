"""Arrival times of a non-homogeneous Poisson process, by thinning (Lewis and Shedler, 1979).

Candidates arrive as a homogeneous Poisson process at `max_rate`; each is kept with probability
`rate(t) / max_rate`. The kept times are a Poisson process of intensity `rate(t)`: counts in
disjoint windows are independent, each Poisson with mean the integral of `rate` over the window.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from evertune.domain.workloads.errors import WorkloadError


def poisson_arrivals(
    rng: random.Random,
    *,
    rate: Callable[[float], float],
    max_rate: float,
    start_s: float,
    end_s: float,
) -> list[float]:
    """Arrival times in [start_s, end_s), ascending, of a Poisson process of intensity `rate(t)` per second.

    `max_rate` must bound `rate` over the window (a larger bound only costs time).
    """
    if not max_rate >= 0.0 or max_rate == float("inf"):
        raise WorkloadError(f"max_rate must be a finite rate >= 0, not {max_rate}")
    times: list[float] = []
    if max_rate == 0.0:
        return times
    t = start_s
    while True:
        t += rng.expovariate(max_rate)
        if t >= end_s:
            return times
        intensity = rate(t)
        if intensity > max_rate * (1.0 + 1e-9):
            raise WorkloadError(
                f"arrival rate {intensity:g}/s at t={t:.3f}s exceeds its bound {max_rate:g}/s"
            )
        if rng.random() * max_rate < intensity:
            times.append(t)
