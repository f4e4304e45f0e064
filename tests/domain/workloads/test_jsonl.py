from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from evertune.domain.workloads import (
    TraceRecord,
    VoiceWorkload,
    WorkloadError,
    load_jsonl_trace,
    parse_jsonl,
    plan_records,
    plan_voice,
    read_jsonl,
    records_of_plan,
    write_jsonl,
)
from evertune.domain.workloads.jsonl import format_record, format_records

from .helpers import count_words, word_tokens


def _conversation(api: str = "chat") -> list[TraceRecord]:
    """Two agents' calls: turns whose history is the previous turn plus an answer."""
    records = []
    for call, group in enumerate(["agent-a", "agent-b", "agent-a"]):
        history = 0
        for turn in range(3):
            new = 5 + turn
            records.append(
                TraceRecord(
                    at_s=10.0 * call + 3.0 * turn,
                    request_id=f"c{call}-t{turn}",
                    api=api,  # type: ignore[arg-type]
                    max_tokens=20,
                    prompt_tokens=40 + history + new + 4,  # 4 tokens of chat template
                    conversation_id=f"c{call}",
                    turn=turn,
                    prefix_group=group,
                    prefix_tokens=40,
                    history_tokens=history,
                    new_tokens=new,
                    tags={"agent": group},
                )
            )
            history += new + 7  # the utterance and a 7-token answer
    return sorted(records, key=lambda r: r.at_s)


def test_records_round_trip_through_a_file(tmp_path: Path) -> None:
    records = [
        *_conversation(),
        TraceRecord(
            at_s=40.0, request_id="solo", api="completions", max_tokens=3, prompt_tokens=9, new_tokens=9
        ),
    ]
    path = tmp_path / "trace.jsonl"
    assert write_jsonl(path, records) == len(records)
    again, report = read_jsonl(path)
    assert again == records and report.rows == len(records) and report.skipped == 0
    assert "".join(format_records(records)) == path.read_text()
    line = json.loads(format_record(records[0]))
    assert set(line) == {
        "at_s", "request_id", "api", "max_tokens", "prompt_tokens", "conversation_id", "turn",
        "prefix_group", "prefix_tokens", "history_tokens", "new_tokens", "tags",
    }  # fmt: skip
    assert "tags" not in json.loads(format_record(records[-1]))


def test_text_is_made_back_with_shared_prefixes_and_growing_conversations() -> None:
    plan = plan_records(_conversation(), make_text=word_tokens, seed=1)
    by_id = {r.request_id: r for r in plan}
    system = {r.request_id: r.messages[0] for r in plan}
    assert system["c0-t0"] == system["c2-t1"] != system["c1-t0"]  # same group, same prefix text
    assert all(m.role == "system" and len(m.content.split()) == 40 for m in system.values())
    for call in range(3):
        turns = [by_id[f"c{call}-t{t}"] for t in range(3)]
        for earlier, later in itertools.pairwise(turns):
            assert later.messages[: len(earlier.messages)] == earlier.messages  # turn k+1 extends turn k
            answer = later.messages[len(earlier.messages)]
            assert answer.role == "assistant" and len(answer.content.split()) == 7
        assert [m.role for m in turns[2].messages] == [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
        ]
        assert [len(m.content.split()) for m in turns[2].messages[1:]] == [5, 7, 6, 7, 7]
    assert plan == plan_records(_conversation(), make_text=word_tokens, seed=1)
    assert plan != plan_records(_conversation(), make_text=word_tokens, seed=2)
    prefix_chars = str(len(system["c0-t0"].content))
    assert plan[0].prompt_tokens == 49
    assert plan[0].tags == {"agent": "agent-a", "prefix_group": "agent-a", "prefix_chars": prefix_chars}


def test_completions_prompts_keep_the_same_structure() -> None:
    plan = plan_records(_conversation("completions"), make_text=word_tokens, seed=1)
    by_id = {r.request_id: r for r in plan}
    assert by_id["c2-t1"].prompt.startswith(by_id["c2-t0"].prompt + " ")
    assert len(by_id["c2-t2"].prompt.split()) == 40 + 5 + 7 + 6 + 7 + 7
    chars = int(by_id["c0-t0"].tags["prefix_chars"])
    assert by_id["c0-t0"].prompt[:chars] == by_id["c2-t2"].prompt[:chars]


def test_structure_survives_plan_and_back() -> None:
    records = _conversation()
    back = records_of_plan(plan_records(records, make_text=word_tokens), count_tokens=count_words)
    assert back == records
    # a voice plan's structure: exported, made back into text, exported again, unchanged
    voice = plan_voice(VoiceWorkload(duration_s=60.0, seed=3))
    exported = records_of_plan(voice, count_tokens=count_words)
    prefixes = {r.prefix_group: r.prefix_tokens for r in exported}
    assert len(prefixes) <= 4 and all(r.prefix_tokens == prefixes[r.prefix_group] > 0 for r in exported)
    assert (
        records_of_plan(plan_records(exported, make_text=word_tokens), count_tokens=count_words) == exported
    )


def test_a_history_that_shrinks_gets_fresh_text() -> None:
    base = {"api": "completions", "max_tokens": 5, "prompt_tokens": 50, "conversation_id": "c"}
    records = [
        TraceRecord(at_s=0.0, request_id="a", history_tokens=0, new_tokens=10, **base),  # type: ignore[arg-type]
        TraceRecord(at_s=1.0, request_id="b", history_tokens=20, new_tokens=10, **base),  # type: ignore[arg-type]
        TraceRecord(at_s=2.0, request_id="c", history_tokens=15, new_tokens=10, **base),  # type: ignore[arg-type]
    ]
    a, b, c = plan_records(records, make_text=word_tokens)
    assert b.prompt.startswith(a.prompt) and len(b.prompt.split()) == 30
    assert len(c.prompt.split()) == 25


BAD = "\n".join(
    [
        '{"at_s":0,"request_id":"a","api":"chat","max_tokens":5,"prompt_tokens":10}',
        "not json",
        '{"at_s":1,"request_id":"b","api":"chat","max_tokens":5}',
        '{"at_s":2,"request_id":"a","api":"chat","max_tokens":5,"prompt_tokens":10}',
        "",
        '{"at_s":3,"request_id":"c","api":"rpc","max_tokens":5,"prompt_tokens":10}',
        '{"at_s":4,"request_id":"d","api":"chat","max_tokens":5,"prompt_tokens":10,"prefix_tokens":8,'
        '"prefix_group":"g","history_tokens":3}',
        '{"at_s":5,"request_id":"e","api":"chat","max_tokens":5,"prompt_tokens":10,"prefix_tokens":4}',
        '{"at_s":9,"request_id":"f","api":"completions","max_tokens":5,"prompt_tokens":10,"new_tokens":6}',
        '{"at_s":2.5,"request_id":"g","api":"chat","max_tokens":5,"prompt_tokens":10}',
        "[1, 2]",
        '{"at_s":8.5,"request_id":"h","api":"chat","max_tokens":true,"prompt_tokens":10}',
        '{"at_s":8.5,"request_id":"i","api":"chat","max_tokens":5,"prompt_tokens":10,"extra":1}',
    ]
)


def test_bad_lines_are_skipped_and_reported_by_line() -> None:
    records, report = parse_jsonl(BAD.splitlines(), source="t.jsonl")
    assert [r.request_id for r in records] == ["a", "f", "i"]  # i is 0.5 s back: within tolerance
    assert records[0].new_tokens == 10 and records[1].new_tokens == 6  # defaults to what is left
    assert report.skipped == 9 and [b.line for b in report.first_bad] == [2, 3, 4, 6, 7]
    reasons = [b.reason for b in report.first_bad]
    assert reasons[0].startswith("not JSON")
    assert reasons[1] == "prompt_tokens is missing"
    assert reasons[2] == "request_id 'a' repeats line 1"
    assert reasons[3] == "api must be 'chat' or 'completions', not 'rpc'"
    assert "exceed prompt_tokens" in reasons[4]


def test_strict_names_the_first_bad_line(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"^t.jsonl line 2: not JSON.*\(9 bad lines in all\)$"):
        parse_jsonl(BAD.splitlines(), source="t.jsonl", strict=True)
    path = tmp_path / "t.jsonl"
    path.write_text(BAD)
    load = load_jsonl_trace(path, make_text=word_tokens)
    assert [r.request_id for r in load.plan] == ["a", "i", "f"] and load.report.skipped == 9
