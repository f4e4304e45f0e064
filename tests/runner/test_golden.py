"""The golden set and its hash chains (pure)."""

from __future__ import annotations

import pytest

from evertune.domain.workloads.voice import VOICE_TURN_CAP
from evertune.errors import InvalidArgument
from evertune.runner.golden import (
    GOLDEN_AGENTS,
    _body,
    common_prefix,
    golden_set,
    hash_answer,
    hash_chain,
)


def test_the_default_golden_set_is_voice_turns_named_by_recipe_and_content() -> None:
    a = golden_set(count=16, max_tokens=VOICE_TURN_CAP, seed=0)
    assert a == golden_set(count=16, max_tokens=60, seed=0, recipe="voice")
    assert a.set_id.startswith("voice-v1-n16-t60-s0-") and len(a.set_id.rsplit("-", 1)[1]) == 8
    other = golden_set(count=16, max_tokens=60, seed=1)
    assert other.prompts != a.prompts and other.set_id.rsplit("-", 1)[1] != a.set_id.rsplit("-", 1)[1]
    # Never the same id as another recipe's set of the same size.
    assert golden_set(count=16, max_tokens=60, seed=0, recipe="corpus").set_id == "corpus-v2-n16-t60-s0"
    for prompt in a.prompts:
        roles = [m.role for m in prompt.messages]
        # A voice turn: the agent's system prompt, its greeting, the history, the caller's turn.
        assert roles[0] == "system" and roles[-1] == "user" and roles[1] == "assistant", roles
        assert prompt.source.startswith("v0-c")
    assert len({p.source for p in a.prompts}) == 16  # no turn twice


def test_voice_turns_are_varied_over_agents_turns_and_lengths() -> None:
    a = golden_set(count=16, max_tokens=60, seed=0)
    systems = [p.messages[0].content for p in a.prompts]
    # Every agent (persona) among the first 2 x GOLDEN_AGENTS prompts, first and later turns alternating.
    assert len(set(systems[: 2 * GOLDEN_AGENTS])) == GOLDEN_AGENTS
    first = [p.source.endswith("-t0") for p in a.prompts]
    assert first[: 2 * GOLDEN_AGENTS] == [True, False] * GOLDEN_AGENTS
    assert 4 <= sum(first) <= 12
    # Agents share their system prompt over the set (the prefix cache is exercised), and a later turn
    # carries the call's history.
    assert len(set(systems)) == GOLDEN_AGENTS
    assert max(len(p.messages) for p in a.prompts) >= 9
    # Long and short prompts: the longest several times the shortest.
    sizes = [sum(len(m.content) for m in p.messages) for p in a.prompts]
    assert max(sizes) > 3 * min(sizes)
    # A larger set starts as the smaller one's buckets do, and takes more of each.
    assert golden_set(count=40, max_tokens=60, seed=0).prompts[0] == a.prompts[0]


def test_golden_sets_refuse_what_they_cannot_make() -> None:
    with pytest.raises(InvalidArgument, match="unknown golden recipe"):
        golden_set(count=4, max_tokens=8, seed=0, recipe="poems")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="count >= 1"):
        golden_set(count=0, max_tokens=8, seed=0)


def test_golden_answers_are_greedy_completions_of_the_rendered_chat_up_to_the_end_of_turn_or_the_cap() -> (
    None
):
    body = _body([1, 2, 3], model="m", max_tokens=60, top_logprobs=5)
    # No ignore_eos: greedy, at most 60 tokens, the model's end of turn ends the answer; the chat
    # goes as token ids (the same prompt for every engine), ids come back in the logprobs.
    assert "ignore_eos" not in body and body["prompt"] == [1, 2, 3]
    assert body["max_tokens"] == 60 and body["temperature"] == 0.0
    assert body["logprobs"] == 5 and body["return_tokens_as_token_ids"] is True
    assert _body([1], model="m", max_tokens=8, top_logprobs=0)["logprobs"] == 1  # the ids still


def test_the_corpus_golden_set_is_deterministic_and_named_by_its_recipe() -> None:
    a = golden_set(count=8, max_tokens=16, seed=3, recipe="corpus")
    assert a == golden_set(count=8, max_tokens=16, seed=3, recipe="corpus")
    assert a.set_id == "corpus-v2-n8-t16-s3"
    assert golden_set(count=8, max_tokens=16, seed=4, recipe="corpus").prompts != a.prompts
    # Pairs share their system prompt (prefix caching is exercised); lengths vary up to 1,600 words.
    systems = [p.messages[0].content for p in a.prompts]
    assert systems[0] == systems[1] and systems[1] != systems[2]
    assert [len(systems[i].split()) for i in (0, 2, 4, 6)] == [40, 200, 800, 1600]
    assert len({p.messages[1].content for p in a.prompts}) == 8


def test_hash_chains_agree_exactly_up_to_the_first_differing_token() -> None:
    ref = hash_chain([5, 6, 7, 8], key="k")
    assert len(ref) == 4 and all(0 <= h < 2**64 for h in ref)
    assert hash_chain([5, 6, 7, 8], key="k") == ref
    other = hash_chain([5, 6, 9, 8], key="k")
    assert common_prefix(ref, other) == 2
    assert other[3] != ref[3]  # a chain never re-converges after a difference
    assert hash_chain([5, 6, 7, 8], key="other key") != ref
    assert common_prefix(ref, ref[:3]) == 3


def test_alternatives_are_the_steps_the_chain_would_take_with_each_top_token() -> None:
    chain, alternatives = hash_answer([5, 6, 7], [[5, 9], [6, 1], [7, 2]], key="k")
    assert chain == hash_chain([5, 6, 7], key="k")
    assert chain[0] in alternatives[0] and chain[1] in alternatives[1] and chain[2] in alternatives[2]
    # The step with token 9 at position 0 is the chain of an answer that starts with 9.
    assert hash_chain([9], key="k")[0] == alternatives[0][1]
    # No logprobs from the engine: no alternatives, the chain unchanged.
    assert hash_answer([5, 6, 7], [], key="k") == (chain, [[], [], []])
