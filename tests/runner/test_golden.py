"""The golden set and its hash chains (pure)."""

from __future__ import annotations

from evertune.runner.golden import common_prefix, golden_set, hash_chain


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
