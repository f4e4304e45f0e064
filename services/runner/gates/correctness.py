"""The correctness gate: does the candidate answer the golden set as the reference config does?

Which changes must be exact: those that only reorganise the same arithmetic (batching, chunked
prefill, prefix caching, replicas, block size, KV cache size, eager mode, context length, and
llama.cpp's micro-batch and prompt-chunk reuse). Greedy
answers of one request served alone must agree token for token, or, when both sides carry top-k
logprobs, every answer must be close by them (below): the same arithmetic in another order (a
prefix read from the cache instead of recomputed, another chunking) rounds differently in bf16,
which can break a near-tie (measured here: with prefix caching and chunked prefill changed
together on the `small` model, 1 of 8 golden answers differed from token 11 on). A cache or kernel
that computes something else is not close. Everything else that differs (quantization, dtype,
kernels, flash attention, speculative decoding, tensor parallelism, a different model or engine)
is lossy: it must reach the agreement threshold the endpoint's policy sets (the job's
GateSpec.threshold; 0 = `DEFAULT_AGREEMENT`), and the figure is reported either way.

Agreement: the share of the reference's answer tokens the candidate reproduces before its first
differing token, over the whole set (after greedy answers differ once, they continue from
different text, so later positions say nothing). It is at most the share of positions that agree.

Lossy changes, when both sides carry top-k logprobs, are judged by logprob closeness instead, the
technique of vLLM's own model tests (`check_logprobs_close`): an answer is close when it equals the
reference, or when, at the first position where the two differ, each side's token is among the
other's top-k there; comparison of that answer stops at that position. A lower precision that
only breaks near-ties passes; a model that answers differently (perturbed weights) does not. The
gate needs `threshold` (0 = `DEFAULT_AGREEMENT`) of the answers close. The reference is the live
configuration's own answers whatever its precision: a bf16 endpoint trying fp32 is compared with
its bf16 answers, since the question is whether callers would notice the change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evertune.domain.engines import EngineSpec
from evertune.domain.gate_result import DEFAULT_AGREEMENT, GateResult
from evertune.runner.golden import common_prefix

NAME = "correctness"
#: Knobs whose changes must not change outputs.
EXACT_KNOBS: frozenset[str] = frozenset(
    {
        "max_num_seqs",
        "max_num_batched_tokens",
        "enable_chunked_prefill",
        "enable_prefix_caching",
        "enforce_eager",
        "block_size",
        "kv_cache_space_gib",
        "replicas",
        "max_model_len",
        "micro_batch_tokens",  # llama.cpp's physical batch: how many tokens one pass computes
        "cache_reuse_tokens",  # llama.cpp's reuse of cached prompt chunks
    }
)


@dataclass(frozen=True)
class ChangeClass:
    """How a candidate config differs from the reference."""

    changed: tuple[str, ...]  #: every field that differs, sorted
    lossy: tuple[str, ...]  #: those that may change outputs, sorted

    @property
    def exact(self) -> bool:
        """No lossy change: outputs must agree token for token."""
        return not self.lossy


def classify_change(reference: EngineSpec, candidate: EngineSpec) -> ChangeClass:
    """Which fields differ, and which of them are lossy (anything not in `EXACT_KNOBS`)."""
    ref, cand = reference.model_dump(), candidate.model_dump()
    changed = sorted(name for name in ref if ref[name] != cand.get(name))
    return ChangeClass(changed=tuple(changed), lossy=tuple(n for n in changed if n not in EXACT_KNOBS))


@dataclass(frozen=True)
class Agreement:
    """How far the candidate's golden answers agree with the reference's."""

    prompts: int  #: prompts compared
    exact_prompts: int  #: prompts whose whole answer agrees
    reference_tokens: int  #: answer tokens of the reference, all prompts
    matched_tokens: int  #: of those, reproduced before the first difference
    first_divergence: tuple[int | None, ...]  #: per prompt, the first differing position (None: none)

    @property
    def share(self) -> float:
        """matched / reference tokens (1.0 for an empty set)."""
        return self.matched_tokens / self.reference_tokens if self.reference_tokens else 1.0


def agreement(reference: Sequence[Sequence[int]], candidate: Sequence[Sequence[int]]) -> Agreement:
    """Compare hash chains prompt by prompt (the two sets must have the same prompts)."""
    if len(reference) != len(candidate):
        raise ValueError(
            f"golden sets differ in size: {len(reference)} reference vs {len(candidate)} candidate answers"
        )
    matched = 0
    exact = 0
    divergence: list[int | None] = []
    for ref, cand in zip(reference, candidate, strict=True):
        n = common_prefix(ref, cand)
        matched += n
        same = n == len(ref) == len(cand)
        exact += same
        divergence.append(None if same else n)
    return Agreement(
        prompts=len(reference),
        exact_prompts=exact,
        reference_tokens=sum(len(r) for r in reference),
        matched_tokens=matched,
        first_divergence=tuple(divergence),
    )


@dataclass(frozen=True)
class Closeness:
    """Top-k logprob closeness of the candidate's golden answers to the reference's."""

    prompts: int  #: answers compared
    exact_prompts: int  #: answers equal to the reference's
    close_prompts: int  #: answers equal, or whose first differing tokens are in each other's top-k
    #: per answer: None (equal), else (first differing position, whether it was close there)
    divergences: tuple[tuple[int, bool] | None, ...]

    @property
    def share(self) -> float:
        """close / compared answers (1.0 for an empty set)."""
        return self.close_prompts / self.prompts if self.prompts else 1.0


def logprob_closeness(
    *,
    reference: Sequence[Sequence[int]],
    reference_alternatives: Sequence[Sequence[Sequence[int]]],
    candidate: Sequence[Sequence[int]],
    candidate_alternatives: Sequence[Sequence[Sequence[int]]],
) -> Closeness:
    """Compare answers prompt by prompt (see the module doc); hashes as in `golden.hash_answer`."""
    if not len(reference) == len(candidate) == len(reference_alternatives) == len(candidate_alternatives):
        raise ValueError(
            f"golden sets differ in size: {len(reference)} reference vs {len(candidate)} candidate answers"
        )
    exact = close = 0
    divergences: list[tuple[int, bool] | None] = []
    for ref, ref_alt, cand, cand_alt in zip(
        reference, reference_alternatives, candidate, candidate_alternatives, strict=True
    ):
        n = common_prefix(ref, cand)
        if n == len(ref) == len(cand):
            exact += 1
            close += 1
            divergences.append(None)
            continue
        within = (
            n < len(ref)
            and n < len(cand)
            and n < len(ref_alt)
            and n < len(cand_alt)
            and cand[n] in ref_alt[n]
            and ref[n] in cand_alt[n]
        )
        close += within
        divergences.append((n, within))
    return Closeness(
        prompts=len(reference), exact_prompts=exact, close_prompts=close, divergences=tuple(divergences)
    )


def correctness_gate(
    *, change: ChangeClass, result: Agreement, threshold: float, closeness: Closeness | None = None
) -> GateResult:
    """Exact changes need every answer equal, or every answer close by top-k logprobs when
    `closeness` is given; lossy ones `threshold` (0 = default) of the answers close when it is
    given, else of the tokens agreeing."""
    summary = (
        f"{result.matched_tokens}/{result.reference_tokens} tokens agree, "
        f"{result.exact_prompts}/{result.prompts} answers identical"
    )
    if change.exact:
        what = f"exact change ({', '.join(change.changed) or 'same config'})"
        if closeness is not None and result.exact_prompts < result.prompts:
            passed = closeness.close_prompts == closeness.prompts
            detail = (
                f"{what}: {summary}; {closeness.close_prompts}/{closeness.prompts} close by top-k "
                "logprobs (every answer must be)"
            )
            return GateResult(name=NAME, passed=passed, value=closeness.share, threshold=1.0, detail=detail)
        passed = result.exact_prompts == result.prompts
        detail = f"{what}: {summary}" + ("" if passed else f"; first difference at token {_first(result)}")
        return GateResult(name=NAME, passed=passed, value=result.share, threshold=1.0, detail=detail)
    needed = threshold or DEFAULT_AGREEMENT
    if closeness is not None:
        passed = closeness.share >= needed
        far = [f"g{i}@{d[0]}" for i, d in enumerate(closeness.divergences) if d is not None and not d[1]]
        detail = (
            f"lossy change ({', '.join(change.lossy)}): {closeness.close_prompts}/{closeness.prompts} "
            f"answers close by top-k logprobs ({closeness.exact_prompts} identical; {summary}); "
            f"needs {needed:.3f}" + (f"; not close: {', '.join(far[:8])}" if far else "")
        )
        return GateResult(name=NAME, passed=passed, value=closeness.share, threshold=needed, detail=detail)
    passed = result.share >= needed
    detail = f"lossy change ({', '.join(change.lossy)}): {summary}; needs {needed:.3f}"
    return GateResult(name=NAME, passed=passed, value=result.share, threshold=needed, detail=detail)


def baseline_gate() -> GateResult:
    """A baseline trial's answers ARE the reference: nothing to compare."""
    return GateResult(
        name=NAME,
        passed=True,
        value=1.0,
        threshold=1.0,
        detail="baseline: its golden answers are the reference",
    )


def _first(result: Agreement) -> str:
    positions = [p for p in result.first_divergence if p is not None]
    return str(min(positions)) if positions else "?"
