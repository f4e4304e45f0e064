"""One replay over several targets: conversations dealt round robin, each kept on one target."""

from __future__ import annotations

import pytest

from evertune.domain.replay import TargetUnreachable, replay
from evertune.domain.replay.spread import spread
from evertune.domain.workloads.plan import PlannedRequest
from evertune.errors import InvalidArgument

from .helpers import chat_plan, server_truth


def _request(at_s: float, request_id: str, conversation: str) -> PlannedRequest:
    return PlannedRequest(
        at_s=at_s, request_id=request_id, api="completions", max_tokens=1, conversation_id=conversation
    )


def test_conversations_are_dealt_in_the_order_they_start_and_stay_put() -> None:
    plan = [
        _request(0.3, "b0", "b"),  # plan order is not due order
        _request(0.0, "a0", "a"),
        _request(0.5, "x", ""),  # no conversation: a unit of its own
        _request(0.6, "a1", "a"),
        _request(0.7, "c0", "c"),
        _request(0.9, "b1", "b"),
        _request(1.0, "y", ""),
    ]
    offsets = [r.at_s for r in plan]
    chosen = spread(plan, offsets, targets=2)
    by_id = {r.request_id: t for r, t in zip(plan, chosen, strict=True)}
    assert by_id == {"a0": 0, "a1": 0, "b0": 1, "b1": 1, "x": 0, "c0": 1, "y": 0}
    assert spread(plan, offsets, targets=1) == [0] * len(plan)
    three = {r.request_id: t for r, t in zip(plan, spread(plan, offsets, targets=3), strict=True)}
    assert three == {"a0": 0, "a1": 0, "b0": 1, "b1": 1, "x": 2, "c0": 0, "y": 1}
    with pytest.raises(ValueError, match="at least 1"):
        spread(plan, offsets, targets=0)


async def test_a_replay_over_two_servers_keeps_each_conversation_on_one(
    fake_url: str, second_fake_url: str
) -> None:
    plan = chat_plan(12, every_s=0.02, prefix=f"spread-{id(object())}")  # 4 conversations of 3 turns
    run = await replay(plan, target=[fake_url, second_fake_url + "/v1"])
    assert all(r.ok for r in run.results), [r.error for r in run.results]
    assert run.target == fake_url and run.targets == (fake_url, second_fake_url)
    first, second = await server_truth(fake_url), await server_truth(second_fake_url)
    by_server = {
        url: {r.request_id for r in plan} & set(truth)
        for url, truth in ((fake_url, first), (second_fake_url, second))
    }
    assert len(by_server[fake_url]) == 6 and len(by_server[second_fake_url]) == 6
    for request, result in zip(plan, run.results, strict=True):
        assert result.target in by_server and request.request_id in by_server[result.target]
    for conversation in {r.conversation_id for r in plan}:
        assert len({res.target for res in run.results if res.conversation_id == conversation}) == 1
    one = await replay(plan[:2], target=fake_url)
    assert one.targets == (fake_url,) and all(r.target == "" for r in one.results)


async def test_every_target_is_preflighted_before_anything_is_sent(fake_url: str) -> None:
    plan = chat_plan(2, every_s=0.01, prefix="spread-preflight")
    with pytest.raises(TargetUnreachable, match=r"127\.0\.0\.1:9\b"):
        await replay(plan, target=[fake_url, "http://127.0.0.1:9"])
    assert not {r.request_id for r in plan} & set(await server_truth(fake_url))
    with pytest.raises(InvalidArgument, match="at least one target"):
        await replay(plan, target=[])
