"""vLLM's timed_trace made from evertune traces: the prefix blocks the replay would send, round trips."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any

import pytest

from evertune.domain.workloads import TraceRecord, VoiceWorkload, plan_voice
from evertune.domain.workloads.errors import WorkloadError
from evertune.domain.workloads.jsonl import plan_records, records_of_plan
from evertune.domain.workloads.timed_trace import (
    BLOCK_TOKENS,
    TimedTraceRow,
    format_row,
    parse_timed_trace,
    timed_trace_rows,
    write_timed_trace,
)

from .helpers import count_words


def _unique_words(n_tokens: int, rng: random.Random) -> str:
    """A `make_text` whose words never repeat by chance: a word is a token."""
    return " ".join(f"w{rng.getrandbits(48):x}" for _ in range(n_tokens))


def _shared_blocks(a: list[str], b: list[str], block: int) -> int:
    """How many leading blocks of `block` tokens two token lists have in common (a last, shorter
    block counts when it is the same length and the same tokens)."""
    shared = 0
    for start in range(0, min(len(a), len(b)), block):
        if a[start : start + block] != b[start : start + block]:
            break
        shared += 1
    return shared


def _leading_equal(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return sum(1 for _ in itertools.takewhile(lambda pair: pair[0] == pair[1], zip(a, b, strict=False)))


def _voice_records() -> list[TraceRecord]:
    plan = plan_voice(VoiceWorkload(duration_s=240.0, seed=7))
    return records_of_plan(plan, count_tokens=count_words)


def test_requests_share_leading_hash_ids_exactly_where_the_replay_shares_tokens() -> None:
    records = _voice_records()
    replayed = plan_records(records, make_text=_unique_words)
    rows = timed_trace_rows(records)
    tokens = [[w for m in request.messages for w in m.content.split()] for request in replayed]
    assert len(rows) == len(tokens) > 50
    assert [row.input_length for row in rows] == [len(t) for t in tokens]
    pairs = sharing = 0
    for i, j in itertools.combinations(range(len(rows)), 2):
        expected = _shared_blocks(tokens[i], tokens[j], BLOCK_TOKENS)
        assert _leading_equal(rows[i].hash_ids, rows[j].hash_ids) == expected, (i, j)
        pairs += 1
        sharing += expected > 0
    # the voice calls share their agents' prompts and their own earlier turns
    assert sharing > pairs // 10


def _agent_turn(**fields: Any) -> TraceRecord:
    """A chat request that starts with agent's 40-token prompt."""
    return TraceRecord(api="chat", max_tokens=8, prefix_group="agent", prefix_tokens=40, **fields)


def test_an_agents_prompt_and_a_calls_earlier_turns_are_the_shared_blocks() -> None:
    first = _agent_turn(
        at_s=0.0, request_id="t0", prompt_tokens=50, conversation_id="c", turn=0, new_tokens=10
    )
    second = _agent_turn(  # the first turn, a 6-token answer, then 10 new tokens
        at_s=2.0,
        request_id="t1",
        prompt_tokens=66,
        conversation_id="c",
        turn=1,
        history_tokens=16,
        new_tokens=10,
    )
    other = _agent_turn(at_s=3.0, request_id="x", prompt_tokens=45, new_tokens=5)  # no call
    a, b, c = timed_trace_rows([first, second, other])
    assert [len(r.hash_ids) for r in (a, b, c)] == [4, 5, 3]  # ceil(50/16), ceil(66/16), ceil(45/16)
    assert a.hash_ids[:3] == b.hash_ids[:3]  # 48 tokens: the prompt (40) and the first turn's start
    assert a.hash_ids[3] != b.hash_ids[3]  # a's last block is 2 tokens long, b's is full
    assert c.hash_ids[:2] == a.hash_ids[:2] and c.hash_ids[2] != a.hash_ids[2]  # 32 of 40 prefix tokens


def test_template_tokens_are_the_requests_own_and_the_same_records_give_the_same_file() -> None:
    # two requests of the same 32-token prefix, each with 8 tokens of chat template
    records = [
        TraceRecord(
            at_s=float(i),
            request_id=name,
            api="chat",
            max_tokens=8,
            prompt_tokens=40,
            prefix_group="g",
            prefix_tokens=32,
        )
        for i, name in enumerate(("r", "s"))
    ]
    r, s = timed_trace_rows(records)
    assert r.hash_ids[:2] == s.hash_ids[:2] and r.hash_ids[2] != s.hash_ids[2]  # 8 template tokens each
    assert r.hash_ids == (0, 1, 2)  # numbered in order of first use
    assert timed_trace_rows(_voice_records()) == timed_trace_rows(_voice_records())


def test_timestamps_are_the_runners_send_times_at_the_multiplier() -> None:
    records = _voice_records()
    rows = timed_trace_rows(records, multiplier=2.0)
    assert [row.timestamp for row in rows] == sorted(r.at_s / 2.0 for r in records)
    assert [row.output_length for row in rows] == [
        r.max_tokens for r in sorted(records, key=lambda r: r.at_s)
    ]
    with pytest.raises(WorkloadError, match="multiplier must be > 0"):
        timed_trace_rows(records, multiplier=0.0)


def test_answers_run_to_their_measured_length_never_past_their_cap() -> None:
    records = _voice_records()
    cap = max(r.max_tokens for r in records)
    rows = timed_trace_rows(records, answer_tokens=24)
    assert [row.output_length for row in rows] == [
        min(24, r.max_tokens) for r in sorted(records, key=lambda r: r.at_s)
    ]
    assert max(row.output_length for row in timed_trace_rows(records, answer_tokens=cap + 100)) == cap
    with pytest.raises(WorkloadError, match="at least 1 token"):
        timed_trace_rows(records, answer_tokens=0)


def test_rows_round_trip_through_a_file(tmp_path: Path) -> None:
    rows = timed_trace_rows(_voice_records(), multiplier=1.5)
    path = tmp_path / "trace.jsonl"
    assert write_timed_trace(path, rows) == len(rows)
    assert parse_timed_trace(path.read_text().splitlines()) == rows
    assert all(len(r.hash_ids) == math.ceil(r.input_length / BLOCK_TOKENS) for r in rows)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("not json", "line 2: not JSON"),
        ("[1]", "line 2: not a JSON object"),
        (
            '{"timestamp":-1,"input_length":16,"output_length":1,"hash_ids":[0]}',
            "timestamp must be a number >= 0",
        ),
        (
            '{"timestamp":1,"input_length":0,"output_length":1,"hash_ids":[]}',
            "input_length must be an integer >= 1",
        ),
        ('{"timestamp":1,"input_length":16,"output_length":true,"hash_ids":[0]}', "output_length must be"),
        ('{"timestamp":1,"input_length":16,"output_length":1,"hash_ids":["a"]}', "hash_ids must be a list"),
        (
            '{"timestamp":1,"input_length":17,"output_length":1,"hash_ids":[0]}',
            "1 hash ids for 17 input tokens",
        ),
    ],
)
def test_a_bad_line_is_a_one_line_error_naming_it(line: str, error: str) -> None:
    good = format_row(TimedTraceRow(timestamp=0.0, input_length=16, output_length=1, hash_ids=(0,)))
    with pytest.raises(WorkloadError, match=error) as raised:
        parse_timed_trace([good, line])
    assert "\n" not in str(raised.value) and "line 2" in str(raised.value)
