# mypy: disable-error-code="import-untyped,no-untyped-def,untyped-decorator"
"""SiLU-and-multiply (the SwiGLU gate): `x[..., 2d] -> silu(x[..., :d]) * x[..., d:]`, as vLLM's
`silu_and_mul`. One Triton kernel and its PyTorch reference.

The kernel computes in fp32 and rounds once to the output dtype. Program (row, j) handles columns
`j*block .. (j+1)*block` of one row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from evertune.kernels._runtime import check_tensors, next_power_of_2
from evertune.kernels._triton_util import round_to
from evertune.kernels.tuning import KernelConfig, ShapeKey, active_cache

OP = "silu_and_mul"


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, x_stride, out_stride, d, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * x_stride + d + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * out_stride + cols, round_to(y, out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(
    x: torch.Tensor, *, out: torch.Tensor | None = None, config: KernelConfig | None = None
) -> torch.Tensor:
    """`silu(x[..., :d]) * x[..., d:]` for `x` of last dimension 2d; the output's last dimension is d."""
    if x.shape[-1] % 2:
        raise ValueError(f"{OP}: the last dimension of x must be even, got {x.shape[-1]}")
    d = x.shape[-1] // 2
    if out is None:
        out = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    if out.shape != (*x.shape[:-1], d):
        raise ValueError(f"{OP}: out shape {tuple(out.shape)} != {(*x.shape[:-1], d)}")
    check_tensors(OP, x, out)
    if x.stride(-1) != 1 or out.stride(-1) != 1:
        raise ValueError(f"{OP}: x and out need a contiguous last dimension")
    x2 = x if x.dim() == 2 else x.view(-1, 2 * d)
    out2 = out if out.dim() == 2 else out.view(-1, d)
    rows = x2.shape[0]
    if rows == 0 or d == 0:
        return out
    if config is None:
        shape = ShapeKey(OP, rows, dims_of(d), str(x.dtype).removeprefix("torch."))
        config = active_cache().get(shape) or default_config(shape)
    grid = (rows, triton.cdiv(d, config.block))
    _silu_and_mul_kernel[grid](
        x2,
        out2,
        x2.stride(0),
        out2.stride(0),
        d,
        BLOCK=config.block,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return out


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """Reference in the input's dtype (pass float64 for a high-precision reference)."""
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d]) * x[..., d:]


def dims_of(d: int) -> tuple[int, ...]:
    """The `ShapeKey.dims` of this op: the output width d (the input is 2d wide)."""
    return (d,)


def default_config(shape: ShapeKey) -> KernelConfig:
    """Up to 1024 columns per program, 4 warps (fewer for narrow rows)."""
    block = min(1024, next_power_of_2(shape.dims[0]))
    return KernelConfig(block=block, num_warps=max(1, min(4, block // 128)), num_stages=1)


def candidates(shape: ShapeKey) -> list[KernelConfig]:
    """Blocks of 256..4096 columns (not wider than the row needs), each with 1..16 warps giving every
    thread 1..32 elements."""
    widest = next_power_of_2(shape.dims[0])
    configs = [
        KernelConfig(block=block, num_warps=warps, num_stages=1)
        for block in (256, 512, 1024, 2048, 4096)
        if block <= max(256, widest)
        for warps in (1, 2, 4, 8, 16)
        if 1 <= block // (32 * warps) <= 32
    ]
    return configs or [default_config(shape)]
