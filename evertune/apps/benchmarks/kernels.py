"""`evertune bench kernels`: evertune's Triton kernels, checked and (on a GPU) tuned and timed.

Everywhere: the correctness harness (`evertune.kernels.harness`), `cases` random cases per op and
dtype (fresh seed, reported), against float64 references with NaN-poisoned outputs.
`correctness_passed` / `correctness_failed` count them; `failures` lists the first few.

Without a GPU that is all: the kernels run in Triton's interpreter (`TRITON_INTERPRET=1` is set for
this process when no CUDA device is present) and the figures say `"gpu": false` and why.

On a GPU (written for H100/H200-class devices; NOT YET RUN on one, so no figure of it is known):
1. the device's peak: a 1 GiB device-to-device copy (`timing.copy_bandwidth`);
2. tuning: each op at the profiled shapes (Llama 3 8B dims, bf16, the default voice step sizes:
   decode 1/8/32/128 tokens, prefill 512/2048) searched over its candidate configs; the winners are
   written to the kernel config cache (`<data dir>/kernels/<hardware>.json`);
3. each op at each shape, with its tuned config, vs PyTorch eager (the same math in torch ops) and
   vs vLLM's own CUDA op when vLLM's CUDA build is importable: median device time per call from a
   CUDA graph of rotated input sets (`timing.median_us`), bytes moved per call, and the bandwidth
   achieved as a fraction of the measured peak.

Figures per shape are named `<op>_t<tokens>_<what>`; the summary gives the slowest decode-shape
speedup over eager (`min_decode_speedup_vs_eager`, the issue's goal: >= 1.3) and the lowest share
of peak bandwidth at prefill shapes (`min_prefill_peak_bandwidth_share`, goal: >= 0.8; a decode step
moves tens of kilobytes, too few to approach peak bandwidth, so its share is reported per shape but
left out of the summary).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
from collections.abc import Callable
from typing import Any

from evertune.apps.benchmarks import Figures
from evertune.kernels.tuning import KernelConfig, ShapeKey

#: Failure lines kept in the figures.
MAX_FAILURES_SHOWN = 5

#: evertune op -> vLLM's compiled op (`torch.ops._C.<name>`, in place like evertune's in-place calls).
_VLLM_OPS = {
    "rms_norm": "fused_add_rms_norm",
    "silu_and_mul": "silu_and_mul",
    "rotary_embedding": "rotary_embedding",
}


async def run(quick: bool) -> Figures:
    return await asyncio.to_thread(_run, quick)


def _run(quick: bool) -> Figures:
    import torch

    figures: Figures = {"benchmark": "kernels"}
    if not torch.cuda.is_available():
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            figures.update(gpu=False, reason="no GPU, and triton was imported before the interpreter was set")
            return figures
        os.environ["TRITON_INTERPRET"] = "1"
        figures.update(
            gpu=False,
            reason="no CUDA device: correctness checked in Triton's interpreter on the CPU; nothing timed",
        )
        figures.update(_correctness(cases=3 if quick else 10))
        figures["tuning"] = "interpreter: each op's default config, untimed (nothing written to the cache)"
        return figures
    figures.update(gpu=True, device=torch.cuda.get_device_name(0))
    figures.update(_correctness(cases=3 if quick else 10))
    figures.update(_gpu_figures(quick))
    return figures


def _correctness(*, cases: int) -> Figures:
    from evertune.kernels.harness import DTYPES, OP_MODULES, random_cases, run_case

    seed = random.SystemRandom().randrange(2**31)
    passed, failed = 0, 0
    failures: list[str] = []
    worst: dict[str, float] = {}
    for op in OP_MODULES:
        for case in random_cases(op, seed=seed, count=cases):
            result = run_case(case)
            name = str(case.dtype).removeprefix("torch.")
            worst[name] = max(worst.get(name, 0.0), *result.errors.values())
            if result.passed:
                passed += 1
            else:
                failed += 1
                if len(failures) < MAX_FAILURES_SHOWN:
                    failures.append(result.describe())
    out: Figures = {
        "correctness_passed": passed,
        "correctness_failed": failed,
        "correctness_seed": seed,
        "correctness_cases_per_op_dtype": cases,
        "correctness_dtypes": ",".join(str(d).removeprefix("torch.") for d in DTYPES),
    }
    out.update({f"worst_rel_err_{name}": err for name, err in sorted(worst.items())})
    if failures:
        out["failures"] = failures
    return out


# --- GPU ---------------------------------------------------------------------------------------


def _gpu_figures(quick: bool) -> Figures:
    from evertune.kernels import timing, tuning
    from evertune.kernels.harness import op_module
    from evertune.kernels.shapes import DEFAULT_STEPS, LLAMA3_8B, StepTokens, op_shapes

    steps = StepTokens(decode=(1, 32), prefill=(2048,)) if quick else DEFAULT_STEPS
    shapes = list({s.key: s for s in op_shapes(steps, LLAMA3_8B, "bfloat16")}.values())
    peak = timing.copy_bandwidth(repeats=5 if quick else 10)
    l2 = timing.l2_bytes()
    hardware = tuning.local_hardware_key()
    path = tuning.cache_path(tuning.default_data_dir(), hardware)
    cache = tuning.load_cache(path, hardware=hardware, triton_version=tuning.triton_version())
    workloads = {shape.key: Workload(shape, l2) for shape in shapes}

    def measure(shape: ShapeKey, config: KernelConfig) -> float:
        work = workloads[shape.key]
        return timing.median_us(work.calls(work.evertune(config)), repeats=5 if quick else 10)

    tuning.tune(
        shapes,
        cache,
        candidates_for=lambda s: op_module(s.op).candidates(s),
        default_for=lambda s: op_module(s.op).default_config(s),
        measure=measure,
    )
    tuning.save_cache(path, cache)

    figures: Figures = {
        "peak_copy_bandwidth_gbs": round(peak / 1e9, 1),
        "l2_mib": round(l2 / 2**20, 1),
        "config_cache": str(path),
        "shapes": len(shapes),
    }
    decode_speedups: list[float] = []
    shares: list[float] = []
    for shape in shapes:
        work = workloads[shape.key]
        config = cache.get(shape)
        assert config is not None
        name = f"{shape.op}_t{shape.tokens}"
        ours = timing.median_us(work.calls(work.evertune(config)))
        eager = timing.median_us(work.calls(work.eager))
        share = work.bytes / (ours * 1e-6) / peak
        figures[f"{name}_us"] = round(ours, 2)
        figures[f"{name}_eager_us"] = round(eager, 2)
        figures[f"{name}_speedup_vs_eager"] = round(eager / ours, 3)
        figures[f"{name}_bytes"] = work.bytes
        figures[f"{name}_peak_bandwidth_share"] = round(share, 3)
        figures[f"{name}_rotations"] = work.rotations
        figures[f"{name}_config"] = (
            f"block={config.block},warps={config.num_warps},stages={config.num_stages}"
        )
        vllm_call = work.vllm()
        if vllm_call is None:
            figures[f"{name}_vllm"] = "vLLM's CUDA op is not importable here"
        else:
            try:
                vllm_us = timing.median_us(work.calls(vllm_call))
            except (RuntimeError, AttributeError) as err:
                figures[f"{name}_vllm"] = f"vLLM's op failed: {type(err).__name__}: {err}"[:200]
            else:
                figures[f"{name}_vllm_us"] = round(vllm_us, 2)
                figures[f"{name}_speedup_vs_vllm"] = round(vllm_us / ours, 3)
        if shape.tokens in steps.decode:
            decode_speedups.append(eager / ours)
        else:
            shares.append(share)
    figures["min_decode_speedup_vs_eager"] = round(min(decode_speedups), 3) if decode_speedups else 0.0
    figures["median_decode_speedup_vs_eager"] = (
        round(statistics.median(decode_speedups), 3) if decode_speedups else 0.0
    )
    figures["min_prefill_peak_bandwidth_share"] = round(min(shares), 3) if shares else 0.0
    return figures


class Workload:
    """Rotated input sets of one shape, and the calls of each implementation on them."""

    def __init__(self, shape: ShapeKey, l2: int, *, device: str = "cuda") -> None:
        import torch

        from evertune.kernels.timing import rotations_for

        self.shape = shape
        self.bytes = _bytes_moved(shape)
        self.rotations = rotations_for(self.bytes, l2_bytes=l2)
        self.sets: list[dict[str, Any]] = []
        dtype = getattr(torch, shape.dtype)
        t = shape.tokens
        for _ in range(self.rotations):
            s: dict[str, Any]
            if shape.op == "rms_norm":
                (hidden,) = shape.dims
                s = {
                    "x": torch.randn(t, hidden, dtype=dtype, device=device),
                    "residual": torch.randn(t, hidden, dtype=dtype, device=device),
                    "weight": torch.randn(hidden, dtype=dtype, device=device),
                }
            elif shape.op == "silu_and_mul":
                (d,) = shape.dims
                s = {"x": torch.randn(t, 2 * d, dtype=dtype, device=device)}
            else:
                n_q, n_k, hs, rot = shape.dims
                s = {
                    "positions": torch.randint(0, 4096, (t,), device=device),
                    "query": torch.randn(t, n_q * hs, dtype=dtype, device=device),
                    "key": torch.randn(t, n_k * hs, dtype=dtype, device=device),
                    "cache": torch.randn(4096, rot, dtype=dtype, device=device),
                    "head_size": hs,
                }
            self.sets.append(s)

    def calls(self, fn: Callable[[dict[str, Any]], object]) -> list[Callable[[], object]]:
        return [lambda s=s: fn(s) for s in self.sets]  # type: ignore[misc]

    def evertune(self, config: KernelConfig) -> Callable[[dict[str, Any]], object]:
        from evertune.kernels import rmsnorm, rotary, silu_mul

        if self.shape.op == "rms_norm":
            return lambda s: rmsnorm.fused_add_rms_norm(
                s["x"],
                s["residual"],
                s["weight"],
                1e-6,
                out=s["x"],
                residual_out=s["residual"],
                config=config,
            )
        if self.shape.op == "silu_and_mul":
            return lambda s: silu_mul.silu_and_mul(s["x"], config=config)
        return lambda s: rotary.rotary_embedding(
            s["positions"], s["query"], s["key"], s["head_size"], s["cache"], True, config=config
        )

    def eager(self, s: dict[str, Any]) -> object:
        """The same math in PyTorch ops (vLLM's native semantics: fp32 inside, in place)."""
        import torch

        if self.shape.op == "rms_norm":
            z = s["x"].float() + s["residual"].float()
            s["residual"].copy_(z)
            y = z * torch.rsqrt(z.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
            return s["x"].copy_(y.to(s["x"].dtype) * s["weight"])
        if self.shape.op == "silu_and_mul":
            x = s["x"]
            d = x.shape[-1] // 2
            return torch.nn.functional.silu(x[..., :d]) * x[..., d:]
        from evertune.kernels.rotary import rotary_embedding_ref

        q, k = rotary_embedding_ref(s["positions"], s["query"], s["key"], s["head_size"], s["cache"], True)
        s["query"].copy_(q)
        assert k is not None
        return s["key"].copy_(k)

    def vllm(self) -> Callable[[dict[str, Any]], object] | None:
        """vLLM's own CUDA op, or None when vLLM's CUDA build is not importable."""
        import torch

        try:
            import vllm._custom_ops  # noqa: F401  (loads vLLM's compiled ops into torch.ops._C)

            op = getattr(torch.ops._C, _VLLM_OPS[self.shape.op])
        except (ImportError, AttributeError, RuntimeError):
            return None
        if self.shape.op == "rms_norm":
            return lambda s: op(s["x"], s["residual"], s["weight"], 1e-6)
        if self.shape.op == "silu_and_mul":

            def silu(s: dict[str, Any]) -> object:
                x = s["x"]
                out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)
                op(out, x)
                return out

            return silu
        return lambda s: op(s["positions"], s["query"], s["key"], s["head_size"], s["cache"], True)


def _bytes_moved(shape: ShapeKey) -> int:
    """Bytes one call must read and write at least (elements x size)."""
    size = {"float32": 4, "bfloat16": 2, "float16": 2}[shape.dtype]
    t = shape.tokens
    if shape.op == "rms_norm":
        (hidden,) = shape.dims
        return (4 * t * hidden + hidden) * size  # read x, residual, weight; write out, residual
    if shape.op == "silu_and_mul":
        (d,) = shape.dims
        return 3 * t * d * size  # read 2d, write d
    n_q, n_k, hs, rot = shape.dims
    return (2 * t * (n_q + n_k) * hs + t * rot) * size + t * 8  # q, k in and out; cos/sin; positions
