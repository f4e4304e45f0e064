"""The floor under a run's TTFT: the same requests, one at a time, on an idle engine.

A request's TTFT at load is its prefill plus the time it waited for others (queueing, a batch's
share of every step). Sent alone, in the same order and from the same engine state (a fresh engine,
primed as the loaded run was), each request costs its prefill and nothing else, with the prefix
cache holding what the loaded run's cache held when it arrived: earlier turns of its call, the
shared system prompts already seen. `floor_ratio` = p50 TTFT at load / p50 TTFT alone: 1.0 is the
physical floor of that engine configuration; what lies above it is the price of the load.

Alone means one request in flight (`max_in_flight=1`): a request due while another is in flight
waits in the client, and its TTFT counts from when it leaves. Each is cut to one token (the prefill
is what TTFT measures; the next turn of a call carries its planned answer as text either way, so the
cache state does not depend on the answers generated).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from evertune.domain.replay.client import replay
from evertune.domain.replay.results import ReplayRun, RequestResult
from evertune.domain.workloads import PlannedRequest

#: Seconds a request may wait in the client for its turn (a run of n requests alone takes about
#: n prefills: minutes for a long one, all of it waiting rather than failing).
ALONE_TIMEOUT_S = 900.0


def alone(plan: Sequence[PlannedRequest]) -> list[PlannedRequest]:
    """`plan` with every answer cut to one token (see the module doc)."""
    return [dataclasses.replace(r, max_tokens=1) for r in plan]


async def replay_alone(
    plan: Sequence[PlannedRequest],
    *,
    target: str,
    model: str | None = None,
    rate: float = 1.0,
    prime: bool = False,
    on_sent: Callable[[str], None] | None = None,
    on_result: Callable[[RequestResult], None] | None = None,
) -> ReplayRun:
    """Replay `plan` one request at a time on `target` (an idle engine), its answers cut to one
    token; the other arguments as in `replay`."""
    return await replay(
        alone(plan),
        target=target,
        model=model,
        rate=rate,
        max_in_flight=1,
        timeout_s=ALONE_TIMEOUT_S,
        prime=prime,
        on_sent=on_sent,
        on_result=on_result,
    )


def floor_ratio(loaded_p50_ms: float | None, alone_p50_ms: float | None) -> float | None:
    """p50 TTFT at load over p50 TTFT alone (None when either is unknown or the floor is not positive)."""
    if loaded_p50_ms is None or alone_p50_ms is None:
        return None
    if math.isnan(loaded_p50_ms) or math.isnan(alone_p50_ms) or alone_p50_ms <= 0:
        return None
    return round(loaded_p50_ms / alone_p50_ms, 3)
