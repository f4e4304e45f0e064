"""The generated English: deterministic, steady tokens per word, texts of exact token counts."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from evertune.domain.model import (
    count_tokens,
    instruction,
    load_tokenizer,
    sentence,
    sentences,
    text_of_tokens,
    utterance,
)
from evertune.domain.model.corpus import (
    adverb_of,
    comparative,
    gerund,
    participle,
    past,
    plural,
    third_person,
)
from evertune.errors import InvalidArgument

#: Tokens per whitespace-separated word of 20-sentence paragraphs (measured 1.13-1.25, median 1.18).
PARAGRAPH_BAND = (1.10, 1.30)
#: Tokens per word of caller utterances, which carry more numbers and punctuation (measured ~1.27).
UTTERANCE_BAND = (1.15, 1.40)


def test_deterministic() -> None:
    assert sentences(random.Random(5), 50) == sentences(random.Random(5), 50)
    assert sentences(random.Random(5), 50) != sentences(random.Random(6), 50)


def test_sentences_look_like_sentences() -> None:
    rng = random.Random(0)
    made = [sentence(rng) for _ in range(500)] + [instruction(rng) for _ in range(100)]
    made += [utterance(rng) for _ in range(100)]
    for text in made:
        assert text[0].isupper() and text[-1] in ".?", text
        assert "  " not in text and text == text.strip(), text
    assert len(set(made)) > 690


def test_inflections() -> None:
    assert [plural(n) for n in ("box", "city", "day", "child", "order")] == [
        "boxes",
        "cities",
        "days",
        "children",
        "orders",
    ]
    assert [third_person(v) for v in ("fix", "try", "pay", "book")] == ["fixes", "tries", "pays", "books"]
    assert [past(v) for v in ("book", "move", "try", "stop", "send")] == [
        "booked",
        "moved",
        "tried",
        "stopped",
        "sent",
    ]
    assert [participle(v) for v in ("take", "book")] == ["taken", "booked"]
    assert [gerund(v) for v in ("make", "see", "stop", "book")] == ["making", "seeing", "stopping", "booking"]
    assert [adverb_of(a) for a in ("quick", "easy", "simple", "basic", "full", "public")] == [
        "quickly",
        "easily",
        "simply",
        "basically",
        "fully",
        "publicly",
    ]
    assert [comparative(a) for a in ("cheap", "big", "easy", "safe")] == [
        "cheaper",
        "bigger",
        "easier",
        "safer",
    ]


def test_tokens_per_word(tokenizer: Tokenizer) -> None:
    rng = random.Random(99)
    ratios = []
    for _ in range(100):
        text = " ".join(sentences(rng, 20))
        ratios.append(count_tokens(tokenizer, text) / len(text.split()))
    low, high = PARAGRAPH_BAND
    assert low <= min(ratios) and max(ratios) <= high, (min(ratios), max(ratios))
    assert statistics.pstdev(ratios) < 0.04
    spoken = " ".join(utterance(rng) for _ in range(2000))
    low, high = UTTERANCE_BAND
    assert low <= count_tokens(tokenizer, spoken) / len(spoken.split()) <= high


def test_text_of_tokens_is_exact(tokenizer: Tokenizer) -> None:
    rng = random.Random(11)
    for n in [*range(0, 200), *range(200, 3001, 23), 3000]:
        text = text_of_tokens(tokenizer, n, rng)
        assert count_tokens(tokenizer, text) == n, n
        assert text == text.strip()


def test_text_of_tokens_deterministic_and_wordy(tokenizer: Tokenizer) -> None:
    first = text_of_tokens(tokenizer, 500, random.Random(2))
    assert first == text_of_tokens(tokenizer, 500, random.Random(2))
    assert first != text_of_tokens(tokenizer, 500, random.Random(3))
    assert 350 < len(first.split()) < 470


def test_text_of_tokens_refuses_negative(tokenizer: Tokenizer) -> None:
    with pytest.raises(InvalidArgument, match="n_tokens"):
        text_of_tokens(tokenizer, -1, random.Random(0))


def test_text_of_tokens_fits_the_real_models_tokenizer(smollm2_model: Path) -> None:
    """SmolLM2 splits digits one by one, so the space before a number is a piece of its own: a cut
    there must not leave the text ending in a space."""
    real = load_tokenizer(smollm2_model)
    for n in (*range(1, 120), 896, 2000):
        text = text_of_tokens(real, n, random.Random(n))
        assert count_tokens(real, text) == n and text == text.strip(), n
