"""The gates as pure functions of measured figures."""

from __future__ import annotations

import math

import pytest

from evertune.domain.engines import EngineSpec, SpeculativeSpec
from evertune.domain.replay import RequestResult, summarize
from evertune.domain.slo import Slo
from evertune.runner.gates import (
    agreement,
    classify_change,
    correctness_gate,
    p99_spread,
    slo_gate,
    stability_gate,
)
from evertune.runner.gates.correctness import logprob_closeness
from evertune.runner.golden import hash_answer
from evertune.runner.measure import goodput_rps, rate_figures, skip_higher

SLO = Slo(ttft_ms=100.0, itl_ms=50.0, share=0.9)


def _result(i: int, ttft: float | None, *, error: bool = False) -> RequestResult:
    return RequestResult(
        request_id=f"r{i}",
        conversation_id="",
        scheduled_s=i * 0.1,
        sent_s=i * 0.1,
        lag_ms=0.0,
        ttft_ms=None if error else ttft,
        itl_ms=(5.0, 5.0),
        e2e_ms=(ttft or 0.0) + 10.0,
        prompt_tokens=10,
        completion_tokens=3,
        chunks=3,
        status=500 if error else 200,
        error_class="http_5xx" if error else "",
    )


def _run(ttfts: list[float], errors: int = 0) -> tuple:  # type: ignore[type-arg]
    results = [_result(i, t) for i, t in enumerate(ttfts)] + [
        _result(100 + i, None, error=True) for i in range(errors)
    ]
    return summarize(results, slo=SLO), results


def test_exact_and_lossy_changes_are_told_apart() -> None:
    base = EngineSpec(model="m")
    assert classify_change(base, base).exact and classify_change(base, base).changed == ()
    exact = classify_change(
        base, EngineSpec(model="m", max_num_seqs=64, enable_chunked_prefill=False, replicas=2)
    )
    assert exact.exact and exact.changed == ("enable_chunked_prefill", "max_num_seqs", "replicas")
    lossy = classify_change(
        base,
        EngineSpec(
            model="m",
            max_num_seqs=64,
            quantization="awq",
            speculative=SpeculativeSpec(method="ngram", num_speculative_tokens=3),
        ),
    )
    assert not lossy.exact and lossy.lossy == ("quantization", "speculative")


def test_agreement_counts_tokens_before_the_first_difference() -> None:
    ref = [[1, 2, 3, 4], [5, 6, 7, 8]]
    result = agreement(ref, [[1, 2, 3, 4], [5, 6, 0, 0]])
    assert (result.matched_tokens, result.reference_tokens, result.exact_prompts) == (6, 8, 1)
    assert result.share == 0.75 and result.first_divergence == (None, 2)
    with pytest.raises(ValueError, match="differ in size"):
        agreement(ref, ref[:1])


def test_the_correctness_gate_wants_all_for_exact_and_the_threshold_for_lossy() -> None:
    result = agreement([[1, 2, 3, 4]] * 10, [[1, 2, 3, 4]] * 9 + [[1, 2, 3, 9]])
    base = EngineSpec(model="m")
    exact = correctness_gate(
        change=classify_change(base, EngineSpec(model="m", block_size=64)), result=result, threshold=0.5
    )
    assert not exact.passed and exact.threshold == 1.0 and exact.value == 39 / 40
    lossy_change = classify_change(base, EngineSpec(model="m", dtype="float32"))
    assert correctness_gate(change=lossy_change, result=result, threshold=0.0).passed  # default 0.95
    strict = correctness_gate(change=lossy_change, result=result, threshold=0.99)
    assert not strict.passed and "lossy change (dtype)" in strict.detail


def _answers(
    tokens: list[list[int]], tops: list[list[list[int]]]
) -> tuple[list[list[int]], list[list[list[int]]]]:
    chains, alternatives = [], []
    for ids, top in zip(tokens, tops, strict=True):
        chain, alts = hash_answer(ids, top, key="k")
        chains.append(chain)
        alternatives.append(alts)
    return chains, alternatives


def test_logprob_closeness_checks_each_side_in_the_others_top_k_at_the_first_difference() -> None:
    """Four answers: equal; a near-tie broken the other way (each token in the other's top-2:
    close); the candidate's token not in the reference's top-2 (far); the reference's token not in
    the candidate's top-2 (far). After the first difference nothing is compared."""
    ref_tokens = [[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3]]
    ref_tops = [
        [[1, 9], [2, 9], [3, 9]],
        [[1, 9], [2, 7], [3, 9]],
        [[1, 9], [2, 8], [3, 9]],
        [[1, 9], [2, 7], [3, 9]],
    ]
    cand_tokens = [[1, 2, 3], [1, 7, 5], [1, 6, 3], [1, 7, 3]]
    cand_tops = [
        [[1, 9], [2, 9], [3, 9]],
        [[1, 9], [7, 2], [0, 0]],
        [[1, 9], [6, 2], [3, 9]],
        [[1, 9], [7, 6], [3, 9]],
    ]
    ref, ref_alt = _answers(ref_tokens, ref_tops)
    cand, cand_alt = _answers(cand_tokens, cand_tops)
    result = logprob_closeness(
        reference=ref, reference_alternatives=ref_alt, candidate=cand, candidate_alternatives=cand_alt
    )
    assert (result.prompts, result.exact_prompts, result.close_prompts) == (4, 1, 2)
    assert result.divergences == (None, (1, True), (1, False), (1, False)) and result.share == 0.5
    lossy = classify_change(EngineSpec(model="m"), EngineSpec(model="m", dtype="float32"))
    gate = correctness_gate(change=lossy, result=agreement(ref, cand), threshold=0.5, closeness=result)
    assert gate.passed and gate.value == 0.5 and "2/4 answers close by top-k logprobs" in gate.detail
    assert "not close: g2@1, g3@1" in gate.detail
    strict = correctness_gate(change=lossy, result=agreement(ref, cand), threshold=0.0, closeness=result)
    assert not strict.passed and strict.threshold == 0.95
    with pytest.raises(ValueError, match="differ in size"):
        logprob_closeness(
            reference=ref, reference_alternatives=ref_alt, candidate=cand[:1], candidate_alternatives=cand_alt
        )


def test_an_exact_change_passes_a_broken_near_tie_but_not_an_answer_far_off() -> None:
    """Prefix caching on reads a prefix's KV from the cache instead of recomputing it: in bf16 that
    can flip a near-tie. Every answer must still be close; one far answer fails the change."""
    ref, ref_alt = _answers([[1, 2, 3], [1, 2, 3]], [[[1, 9], [2, 7], [3, 9]], [[1, 9], [2, 8], [3, 9]]])
    tie, tie_alt = _answers([[1, 2, 3], [1, 8, 4]], [[[1, 9], [2, 7], [3, 9]], [[1, 9], [8, 2], [4, 9]]])
    far, far_alt = _answers([[1, 2, 3], [1, 6, 4]], [[[1, 9], [2, 7], [3, 9]], [[1, 9], [6, 2], [4, 9]]])
    caching = classify_change(EngineSpec(model="m"), EngineSpec(model="m", enable_prefix_caching=True))
    assert caching.exact
    for cand, cand_alt, passes in ((tie, tie_alt, True), (far, far_alt, False)):
        closeness = logprob_closeness(
            reference=ref, reference_alternatives=ref_alt, candidate=cand, candidate_alternatives=cand_alt
        )
        gate = correctness_gate(
            change=caching, result=agreement(ref, cand), threshold=0.5, closeness=closeness
        )
        assert gate.passed is passes and gate.threshold == 1.0
        assert "close by top-k logprobs (every answer must be)" in gate.detail
    # identical answers need no logprobs
    same = logprob_closeness(
        reference=ref, reference_alternatives=ref_alt, candidate=ref, candidate_alternatives=ref_alt
    )
    assert correctness_gate(change=caching, result=agreement(ref, ref), threshold=0.5, closeness=same).passed


def test_an_answer_that_ends_earlier_differs_at_its_end() -> None:
    """Answers stop at the model's end of turn (EOS, id 2 here). vLLM returns the EOS id as the
    answer's last token, with its top-k: an answer that ends where the reference goes on differs at
    that position and is judged there like any other token. Where an engine leaves the end token
    out, the shorter answer is a difference too, never agreement, and never close."""
    eos = 2
    ref, ref_alt = _answers([[5, 6, 7, 8, eos]], [[[5, 9], [6, 9], [7, eos], [8, 9], [eos, 8]]])
    # Ends at position 2 with the end token, which the reference had as its second choice there.
    ended, ended_alt = _answers([[5, 6, eos]], [[[5, 9], [6, 9], [eos, 7]]])
    result = agreement(ref, ended)
    assert (result.exact_prompts, result.matched_tokens, result.first_divergence) == (0, 2, (2,))
    close = logprob_closeness(
        reference=ref, reference_alternatives=ref_alt, candidate=ended, candidate_alternatives=ended_alt
    )
    assert close.divergences == ((2, True),)
    # The end token not among the reference's top-k there: not close.
    far, far_alt = _answers([[5, eos]], [[[5, 9], [eos, 6]]])
    assert logprob_closeness(
        reference=ref, reference_alternatives=ref_alt, candidate=far, candidate_alternatives=far_alt
    ).divergences == ((1, False),)
    # No end token in the ids: the shorter answer (either side) agrees with nothing and is not close.
    short, short_alt = _answers([[5, 6]], [[[5, 9], [6, 9]]])
    for a, a_alt, b, b_alt in ((ref, ref_alt, short, short_alt), (short, short_alt, ref, ref_alt)):
        assert agreement(a, b).exact_prompts == 0 and agreement(a, b).first_divergence == (2,)
        closeness = logprob_closeness(
            reference=a, reference_alternatives=a_alt, candidate=b, candidate_alternatives=b_alt
        )
        assert closeness.close_prompts == 0
        batching = classify_change(EngineSpec(model="m"), EngineSpec(model="m", max_num_seqs=4))
        gate = correctness_gate(change=batching, result=agreement(a, b), threshold=0.0, closeness=closeness)
        assert not gate.passed
    # The same answer, ended at the same place: exact.
    assert agreement(ref, ref).exact_prompts == 1


def test_p99_spread_is_relative_with_an_absolute_floor() -> None:
    assert p99_spread([100.0, 125.0], tolerance=0.3, floor_ms=20.0).stable  # 25 <= 33.75
    assert not p99_spread([100.0, 150.0], tolerance=0.3, floor_ms=20.0).stable  # 50 > 37.5
    assert p99_spread([10.0, 25.0], tolerance=0.3, floor_ms=20.0).stable  # 15 ms: under the floor
    assert not p99_spread([10.0], tolerance=0.3, floor_ms=20.0).stable
    assert not p99_spread([10.0, math.nan], tolerance=0.3, floor_ms=20.0).stable


def test_stability_fails_on_errors_below_the_gate_rate_and_on_unstable_p99() -> None:
    steady = [20.0] * 50
    calm = rate_figures(4.0, [_run(steady), _run(steady)], slo=SLO)
    overload = rate_figures(8.0, [_run(steady, errors=5), _run(steady, errors=5)], slo=SLO)
    ok = stability_gate(
        rates=[calm, overload], gate_rate_rps=4.0, threshold=0.0, tolerance=0.3, floor_ms=20.0
    )
    assert ok.passed and ok.value == 0.0  # errors above the gate rate do not count
    bad = stability_gate(
        rates=[calm, overload], gate_rate_rps=8.0, threshold=0.0, tolerance=0.3, floor_ms=20.0
    )
    assert not bad.passed and "10 of 210 requests failed" in bad.detail
    shaky = rate_figures(4.0, [_run([20.0] * 49 + [40.0]), _run([20.0] * 49 + [300.0])], slo=SLO)
    unstable = stability_gate(rates=[shaky], gate_rate_rps=4.0, threshold=0.0, tolerance=0.3, floor_ms=20.0)
    assert not unstable.passed and "TTFT p99 unstable" in unstable.detail
    single = rate_figures(4.0, [_run(steady)], slo=SLO)
    assert (
        "2 needed"
        in stability_gate(
            rates=[single], gate_rate_rps=4.0, threshold=0.0, tolerance=0.3, floor_ms=20.0
        ).detail
    )


def test_the_slo_gate_checks_attainment_and_the_median_target_at_the_gate_rate() -> None:
    fast = rate_figures(5.0, [_run([30.0] * 95 + [500.0] * 5)], slo=SLO)
    at = {"slo": SLO, "rate_rps": 5.0, "headroom": 1.25}
    met = slo_gate(figures=fast, p50_target_ms=0.0, threshold=0.0, **at)  # type: ignore[arg-type]
    assert met.passed and met.value == 0.95 and met.threshold == 0.9
    assert not slo_gate(figures=fast, p50_target_ms=25.0, threshold=0.0, **at).passed  # type: ignore[arg-type]
    assert not slo_gate(figures=fast, p50_target_ms=0.0, threshold=0.99, **at).passed  # type: ignore[arg-type]
    missing = slo_gate(figures=None, p50_target_ms=0.0, threshold=0.0, **at)  # type: ignore[arg-type]
    assert not missing.passed and "not measured" in missing.detail
    assert "5 rps (target x 1.25)" in met.detail and "5 rps (target x 1.25)" in missing.detail


def test_goodput_is_the_highest_pass_below_the_lowest_fail() -> None:
    good, bad = _run([30.0] * 20), _run([500.0] * 20)
    rates = [
        rate_figures(r, [run], slo=SLO) for r, run in ((2.0, good), (4.0, good), (6.0, bad), (8.0, good))
    ]
    assert goodput_rps(rates, slo=SLO) == 4.0
    assert goodput_rps(rates[2:3], slo=SLO) == 0.0
    assert skip_higher(rates[2], gate_rate_rps=5.0) and not skip_higher(rates[2], gate_rate_rps=7.0)
