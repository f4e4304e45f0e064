from __future__ import annotations

import csv
import random
from datetime import datetime
from pathlib import Path

import pytest

from evertune.domain.workloads import WorkloadError, parse_azure_csv, plan_rows, read_azure_trace
from evertune.domain.workloads.shared_traces import AZURE_CODE_2023, shared_trace

from .helpers import word_tokens

SHARED_TRACE = shared_trace(AZURE_CODE_2023)


def _cheap_text(n_tokens: int, rng: random.Random) -> str:
    return f"prompt of {n_tokens} tokens"


@pytest.mark.skipif(not SHARED_TRACE.exists(), reason="the shared trace is not on this machine")
def test_the_shared_azure_trace_is_read_whole() -> None:
    with SHARED_TRACE.open(newline="") as handle:
        raw = list(csv.reader(handle))
    header, data = raw[0], raw[1:]
    assert header == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]

    load = read_azure_trace(SHARED_TRACE, make_text=_cheap_text)
    assert load.report.rows == len(load.plan) == len(data) and load.report.skipped == 0
    times = [request.at_s for request in load.plan]
    assert times[0] == 0.0 and times == sorted(times)
    first = datetime.fromisoformat(data[0][0])
    by_line = {request.request_id: request for request in load.plan}
    for index in random.Random(0).sample(range(len(data)), 50):
        stamp, context, generated = data[index]
        request = by_line[f"trace-L{index + 2}"]  # line 1 is the header
        assert request.api == "completions"
        assert request.prompt_tokens == int(context) and request.max_tokens == int(generated)
        assert request.prompt == f"prompt of {context} tokens"
        assert request.at_s == pytest.approx(
            (datetime.fromisoformat(stamp) - first).total_seconds(), abs=1e-6
        )


@pytest.mark.skipif(not SHARED_TRACE.exists(), reason="the shared trace is not on this machine")
def test_window_limit_and_context_cap() -> None:
    load = read_azure_trace(SHARED_TRACE, make_text=_cheap_text, start_s=600.0, end_s=900.0)
    assert load.plan and all(0.0 <= r.at_s < 300.0 for r in load.plan)
    limited = read_azure_trace(SHARED_TRACE, make_text=_cheap_text, start_s=600.0, limit=25)
    assert [r.request_id for r in limited.plan] == [r.request_id for r in load.plan[:25]]
    capped = read_azure_trace(SHARED_TRACE, make_text=_cheap_text, max_context_tokens=1000, limit=500)
    assert max(r.prompt_tokens for r in capped.plan) == 1000
    clipped = [r for r in capped.plan if "clipped_from" in r.tags]
    assert clipped and all(int(r.tags["clipped_from"]) > 1000 for r in clipped)


def test_prompts_come_from_make_text_deterministically() -> None:
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n0.5,12,3\n1.5,7,4\n"
    rows, _ = parse_azure_csv(text.splitlines())
    plan = plan_rows(rows, make_text=word_tokens, seed=3)
    assert [len(r.prompt.split()) for r in plan] == [12, 7]
    assert plan == plan_rows(rows, make_text=word_tokens, seed=3)
    assert plan[0].prompt != plan_rows(rows, make_text=word_tokens, seed=4)[0].prompt
    # a window keeps the text of the rows it keeps
    assert plan_rows(rows, make_text=word_tokens, seed=3, start_s=1.0)[0].prompt == plan[1].prompt


BAD = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:17:03.9799600,4808,10
2023-11-16 18:17:04.0319600,abc,8
2023-11-16 18:17:04.0781490,110

not a time,5,5
2023-11-16 18:17:05.0000000,-3,5
2023-11-16 18:17:02.0000000,5,5
2023-11-16 18:17:05.0000000,5,5
2023-11-16 18:17:04.5000000,5,5
2023-11-16 18:17:06.0000000,100,0
2023-11-16 18:17:07.0000000,100,20
"""


def test_bad_rows_are_skipped_and_reported_by_line() -> None:
    rows, report = parse_azure_csv(BAD.splitlines(), source="bad.csv")
    # line 10 (04.5 s) is 0.5 s behind line 9 (05.0 s): within the 1 s tolerance, kept and sorted
    assert [row.line for row in rows] == [2, 10, 9, 12]
    assert report.rows == 4 and report.skipped == 6
    assert [bad.line for bad in report.first_bad] == [3, 4, 6, 7, 8]  # the first five; line 5 is blank
    reasons = [bad.reason for bad in report.first_bad]
    assert "ContextTokens is not a whole number: 'abc'" in reasons[0]
    assert "GeneratedTokens is missing" in reasons[1]
    assert "not a date-time" in reasons[2]
    assert "ContextTokens must be at least 1, not -3" in reasons[3]
    assert "goes back" in reasons[4]
    assert "bad.csv: 4 rows, 6 bad lines skipped: line 3" in report.summary()
    assert report.summary().endswith("and 1 more")
    # times count from the earliest row
    assert [round(row.t_s, 3) for row in rows] == [0.0, 0.52, 1.02, 3.02]


def test_strict_names_the_first_bad_line_and_the_count() -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_azure_csv(BAD.splitlines(), source="bad.csv", strict=True)
    message = str(caught.value)
    assert message.startswith("bad.csv line 3: ContextTokens is not a whole number")
    assert message.endswith("(6 bad lines in all)") and "\n" not in message


def test_tolerance_decides_what_going_back_means() -> None:
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n10,5,5\n12,5,5\n11.5,5,5\n".splitlines()
    assert parse_azure_csv(text, backwards_tolerance_s=1.0)[1].skipped == 0
    assert parse_azure_csv(text, backwards_tolerance_s=0.1)[1].first_bad[0].line == 4


def test_header_columns_by_name_and_time_zones() -> None:
    text = [
        "\ufeffgeneratedtokens,TIMESTAMP,contexttokens,extra",
        "5,2024-05-10 00:00:00.5+00:00,100,x",
        "6,2024-05-10T02:00:01.5+02:00,200,y",  # 00:00:01.5 UTC
    ]
    rows, report = parse_azure_csv(text)
    assert report.skipped == 0
    assert [(r.t_s, r.context_tokens, r.generated_tokens) for r in rows] == [(0.0, 100, 5), (1.0, 200, 6)]
    mixed = ["TIMESTAMP,ContextTokens,GeneratedTokens", "5.0,1,1", "2024-05-10 00:00:00,1,1"]
    assert "unlike the first row" in parse_azure_csv(mixed)[1].first_bad[0].reason


def test_a_file_without_the_header_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="line 1: the header must name TIMESTAMP"):
        parse_azure_csv(["time,in,out", "1,2,3"])
    with pytest.raises(WorkloadError, match="is empty"):
        parse_azure_csv(["", "  "])
    with pytest.raises(WorkloadError, match="cannot read trace"):
        read_azure_trace(tmp_path / "missing.csv", make_text=_cheap_text)
