"""The weights: shapes vLLM expects, and blocked tokens (special, partial characters) never win."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from evertune.domain.model import SIZES
from evertune.domain.model.tokenizer import SPECIAL_TOKENS, blocked_output_ids
from evertune.domain.model.weights import BLOCK, CHANNEL, tensor_shapes


def test_tensors_and_dtype(tiny_model: Path) -> None:
    weights = load_file(str(tiny_model / "model.safetensors"))
    assert {name: tuple(t.shape) for name, t in weights.items()} == tensor_shapes(SIZES["tiny"])
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}
    assert sum(t.numel() for t in weights.values()) == SIZES["tiny"].parameters()


def test_blocked_tokens(tiny_model: Path, tokenizer: Tokenizer) -> None:
    blocked = blocked_output_ids(tokenizer)
    assert set(range(len(SPECIAL_TOKENS))) <= set(blocked)
    assert tokenizer.token_to_id("Ġorder") not in blocked
    allowed = [tokenizer.decode([i]) for i in range(tokenizer.get_vocab_size()) if i not in blocked]
    assert all(text.isprintable() or text == "\n" for text in allowed)
    weights = load_file(str(tiny_model / "model.safetensors"))
    head = weights["lm_head.weight"][:, 0].float()
    assert head[blocked].eq(BLOCK).all() and head.ne(BLOCK).sum() == 4096 - len(blocked)
    assert weights["model.embed_tokens.weight"][:, 0].float().eq(CHANNEL).all()


def test_blocked_tokens_never_win(tiny_model: Path, tokenizer: Tokenizer) -> None:
    """A forward pass (transformers, float32) over random inputs: every blocked logit is far below."""
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)
    inputs = torch.randint(0, 4096, (2, 256), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(inputs).logits
    blocked = torch.zeros(4096, dtype=torch.bool)
    blocked[blocked_output_ids(tokenizer)] = True
    gap = logits[..., ~blocked].max(-1).values - logits[..., blocked].max(-1).values
    assert gap.min().item() > 30
