# mypy: disable-error-code="import-untyped,no-untyped-def,untyped-decorator"
"""Every kernel against its float64 reference on random shapes and inputs, outputs poisoned with NaN.

The seed is fresh each run (EVERTUNE_KERNELS_SEED repeats one); a failure names its case and seed.
The kernel modules import triton, so they are imported in the tests, after conftest.py has set
TRITON_INTERPRET (see there).
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import pytest
import torch

from evertune.kernels import harness
from evertune.kernels.harness import Case, random_cases, relative_error, run_case
from evertune.kernels.shapes import LLAMA3_8B, StepTokens, op_shapes
from evertune.kernels.tuning import ConfigCache, KernelConfig, set_active_cache
from tests.kernels.conftest import SEED

#: Random cases per op and dtype (3 dtypes): about 5 s per op in the interpreter on 2 cores.
CASES = 16


@pytest.mark.parametrize("op", sorted(harness.OP_MODULES))
def test_kernel_matches_reference_on_random_shapes(op: str) -> None:
    failures = [
        r.describe() for c in random_cases(op, seed=SEED, count=CASES) if not (r := run_case(c)).passed
    ]
    assert not failures, f"seed {SEED}:\n" + "\n".join(failures)


def _case(op: str, dtype: torch.dtype, config: KernelConfig, **shape: object) -> Case:
    return Case(op=op, dtype=dtype, seed=SEED, shape=dict(shape), config=config)


RMS = {"residual": True, "weight": True, "eps": 1e-6, "row_pad": 0, "inplace": False}
ROPE = {"key": True, "neox": True, "packed_qkv": False, "max_position": 64, "inplace": False}
EDGE_CASES = [
    # one column; a row one past a power of two, in one pass and in chunks of 64 (last chunk: 1 column)
    _case("rms_norm", torch.bfloat16, KernelConfig(block=1), tokens=1, hidden=1, **RMS),
    _case("rms_norm", torch.float32, KernelConfig(block=256), tokens=3, hidden=129, **RMS),
    _case("rms_norm", torch.float16, KernelConfig(block=64), tokens=3, hidden=129, **RMS),
    _case(
        "rms_norm", torch.bfloat16, KernelConfig(block=64), tokens=2, hidden=129, **{**RMS, "residual": False}
    ),
    _case(
        "rms_norm", torch.float32, KernelConfig(block=64), tokens=2, hidden=200, **{**RMS, "weight": False}
    ),
    _case(
        "rms_norm", torch.bfloat16, KernelConfig(block=64), tokens=5, hidden=200, **{**RMS, "inplace": True}
    ),
    _case("rms_norm", torch.float32, KernelConfig(block=512), tokens=2, hidden=300, **{**RMS, "row_pad": 5}),
    # one output column; 2 blocks of which the last holds one column; a batch dimension
    _case("silu_and_mul", torch.float32, KernelConfig(block=1), tokens=1, d=1, batch=1),
    _case("silu_and_mul", torch.bfloat16, KernelConfig(block=16), tokens=3, d=17, batch=1),
    _case("silu_and_mul", torch.float16, KernelConfig(block=64), tokens=4, d=100, batch=3),
    # Llama-like heads; partial rotary (head 80, 32 rotated: 16 pairs + 48 passed through); GPT-J;
    # no key; qkv views; blocks of heads that do not divide the heads; in place
    _case(
        "rotary_embedding",
        torch.bfloat16,
        KernelConfig(block=4),
        tokens=3,
        head_size=128,
        rotary_dim=128,
        q_heads=8,
        kv_heads=2,
        **ROPE,
    ),
    _case(
        "rotary_embedding",
        torch.float32,
        KernelConfig(block=2),
        tokens=2,
        head_size=80,
        rotary_dim=32,
        q_heads=3,
        kv_heads=1,
        **ROPE,
    ),
    _case(
        "rotary_embedding",
        torch.float16,
        KernelConfig(block=4),
        tokens=5,
        head_size=64,
        rotary_dim=64,
        q_heads=6,
        kv_heads=3,
        **{**ROPE, "neox": False, "packed_qkv": True},
    ),
    _case(
        "rotary_embedding",
        torch.bfloat16,
        KernelConfig(block=1),
        tokens=1,
        head_size=32,
        rotary_dim=16,
        q_heads=2,
        kv_heads=2,
        **{**ROPE, "neox": False, "key": False},
    ),
    _case(
        "rotary_embedding",
        torch.float32,
        KernelConfig(block=8),
        tokens=4,
        head_size=16,
        rotary_dim=16,
        q_heads=5,
        kv_heads=5,
        **{**ROPE, "inplace": True, "packed_qkv": True},
    ),
]


@pytest.mark.parametrize("case", EDGE_CASES, ids=lambda c: c.describe().split(" seed=")[0])
def test_kernel_matches_reference_at_edges(case: Case) -> None:
    result = run_case(case)
    assert result.passed, result.describe()
    assert all(math.isfinite(e) for e in result.errors.values())


def test_relative_error_treats_nan_and_shape_mismatch_as_infinite() -> None:
    ref = torch.tensor([1.0, -2.0], dtype=torch.float64)
    assert relative_error(torch.tensor([1.0, -2.0]), ref) == 0.0
    assert relative_error(torch.tensor([1.0, -1.9]), ref) == pytest.approx(0.05)
    assert relative_error(torch.tensor([1.0, math.nan]), ref) == math.inf
    assert relative_error(torch.tensor([1.0, math.inf]), ref) == math.inf
    assert relative_error(torch.tensor([1.0]), ref) == math.inf


@pytest.fixture
def rmsnorm() -> ModuleType:
    return harness.op_module("rms_norm")


@pytest.fixture
def silu_mul() -> ModuleType:
    return harness.op_module("silu_and_mul")


@pytest.fixture
def rotary() -> ModuleType:
    return harness.op_module("rotary_embedding")


def _round_kernel() -> Any:
    from evertune.kernels._triton_util import cast_kernel

    return cast_kernel


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_outputs_round_to_nearest_even_like_torch(dtype: torch.dtype) -> None:
    # Triton 3.9's interpreter truncates fp32 -> bf16; `round_to` must match torch's cast exactly,
    # ties (exactly half an ulp of bf16) and NaN included.
    ties = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 3.0 + 2**-7, math.nan, -0.0, 6e4])
    x = torch.cat((torch.randn(4000) * 7, ties)).to(torch.float32)
    out = torch.empty(x.shape, dtype=dtype)
    _round_kernel()[((x.numel() + 1023) // 1024,)](x, out, x.numel(), BLOCK=1024)
    expected = x.to(dtype)
    assert torch.equal(out.isnan(), expected.isnan())
    finite = ~expected.isnan()
    assert torch.equal(out[finite], expected[finite])


def test_ops_without_config_use_the_active_cache_or_the_default(
    rmsnorm: ModuleType, silu_mul: ModuleType, rotary: ModuleType
) -> None:
    set_active_cache(ConfigCache(hardware="cpu-interpreter", triton_version="test"))
    try:
        x, r, w = torch.randn(3, 40), torch.randn(3, 40), torch.randn(40)
        out, res = rmsnorm.fused_add_rms_norm(x, r, w, 1e-6)
        ref_out, ref_res = rmsnorm.fused_add_rms_norm_ref(x.double(), r.double(), w.double(), 1e-6)
        assert relative_error(out, ref_out) < 1e-5 and relative_error(res, ref_res) < 1e-6
        y = silu_mul.silu_and_mul(torch.randn(2, 3, 10))
        assert y.shape == (2, 3, 5)
        q = torch.randn(2, 4 * 8)
        q_ref, _ = rotary.rotary_embedding_ref(
            torch.tensor([0, 3]), q.double(), None, 8, torch.randn(4, 8).double(), True
        )
        assert q_ref.shape == q.shape
    finally:
        set_active_cache(None)


def test_in_place_calls_write_into_their_inputs(rmsnorm: ModuleType, rotary: ModuleType) -> None:
    x, r, w = torch.randn(2, 48), torch.randn(2, 48), torch.randn(48)
    ref_out, ref_res = rmsnorm.fused_add_rms_norm_ref(x.double(), r.double(), w.double(), 1e-5)
    out, res = rmsnorm.fused_add_rms_norm(x, r, w, 1e-5, out=x, residual_out=r, config=KernelConfig(block=16))
    assert out.data_ptr() == x.data_ptr() and res.data_ptr() == r.data_ptr()
    assert relative_error(x, ref_out) < 1e-5 and relative_error(r, ref_res) < 1e-6
    qkv = torch.randn(3, (2 + 1 + 1) * 16)
    q, k, _ = torch.split(qkv, [32, 16, 16], dim=-1)
    pos, cache = torch.tensor([1, 0, 2]), torch.randn(3, 16)
    rq, rk = rotary.rotary_embedding_ref(pos, q.double(), k.double(), 16, cache.double(), False)
    got_q, got_k = rotary.rotary_embedding(pos, q, k, 16, cache, False)
    assert got_q is q and got_k is k and rk is not None
    assert relative_error(qkv[:, :32], rq) < 1e-5 and relative_error(qkv[:, 32:48], rk) < 1e-5


def test_bad_inputs_get_one_line_errors(
    rmsnorm: ModuleType, silu_mul: ModuleType, rotary: ModuleType
) -> None:
    with pytest.raises(ValueError, match="must be even"):
        silu_mul.silu_and_mul(torch.randn(2, 5))
    with pytest.raises(ValueError, match="residual shape"):
        rmsnorm.fused_add_rms_norm(torch.randn(2, 8), torch.randn(2, 4), None, 1e-6)
    with pytest.raises(ValueError, match="rotary_dim"):
        rotary.rotary_embedding(torch.tensor([0]), torch.randn(1, 8), None, 8, torch.randn(4, 10), True)


def test_shape_dims_match_each_op(rmsnorm: ModuleType, silu_mul: ModuleType, rotary: ModuleType) -> None:
    shapes = op_shapes(StepTokens(decode=(1,), prefill=()), LLAMA3_8B, "bfloat16")
    dims = {s.op: s.dims for s in shapes}
    assert dims["rms_norm"] == rmsnorm.dims_of(4096)
    assert dims["silu_and_mul"] == silu_mul.dims_of(14336)
    assert dims["rotary_embedding"] == rotary.dims_of(32, 8, 128, 128)


@pytest.mark.parametrize("op", sorted(harness.OP_MODULES))
def test_candidates_are_launchable_configs(op: str) -> None:
    module = harness.op_module(op)
    for shape in [
        s
        for s in op_shapes(StepTokens(decode=(1, 128), prefill=(2048,)), LLAMA3_8B, "bfloat16")
        if s.op == op
    ]:
        configs = module.candidates(shape)
        assert configs and len(set(configs)) == len(configs)
        for c in [*configs, module.default_config(shape)]:
            assert c.block >= 1 and c.block & (c.block - 1) == 0, c
            assert c.num_warps in (1, 2, 4, 8, 16) and c.num_stages >= 1, c
