"""The tokenizer: round trips, special tokens, the chat format as transformers renders it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from evertune.domain.model import count_chat_tokens, count_tokens, load_tokenizer, render_chat, sentences
from evertune.domain.model.tokenizer import BOS, EOS, SPECIAL_TOKENS, VOCAB_SIZE
from evertune.errors import InvalidArgument, NotFound

ORDINARY = [
    "Hello, world! Can you move my appointment to Friday at 3:30 pm?",
    "The quick brown fox jumps over the lazy dog.",
    "Zürich, São Paulo, 東京 and Кыїў — naïve café ☕ 🚀",
    "def f(x):\n    return {'a': [1, 2, 3]}  # code\t\ttabs\r\n",
    "   leading and trailing spaces   ",
    "",
]


def test_vocabulary(tokenizer: Tokenizer) -> None:
    assert tokenizer.get_vocab_size() == VOCAB_SIZE
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))


@pytest.mark.parametrize("text", ORDINARY)
def test_round_trip(tokenizer: Tokenizer, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert tokenizer.decode(ids) == text


def test_round_trip_generated(tokenizer: Tokenizer) -> None:
    text = " ".join(sentences(random.Random(3), 200))
    assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_nothing_added_on_encode(tokenizer: Tokenizer) -> None:
    assert count_tokens(tokenizer, "") == 0
    assert tokenizer.encode("Hello").ids == tokenizer.encode("Hello", add_special_tokens=False).ids
    assert count_tokens(tokenizer, "Hello") == 1


def test_special_tokens_are_one_token_each(tokenizer: Tokenizer) -> None:
    assert tokenizer.encode(f"{BOS}Hi{EOS}").ids[0] == tokenizer.token_to_id(BOS)
    assert count_tokens(tokenizer, f"{BOS}{EOS}") == 2


def test_render_chat() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."}]
    assert render_chat(messages) == (
        "<|begin|><|system|>\nBe brief.<|end|>\n<|user|>\nHi.<|end|>\n<|assistant|>\n"
    )
    assert render_chat(messages, add_generation_prompt=False).endswith("Hi.<|end|>\n")
    with pytest.raises(InvalidArgument, match="roles"):
        render_chat([{"role": "tool", "content": "x"}])


def test_chat_template_matches_transformers(tiny_model: Path, tokenizer: Tokenizer) -> None:
    """transformers (which vLLM uses) loads the tokenizer and renders the template as render_chat does."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(tiny_model))
    rng = random.Random(1)
    messages = [
        {"role": "system", "content": " ".join(sentences(rng, 5))},
        {"role": "user", "content": "Yes, my order number is 48213."},
        {"role": "assistant", "content": "Thanks. One moment."},
        {"role": "user", "content": "Okay."},
    ]
    for generation_prompt in (True, False):
        rendered = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
        assert rendered == render_chat(messages, add_generation_prompt=generation_prompt)
    encoded = hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=True)
    assert len(encoded["input_ids"]) == count_chat_tokens(tokenizer, messages)
    assert hf("Hello there")["input_ids"] == tokenizer.encode("Hello there").ids
    assert (hf.bos_token, hf.eos_token, hf.pad_token) == ("<|begin|>", "<|end|>", "<|pad|>")
    with pytest.raises(Exception, match="roles"):
        hf.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_load_tokenizer_missing(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=r"no tokenizer\.json"):
        load_tokenizer(tmp_path)
