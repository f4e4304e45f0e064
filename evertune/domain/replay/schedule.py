"""When each planned request is due, after rate and time scaling (pure).

A request planned at `at_s` is due `at_s / (rate * time_scale)` seconds after the replay starts.
Both knobs compress the plan's time axis the same way; they are kept apart because they mean
different things to the caller: `time_scale` is how fast to play the recording (a 10-minute trace at
`time_scale=10` takes a minute), `rate` is the load multiplier a goodput search turns (`rate=2`
doubles the requests per second). Compressing time also compresses the gaps between the turns of a
conversation; a workload that must keep think time fixed should be generated at the wanted rate
and replayed at `rate=1`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from evertune.domain.workloads.plan import PlannedRequest
from evertune.errors import InvalidArgument


def check_scaling(*, rate: float, time_scale: float) -> None:
    if not rate > 0:
        raise InvalidArgument(f"rate must be a positive multiplier, got {rate}")
    if not time_scale > 0:
        raise InvalidArgument(f"time_scale must be positive, got {time_scale}")


def due_offsets(plan: Sequence[PlannedRequest], *, rate: float = 1.0, time_scale: float = 1.0) -> list[float]:
    """Seconds after the start at which each request (in plan order) is due."""
    check_scaling(rate=rate, time_scale=time_scale)
    speed = rate * time_scale
    return [max(0.0, request.at_s) / speed for request in plan]


class Timed(Protocol):
    """Anything planned at a time: a planned request, a trace record."""

    @property
    def at_s(self) -> float: ...


def plan_rps(plan: Sequence[Timed]) -> float:
    """The plan's mean request rate at `rate=1`: requests per second over its span (first to last).

    Use it to turn an absolute rate into `replay`'s multiplier: `rate = rps / plan_rps(plan)`. A
    trace's records (the same times, before any text is made) have the rate of their plan.
    """
    if len(plan) < 2:
        raise InvalidArgument("a plan needs at least two requests to have a rate")
    times = [request.at_s for request in plan]
    span = max(times) - min(times)
    if span <= 0:
        raise InvalidArgument("every request of the plan is due at the same time: it has no rate")
    return (len(plan) - 1) / span
