"""Retry policy, defined once: how long to wait after the n-th failure in a row.

Pure core: a policy is a function of the attempt number (1-based: the wait after the first failed
try is `delay(1, ...)`) and a random draw in [0, 1) that the caller passes in (`random.random()`
in a service, a fixed number in a test); no clock, no I/O.

- `StepBackoff`: a table of delays, the last step repeating (JetStream nak delays: the bus
  consumers and the telemetry sink; the gateway's fixed spool retry is a table of one step);
- `ExponentialBackoff`: capped exponential with full jitter (alert delivery over HTTP).

Thin shell: `rest(stop, seconds)`, the one wait between two tries, cut short by a stop event.

There is no generic "call until it works" loop: each retrying caller decides between tries
something of its own (a JetStream nak instead of a local wait, an alert too old to send, a queue
head that changed), so each keeps its loop and takes its delays from here.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Protocol

#: Largest exponent `ExponentialBackoff` computes (2**60 is past any cap: no float overflow).
_MAX_DOUBLINGS = 60


class Backoff(Protocol):
    """A retry policy: the wait, in seconds, after failed attempt number `attempt` (1-based)."""

    def delay(self, attempt: int, draw: float) -> float: ...


@dataclass(frozen=True)
class StepBackoff:
    """Delays from a table: step n after the n-th failure, the last step repeating; no steps means
    at once (0). An attempt number below 1 (a delivery count the server did not give) counts as 1.
    The draw is not used (no jitter)."""

    steps_s: tuple[float, ...]  #: wait after the 1st, 2nd, ... failure, in seconds

    def delay(self, attempt: int, draw: float = 0.0) -> float:
        steps = self.steps_s
        if not steps:
            return 0.0
        return steps[min(max(attempt, 1) - 1, len(steps) - 1)]


@dataclass(frozen=True)
class ExponentialBackoff:
    """Capped exponential backoff with full jitter: `draw` times min(cap, base * 2^(attempt-1)),
    and never under `floor_s` (a draw near 0 would otherwise retry at once)."""

    base_s: float  #: the ceiling of the wait after the first failure, in seconds
    cap_s: float  #: the largest ceiling, in seconds
    floor_s: float = 0.0  #: the least wait, whatever the draw, in seconds

    def delay(self, attempt: int, draw: float) -> float:
        ceiling = min(self.cap_s, self.base_s * 2.0 ** min(max(attempt, 1) - 1, _MAX_DOUBLINGS))
        return max(self.floor_s, draw * ceiling)


async def rest(stop: asyncio.Event, seconds: float) -> bool:
    """Wait `seconds` between two tries, or until `stop` is set: True when stop came first (or was
    set already), False after the full wait."""
    if stop.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(seconds, 0.0))
    return stop.is_set()
