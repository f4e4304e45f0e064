"""Step sizes from a workload profile, and the op shapes they make."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from evertune.kernels.shapes import (
    DEFAULT_STEPS,
    LLAMA3_8B,
    ModelDims,
    StepTokens,
    op_shapes,
    step_tokens,
    step_tokens_of,
)
from evertune.profiler.profile import Concurrency, Distribution


@dataclass(frozen=True)
class _Profile:
    concurrency: Concurrency
    prompt_tokens: Distribution


def test_steps_come_from_concurrency_and_prompt_lengths_within_vllms_budgets() -> None:
    steps = step_tokens(
        concurrency=(0.2, 3.4, 9.0, 300.0),
        prompt_tokens=(350.0, 1800.0, 9000.0),
        max_num_seqs=128,
        max_num_batched_tokens=2048,
    )
    assert steps.decode == (1, 4, 9, 128)  # at least one sequence, at most max_num_seqs
    assert steps.prefill == (350, 1800, 2048)  # a longer prompt is prefilled in full-budget chunks
    assert steps.all == (1, 4, 9, 128, 350, 1800, 2048)


def test_an_idle_profile_still_gives_a_decode_step() -> None:
    steps = step_tokens(concurrency=(0.0,), prompt_tokens=(0.0,), max_num_seqs=8, max_num_batched_tokens=64)
    assert steps == StepTokens(decode=(1,), prefill=())
    with pytest.raises(ValueError):
        step_tokens(concurrency=(), prompt_tokens=(), max_num_seqs=0, max_num_batched_tokens=1)


def test_steps_of_a_workload_profile() -> None:
    profile = _Profile(
        concurrency=Concurrency(mean=3.0, p50=2.0, p90=6.0, p99=11.5, max=14, time_share=()),
        prompt_tokens=Distribution.of([200.0] * 60 + [900.0] * 35 + [4000.0] * 5),
    )
    steps = step_tokens_of(profile, max_num_seqs=128, max_num_batched_tokens=2048)
    assert steps.decode == (2, 6, 12, 14)
    assert steps.prefill == (200, 900, 2048)  # p50, p90, p99 capped at the batch budget


def test_op_shapes_split_heads_and_mlp_over_tensor_parallel_ranks() -> None:
    dims = ModelDims(hidden=8192, intermediate=28672, heads=64, kv_heads=8, head_dim=128, tensor_parallel=8)
    shapes = op_shapes(StepTokens(decode=(16,), prefill=(512,)), dims, "bfloat16")
    assert [(s.op, s.tokens, s.dims) for s in shapes] == [
        ("rms_norm", 16, (8192,)),
        ("silu_and_mul", 16, (3584,)),
        ("rotary_embedding", 16, (8, 1, 128, 128)),
        ("rms_norm", 512, (8192,)),
        ("silu_and_mul", 512, (3584,)),
        ("rotary_embedding", 512, (8, 1, 128, 128)),
    ]
    assert len(op_shapes(DEFAULT_STEPS, LLAMA3_8B, "bfloat16")) == 3 * len(DEFAULT_STEPS.all)
