from __future__ import annotations

import itertools
import random
from collections import defaultdict

import pytest

from evertune.domain.workloads import (
    DailyCurve,
    PlannedRequest,
    VoiceWorkload,
    WorkloadError,
    describe,
    plan_voice,
)
from evertune.domain.workloads.arrivals import poisson_arrivals
from evertune.domain.workloads.curve import Shape
from evertune.domain.workloads.stats import coefficient_of_variation
from evertune.domain.workloads.voice import Content, voice_agents


def _calls(plan: list[PlannedRequest]) -> dict[str, list[PlannedRequest]]:
    calls: dict[str, list[PlannedRequest]] = defaultdict(list)
    for request in plan:
        calls[request.conversation_id].append(request)
    return {cid: sorted(turns, key=lambda r: r.turn) for cid, turns in calls.items()}


def _one_turn(**settings: object) -> VoiceWorkload:
    """A workload that is only call starts (one short turn, no prompt): cheap to plan at high rates."""
    base: dict[str, object] = {
        "turns": (1, 1),
        "system_prompt_words": 0,
        "greeting_words": 0,
        "user_words": (1, 1),
        "warm_start": False,
    }
    return VoiceWorkload.parse({**base, **settings})


SHAPES: list[Shape] = ["sine", "business"]


@pytest.mark.parametrize("shape", SHAPES)
def test_call_arrivals_follow_the_daily_curve(shape: Shape) -> None:
    # 20 minutes = one day at 20 calls/s peak: ~4,000-15,000 calls; per-minute counts are Poisson.
    workload = _one_turn(
        duration_s=1200.0,
        peak_calls_per_s=20.0,
        curve=DailyCurve(shape=shape, day_length_s=1200.0, peak_to_trough=4.0),
    )
    starts = [r.at_s for r in plan_voice(workload) if r.turn == 0]
    window = 60.0
    chi_square = 0.0
    for index in range(20):
        low, high = index * window, (index + 1) * window
        expected = workload.expected_calls(low, high)
        observed = sum(1 for t in starts if low <= t < high)
        # each window within 4 standard deviations (sqrt(expected) for a Poisson count) ...
        assert abs(observed - expected) < 4 * expected**0.5, (index, observed, expected)
        chi_square += (observed - expected) ** 2 / expected
    # ... and all together: chi-square with 20 degrees of freedom, p = 0.001 at 45.3
    assert chi_square < 45.3
    assert len(starts) == pytest.approx(workload.expected_calls(0, 1200), rel=0.03)


def test_call_starts_are_poisson_within_a_flat_window() -> None:
    workload = _one_turn(duration_s=600.0, peak_calls_per_s=10.0, curve=DailyCurve(shape="flat"))
    stats = describe(plan_voice(workload))
    assert stats.conversations == pytest.approx(6000, rel=0.05)
    assert stats.conversation_start_cv == pytest.approx(1.0, abs=0.05)


def test_thinning_keeps_poisson_counts_and_gaps() -> None:
    times = poisson_arrivals(random.Random(3), rate=lambda t: 5.0, max_rate=20.0, start_s=0.0, end_s=1000.0)
    assert len(times) == pytest.approx(5000, abs=4 * 5000**0.5)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert coefficient_of_variation(gaps) == pytest.approx(1.0, abs=0.05)
    assert times == sorted(times) and 0 <= times[0] and times[-1] < 1000


def test_arrival_rate_above_its_bound_is_refused() -> None:
    with pytest.raises(WorkloadError, match="exceeds its bound"):
        poisson_arrivals(random.Random(1), rate=lambda t: 2.0, max_rate=1.0, start_s=0, end_s=100)


def test_turns_gaps_and_lengths_stay_in_their_ranges() -> None:
    workload = VoiceWorkload(duration_s=300.0, warm_start=False, seed=5)
    plan = plan_voice(workload)
    assert plan and [r.at_s for r in plan] == sorted(r.at_s for r in plan)
    assert all(0.0 <= r.at_s < workload.duration_s for r in plan)
    complete = 0
    for turns in _calls(plan).values():
        assert [r.turn for r in turns] == list(range(len(turns)))  # no warm start: every call from turn 0
        if turns[0].at_s + workload.longest_call_s() < workload.duration_s:
            assert 3 <= len(turns) <= 8
            complete += 1
        for earlier, later in itertools.pairwise(turns):
            assert 3.0 <= later.at_s - earlier.at_s <= 6.0  # nominal answer 1 s + think 2-5 s
        for request in turns:
            assert 15 <= request.max_tokens <= 40
            assert 5 <= len(request.messages[-1].content.split()) <= 25
    assert complete > 50


@pytest.mark.parametrize("content", ["personas", "words"])
def test_every_turn_resends_the_system_prompt_and_a_history_one_exchange_longer(content: Content) -> None:
    workload = VoiceWorkload(duration_s=120.0, seed=11, content=content)
    plan = plan_voice(workload)
    prompts_by_agent: dict[str, set[str]] = defaultdict(set)
    for turns in _calls(plan).values():
        agent = turns[0].tags["agent"]
        for request in turns:
            assert request.api == "chat" and request.tags == {"workload": "voice", "agent": agent}
            system, greeting = request.messages[0], request.messages[1]
            assert system.role == "system" and greeting.role == "assistant"
            if content == "words":  # exact lengths; personas: see tests/domain/workloads/personas/
                assert len(system.content.split()) == 800 and len(greeting.content.split()) == 12
            else:
                assert 250 < len(system.content.split()) <= 1400 and len(greeting.content.split()) <= 12
            assert request.messages[-1].role == "user"
            prompts_by_agent[agent].add(system.content + greeting.content)
        for earlier, later in itertools.pairwise(turns):
            assert later.messages[: len(earlier.messages)] == earlier.messages
            assert len(later.messages) == len(earlier.messages) + 2
            reply = later.messages[len(earlier.messages)]
            assert reply.role == "assistant" and 10 <= len(reply.content.split()) <= 30
    assert all(len(prompts) == 1 for prompts in prompts_by_agent.values())  # one prompt per agent
    assert len(set.union(*prompts_by_agent.values())) == len(prompts_by_agent) == 4  # distinct agents


def test_warm_start_has_calls_in_progress_at_zero() -> None:
    plan = plan_voice(VoiceWorkload(duration_s=60.0, curve=DailyCurve(shape="flat"), seed=2))
    early = [r for r in plan if r.at_s < 10.0]
    assert any(r.turn > 0 for r in early)
    cold = plan_voice(
        VoiceWorkload(duration_s=60.0, curve=DailyCurve(shape="flat"), seed=2, warm_start=False)
    )
    assert all(r.turn == 0 for r in cold if r.at_s < 3.0)


def test_same_seed_same_plan_other_seed_other_plan() -> None:
    workload = VoiceWorkload(duration_s=90.0, seed=7)
    first, again = plan_voice(workload), plan_voice(workload)
    assert first == again
    other = plan_voice(VoiceWorkload(duration_s=90.0, seed=8))
    assert [r.at_s for r in first] != [r.at_s for r in other]
    assert first[0].messages[0].content != other[0].messages[0].content
    ids = [r.request_id for r in first]
    assert len(set(ids)) == len(ids)
    assert all(
        r.request_id == f"{r.conversation_id}-t{r.turn}" and r.request_id.startswith("v7-c") for r in first
    )


def test_scaled_workload_has_more_calls_and_a_longer_prompt() -> None:
    base = _one_turn(duration_s=600.0, peak_calls_per_s=5.0, curve=DailyCurve(shape="flat"), seed=4)
    more = base.scaled(calls=1.25)
    assert more.peak_calls_per_s == pytest.approx(6.25) and more.seed == base.seed
    n_base = len(plan_voice(base))
    n_more = len(plan_voice(more))
    assert n_more / n_base == pytest.approx(1.25, abs=0.06)

    workload = VoiceWorkload(duration_s=30.0, seed=4, content="words")
    longer = workload.scaled(system_prompt=1.5)
    assert longer.system_prompt_words == 1200
    assert len(plan_voice(longer)[0].messages[0].content.split()) == 1200
    # personas: the same agents' prompts, longer (tests/domain/workloads/personas/ for more)
    persona = VoiceWorkload(duration_s=30.0, seed=4)
    for short, long in zip(
        voice_agents(persona), voice_agents(persona.scaled(system_prompt=1.5)), strict=True
    ):
        assert long.system_prompt.startswith(short.system_prompt)
        assert len(long.system_prompt.split()) / len(short.system_prompt.split()) == pytest.approx(
            1.5, abs=0.1
        )
    # scaling calls alone keeps the agents' prompts
    prompts = {r.messages[0].content for r in plan_voice(workload)}
    assert prompts >= {r.messages[0].content for r in plan_voice(workload.scaled(calls=2.0))}


def test_scaled_text_shortens_every_text_of_the_same_conversations() -> None:
    workload = VoiceWorkload(duration_s=60.0, seed=4, peak_calls_per_s=0.5)
    shorter = workload.scaled(text=0.3)
    assert shorter.system_prompt_words == 240 and shorter.greeting_words == 4
    assert shorter.user_words == (2, 8) and shorter.reply_words == (3, 9) and shorter.text_scale == 0.3
    assert shorter.scaled(text=0.01).user_words == (1, 1)  # a turn keeps a word
    assert workload.scaled(system_prompt=3.0, text=0.5).system_prompt_words == 1200
    full, short = plan_voice(workload), plan_voice(shorter)

    # the same calls starting at the same times, in about 0.3 of the characters
    def firsts(plan: list[PlannedRequest]) -> list[tuple[float, str]]:
        return [(r.at_s, r.conversation_id) for r in plan if r.turn == 0]

    assert firsts(full) == firsts(short)
    chars = [sum(len(m.content) for m in r.messages) for r in full]
    short_chars = [sum(len(m.content) for m in r.messages) for r in short]
    assert 0.2 < sum(short_chars) / sum(chars) < 0.4
    with pytest.raises(WorkloadError, match="text=0"):
        workload.scaled(text=0.0)


def test_bad_settings_are_one_line_errors() -> None:
    with pytest.raises(WorkloadError, match="turns: low end 5 is above high end 3"):
        VoiceWorkload.parse({"turns": (5, 3)})
    with pytest.raises(WorkloadError, match="agents"):
        VoiceWorkload.parse({"agents": 0})
    with pytest.raises(WorkloadError, match=r"curve\.peak_to_trough"):
        VoiceWorkload.parse({"curve": {"peak_to_trough": 0.5}})
    with pytest.raises(WorkloadError, match="unknown_knob"):
        VoiceWorkload.parse({"unknown_knob": 1})
    with pytest.raises(WorkloadError, match="content: Input should be 'personas' or 'words'"):
        VoiceWorkload.parse({"content": "poems"})
    with pytest.raises(WorkloadError) as caught:
        VoiceWorkload().scaled(calls=-1)
    assert "\n" not in str(caught.value)


def test_default_ten_minute_plan_looks_like_a_voice_agent() -> None:
    stats = describe(plan_voice(VoiceWorkload()))
    assert 1000 < stats.requests < 2600
    assert stats.duration_s == pytest.approx(600, abs=5)
    assert stats.peak_rate_per_s > 1.5 * stats.mean_rate_per_s  # the daily curve shows
    # words: the system prompts dominate; the agents' span from ~300 to ~1,350 words (personas)
    assert 600 < stats.prompt_length.p50 < 1000 and stats.prompt_length.p90 > 1300
    assert stats.repeated_prefix_share > 0.9
    assert 15 <= stats.max_tokens.mean <= 40
    assert stats.turns_per_conversation.max <= 8
