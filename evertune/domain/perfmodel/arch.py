"""A decoder's architecture, read from its `config.json`: what the step-time model counts.

Only dense decoders with grouped-query attention and a gated (SwiGLU) MLP are known: the Llama
family and the architectures that share its shape. Anything else is refused with the known list,
rather than modelled wrongly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evertune.errors import InvalidArgument

#: `architectures[0]` values whose compute is a Llama-shaped decoder.
KNOWN_ARCHITECTURES: frozenset[str] = frozenset(
    {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}
)
#: Bytes per element of each `torch_dtype` / `dtype` value.
DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class ModelArch:
    """The dimensions of a decoder that decide its FLOPs and bytes per step."""

    name: str  #: architecture name (`architectures[0]`)
    layers: int  #: decoder layers
    hidden: int  #: model width
    heads: int  #: query heads
    kv_heads: int  #: key/value heads
    head_dim: int  #: width of one head
    intermediate: int  #: MLP width (gate, up and down projections)
    vocab: int  #: vocabulary size (output head width)
    dtype_bytes: int  #: bytes per weight and per KV element (the checkpoint's dtype)

    @property
    def layer_params(self) -> int:
        """Weights of the matrix multiplies of one layer: q, k, v, o and the three MLP projections."""
        q_o = 2 * self.hidden * self.heads * self.head_dim
        k_v = 2 * self.hidden * self.kv_heads * self.head_dim
        mlp = 3 * self.hidden * self.intermediate
        return q_o + k_v + mlp

    @property
    def weight_bytes(self) -> int:
        """Bytes of every weight a step reads: the layers and the output head (embeddings are gathered)."""
        return (self.layers * self.layer_params + self.hidden * self.vocab) * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes of one token over all layers (K and V)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelArch:
        """The architecture of a Hugging Face `config.json` mapping; `InvalidArgument` if unknown."""
        archs = config.get("architectures") or []
        name = str(archs[0]) if archs else ""
        if name not in KNOWN_ARCHITECTURES:
            known = ", ".join(sorted(KNOWN_ARCHITECTURES))
            raise InvalidArgument(f"unknown model architecture {name or '(none)'!r} (known: {known})")
        try:
            hidden = int(config["hidden_size"])
            heads = int(config["num_attention_heads"])
            dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
            return cls(
                name=name,
                layers=int(config["num_hidden_layers"]),
                hidden=hidden,
                heads=heads,
                kv_heads=int(config.get("num_key_value_heads") or heads),
                head_dim=int(config.get("head_dim") or hidden // heads),
                intermediate=int(config["intermediate_size"]),
                vocab=int(config["vocab_size"]),
                dtype_bytes=DTYPE_BYTES.get(dtype, 2),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise InvalidArgument(f"model config lacks a usable field: {err}") from None


def load_arch(model_dir: Path) -> ModelArch:
    """The architecture of the model folder's `config.json`; one-line error when missing or unknown."""
    path = model_dir / "config.json"
    try:
        config = json.loads(path.read_text())
    except OSError as err:
        raise InvalidArgument(f"cannot read {path}: {err.strerror or err}") from None
    except ValueError:
        raise InvalidArgument(f"{path} is not JSON") from None
    if not isinstance(config, dict):
        raise InvalidArgument(f"{path} is not a JSON object")
    return ModelArch.from_config(config)
