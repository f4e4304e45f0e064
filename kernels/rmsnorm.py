# mypy: disable-error-code="import-untyped,no-untyped-def,untyped-decorator"
"""Fused residual-add + RMSNorm, and plain RMSNorm: one Triton kernel, and its PyTorch reference.

vLLM's semantics (`fused_add_rms_norm`, in place there): with `z = x + residual` computed in fp32,

    residual_out = z rounded to the input dtype          (the next layer's residual)
    out          = z / sqrt(mean(z^2) + eps) * weight    (fp32, rounded once to the input dtype)

Without a residual it is plain RMSNorm of `x`. `weight` may be None (vLLM's `has_weight=False`).
Passing `out=x, residual_out=residual` makes it in place, as vLLM's op is.

One program normalizes one row. When the whole row fits in one block (`config.block >= hidden`) it
is read once and kept in registers; otherwise the kernel makes two passes over the row in chunks of
`config.block` columns (sum of squares, then scale), the second reading back the rounded residual it
stored, as vLLM's CUDA kernel does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from evertune.kernels._runtime import check_tensors, next_power_of_2
from evertune.kernels._triton_util import round_to
from evertune.kernels.tuning import KernelConfig, ShapeKey, active_cache

OP = "rms_norm"

#: Largest row kept whole in registers by the default config; longer rows go in chunks.
MAX_ONE_PASS = 16384
#: Chunk of the two-pass default for rows longer than MAX_ONE_PASS.
CHUNK = 4096


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    res_out_ptr,
    x_stride,
    res_stride,
    out_stride,
    res_out_stride,
    n_cols,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
    ONE_PASS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    res_row = res_ptr + row * res_stride
    out_row = out_ptr + row * out_stride
    res_out_row = res_out_ptr + row * res_out_stride
    if ONE_PASS:
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        z = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:
            z += tl.load(res_row + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(res_out_row + cols, round_to(z, res_out_ptr.dtype.element_ty), mask=mask)
        rstd = tl.rsqrt(tl.sum(z * z, axis=0) / n_cols + eps)
        y = z * rstd
        if HAS_WEIGHT:
            y *= tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_row + cols, round_to(y, out_ptr.dtype.element_ty), mask=mask)
    else:
        squares = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            z = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            if HAS_RESIDUAL:
                z += tl.load(res_row + cols, mask=mask, other=0.0).to(tl.float32)
                tl.store(res_out_row + cols, round_to(z, res_out_ptr.dtype.element_ty), mask=mask)
            squares += z * z
        rstd = tl.rsqrt(tl.sum(squares, axis=0) / n_cols + eps)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            if HAS_RESIDUAL:
                z = tl.load(res_out_row + cols, mask=mask, other=0.0).to(tl.float32)
            else:
                z = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            y = z * rstd
            if HAS_WEIGHT:
                y *= tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_row + cols, round_to(y, out_ptr.dtype.element_ty), mask=mask)


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    *,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    config: KernelConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(rmsnorm(x + residual) * weight, x + residual)`; `out=x, residual_out=residual` for in place."""
    if residual.shape != x.shape:
        raise ValueError(f"{OP}: residual shape {tuple(residual.shape)} != x shape {tuple(x.shape)}")
    out = torch.empty_like(x) if out is None else out
    residual_out = torch.empty_like(residual) if residual_out is None else residual_out
    _launch(x, residual, weight, eps, out=out, residual_out=residual_out, config=config)
    return out, residual_out


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    *,
    out: torch.Tensor | None = None,
    config: KernelConfig | None = None,
) -> torch.Tensor:
    """`rmsnorm(x) * weight`."""
    out = torch.empty_like(x) if out is None else out
    _launch(x, None, weight, eps, out=out, residual_out=None, config=config)
    return out


def fused_add_rms_norm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference in the inputs' dtype (pass float64 tensors for a high-precision reference)."""
    z = x + residual
    return rms_norm_ref(z, weight, eps), z


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Reference in the input's dtype."""
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


def dims_of(hidden: int) -> tuple[int, ...]:
    """The `ShapeKey.dims` of this op: the hidden size."""
    return (hidden,)


def default_config(shape: ShapeKey) -> KernelConfig:
    """One pass with the row in registers up to MAX_ONE_PASS columns, chunks of CHUNK beyond;
    about 512 columns per warp."""
    hidden = shape.dims[0]
    block = next_power_of_2(hidden) if hidden <= MAX_ONE_PASS else CHUNK
    return KernelConfig(block=block, num_warps=min(16, max(1, block // 512)), num_stages=1)


def candidates(shape: ShapeKey) -> list[KernelConfig]:
    """The search space: the one-pass block (when the row fits) and chunks of 1024..4096, each with
    the warp counts that give every thread 1..64 elements of a chunk."""
    hidden = shape.dims[0]
    whole = next_power_of_2(hidden)
    blocks = sorted(
        {b for b in (1024, 2048, 4096) if b < whole} | ({whole} if whole <= 2 * MAX_ONE_PASS else set())
    )
    configs: list[KernelConfig] = []
    for block in blocks:
        for warps in (1, 2, 4, 8, 16):
            per_thread = block // (32 * warps)
            if 1 <= per_thread <= 64:
                stages = (1,) if block >= hidden else (1, 2)
                configs += [KernelConfig(block=block, num_warps=warps, num_stages=s) for s in stages]
    return configs or [default_config(shape)]


def _rows(t: torch.Tensor, name: str, hidden: int) -> torch.Tensor:
    if t.shape[-1] != hidden or t.stride(-1) != 1:
        raise ValueError(f"{OP}: {name} must have a contiguous last dimension of {hidden}")
    return t if t.dim() == 2 else t.view(-1, hidden)


def _launch(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor | None,
    eps: float,
    *,
    out: torch.Tensor,
    residual_out: torch.Tensor | None,
    config: KernelConfig | None,
) -> None:
    check_tensors(OP, x, residual, weight, out, residual_out)
    hidden = x.shape[-1]
    if weight is not None and (weight.dim() != 1 or weight.shape[0] != hidden or weight.stride(0) != 1):
        raise ValueError(f"{OP}: weight must be a contiguous vector of {hidden}")
    x2 = _rows(x, "x", hidden)
    out2 = _rows(out, "out", hidden)
    res2 = _rows(residual, "residual", hidden) if residual is not None else x2
    res_out2 = _rows(residual_out, "residual_out", hidden) if residual_out is not None else out2
    rows = x2.shape[0]
    if rows == 0 or hidden == 0:
        return
    if config is None:
        shape = ShapeKey(OP, rows, dims_of(hidden), str(x.dtype).removeprefix("torch."))
        config = active_cache().get(shape) or default_config(shape)
    _rms_norm_kernel[(rows,)](
        x2,
        res2,
        weight if weight is not None else x2,
        out2,
        res_out2,
        x2.stride(0),
        res2.stride(0),
        out2.stride(0),
        res_out2.stride(0),
        hidden,
        float(eps),
        HAS_RESIDUAL=residual is not None,
        HAS_WEIGHT=weight is not None,
        BLOCK=config.block,
        ONE_PASS=config.block >= hidden,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
