"""Priming: the prefix cache a live engine holds when a replay starts in mid-conversation (pure).

A trace cut at its start opens with conversations already under way. Served live, each of them sent
its earlier turns through the engine, whose prefix cache holds their blocks when the next turn
comes. A fresh engine replaying the cut instead sees every such conversation's whole history
uncached in its first seconds: a burst of long prefills that an endpoint in steady state never
serves, and that a short measured window then mostly measures. On an AMD EPYC Zen 4 (2 cores,
engine on one; `small` model, bf16 eager, the `bench search` voice trace at 2.5 requests/s,
15 s) the cold window measured p50/p99 TTFT 208/1,351 ms and 76% of requests within 500 ms; the
same engine primed measured 70/245 ms and 100% (32-token KV blocks: 125/1,252 cold against
44/124 primed); priming took 2.4-3.4 s.

Priming sends, before the replay's clock starts, one request per conversation whose first request in
the plan is a later turn: that turn's earlier messages (`workloads.plan.history`), for one output
token, to the target the conversation will go to. Nothing of it is measured. Conversations that
start inside the plan, and requests without history (completions, first turns), need none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from evertune.workloads.plan import PlannedRequest, history

PRIMER_SUFFIX = "/prime"  #: appended to the primed request's id to name its primer


def primers(plan: Sequence[PlannedRequest]) -> list[tuple[int, PlannedRequest]]:
    """(index in `plan` of the request primed, its primer) for each conversation whose first request
    in due order (`at_s`, ties in plan order) has a history; in that order."""
    seen: set[str] = set()
    out: list[tuple[int, PlannedRequest]] = []
    for index in sorted(range(len(plan)), key=lambda i: plan[i].at_s):
        request = plan[index]
        if not request.conversation_id or request.conversation_id in seen:
            continue
        seen.add(request.conversation_id)
        earlier = history(request)
        if earlier:
            primer = dataclasses.replace(
                request,
                at_s=0.0,
                request_id=request.request_id + PRIMER_SUFFIX,
                max_tokens=1,
                messages=earlier,
                prompt_tokens=0,
            )
            out.append((index, primer))
    return out
