"""Which target each planned request goes to when a replay spreads over several (pure).

Round robin per conversation: in due order, each new conversation takes the next target, and every
later turn of it goes where its first turn went, so a replica's prefix cache sees the conversation
grow as one server would. A request without a conversation id is a conversation of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from evertune.domain.workloads.plan import PlannedRequest


def spread(plan: Sequence[PlannedRequest], offsets: Sequence[float], *, targets: int) -> list[int]:
    """The target index (0 .. targets - 1) of each request, in plan order.

    `offsets` are the requests' due times (as `due_offsets` gives them): conversations are dealt
    out in the order their first request is due (ties in plan order).
    """
    if targets < 1:
        raise ValueError(f"targets must be at least 1, got {targets}")
    chosen = [0] * len(plan)
    if targets == 1:
        return chosen
    placed: dict[str, int] = {}
    dealt = 0
    for index in sorted(range(len(plan)), key=lambda i: offsets[i]):
        conversation = plan[index].conversation_id
        target = placed.get(conversation) if conversation else None
        if target is None:
            target = dealt % targets
            dealt += 1
            if conversation:
                placed[conversation] = target
        chosen[index] = target
    return chosen
