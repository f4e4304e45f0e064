# mypy: disable-error-code="import-untyped,no-untyped-def,untyped-decorator"
"""Triton helpers shared by the kernels."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def round_to(y, dtype: tl.constexpr):
    """Cast fp32 `y` to `dtype`, rounding to nearest even.

    A GPU's fp32 -> bf16 cast rounds to nearest even by itself; Triton 3.9's interpreter truncates
    instead (and ignores `fp_downcast_rounding`), which doubles the error of every bf16 output. So
    bf16 is rounded here in integer ops first (the cast that follows is then exact), the same on
    both: the interpreter tests the code the GPU runs. NaN stays NaN.
    """
    if dtype == tl.bfloat16:
        bits = y.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        y = tl.where(y != y, y, bits.to(tl.float32, bitcast=True))
    return y.to(dtype)


@triton.jit
def cast_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Cast fp32 `x` into `out`'s dtype through `round_to` (what the tests compare with torch's cast)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, round_to(x, out_ptr.dtype.element_ty), mask=mask)
