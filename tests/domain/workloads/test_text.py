from __future__ import annotations

import random

import pytest

from evertune.domain.workloads import WordListText, WorkloadError, words_as_tokens


def test_word_list_text_has_exact_lengths_and_depends_only_on_the_rng() -> None:
    source = WordListText()
    for n in (0, 1, 5, 17, 800):
        text = source.words(random.Random(n), n)
        assert len(text.split()) == n and text == text.strip()
    assert source.words(random.Random(1), 50) == source.words(random.Random(1), 50)
    assert source.words(random.Random(1), 50) != source.words(random.Random(2), 50)
    assert source.words(random.Random(1), 12).endswith(".")


def test_words_as_tokens_approximates_by_a_ratio() -> None:
    make_text = words_as_tokens(WordListText(), tokens_per_word=1.3)
    assert len(make_text(130, random.Random(0)).split()) == 100
    assert len(make_text(1, random.Random(0)).split()) == 1
    assert make_text(0, random.Random(0)) == ""
    with pytest.raises(WorkloadError):
        words_as_tokens(WordListText(), tokens_per_word=0)
