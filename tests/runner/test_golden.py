"""The golden set and its hash chains (pure)."""

from __future__ import annotations

from evertune.runner.golden import _top_ids, common_prefix, golden_set, hash_answer, hash_chain


def test_the_golden_set_is_deterministic_and_named_by_its_recipe() -> None:
    a = golden_set(count=8, max_tokens=16, seed=3)
    assert a == golden_set(count=8, max_tokens=16, seed=3)
    assert a.set_id == "corpus-v1-n8-t16-s3"
    assert golden_set(count=8, max_tokens=16, seed=4).prompts != a.prompts
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


def test_top_ids_are_read_from_token_id_strings_only() -> None:
    answer = {
        "choices": [
            {
                "logprobs": {
                    "content": [
                        {
                            "token": "token_id:5",
                            "top_logprobs": [{"token": "token_id:5"}, {"token": "token_id:9"}],
                        },
                        {"token": "token_id:6", "top_logprobs": [{"token": "token_id:6"}]},
                    ]
                }
            }
        ]
    }
    assert _top_ids(answer) == [[5, 9], [6]]
    as_text = {"choices": [{"logprobs": {"content": [{"token": "hi", "top_logprobs": [{"token": "hi"}]}]}}]}
    assert _top_ids(as_text) == [] and _top_ids({"choices": [{}]}) == []
