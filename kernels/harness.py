"""The correctness harness: each kernel against its PyTorch reference in float64, on fresh random
inputs of random shapes, with every output poisoned (filled with NaN) before the kernel runs.

- `random_cases(op, seed=..., count=...)` draws cases from a seeded generator: shapes (odd sizes,
  sizes just past a power of two, one-token decode steps, strided views), dtypes, launch configs
  (the default and the op's other candidates, so that every code path of a kernel runs).
- `run_case(case)` makes the inputs (drawn in fp32, rounded to the case's dtype), runs the kernel
  into NaN-filled outputs, computes the reference in float64 from the same rounded inputs, and
  measures each output's relative error `max|out - ref| / max|ref|`. An output element the kernel
  did not write stays NaN, and a NaN makes the error infinite: the case fails.
- `TOLERANCE` bounds the error per dtype: fp32 1e-5, fp16 2e-3, bf16 1e-2. One rounding of the
  output costs at most 2^-24, 2^-11 and 2^-8 of the largest value; the two-pass RMSNorm path rounds
  twice (the residual it reads back, then the output), which the bounds cover with room to spare.

Cases where the kernel works in place (as vLLM calls it) cannot be poisoned; `inplace` cases are
drawn besides the poisoned ones and check the values only.
"""

from __future__ import annotations

import importlib
import math
import random
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from evertune.kernels.tuning import KernelConfig, ShapeKey

#: Relative error bound per dtype (see the module's doc).
TOLERANCE: dict[torch.dtype, float] = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

#: The dtypes every op is checked in.
DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)

#: op name -> module holding the kernel (`evertune.kernels.<module>`).
OP_MODULES: dict[str, str] = {
    "rms_norm": "evertune.kernels.rmsnorm",
    "silu_and_mul": "evertune.kernels.silu_mul",
    "rotary_embedding": "evertune.kernels.rotary",
}


@dataclass(frozen=True)
class Case:
    """One check: an op, a shape, a dtype, a launch config and the seed of its inputs."""

    op: str  #: a key of OP_MODULES
    dtype: torch.dtype  #: dtype of the inputs and outputs
    seed: int  #: seed of the input values
    shape: dict[str, Any] = field(hash=False)  #: the op's shape parameters (see `random_case`)
    config: KernelConfig  #: launch config

    def describe(self) -> str:
        """One line that reproduces the case."""
        dims = ", ".join(f"{k}={v}" for k, v in sorted(self.shape.items()))
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{self.op} {dtype} {dims} config={self.config} seed={self.seed}"


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one case."""

    case: Case  #: what was checked
    errors: dict[str, float]  #: output name -> relative error (inf when it holds a NaN)
    bound: float  #: the dtype's tolerance

    @property
    def passed(self) -> bool:
        return all(err <= self.bound for err in self.errors.values())

    def describe(self) -> str:
        """One line: the case, each output's error against the bound, and the verdict."""
        errs = ", ".join(f"{name} {err:.2e}" for name, err in sorted(self.errors.items()))
        verdict = "ok" if self.passed else "FAILED"
        return f"{verdict}: {self.case.describe()}: relative error {errs} (bound {self.bound:g})"


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """`max|actual - expected| / max|expected|` in float64; inf when `actual` holds a NaN or an inf, or
    the shapes differ."""
    if actual.shape != expected.shape:
        return math.inf
    a = actual.to(torch.float64)
    if not bool(torch.isfinite(a).all()):
        return math.inf
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    diff = float((a - expected).abs().max()) if expected.numel() else 0.0
    return diff / max(scale, 1e-30)


def random_case(op: str, rng: random.Random, dtype: torch.dtype) -> Case:
    """A random case of `op` in `dtype`, small enough for the interpreter (tens of tokens)."""
    module = op_module(op)
    shape: dict[str, Any]
    if op == "rms_norm":
        hidden = _size(rng, 1, 700)
        shape = {
            "tokens": _tokens(rng),
            "hidden": hidden,
            "residual": rng.random() < 0.8,
            "weight": rng.random() < 0.85,
            "eps": rng.choice((1e-5, 1e-6)),
            "row_pad": rng.choice((0, 0, 3, 64)),  # x and residual are rows of a wider buffer
            "inplace": rng.random() < 0.15,
        }
        key = ShapeKey(op, shape["tokens"], module.dims_of(hidden), "x")
    elif op == "silu_and_mul":
        d = _size(rng, 1, 900)
        tokens = _tokens(rng)
        shape = {"tokens": tokens, "d": d, "batch": rng.choice((1, 1, 2, 3))}
        key = ShapeKey(op, tokens, module.dims_of(d), "x")
    elif op == "rotary_embedding":
        head_size = rng.choice((8, 16, 32, 64, 80, 128))
        rotary_dim = head_size if rng.random() < 0.6 else 2 * rng.randint(1, head_size // 2)
        n_q = rng.randint(1, 8)
        shape = {
            "tokens": _tokens(rng, most=16),
            "head_size": head_size,
            "rotary_dim": rotary_dim,
            "q_heads": n_q,
            "kv_heads": rng.choice([k for k in range(1, n_q + 1) if n_q % k == 0]),
            "key": rng.random() < 0.85,
            "neox": rng.random() < 0.5,
            "packed_qkv": rng.random() < 0.5,  # query and key are views of one qkv tensor
            "max_position": rng.choice((17, 64, 200)),
            "inplace": rng.random() < 0.15,
        }
        key = ShapeKey(
            op, shape["tokens"], module.dims_of(n_q, shape["kv_heads"], head_size, rotary_dim), "x"
        )
    else:
        raise ValueError(f"unknown op {op!r}; one of {', '.join(OP_MODULES)}")
    configs = [module.default_config(key), *(_interpreter_sized(op, module.candidates(key), shape))]
    config = configs[0] if rng.random() < 0.4 else rng.choice(configs)
    return Case(op=op, dtype=dtype, seed=rng.randrange(2**31), shape=shape, config=config)


def random_cases(op: str, *, seed: int, count: int, dtypes: tuple[torch.dtype, ...] = DTYPES) -> list[Case]:
    """`count` cases of `op` per dtype, from `seed`."""
    rng = random.Random(f"{op}/{seed}")
    return [random_case(op, rng, dtype) for dtype in dtypes for _ in range(count)]


def run_case(case: Case, *, module: ModuleType | None = None) -> CaseResult:
    """Run `case` (on the module's kernel; a planted variant when `module` is given) and measure it."""
    impl = module if module is not None else op_module(case.op)
    gen = torch.Generator().manual_seed(case.seed)
    device = "cuda" if _on_gpu() else "cpu"
    if case.op == "rms_norm":
        errors = _check_rms_norm(case, impl, gen, device)
    elif case.op == "silu_and_mul":
        errors = _check_silu_and_mul(case, impl, gen, device)
    else:
        errors = _check_rotary(case, impl, gen, device)
    return CaseResult(case=case, errors=errors, bound=TOLERANCE[case.dtype])


def op_module(op: str) -> ModuleType:
    """The module of `op`'s kernel (imports triton)."""
    if op not in OP_MODULES:
        raise ValueError(f"unknown op {op!r}; one of {', '.join(OP_MODULES)}")
    return importlib.import_module(OP_MODULES[op])


# --- per op -----------------------------------------------------------------------------------


def _check_rms_norm(case: Case, impl: ModuleType, gen: torch.Generator, device: str) -> dict[str, float]:
    s = case.shape
    tokens, hidden, pad = s["tokens"], s["hidden"], s["row_pad"]
    x = _rand((tokens, hidden + pad), case.dtype, gen, device)[:, :hidden]
    res = _rand((tokens, hidden + pad), case.dtype, gen, device)[:, :hidden] if s["residual"] else None
    weight = _rand((hidden,), case.dtype, gen, device) if s["weight"] else None
    w64 = weight.double() if weight is not None else None
    if res is not None:
        ref_out, ref_res = impl.fused_add_rms_norm_ref(x.double(), res.double(), w64, s["eps"])
    else:
        ref_out, ref_res = impl.rms_norm_ref(x.double(), w64, s["eps"]), None
    if s["inplace"]:
        out, res_out = x, res
    else:
        out = _poisoned(x)
        res_out = _poisoned(res) if res is not None else None
    if res is not None:
        assert res_out is not None
        impl.fused_add_rms_norm(x, res, weight, s["eps"], out=out, residual_out=res_out, config=case.config)
    else:
        impl.rms_norm(x, weight, s["eps"], out=out, config=case.config)
    errors = {"out": relative_error(out, ref_out)}
    if ref_res is not None and res_out is not None:
        errors["residual"] = relative_error(res_out, ref_res)
    return errors


def _check_silu_and_mul(case: Case, impl: ModuleType, gen: torch.Generator, device: str) -> dict[str, float]:
    s = case.shape
    lead = (s["batch"], s["tokens"]) if s["batch"] > 1 else (s["tokens"],)
    x = _rand((*lead, 2 * s["d"]), case.dtype, gen, device, scale=3.0)
    out = torch.full((*lead, s["d"]), math.nan, dtype=case.dtype, device=device)
    impl.silu_and_mul(x, out=out, config=case.config)
    return {"out": relative_error(out, impl.silu_and_mul_ref(x.double()))}


def _check_rotary(case: Case, impl: ModuleType, gen: torch.Generator, device: str) -> dict[str, float]:
    s = case.shape
    tokens, hs, n_q, n_k = s["tokens"], s["head_size"], s["q_heads"], s["kv_heads"]
    width = (n_q + 2 * n_k) * hs
    qkv = _rand((tokens, width), case.dtype, gen, device)
    if s["packed_qkv"]:
        query, key, _ = torch.split(qkv, [n_q * hs, n_k * hs, n_k * hs], dim=-1)
    else:
        query = qkv[:, : n_q * hs].contiguous().view(tokens, n_q, hs)
        key = qkv[:, n_q * hs : (n_q + n_k) * hs].contiguous()
    key_in = key if s["key"] else None
    angles = torch.rand((s["max_position"], s["rotary_dim"] // 2), generator=gen, dtype=torch.float64)
    angles = (angles * 2 * math.pi).to(device)
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1).to(case.dtype)
    positions = torch.randint(0, s["max_position"], (tokens,), generator=gen).to(device)
    ref_q, ref_k = impl.rotary_embedding_ref(
        positions,
        query.double(),
        key_in.double() if key_in is not None else None,
        hs,
        cache.double(),
        s["neox"],
    )
    if s["inplace"]:
        q_out, k_out = query, key_in
    else:
        q_out = _poisoned(query)
        k_out = _poisoned(key_in) if key_in is not None else None
    impl.rotary_embedding(
        positions, query, key_in, hs, cache, s["neox"], query_out=q_out, key_out=k_out, config=case.config
    )
    errors = {"query": relative_error(q_out, ref_q)}
    if ref_k is not None and k_out is not None:
        errors["key"] = relative_error(k_out, ref_k)
    return errors


# --- helpers ----------------------------------------------------------------------------------


def _rand(
    shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, device: str, scale: float = 1.0
) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(device=device, dtype=dtype)


def _poisoned(like: torch.Tensor) -> torch.Tensor:
    """A contiguous NaN-filled tensor of `like`'s shape and dtype."""
    return torch.full(like.shape, math.nan, dtype=like.dtype, device=like.device)


def _tokens(rng: random.Random, most: int = 24) -> int:
    """Decode-like (1..4 tokens) a third of the time, else up to `most`."""
    return rng.randint(1, 4) if rng.random() < 0.34 else rng.randint(1, most)


def _size(rng: random.Random, low: int, high: int) -> int:
    """A size in [low, high]: uniform, a power of two, or one off a power of two."""
    kind = rng.random()
    if kind < 0.5:
        return rng.randint(low, high)
    powers = [1 << k for k in range(12) if low <= 1 << k <= high]
    base = rng.choice(powers)
    return max(low, min(high, base + (0 if kind < 0.7 else rng.choice((-1, 1)))))


def _interpreter_sized(op: str, configs: list[KernelConfig], shape: dict[str, Any]) -> list[KernelConfig]:
    """The candidates worth running in the interpreter: blocks that split the case's rows or heads
    (each block size is one code path; warps and stages change nothing there), plus small blocks that
    force the chunked paths."""
    extra: list[KernelConfig] = []
    if op == "rms_norm":
        extra = [KernelConfig(block=b, num_warps=1) for b in (16, 64, 128)]
    elif op == "silu_and_mul":
        extra = [KernelConfig(block=b, num_warps=1) for b in (16, 64, 256)]
    blocks = {c.block for c in configs} | {c.block for c in extra}
    return [KernelConfig(block=b, num_warps=1) for b in sorted(blocks)]


def _on_gpu() -> bool:
    from evertune.kernels._runtime import backend

    return backend() == "gpu"
