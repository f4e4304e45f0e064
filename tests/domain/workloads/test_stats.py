from __future__ import annotations

import pytest

from evertune.domain.workloads import PlannedRequest, Quantiles, WorkloadError, describe

from .helpers import chat


def _completion(at_s: float, tokens: int = 0, prompt: str = "x y z") -> PlannedRequest:
    return PlannedRequest(
        at_s=at_s,
        request_id=f"r{at_s}",
        api="completions",
        max_tokens=10,
        prompt=prompt,
        prompt_tokens=tokens,
    )


def test_a_regular_plan() -> None:
    plan = [_completion(t * 0.5, tokens=100 + t) for t in range(241)]  # 2/s for 120 s
    stats = describe(plan, window_s=30.0)
    assert stats.requests == 241 and stats.start_s == 0.0 and stats.duration_s == 120.0
    assert stats.mean_rate_per_s == pytest.approx(241 / 120)
    assert stats.peak_rate_per_s == pytest.approx(2.0) and stats.max_window_rate_per_s == pytest.approx(2.0)
    assert stats.gap_cv == pytest.approx(0.0, abs=1e-9)
    assert stats.prompt_unit == "tokens" and stats.prompt_length.p50 == 220 and stats.prompt_length.max == 340
    assert stats.conversations == 0 and stats.standalone_requests == 241
    assert stats.repeated_prefix_share == 0.0


def test_peak_is_a_high_percentile_of_window_rates() -> None:
    # 10 quiet minutes at 1/s, then one busy minute at 10/s
    plan = [_completion(float(t)) for t in range(600)] + [_completion(600 + t / 10) for t in range(600)]
    stats = describe(plan)
    assert stats.max_window_rate_per_s == pytest.approx(10.0, rel=0.02)
    assert stats.peak_rate_per_s == pytest.approx(1 + 0.5 * 9, rel=0.05)  # p95 of [1]*10 + [10]
    assert stats.prompt_unit == "words" and stats.prompt_length.mean == 3


def test_conversations_turns_and_repeated_prefixes() -> None:
    system = " ".join(f"s{i}" for i in range(64))  # with its role marker: four 16-word blocks and a word
    plan = [
        chat(0.0, "a0", system, "hello there", conversation="a", turn=0),
        chat(1.0, "b0", system, "good day", conversation="b", turn=0),
        chat(4.0, "a1", system, "hello there", "hi", "more", conversation="a", turn=1),
    ]
    stats = describe(plan)
    assert stats.conversations == 2 and stats.standalone_requests == 0
    assert stats.turns_per_conversation.max == 2 and stats.turns_per_conversation.mean == 1.5
    # words with role markers: 68, 68, 72; reused: the first four blocks (64 words) by b0 and by a1
    assert stats.repeated_prefix_share == pytest.approx(128 / (68 + 68 + 72))
    assert stats.prompt_length.p50 == 66  # content words only
    assert any("conversations: 2" in line for line in stats.lines())


def test_quantiles_and_empty_plans() -> None:
    assert Quantiles.of([4.0, 1.0, 3.0, 2.0]).p50 == 2.5  # interpolated between ranks
    assert Quantiles.of([5.0]).p99 == 5.0 and Quantiles.of([]).count == 0
    empty = describe([])
    assert empty.requests == 0 and empty.mean_rate_per_s == 0.0 and empty.peak_rate_per_s == 0.0
    with pytest.raises(WorkloadError):
        describe([], window_s=0)
