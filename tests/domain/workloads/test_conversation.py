from __future__ import annotations

import random

from evertune.domain.workloads import VoiceWorkload, WordListText, plan_voice
from evertune.domain.workloads.conversation import TextLengths, WordConversations, cut_words, fit, word_count
from evertune.domain.workloads.source import CorpusText
from evertune.domain.workloads.voice import voice_agents

LENGTHS = TextLengths(system_prompt=40, greeting=6, user=(3, 9), reply=(0, 4))


def test_cut_words_keeps_a_prefix_of_exactly_n_words() -> None:
    text = "Hello there,\n\nthis is  a test."
    assert cut_words(text, 3) == "Hello there,\n\nthis"
    assert text.startswith(cut_words(text, 4)) and word_count(cut_words(text, 4)) == 4
    assert cut_words(text, 99) == text
    assert cut_words(text, 0) == "" and cut_words(text, -1) == ""


def test_fit_picks_a_text_within_the_span_or_cuts_the_nearest() -> None:
    texts = ["one two", "one two three four", "one two three four five six"]
    picked = {fit(random.Random(seed), texts, (3, 6)) for seed in range(20)}
    assert picked == {texts[1], texts[2]}  # either fitting one, never the short one
    assert fit(random.Random(0), texts, (1, 2)) == "one two"
    assert fit(random.Random(0), texts, (8, 9)) == texts[2]  # too short: the longest, whole
    assert fit(random.Random(0), ["a b c d e f g h"], (1, 3)) == "a b c"  # too long: cut


def test_word_conversations_have_exact_lengths_from_the_given_streams_only() -> None:
    source = WordConversations(WordListText(), LENGTHS)
    agent = source.agent(0, random.Random(1))
    assert word_count(agent.system_prompt) == 40 and word_count(agent.greeting) == 6
    assert agent.system_prompt == source.agent(0, random.Random(1)).system_prompt
    script = agent.call(3, random.Random(2))
    again = agent.call(3, random.Random(2))
    for turn in range(3):
        caller, reply = script.caller(turn), script.reply(turn)
        assert 3 <= word_count(caller) <= 9 and 0 <= word_count(reply) <= 4
        assert (caller, reply) == (again.caller(turn), again.reply(turn))
    none = WordConversations(
        WordListText(), TextLengths(system_prompt=0, greeting=0, user=(1, 1), reply=(0, 0))
    )
    assert none.agent(0, random.Random(1)).system_prompt == ""


def test_an_explicit_text_source_gives_word_content() -> None:
    workload = VoiceWorkload(duration_s=60.0, seed=2)
    assert plan_voice(workload, text=WordListText()) == plan_voice(
        workload.model_copy(update={"content": "words"})
    )
    corpus = plan_voice(workload, text=CorpusText())
    assert corpus != plan_voice(workload)
    assert [len(m.split()) for m in (a.system_prompt for a in voice_agents(workload, text=CorpusText()))] == [
        800
    ] * 4
