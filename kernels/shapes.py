"""The shapes worth tuning and benchmarking: the tokens of the steps an endpoint's traffic makes,
crossed with the model's dimensions. Pure.

A vLLM step runs each op over every token scheduled in it: a decode step over one token per running
sequence, a prefill step over a prompt (or a chunk of it, at most `max_num_batched_tokens`). So the
workload profile gives the tokens per step: the requests in flight (its concurrency percentiles) for
decode steps, the prompt lengths (its percentiles, capped at the batch budget) for prefill steps.
The cache keys each shape by the power-of-two bucket of its tokens (see `tuning.ShapeKey`).

The profile is read by duck typing (`profile.concurrency.p50`, `profile.prompt_tokens.p90`, ...), so
this part does not import the profiler service.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from evertune.kernels.tuning import ShapeKey


@dataclass(frozen=True)
class ModelDims:
    """The dimensions of a Llama-architecture decoder that the ops see (per tensor-parallel rank)."""

    hidden: int  #: model width (RMSNorm rows)
    intermediate: int  #: MLP width (SiLU-and-mul output per token, before tensor parallelism)
    heads: int  #: query heads (before tensor parallelism)
    kv_heads: int  #: key/value heads (before tensor parallelism)
    head_dim: int  #: width of one head
    rotary_dim: int = 0  #: rotated dimensions of a head; 0: the whole head
    tensor_parallel: int = 1  #: ranks the heads and the MLP are split over

    @property
    def rank_intermediate(self) -> int:
        return self.intermediate // self.tensor_parallel

    @property
    def rank_heads(self) -> int:
        return max(1, self.heads // self.tensor_parallel)

    @property
    def rank_kv_heads(self) -> int:
        return max(1, self.kv_heads // self.tensor_parallel)

    @property
    def rank_rotary_dim(self) -> int:
        return self.rotary_dim or self.head_dim


#: Llama 3 8B: the default dimensions of `evertune bench kernels`.
LLAMA3_8B = ModelDims(hidden=4096, intermediate=14336, heads=32, kv_heads=8, head_dim=128)


@dataclass(frozen=True)
class StepTokens:
    """Tokens per step of a workload."""

    decode: tuple[int, ...]  #: decode steps: sequences decoding together, one token each
    prefill: tuple[int, ...]  #: prefill steps: prompt tokens (a chunk at most the batch budget)

    @property
    def all(self) -> tuple[int, ...]:
        """Every distinct step size, ascending."""
        return tuple(sorted(set(self.decode) | set(self.prefill)))


#: A voice endpoint without a profile yet: one to 128 calls decoding, prompts of 512 and 2048 tokens.
DEFAULT_STEPS = StepTokens(decode=(1, 8, 32, 128), prefill=(512, 2048))


class _Quantiles(Protocol):
    @property
    def p50(self) -> float: ...
    @property
    def p90(self) -> float: ...
    @property
    def p99(self) -> float: ...


class _Concurrency(_Quantiles, Protocol):
    @property
    def max(self) -> int: ...


class ProfileLike(Protocol):
    """What this module reads of a `WorkloadProfile`."""

    @property
    def concurrency(self) -> _Concurrency: ...
    @property
    def prompt_tokens(self) -> _Quantiles: ...


def step_tokens(
    *,
    concurrency: Iterable[float],
    prompt_tokens: Iterable[float],
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> StepTokens:
    """Decode steps of each concurrency level (1..max_num_seqs) and prefill steps of each prompt
    length (1..max_num_batched_tokens; a longer prompt is prefilled in full-budget chunks)."""
    if max_num_seqs < 1 or max_num_batched_tokens < 1:
        raise ValueError("max_num_seqs and max_num_batched_tokens must be positive")
    decode = {min(max_num_seqs, max(1, math.ceil(c))) for c in concurrency if math.isfinite(c)}
    prefill = {
        min(max_num_batched_tokens, max(1, math.ceil(p))) for p in prompt_tokens if math.isfinite(p) and p > 0
    }
    return StepTokens(decode=tuple(sorted(decode or {1})), prefill=tuple(sorted(prefill)))


def step_tokens_of(profile: ProfileLike, *, max_num_seqs: int, max_num_batched_tokens: int) -> StepTokens:
    """`step_tokens` of a workload profile: concurrency p50/p90/p99/max, prompt p50/p90/p99."""
    c, p = profile.concurrency, profile.prompt_tokens
    return step_tokens(
        concurrency=(c.p50, c.p90, c.p99, float(c.max)),
        prompt_tokens=(p.p50, p.p90, p.p99),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )


def op_shapes(steps: StepTokens, dims: ModelDims, dtype: str) -> list[ShapeKey]:
    """Every op at every step size: RMSNorm over the hidden size, SiLU-and-mul over the rank's MLP
    width, rotary over the rank's heads."""
    shapes: list[ShapeKey] = []
    for tokens in steps.all:
        shapes.append(ShapeKey("rms_norm", tokens, (dims.hidden,), dtype))
        shapes.append(ShapeKey("silu_and_mul", tokens, (dims.rank_intermediate,), dtype))
        shapes.append(
            ShapeKey(
                "rotary_embedding",
                tokens,
                (dims.rank_heads, dims.rank_kv_heads, dims.head_dim, dims.rank_rotary_dim),
                dtype,
            )
        )
    return shapes
