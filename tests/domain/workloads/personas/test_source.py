"""Persona conversations as `plan_voice` makes them: prompts, greetings and calls."""

from __future__ import annotations

import itertools
import random
import statistics
from collections import Counter, defaultdict

import pytest

from evertune.domain.workloads import PlannedRequest, VoiceWorkload, plan_voice
from evertune.domain.workloads.conversation import TextLengths, word_count
from evertune.domain.workloads.personas import PERSONAS, PersonaAgent
from evertune.domain.workloads.personas.source import call_steps, greeting, system_prompt
from evertune.domain.workloads.voice import voice_agents

CLINIC = PERSONAS[0]


def _calls(plan: list[PlannedRequest]) -> dict[str, list[PlannedRequest]]:
    calls: dict[str, list[PlannedRequest]] = defaultdict(list)
    for request in plan:
        calls[request.conversation_id].append(request)
    return {cid: sorted(turns, key=lambda r: r.turn) for cid, turns in calls.items()}


def _prompt(words: int, seed: int = 3) -> str:
    rng = random.Random(seed)
    return system_prompt(CLINIC, CLINIC.facts(rng), rng, words)


def test_a_prompt_is_the_core_and_whole_entries_up_to_its_length_and_grows_at_its_end() -> None:
    core_words = word_count(_prompt(10_000).split("\n\n# Knowledge base")[0])
    prompts = {words: _prompt(words) for words in (0, 5, core_words + 30, 800, 2400, 6000)}
    assert prompts[0] == "" and prompts[5] == "# Role\nYou are Ava,"  # below the core: its first words
    for words in (core_words + 30, 800, 2400, 6000):
        assert words - 80 < word_count(prompts[words]) <= words  # whole entries: within one of the length
    shorter = [prompts[w] for w in sorted(prompts)]
    assert all(b.startswith(a) for a, b in itertools.pairwise(shorter))
    assert "# Knowledge base\nQ: " in prompts[800] and "# Provider directory\n- Dr. " in prompts[6000]
    assert _prompt(800) == prompts[800] and _prompt(800, seed=4) != prompts[800]


def test_the_greeting_is_the_longest_within_its_length() -> None:
    greetings = ["a b c d e f g h i j k l m n", "a b c d e f g h", "a b c d"]

    def pick(words: int, scale: float = 1.0) -> str:
        lengths = TextLengths(system_prompt=0, greeting=words, user=(1, 1), reply=(0, 0), scale=scale)
        return greeting(greetings, lengths)

    assert pick(12) == "a b c d e f g h"
    assert pick(4) == "a b c d" and pick(2) == "a b" and pick(0) == ""
    assert pick(6, scale=0.5) == "a b c d"  # chosen as at 12 words, then half of it


@pytest.mark.parametrize("turns", range(1, 11))
def test_a_call_follows_its_flow_as_far_as_its_turns_go(turns: int) -> None:
    for seed in range(10):
        steps = call_steps(CLINIC, turns, random.Random(seed))
        assert len(steps) == turns
        intent = next(i for i in CLINIC.intents if i.opening == steps[0])
        if turns >= 3:
            assert steps[-1] == CLINIC.closing
        details = min(len(intent.details), turns - 1 if turns <= 2 else turns - 2)
        assert steps[1 : 1 + details] == list(intent.details[:details])
        if turns >= 5:
            assert steps[-2] == intent.confirm
        questions = steps[3:-2]
        pool = intent.follow_ups or CLINIC.follow_ups
        assert all(q in pool for q in questions)
        assert len(set(map(id, questions))) == min(len(questions), len(pool))  # each once while they last


def test_every_call_of_an_agent_sends_its_exact_prompt_and_agents_cycle_over_the_personas() -> None:
    workload = VoiceWorkload(duration_s=200.0, seed=6, agents=7, peak_calls_per_s=1.5)
    agents = voice_agents(workload)
    assert all(isinstance(a, PersonaAgent) for a in agents)
    kinds = [a.persona.key for a in agents if isinstance(a, PersonaAgent)]
    assert kinds == [PERSONAS[n % len(PERSONAS)].key for n in range(7)]
    # agent 5 is the clinic again, another clinic: other facts, the same kind of prompt
    assert agents[5].system_prompt != agents[0].system_prompt
    assert (
        "phone receptionist for" in agents[5].system_prompt
        and "phone receptionist for" in agents[0].system_prompt
    )
    plan = plan_voice(workload)
    seen: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for request in plan:
        system, opening = request.messages[0], request.messages[1]
        seen[request.tags["agent"]].add((system.content, opening.content))
    assert len(seen) == 7
    for agent, openings in seen.items():
        assert openings == {(agents[int(agent[1:])].system_prompt, agents[int(agent[1:])].greeting)}


def test_no_two_calls_are_alike_and_no_text_has_an_unfilled_slot() -> None:
    plan = plan_voice(VoiceWorkload(duration_s=600.0, seed=1, agents=5, warm_start=False))
    calls = _calls(plan)
    complete = [turns for turns in calls.values() if len(turns) >= 3]
    assert len(complete) > 250
    callers = [tuple(r.messages[-1].content for r in turns) for turns in complete]
    assert len(set(callers)) == len(callers)
    later = [r.messages for r in plan if r.turn > 0]
    assert len(set(later)) == len(later)  # no later turn repeats another; a first may, rarely
    first = [r.messages for r in plan if r.turn == 0]
    assert len(set(first)) > 0.8 * len(first)  # "Hi, my power just went out at ..." may recur
    texts = {m.content for r in plan for m in r.messages}
    assert not [t for t in texts if "{" in t or "}" in t]
    # every persona answers calls, each with several of its intents
    assert Counter(r.tags["agent"] for r in plan).keys() == {f"a{n}" for n in range(5)}


def test_utterances_and_answers_spread_in_length() -> None:
    plan = plan_voice(VoiceWorkload(duration_s=600.0, seed=2, agents=5))
    callers = [word_count(r.messages[-1].content) for r in plan]
    replies = [
        word_count(m.content) for r in plan if r.turn > 0 for m in r.messages[2:-1] if m.role == "assistant"
    ]
    assert min(callers) >= 5 and max(callers) <= 25 and len(set(callers)) > 12
    assert statistics.quantiles(callers, n=10)[0] <= 7 and statistics.quantiles(callers, n=10)[-1] >= 13
    assert min(replies) >= 10 and max(replies) <= 30 and len(set(replies)) > 12
    prompts = sorted({word_count(r.messages[0].content) for r in plan})
    assert prompts[0] < 400 and prompts[-1] > 1200  # the shortest persona's prompt to the longest's


def test_same_seed_same_texts_other_seed_other_texts() -> None:
    workload = VoiceWorkload(duration_s=120.0, seed=9, agents=5)
    assert plan_voice(workload) == plan_voice(workload)
    other = [a.system_prompt for a in voice_agents(workload.model_copy(update={"seed": 10}))]
    assert all(a.system_prompt != b for a, b in zip(voice_agents(workload), other, strict=True))


def test_scaling_keeps_what_it_does_not_scale() -> None:
    workload = VoiceWorkload(duration_s=300.0, seed=4, agents=5)
    base = voice_agents(workload)
    # a 3x longer shared prompt: the same agents' prompts, continued; the same arrivals
    tripled = voice_agents(workload.scaled(system_prompt=3))
    for short, long in zip(base, tripled, strict=True):
        assert long.system_prompt.startswith(short.system_prompt) and long.greeting == short.greeting
        assert word_count(long.system_prompt) / word_count(short.system_prompt) == pytest.approx(
            3.0, rel=0.08
        )

    def starts(plan: list[PlannedRequest]) -> list[tuple[float, str, str]]:
        return [(r.at_s, r.conversation_id, r.tags["agent"]) for r in plan if r.turn == 0]

    plan = plan_voice(workload)
    assert starts(plan_voice(workload.scaled(system_prompt=3))) == starts(plan)
    # more calls: the same agents
    more = workload.scaled(calls=1.25)
    assert [a.system_prompt for a in voice_agents(more)] == [a.system_prompt for a in base]
    # shorter texts: the same calls (starts, agents, turn times), fewer words in each
    shorter = plan_voice(workload.scaled(text=0.4))
    assert [(r.at_s, r.request_id) for r in shorter] == [(r.at_s, r.request_id) for r in plan]
    ratio = sum(len(m.content) for r in shorter for m in r.messages) / sum(
        len(m.content) for r in plan for m in r.messages
    )
    assert 0.3 < ratio < 0.5
    assert all(word_count(r.messages[-1].content) <= 10 for r in shorter)
