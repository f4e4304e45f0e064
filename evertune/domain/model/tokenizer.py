"""evertune's tokenizer: a byte-level BPE trained locally on the generated corpus, and its chat format.

Byte-level, so any text (any language, emoji, code) round-trips; trained on `evertune.domain.model.corpus`
so ordinary generated English costs a steady number of tokens per word. Training is deterministic:
the same corpus seed and vocabulary size give a byte-identical `tokenizer.json`.

Nothing adds special tokens on encode (no BOS in the post-processor): a completions prompt of text
`t` is exactly `count_tokens(tokenizer, t)` tokens in vLLM too. The chat template writes the BOS
itself; `render_chat` is the same format in Python, for counting a chat prompt's tokens.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from evertune.domain.model.corpus import sentences
from evertune.errors import InvalidArgument, NotFound

#: Beginning of a prompt; the chat template writes it first.
BOS = "<|begin|>"
#: End of a message; also the end-of-sequence token generation stops at.
EOS = "<|end|>"
#: Padding.
PAD = "<|pad|>"
#: Role markers, one token each: a message is `<|role|>\n{content}<|end|>\n`.
ROLE_TOKENS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
#: Every special token, in id order (ids 0..5).
SPECIAL_TOKENS = (BOS, EOS, PAD, *ROLE_TOKENS.values())

#: The chat template (Jinja, as Hugging Face and vLLM render it). Unknown roles are an error.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('evertune models know the roles system, user and assistant') }}"
    "{% endif %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

#: The corpus seed every evertune tokenizer is trained from (one tokenizer for every model).
TOKENIZER_SEED = 0
#: Sentences in the training corpus.
TRAINING_SENTENCES = 40_000
#: Vocabulary size, special tokens included.
VOCAB_SIZE = 4096


def _training_text(seed: int, n: int) -> Iterator[str]:
    rng = random.Random(seed)
    for _ in range(n // 16):
        yield " ".join(sentences(rng, 16))


def train_tokenizer(
    *, seed: int = TOKENIZER_SEED, vocab_size: int = VOCAB_SIZE, n_sentences: int = TRAINING_SENTENCES
) -> Tokenizer:
    """A byte-level BPE trained on `n_sentences` of the corpus from `seed`. Deterministic."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_text(seed, n_sentences), trainer=trainer)
    return tokenizer


def blocked_output_ids(tokenizer: Tokenizer) -> list[int]:
    """Tokens the model must never generate: special tokens, and tokens that are not printable text
    on their own (a lone byte of a multi-byte character, a control character other than newline)."""
    blocked = []
    for token_id in range(tokenizer.get_vocab_size()):
        text = tokenizer.decode([token_id], skip_special_tokens=False)
        special = tokenizer.id_to_token(token_id) in SPECIAL_TOKENS
        printable = all(ch == "\n" or ch.isprintable() for ch in text) and "\ufffd" not in text
        if special or not text or not printable:
            blocked.append(token_id)
    return blocked


def tokenizer_config(max_length: int) -> dict[str, Any]:
    """`tokenizer_config.json` for transformers and vLLM: special tokens, chat template, no BOS on encode."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(i): {
                "content": token,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, token in enumerate(SPECIAL_TOKENS)
        },
    }


def special_tokens_map() -> dict[str, str]:
    """`special_tokens_map.json`."""
    return {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}


def load_tokenizer(model_dir: Path) -> Tokenizer:
    """The tokenizer of a model folder (`tokenizer.json`), without importing transformers."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise NotFound(f"no tokenizer.json in {model_dir}")
    return Tokenizer.from_file(str(path))


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    """How many tokens `text` is, no special tokens added (as vLLM counts a completions prompt)."""
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def render_chat(messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True) -> str:
    """A chat rendered as `CHAT_TEMPLATE` renders it (messages have `role` and `content`)."""
    parts = [BOS]
    for message in messages:
        role = message["role"]
        if role not in ROLE_TOKENS:
            raise InvalidArgument(f"evertune models know the roles system, user and assistant, not {role!r}")
        parts.append(f"{ROLE_TOKENS[role]}\n{message['content']}{EOS}\n")
    if add_generation_prompt:
        parts.append(ROLE_TOKENS["assistant"] + "\n")
    return "".join(parts)


def count_chat_tokens(
    tokenizer: Tokenizer, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True
) -> int:
    """Prompt tokens of a chat completion (what vLLM reports as `usage.prompt_tokens`)."""
    return count_tokens(tokenizer, render_chat(messages, add_generation_prompt=add_generation_prompt))
