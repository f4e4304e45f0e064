# mypy: disable-error-code="import-untyped,no-untyped-def,untyped-decorator"
"""Rotary position embedding of query and key, as vLLM's `rotary_embedding` op: one Triton kernel
and its PyTorch reference.

Inputs as vLLM passes them: `positions` [tokens] (or any shape with that many elements), `query`
[tokens, heads * head_size] (or [tokens, heads, head_size], or with batch dimensions in front), `key`
likewise or None, and `cos_sin_cache` [max_position, rotary_dim] holding cos in its first half and
sin in its second. The first `rotary_dim` dimensions of each head are rotated, the rest pass through.

- neox style: pairs (i, i + rotary_dim/2);
- GPT-J style: pairs (2i, 2i + 1);

each pair (a, b) -> (a cos - b sin, b cos + a sin), in fp32, rounded once to the output dtype.

In place by default (vLLM's contract: the op updates `query` and `key`); `query_out`/`key_out` write
elsewhere, every element of each head (the pass-through part is copied). Query and key may be
strided views (vLLM splits them out of one qkv tensor). One launch does both: program (t, j)
rotates a block of `config.block` heads of token t, query blocks first, then key blocks.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from evertune.kernels._runtime import check_tensors, next_power_of_2
from evertune.kernels._triton_util import round_to
from evertune.kernels.tuning import KernelConfig, ShapeKey, active_cache

OP = "rotary_embedding"


@triton.jit
def _rotate_heads(
    src,
    dst,
    src_stride_h,
    dst_stride_h,
    head0,
    n_heads,
    cos,
    sin,
    half,
    n_pass,
    IS_NEOX: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr,
    HAS_PASS: tl.constexpr,
):
    heads = head0 + tl.arange(0, BLOCK_H)
    hmask = heads < n_heads
    r = tl.arange(0, BLOCK_R)
    rmask = r < half
    mask = hmask[:, None] & rmask[None, :]
    if IS_NEOX:
        i1 = r
        i2 = r + half
    else:
        i1 = 2 * r
        i2 = 2 * r + 1
    src_h = src + heads[:, None] * src_stride_h
    dst_h = dst + heads[:, None] * dst_stride_h
    x1 = tl.load(src_h + i1[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src_h + i2[None, :], mask=mask, other=0.0).to(tl.float32)
    o1 = x1 * cos[None, :] - x2 * sin[None, :]
    o2 = x2 * cos[None, :] + x1 * sin[None, :]
    tl.store(dst_h + i1[None, :], round_to(o1, dst.dtype.element_ty), mask=mask)
    tl.store(dst_h + i2[None, :], round_to(o2, dst.dtype.element_ty), mask=mask)
    if HAS_PASS:
        p = tl.arange(0, BLOCK_P)
        pmask = hmask[:, None] & (p < n_pass)[None, :]
        kept = tl.load(src_h + 2 * half + p[None, :], mask=pmask, other=0.0)
        tl.store(dst_h + 2 * half + p[None, :], kept, mask=pmask)


@triton.jit
def _rotary_kernel(
    pos_ptr,
    q_ptr,
    k_ptr,
    qo_ptr,
    ko_ptr,
    cache_ptr,
    q_stride_t,
    q_stride_h,
    k_stride_t,
    k_stride_h,
    qo_stride_t,
    qo_stride_h,
    ko_stride_t,
    ko_stride_h,
    cache_stride,
    n_q_heads,
    n_k_heads,
    half,
    n_pass,
    IS_NEOX: tl.constexpr,
    HAS_KEY: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr,
    HAS_PASS: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    r = tl.arange(0, BLOCK_R)
    cmask = r < half
    cos = tl.load(cache_ptr + pos * cache_stride + r, mask=cmask, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * cache_stride + half + r, mask=cmask, other=0.0).to(tl.float32)
    n_q_blocks = tl.cdiv(n_q_heads, BLOCK_H)
    if block < n_q_blocks:
        _rotate_heads(
            q_ptr + t * q_stride_t,
            qo_ptr + t * qo_stride_t,
            q_stride_h,
            qo_stride_h,
            block * BLOCK_H,
            n_q_heads,
            cos,
            sin,
            half,
            n_pass,
            IS_NEOX,
            BLOCK_H,
            BLOCK_R,
            BLOCK_P,
            HAS_PASS,
        )
    else:
        if HAS_KEY:
            _rotate_heads(
                k_ptr + t * k_stride_t,
                ko_ptr + t * ko_stride_t,
                k_stride_h,
                ko_stride_h,
                (block - n_q_blocks) * BLOCK_H,
                n_k_heads,
                cos,
                sin,
                half,
                n_pass,
                IS_NEOX,
                BLOCK_H,
                BLOCK_R,
                BLOCK_P,
                HAS_PASS,
            )


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    *,
    query_out: torch.Tensor | None = None,
    key_out: torch.Tensor | None = None,
    config: KernelConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate `query` and `key` (in place unless `query_out`/`key_out` are given); returns the
    tensors written."""
    query_out = query if query_out is None else query_out
    key_out = key if key_out is None else key_out
    if (key is None) != (key_out is None):
        raise ValueError(f"{OP}: key_out needs a key")
    check_tensors(OP, positions, query, key, query_out, key_out, cos_sin_cache)
    tokens = positions.numel()
    rotary_dim = cos_sin_cache.shape[-1]
    if cos_sin_cache.dim() != 2 or rotary_dim % 2 or rotary_dim > head_size or cos_sin_cache.stride(1) != 1:
        raise ValueError(
            f"{OP}: cos_sin_cache must be [max_position, rotary_dim] with an even rotary_dim <= head_size "
            f"({head_size}), got {tuple(cos_sin_cache.shape)}"
        )
    if tokens == 0:
        return query_out, key_out
    q, qo = _heads(query, "query", tokens, head_size), _heads(query_out, "query_out", tokens, head_size)
    if qo.shape != q.shape:
        raise ValueError(f"{OP}: query_out shape {tuple(query_out.shape)} != query's")
    k = _heads(key, "key", tokens, head_size) if key is not None else None
    ko = _heads(key_out, "key_out", tokens, head_size) if key_out is not None else None
    if k is not None and ko is not None and ko.shape != k.shape:
        raise ValueError(f"{OP}: key_out shape {tuple(ko.shape)} != key's")
    n_q, n_k = q.shape[1], (k.shape[1] if k is not None else 0)
    if config is None:
        shape = ShapeKey(OP, tokens, dims_of(n_q, n_k, head_size, rotary_dim), _dtype(query))
        config = active_cache().get(shape) or default_config(shape)
    n_pass = head_size - rotary_dim
    pos = positions.reshape(-1)
    k_ = k if k is not None else q
    ko_ = ko if ko is not None else qo
    grid = (tokens, triton.cdiv(n_q, config.block) + triton.cdiv(n_k, config.block))
    _rotary_kernel[grid](
        pos,
        q,
        k_,
        qo,
        ko_,
        cos_sin_cache,
        q.stride(0),
        q.stride(1),
        k_.stride(0),
        k_.stride(1),
        qo.stride(0),
        qo.stride(1),
        ko_.stride(0),
        ko_.stride(1),
        cos_sin_cache.stride(0),
        n_q,
        n_k,
        rotary_dim // 2,
        n_pass,
        IS_NEOX=is_neox,
        HAS_KEY=k is not None,
        BLOCK_H=config.block,
        BLOCK_R=next_power_of_2(max(1, rotary_dim // 2)),
        BLOCK_P=next_power_of_2(max(1, n_pass)),
        HAS_PASS=n_pass > 0,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return query_out, key_out


def rotary_embedding_ref(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Reference, out of place, in the inputs' dtype (pass float64 for a high-precision reference)."""
    tokens = positions.numel()
    rotary_dim = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache[positions.reshape(-1)].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        heads = x.reshape(tokens, -1, head_size)
        rot, kept = heads[..., :rotary_dim], heads[..., rotary_dim:]
        if is_neox:
            a, b = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2 :]
        else:
            a, b = rot[..., 0::2], rot[..., 1::2]
        ra, rb = a * cos - b * sin, b * cos + a * sin
        turned = torch.cat((ra, rb), dim=-1) if is_neox else torch.stack((ra, rb), dim=-1).flatten(-2)
        return torch.cat((turned, kept), dim=-1).reshape(x.shape)

    return rotate(query), (rotate(key) if key is not None else None)


def dims_of(n_q_heads: int, n_kv_heads: int, head_size: int, rotary_dim: int) -> tuple[int, ...]:
    """The `ShapeKey.dims` of this op: query heads, key heads, head size, rotary dim."""
    return (n_q_heads, n_kv_heads, head_size, rotary_dim)


def default_config(shape: ShapeKey) -> KernelConfig:
    """Heads per program so that a program rotates about 1024 pairs, 4 warps."""
    n_q, _, _, rotary_dim = shape.dims
    pairs = next_power_of_2(max(1, rotary_dim // 2))
    block = max(1, min(next_power_of_2(max(1, n_q)), 1024 // pairs))
    return KernelConfig(block=block, num_warps=4 if block * pairs >= 512 else 1, num_stages=1)


def candidates(shape: ShapeKey) -> list[KernelConfig]:
    """1..32 heads per program (not more than the most heads of query or key), with 1..8 warps."""
    n_q, n_k, _, _ = shape.dims
    most = next_power_of_2(max(1, n_q, n_k))
    return [
        KernelConfig(block=block, num_warps=warps, num_stages=1)
        for block in (1, 2, 4, 8, 16, 32)
        if block <= most
        for warps in (1, 2, 4, 8)
    ]


def _heads(t: torch.Tensor, name: str, tokens: int, head_size: int) -> torch.Tensor:
    """`t` as [tokens, heads, head_size] (a view: writes reach `t`)."""
    if t.stride(-1) != 1 or t.numel() % (tokens * head_size):
        raise ValueError(
            f"{OP}: {name} {tuple(t.shape)} is not {tokens} tokens of whole heads of {head_size} with a "
            "contiguous last dimension"
        )
    try:
        return t.view(tokens, -1, head_size)
    except RuntimeError:
        raise ValueError(
            f"{OP}: {name} {tuple(t.shape)} cannot be viewed as [tokens, heads, head_size]"
        ) from None


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")
