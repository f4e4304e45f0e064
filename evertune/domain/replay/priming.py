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
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from evertune.domain.workloads.plan import PlannedRequest, history

PRIMER_SUFFIX = "/prime"  #: appended to the primed request's id to name its primer


class _InConversation(Protocol):
    @property
    def conversation_id(self) -> str: ...


T = TypeVar("T", bound=_InConversation)


def openers(items: Sequence[T], *, due: Callable[[T], float]) -> list[int]:
    """Indices of the first item of each conversation in due order (ties in sequence order), in that
    order; items without a conversation open none. The one rule of which requests a replay primes
    and which the model's primed windows warm (`perfmodel.workload.primer_inputs`)."""
    seen: set[str] = set()
    out: list[int] = []
    for index in sorted(range(len(items)), key=lambda i: due(items[i])):
        conversation = items[index].conversation_id
        if conversation and conversation not in seen:
            seen.add(conversation)
            out.append(index)
    return out


def primers(plan: Sequence[PlannedRequest]) -> list[tuple[int, PlannedRequest]]:
    """(index in `plan` of the request primed, its primer) for each conversation whose first request
    in due order (`at_s`, ties in plan order) has a history; in that order."""
    return [
        (
            index,
            dataclasses.replace(
                plan[index],
                at_s=0.0,
                request_id=plan[index].request_id + PRIMER_SUFFIX,
                max_tokens=1,
                messages=history(plan[index]),
                prompt_tokens=0,
            ),
        )
        for index in openers(plan, due=lambda r: r.at_s)
        if history(plan[index])
    ]
