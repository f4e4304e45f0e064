"""Small GGUF checkpoints written by the tests with the `gguf` package, as llama.cpp writes them.

A Llama of a few thousand parameters with a byte-level BPE trained here: the tensors are stored
under llama.cpp's names, quantized (Q4_1 for matrices, Q8_0 for the embedding, F32 for norms) and
with the query and key rows permuted per head the way llama.cpp's converter permutes them. The
importer must undo all of it; `expected_tensors` is what it should give back.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from evertune.domain.model.weights import ModelShape, tensor_shapes

#: The special tokens of the test tokenizer (GGUF token type 3, control), ids 0..2.
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: A chat template of the ChatML kind SmolLM2 uses.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_WORDS = "the clinic opens at nine and closes at five on weekdays please call again tomorrow".split()


def train_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE that splits digits one by one (SmolLM2's pre-tokenizer), `vocab_size` tokens."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    rng = random.Random(0)
    corpus = [" ".join(rng.choices(_WORDS, k=12)) + f" {rng.randint(0, 9999)}." for _ in range(400)]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return tokenizer


def permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's permutation of a query or key projection (the converter's direction)."""
    split = weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
    return split.swapaxes(1, 2).reshape(weights.shape)


_TYPES = {
    "embed": gguf.GGMLQuantizationType.Q8_0,
    "matrix": gguf.GGMLQuantizationType.Q4_1,
    "norm": gguf.GGMLQuantizationType.F32,
}
_GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _gguf_name(hf_name: str) -> str:
    if hf_name in _GGUF_NAMES:
        return _GGUF_NAMES[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{_GGUF_NAMES[rest.removesuffix('.weight')]}.weight"


@dataclass
class TestCheckpoint:
    """What a test GGUF holds, to check the importer's output against."""

    shape: ModelShape  #: the model's dimensions
    tokenizer: Tokenizer  #: the tokenizer the GGUF's vocabulary came from
    expected_tensors: dict[str, np.ndarray] = field(default_factory=dict)  #: HF name -> dequantized values


def write_checkpoint(
    path: Path,
    *,
    architecture: str = "llama",
    pre: str = "smollm",
    tied: bool = True,
    drop: str | None = None,
    seed: int = 0,
) -> TestCheckpoint:
    """A small quantized Llama GGUF at `path`; `architecture`, `pre` and `drop` (a tensor left
    out) make the bad ones."""
    tokenizer = train_tokenizer(320)
    shape = ModelShape(
        layers=2,
        hidden=64,
        heads=4,
        kv_heads=2,
        intermediate=96,
        vocab=tokenizer.get_vocab_size(),
        max_positions=512,
        rope_theta=100_000.0,
    )
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("evertune test llama")
    writer.add_block_count(shape.layers)
    writer.add_context_length(shape.max_positions)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.intermediate)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(shape.vocab)
    writer.add_rope_dimension_count(shape.head_dim)
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    merges: list[Any] = [" ".join(pair) for pair in _merges(tokenizer)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    checkpoint = TestCheckpoint(shape=shape, tokenizer=tokenizer)
    rng = np.random.default_rng(seed)
    for name, dims in tensor_shapes(shape).items():
        if (tied and name == "lm_head.weight") or name == drop:
            continue
        kind = "norm" if len(dims) == 1 else "embed" if name == "model.embed_tokens.weight" else "matrix"
        values = 1.0 + 0.1 * rng.standard_normal(dims) if kind == "norm" else 0.05 * rng.standard_normal(dims)
        values = values.astype(np.float32)
        stored = values
        if name.endswith("q_proj.weight"):
            stored = permute(values, shape.heads)
        elif name.endswith("k_proj.weight"):
            stored = permute(values, shape.kv_heads)
        quantized = gguf.quants.quantize(stored, _TYPES[kind])
        writer.add_tensor(_gguf_name(name), quantized, raw_dtype=_TYPES[kind])
        # Quantization works row by row and the permutation moves whole rows: rounding then
        # permuting back gives the values the importer must return.
        checkpoint.expected_tensors[name] = gguf.quants.dequantize(
            gguf.quants.quantize(values, _TYPES[kind]), _TYPES[kind]
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return checkpoint


def _merges(tokenizer: Tokenizer) -> list[tuple[str, str]]:
    import json

    model = json.loads(tokenizer.to_str())["model"]
    pairs = [m.split(" ", 1) if isinstance(m, str) else m for m in model["merges"]]
    return [(str(pair[0]), str(pair[1])) for pair in pairs]
