"""The kernels as PyTorch custom ops (`torch.ops.evertune.*`), so that `torch.compile` and CUDA graphs
see each one as a single opaque call with declared mutations instead of tracing into Triton's
launcher. vLLM's layers call these (see `evertune.kernels.vllm_ops`). Importing this module
registers them once per process.

- `evertune::fused_add_rms_norm(x!, residual!, weight?, eps)`: in place, as vLLM's op: x becomes the
  normalized output, residual becomes x + residual.
- `evertune::rms_norm(x, weight?, eps) -> Tensor`
- `evertune::silu_and_mul(x) -> Tensor`
- `evertune::rotary_embedding(positions, query!, key!?, head_size, cos_sin_cache, is_neox)`: in place.
"""

from __future__ import annotations

import torch

from evertune.kernels.rmsnorm import fused_add_rms_norm as _fused_add_rms_norm
from evertune.kernels.rmsnorm import rms_norm as _rms_norm
from evertune.kernels.rotary import rotary_embedding as _rotary_embedding
from evertune.kernels.silu_mul import silu_and_mul as _silu_and_mul


@torch.library.custom_op("evertune::fused_add_rms_norm", mutates_args=("x", "residual"))
def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float
) -> None:
    _fused_add_rms_norm(x, residual, weight, eps, out=x, residual_out=residual)


@fused_add_rms_norm.register_fake
def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float) -> None:
    return None


@torch.library.custom_op("evertune::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    return _rms_norm(x, weight, eps)


@rms_norm.register_fake
def _(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("evertune::silu_and_mul", mutates_args=())
def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    return _silu_and_mul(x)


@silu_and_mul.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.custom_op("evertune::rotary_embedding", mutates_args=("query", "key"))
def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> None:
    _rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)


@rotary_embedding.register_fake
def _(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> None:
    return None
