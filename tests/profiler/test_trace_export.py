"""The exported trace loads back with evertune.domain.workloads and shows the profile's statistics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from evertune.domain.workloads import WordListText, describe, load_jsonl_trace, read_jsonl, words_as_tokens
from evertune.profiler.profile import ProfileConfig, aggregates_of, build_profile
from evertune.profiler.trace_export import trace_records, trace_sha256, trace_text
from tests.profiler.synthetic import voice

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_trace_replays_the_profile(tmp_path: Path, api: str) -> None:
    block = 16
    samples = [g.sample for g in voice(seed=11, duration_s=900.0, calls_per_s=0.3, block=block, api=api)]
    profile = build_profile(
        endpoint="voice",
        window_start=T0,
        window_end=T0 + timedelta(hours=1),
        aggregates=aggregates_of(samples),
        samples=samples,
        config=ProfileConfig(block_tokens=block, horizon_s=1e9),
    )
    records = trace_records(samples, block_tokens=block)
    path = tmp_path / "trace.jsonl"
    text = trace_text(records)
    path.write_text(text)
    assert trace_sha256(path.read_text()) == trace_sha256(text)
    read, report = read_jsonl(path, strict=True)
    assert read == records and report.skipped == 0
    # One word a token, so the replay's text has the trace's token counts.
    plan = load_jsonl_trace(path, make_text=words_as_tokens(WordListText(), tokens_per_word=1.0)).plan
    stats = describe(plan)
    assert stats.requests == profile.requests
    assert stats.mean_rate_per_s == pytest.approx(profile.rate.mean_rps, rel=1e-6)
    assert stats.gap_cv == pytest.approx(profile.rate.gap_cv, rel=1e-4)
    assert stats.peak_rate_per_s == pytest.approx(profile.rate.peak_p95_rps, rel=1e-6)
    assert stats.prompt_unit == "tokens"
    assert (stats.prompt_length.p50, stats.prompt_length.p99) == pytest.approx(
        (profile.prompt_tokens.p50, profile.prompt_tokens.p99)
    )
    assert (stats.max_tokens.p50, stats.max_tokens.p99) == pytest.approx(
        (profile.completion_tokens.p50, profile.completion_tokens.p99)
    )
    assert stats.conversations == profile.prefix.conversations
    assert stats.standalone_requests == profile.prefix.standalone_requests
    assert stats.turns_per_conversation.mean == pytest.approx(profile.prefix.turns_per_conversation.mean)
    # Prefix sharing: the replay's text repeats what the telemetry's chains repeated (in 16-word blocks).
    assert stats.repeated_prefix_share == pytest.approx(profile.prefix.unbounded_share, abs=0.03)
    # A planned prompt's text has the trace's token count (words, here).
    for request, record in zip(sorted(plan, key=lambda r: r.at_s), records, strict=True):
        words = (
            sum(len(m.content.split()) for m in request.messages)
            if api == "chat"
            else len(request.prompt.split())
        )
        assert words == record.prompt_tokens


def test_structure_of_records() -> None:
    samples = [
        g.sample for g in voice(seed=4, duration_s=200.0, calls_per_s=0.3, block=16, system_tokens=100)
    ]
    records = trace_records(samples, block_tokens=16)
    assert records[0].at_s == 0.0
    assert [r.at_s for r in records] == sorted(r.at_s for r in records)
    by_id = {r.request_id: r for r in records}
    for s in samples:
        r = by_id[s.request_id]
        assert r.prefix_tokens + r.history_tokens + r.new_tokens == s.prompt_tokens
        assert r.max_tokens == s.completion_tokens
        # The shared prefix is the agent's 100-token system prompt: 6 full blocks of 16.
        assert r.prefix_tokens == 96 and r.prefix_group.startswith("g")
    groups = {r.prefix_group for r in records}
    assert 1 <= len(groups) <= 3
    np.testing.assert_array_equal(sorted({r.turn for r in records if r.conversation_id})[:2], [0, 1])


def test_no_samples_no_records() -> None:
    assert trace_records([], block_tokens=16) == [] and trace_text([]) == ""
