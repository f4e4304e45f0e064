"""The personas' material: every template fills, fits the default spans, and speaks numbers in words."""

from __future__ import annotations

import random
import re

import pytest

from evertune.domain.workloads import VoiceWorkload
from evertune.domain.workloads.conversation import word_count
from evertune.domain.workloads.personas import PERSONAS, Exchange, Persona

DEFAULT = VoiceWorkload()


def _exchanges(persona: Persona) -> list[Exchange]:
    steps = [persona.closing, *persona.follow_ups]
    for intent in persona.intents:
        steps += [intent.opening, *intent.details, intent.confirm, *intent.follow_ups]
    return steps


def test_there_are_the_asked_personas_with_lengths_that_spread() -> None:
    keys = [p.key for p in PERSONAS]
    assert keys[:5] == ["clinic", "pharmacy", "airline", "utility", "restaurant"] and len(set(keys)) == len(
        keys
    )
    lengths = sorted(p.relative_length for p in PERSONAS)
    assert lengths[0] <= 0.5 and lengths[-1] >= 1.5  # a few hundred to a couple of thousand tokens
    # the default four agents (personas 0-3) average about the typical length
    assert sum(p.relative_length for p in PERSONAS[:4]) / 4 == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize("persona", PERSONAS, ids=lambda p: p.key)
def test_every_template_fills_and_a_variant_fits_the_default_spans(persona: Persona) -> None:
    for seed in range(25):
        rng = random.Random(seed)
        facts = persona.facts(rng)
        slots = {**facts, **persona.caller(rng, facts)}
        texts = [persona.core.format_map(facts), persona.directory(rng, facts)]
        texts += [entry.format_map(facts) for entry in persona.knowledge]
        texts += [greeting.format_map(facts) for greeting in persona.greetings]
        for step in _exchanges(persona):
            callers = [template.format_map(slots) for template in step.callers]
            replies = [template.format_map(slots) for template in step.replies]
            assert any(DEFAULT.user_words[0] <= word_count(c) <= DEFAULT.user_words[1] for c in callers), (
                callers
            )
            assert any(DEFAULT.reply_words[0] <= word_count(r) <= DEFAULT.reply_words[1] for r in replies), (
                replies
            )
            # an agent's words are spoken: numbers, prices, times and codes spelled out
            assert not [r for r in replies if re.search(r"[0-9$]", r)]
            texts += callers + replies
        assert not [t for t in texts if "{" in t or "}" in t]  # no unfilled slot


@pytest.mark.parametrize("persona", PERSONAS, ids=lambda p: p.key)
def test_a_persona_has_enough_material_for_long_calls_and_prompts(persona: Persona) -> None:
    assert len(persona.intents) >= 3 and len(persona.greetings) >= 2
    assert all(intent.details for intent in persona.intents)
    assert len(persona.follow_ups) >= 4  # a call of 8 turns asks up to 3 follow-ups, each once
    assert len(persona.knowledge) >= 8
    facts = persona.facts(random.Random(0))
    assert len({persona.directory(random.Random(seed), facts) for seed in range(50)}) >= 45  # endless
    # the knowledge base and core fill the default prompt; the core alone stays under it
    core = word_count(persona.core.format_map(facts))
    assert core < persona.relative_length * DEFAULT.system_prompt_words
