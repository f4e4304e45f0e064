"""The floor replay: the same requests one at a time, answers cut to one token; the ratio."""

from __future__ import annotations

import itertools
import math

from evertune.domain.replay import floor_ratio, replay_alone

from .helpers import chat_plan, server_truth


async def test_requests_due_together_reach_the_engine_one_after_another_with_one_token_each(
    fake_url: str,
) -> None:
    plan = chat_plan(6, every_s=0.0, prefix="alone", max_tokens=40)  # all due at once
    run = await replay_alone(plan, target=fake_url)
    truth = await server_truth(fake_url)
    assert [r.request_id for r in run.results] == [r.request_id for r in plan]
    assert all(r.ok for r in run.results) and run.peak_in_flight == 1
    seen = [truth[r.request_id] for r in plan]
    assert [s["max_tokens"] for s in seen] == [1] * 6
    # The fake engine takes 20 ms to its first token: a request sent only after the one before it
    # ended arrives at least that much later (sent together, they would arrive within a few ms).
    arrivals = [s["arrived_at"] for s in seen]
    assert all(later - earlier >= 0.015 for earlier, later in itertools.pairwise(arrivals))


def test_the_ratio_is_the_loaded_median_over_the_median_alone() -> None:
    assert floor_ratio(260.0, 200.0) == 1.3
    assert floor_ratio(None, 200.0) is None and floor_ratio(260.0, None) is None
    assert floor_ratio(260.0, 0.0) is None and floor_ratio(math.nan, 200.0) is None
