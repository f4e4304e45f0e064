"""evertune's replacements of vLLM's layers, registered out of tree (`CustomOp.register_oot`) by the
plugin (`evertune.kernels.vllm_plugin`). Imports vLLM; only the plugin imports this module.

vLLM instantiates a registered replacement wherever a model builds the original class (by class
name): `RMSNorm`, `SiluAndMul`, `RotaryEmbedding` and `Llama3RotaryEmbedding` (Llama 3's scaled
frequencies only change the cos/sin cache; the forward is the same). Each replacement overrides
`forward_cuda` (ROCm's `forward_hip` calls it) and hands anything it does not cover back to vLLM:

- RMSNorm with `var_hidden_size` (a variance over part of the row), under vLLM's batch-invariant
  mode, or on a strided view that is not rows of the hidden size;
- rotary embeddings that vLLM routes to FlashInfer or AITER.

A replacement is enabled unless `custom_ops` disables it by vLLM's name (`-rms_norm`,
`-silu_and_mul`, `-rotary_embedding`): vLLM turns custom ops off by default when it compiles with
Inductor, and asking for evertune's kernels means asking for them to run.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm import envs
from vllm.config import get_cached_compilation_config
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding
from vllm.model_executor.layers.rotary_embedding.llama3_rope import Llama3RotaryEmbedding

import evertune.kernels.torch_ops  # noqa: F401  (registers torch.ops.evertune.*)


def _rows_viewable(t: torch.Tensor) -> bool:
    """Whether the kernel can treat `t` as rows (a 2-D tensor with a contiguous last dimension, or a
    contiguous one); e.g. a per-head norm over a strided view of qkv goes to vLLM's path instead."""
    return t.stride(-1) == 1 and (t.dim() <= 2 or t.is_contiguous())


def _enabled(vllm_name: str) -> bool:
    return f"-{vllm_name}" not in get_cached_compilation_config().custom_ops


class EvertuneRMSNorm(RMSNorm):
    """vLLM's RMSNorm on evertune's fused residual-add + RMSNorm kernel."""

    @classmethod
    def enabled(cls) -> bool:
        return _enabled("rms_norm")

    def forward_cuda(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> Any:
        if (
            self.variance_size_override is not None
            or envs.VLLM_BATCH_INVARIANT
            or not _rows_viewable(x)
            or (residual is not None and not _rows_viewable(residual))
        ):
            return super().forward_cuda(x, residual)
        if residual is None:
            weight = self.weight.data if self.pass_weight else None
            return torch.ops.evertune.rms_norm(x, weight, self.variance_epsilon)
        weight = self.weight.data if self.pass_weight_add else None
        torch.ops.evertune.fused_add_rms_norm(x, residual, weight, self.variance_epsilon)
        return x, residual


class EvertuneSiluAndMul(SiluAndMul):
    """vLLM's SiluAndMul on evertune's kernel."""

    @classmethod
    def enabled(cls) -> bool:
        return _enabled("silu_and_mul")

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.evertune.silu_and_mul(x)
        return out


class _RotaryForward:
    """The forward shared by the rotary replacements (mixed in before vLLM's class)."""

    head_size: int
    is_neox_style: bool
    use_flashinfer: bool
    use_aiter: bool

    @classmethod
    def enabled(cls) -> bool:
        return _enabled("rotary_embedding")

    def forward_cuda(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.use_flashinfer or getattr(self, "use_aiter", False):
            result: tuple[torch.Tensor, torch.Tensor | None] = super().forward_cuda(  # type: ignore[misc]
                positions, query, key
            )
            return result
        cache = self._match_cos_sin_cache_dtype(query)  # type: ignore[attr-defined]
        torch.ops.evertune.rotary_embedding(positions, query, key, self.head_size, cache, self.is_neox_style)
        return query, key


class EvertuneRotaryEmbedding(_RotaryForward, RotaryEmbedding):
    """vLLM's RotaryEmbedding on evertune's kernel."""


class EvertuneLlama3RotaryEmbedding(_RotaryForward, Llama3RotaryEmbedding):
    """vLLM's Llama3RotaryEmbedding on evertune's kernel."""


#: vLLM class name -> (vLLM class, evertune's replacement)
REPLACEMENTS: dict[str, tuple[type[Any], type[Any]]] = {
    "RMSNorm": (RMSNorm, EvertuneRMSNorm),
    "SiluAndMul": (SiluAndMul, EvertuneSiluAndMul),
    "RotaryEmbedding": (RotaryEmbedding, EvertuneRotaryEmbedding),
    "Llama3RotaryEmbedding": (Llama3RotaryEmbedding, EvertuneLlama3RotaryEmbedding),
}
