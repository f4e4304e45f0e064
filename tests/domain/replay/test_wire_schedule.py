from __future__ import annotations

import pytest

from evertune.domain.replay.schedule import due_offsets, plan_rps
from evertune.domain.replay.wire import base_url, request_body
from evertune.errors import InvalidArgument

from .helpers import chat_plan


def test_due_offsets_compress_by_rate_times_time_scale() -> None:
    plan = chat_plan(3, every_s=1.0, prefix="d", start_s=-0.5)  # due at -0.5, 0.5, 1.5
    assert due_offsets(plan) == [0.0, 0.5, 1.5]
    assert due_offsets(plan, rate=2.0, time_scale=5.0) == [0.0, 0.05, 0.15]
    with pytest.raises(InvalidArgument):
        due_offsets(plan, rate=0.0)
    with pytest.raises(InvalidArgument):
        due_offsets(plan, time_scale=-1.0)


def test_plan_rps() -> None:
    assert plan_rps(chat_plan(11, every_s=0.1, prefix="r")) == pytest.approx(10.0)
    with pytest.raises(InvalidArgument):
        plan_rps(chat_plan(1, every_s=0.1, prefix="r"))
    with pytest.raises(InvalidArgument):
        plan_rps(chat_plan(3, every_s=0.0, prefix="r"))


def test_request_bodies() -> None:
    (chat,) = chat_plan(1, every_s=0, prefix="b", max_tokens=12)
    body = request_body(chat, model="m")
    assert body == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a voice agent."},
            {"role": "user", "content": "Hello there."},
        ],
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    (completion,) = chat_plan(1, every_s=0, prefix="b", api="completions")
    body = request_body(completion, model="m", ignore_eos=True)
    assert body["prompt"] == "Hello there." and body["ignore_eos"] is True and "messages" not in body


def test_base_url() -> None:
    assert base_url("http://h:8000/v1/") == "http://h:8000"
    assert base_url(" https://h ") == "https://h"
    with pytest.raises(InvalidArgument):
        base_url("h:8000")
