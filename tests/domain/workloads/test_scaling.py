from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

from evertune.domain.workloads import (
    DailyCurve,
    PlannedRequest,
    TraceRecord,
    VoiceWorkload,
    WorkloadError,
    plan_records,
    plan_voice,
    scale,
)

from .helpers import word_tokens


@pytest.fixture(scope="module")
def voice() -> list[PlannedRequest]:
    return plan_voice(VoiceWorkload(duration_s=300.0, curve=DailyCurve(shape="flat"), seed=9))


def _by_conversation(plan: list[PlannedRequest]) -> dict[str, list[PlannedRequest]]:
    out: dict[str, list[PlannedRequest]] = defaultdict(list)
    for request in plan:
        out[request.conversation_id].append(request)
    return out


def test_unit_scale_is_the_plan(voice: list[PlannedRequest]) -> None:
    assert scale(voice) == voice


def test_time_compresses_everything(voice: list[PlannedRequest]) -> None:
    fast = scale(voice, time=2.0)
    assert [r.at_s for r in fast] == [r.at_s / 2 for r in voice]
    assert [r.request_id for r in fast] == [r.request_id for r in voice]
    assert [r.messages for r in fast] == [r.messages for r in voice]


def test_rate_below_one_keeps_whole_conversations(voice: list[PlannedRequest]) -> None:
    half = scale(voice, rate=0.5, seed=1)
    before, after = _by_conversation(voice), _by_conversation(half)
    assert set(after) < set(before)
    assert all(after[cid] == before[cid] for cid in after)  # a kept call keeps every turn
    assert len(after) / len(before) == pytest.approx(0.5, abs=0.08)
    assert half == scale(voice, rate=0.5, seed=1) and half != scale(voice, rate=0.5, seed=2)


def test_rate_above_one_adds_distinct_copies(voice: list[PlannedRequest]) -> None:
    double = scale(voice, rate=2.0, seed=1)
    assert len(double) == 2 * len(voice)
    ids = [r.request_id for r in double]
    assert len(set(ids)) == len(ids)
    first, last = voice[0].at_s, voice[-1].at_s
    copies = [r for r in double if r.tags.get("replica") == "1"]
    assert len(copies) == len(voice) and all(r.request_id.endswith("~r1") for r in copies)
    assert all(first <= r.at_s <= last + VoiceWorkload().longest_call_s() for r in copies)
    originals = {r.request_id: r for r in voice}
    for copy in copies:
        original = originals[copy.request_id.removesuffix("~r1")]
        assert copy.messages[0] == original.messages[0]  # the shared system prompt stays
        assert copy.messages[-1].content != original.messages[-1].content  # the caller's words do not
        assert sorted(copy.messages[-1].content.split()) == sorted(original.messages[-1].content.split())
    for turns in _by_conversation(copies).values():  # a copy's turns still extend each other
        turns.sort(key=lambda r: r.turn)
        for earlier, later in itertools.pairwise(turns):
            assert later.messages[: len(earlier.messages)] == earlier.messages
            assert later.at_s > earlier.at_s


def test_fractional_rate_and_combined_time(voice: list[PlannedRequest]) -> None:
    scaled = scale(voice, rate=1.5, time=3.0, seed=4)
    conversations = len(_by_conversation(voice))
    assert len(_by_conversation(scaled)) / conversations == pytest.approx(1.5, abs=0.1)
    assert max(r.at_s for r in scaled) <= (voice[-1].at_s + 60) / 3


def test_copies_of_completions_keep_their_shared_prefix() -> None:
    records = [
        TraceRecord(
            at_s=float(i), request_id=f"r{i}", api="completions", max_tokens=5, prompt_tokens=60,
            prefix_group="g", prefix_tokens=40, new_tokens=20,
        )
        for i in range(20)
    ]  # fmt: skip
    plan = plan_records(records, make_text=word_tokens)
    copies = [r for r in scale(plan, rate=2.0, jitter_s=5.0) if "replica" in r.tags]
    chars = int(plan[0].tags["prefix_chars"])
    originals = {r.request_id: r for r in plan}
    for copy in copies:
        original = originals[copy.request_id.removesuffix("~r1")]
        assert copy.prompt[:chars] == original.prompt[:chars]
        assert copy.prompt[chars:] != original.prompt[chars:]
        assert len(copy.prompt.split()) == 60


def test_bad_factors_are_refused(voice: list[PlannedRequest]) -> None:
    for bad in ({"rate": 0.0}, {"time": -1.0}, {"rate": float("nan")}, {"jitter_s": -2.0}):
        with pytest.raises(WorkloadError):
            scale(voice, **bad)  # type: ignore[arg-type]
    assert scale([], rate=3.0) == []
