"""Successive halving over the model's ranking: budget never exceeded, the best survives, the
baseline is trialled every round, no winner unless it beats the baseline, re-ranking swaps in a
better-predicted candidate."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Literal

import pytest

from evertune.domain.engines import EngineSpec
from evertune.searcher.noise import Verdict
from evertune.searcher.space import Candidate, config_key
from evertune.searcher.strategy import Figures, NoiseRule, Objective, SuccessiveHalving, score


def _candidates(n: int) -> list[Candidate]:
    out = []
    for i in range(n):
        spec = EngineSpec(model="/m", max_num_seqs=i + 1)
        out.append(Candidate(spec=spec, key=config_key(spec), lossy=False, devices=1))
    return out


def _run(search: SuccessiveHalving, truth: dict[str, float], rng: random.Random, noise: float) -> int:
    trials = 0
    while True:
        batch = search.next_round()
        if not batch:
            return trials
        assert batch[0].baseline and sum(r.baseline for r in batch) == 1
        for request in batch:
            trials += 1
            value = truth[request.candidate.key]
            search.report(request, value + rng.gauss(0, noise) if value > -math.inf else value)


@pytest.mark.parametrize("budget", [2, 3, 5, 8, 13, 20])
def test_budget_is_never_exceeded_and_each_candidate_runs_once_per_fidelity(budget: int) -> None:
    cands = _candidates(40)
    rng = random.Random(budget)
    truth = {c.key: rng.uniform(1, 10) for c in cands}
    search = SuccessiveHalving(baseline=cands[0], predicted=truth, candidates=cands, budget=budget)
    trials = _run(search, truth, rng, noise=0.1)
    assert trials == search.started <= budget
    seen = [(r.candidate.key, r.fidelity) for rnd in search.rounds for r in rnd.requests]
    assert len(seen) == len(set(seen))
    fidelities = [rnd.fidelity for rnd in search.rounds]
    assert fidelities == [2**i for i in range(len(fidelities))]


def test_finds_the_true_best_when_the_model_ranks_it_into_the_first_round() -> None:
    cands = _candidates(60)
    rng = random.Random(1)
    truth = {c.key: float(i) for i, c in enumerate(cands)}  # the last is best
    # the model is biased (noise of +-8 on a 0..59 scale) but the truth's best stays in its top 8
    predicted = {k: v + rng.uniform(-8, 8) for k, v in truth.items()}
    search = SuccessiveHalving(baseline=cands[0], predicted=predicted, candidates=cands, budget=16)
    _run(search, truth, rng, noise=0.5)
    result = search.winner()
    assert result is not None
    winner, best, base = result
    assert winner.key in {c.key for c in cands[-3:]}
    assert best > base


def test_no_winner_when_nothing_beats_the_baseline_by_the_margin() -> None:
    cands = _candidates(10)
    truth = {c.key: 10.0 for c in cands}
    truth[cands[0].key] = 10.2  # the baseline is already the best
    search = SuccessiveHalving(baseline=cands[0], predicted=truth, candidates=cands, budget=8)
    _run(search, truth, random.Random(2), noise=0.0)
    assert search.winner() is None


def test_failed_candidates_never_win_and_infeasible_predictions_are_not_tried() -> None:
    cands = _candidates(6)
    truth = {c.key: -math.inf for c in cands}
    truth[cands[0].key] = 1.0
    predicted = {c.key: 5.0 for c in cands}
    predicted[cands[5].key] = -math.inf  # the model says it misses the SLO
    search = SuccessiveHalving(baseline=cands[0], predicted=predicted, candidates=cands, budget=10)
    _run(search, truth, random.Random(3), noise=0.0)
    assert search.winner() is None
    tried = {r.candidate.key for rnd in search.rounds for r in rnd.requests}
    assert cands[5].key not in tried


def test_rerank_swaps_in_a_better_predicted_untried_candidate() -> None:
    cands = _candidates(10)
    predicted = {c.key: float(10 - i) for i, c in enumerate(cands)}  # cands[1] best by the model
    search = SuccessiveHalving(
        baseline=cands[0], predicted=predicted, candidates=cands, budget=12, first_round=4
    )
    first = search.next_round()
    assert [r.candidate.key for r in first[1:]] == [c.key for c in cands[1:5]]
    for request in first:
        search.report(request, 1.0 if request.baseline else float(request.candidate.spec.max_num_seqs or 0))
    # after calibration the model thinks cands[9] (never tried) is far better than anything
    search.rerank({cands[9].key: 100.0})
    second = search.next_round()
    assert cands[9].key in {r.candidate.key for r in second}
    assert all(r.fidelity == 2 for r in second)


def test_score_by_objective() -> None:
    good = Figures(goodput_rps=20.0, ttft_p50_ms=80.0, meets_slo=True)
    assert score(good, objective=Objective.GOODPUT, devices=2) == 20.0
    assert score(good, objective=Objective.P50_TTFT, devices=2) == -80.0
    assert score(good, objective=Objective.COST, devices=4) == 5.0
    assert score(good, objective=Objective.COST, devices=0) == 20.0
    assert score(Figures(20.0, 80.0, meets_slo=False), objective=Objective.GOODPUT, devices=1) == -math.inf
    failed = Figures(20.0, 80.0, meets_slo=True, gates_passed=False)
    assert score(failed, objective=Objective.GOODPUT, devices=1) == -math.inf


def test_bad_budgets_are_refused() -> None:
    cands = _candidates(3)
    with pytest.raises(ValueError, match="at least 2"):
        SuccessiveHalving(baseline=cands[0], predicted={}, candidates=cands, budget=1)


def test_a_challenger_joins_a_lone_survivor_and_both_are_judged_at_one_fidelity() -> None:
    cands = _candidates(8)
    predicted = {c.key: float(8 - i) for i, c in enumerate(cands)}
    search = SuccessiveHalving(
        baseline=cands[0], predicted=predicted, candidates=cands, budget=6, first_round=2
    )
    first = search.next_round()  # baseline, cands[1], cands[2]
    measured = {cands[0].key: 10.0, cands[1].key: 20.0, cands[2].key: 12.0}
    for request in first:
        search.report(request, measured[request.candidate.key])
    # The re-calibrated model says cands[7] beats the survivor's measured 20: it joins it.
    search.rerank({cands[7].key: 25.0})
    second = search.next_round()
    assert [r.candidate.key for r in second] == [cands[0].key, cands[1].key, cands[7].key]
    assert all(r.fidelity == 2 for r in second)
    for request, value in zip(second, (10.5, 19.0, 15.0), strict=True):
        search.report(request, value)  # the challenger measured worse than the model said
    decision = search.decision()
    assert decision is not None and decision.candidate.key == cands[1].key
    assert (decision.fidelity, decision.score, decision.baseline_score) == (2, 19.0, 10.5)


def test_when_the_room_holds_one_survivor_the_challenger_predicted_ahead_is_measured() -> None:
    """From an fp32 start, round 0 spends the budget on the classes the model cannot price; the
    re-calibrated model then ranks a candidate of the measured class far ahead of its survivor."""
    cands = _candidates(8)
    predicted = {c.key: float(8 - i) for i, c in enumerate(cands)}
    search = SuccessiveHalving(
        baseline=cands[0], predicted=predicted, candidates=cands, budget=5, first_round=2
    )
    for request in search.next_round():  # baseline, cands[1], cands[2]
        search.report(
            request, {cands[0].key: 10.0, cands[1].key: 20.0, cands[2].key: 12.0}[request.candidate.key]
        )
    search.rerank({cands[7].key: 25.0})
    second = search.next_round()  # room for one beside the baseline: the challenger, not cands[1]
    assert [r.candidate.key for r in second] == [cands[0].key, cands[7].key]
    for request, value in zip(second, (10.5, 24.0), strict=True):
        search.report(request, value)
    decision = search.decision()
    assert decision is not None and decision.candidate.key == cands[7].key


def test_rerank_keeps_a_survivor_that_measured_above_the_challengers_prediction() -> None:
    cands = _candidates(6)
    predicted = {c.key: float(6 - i) for i, c in enumerate(cands)}
    search = SuccessiveHalving(
        baseline=cands[0], predicted=predicted, candidates=cands, budget=6, first_round=2
    )
    for request in search.next_round():
        search.report(request, 30.0 if request.candidate.key == cands[1].key else 5.0)
    search.rerank({cands[5].key: 25.0})  # above cands[1]'s prediction (5), below what it measured
    assert [r.candidate.key for r in search.next_round()] == [cands[0].key, cands[1].key]


def _noisy_run(search: SuccessiveHalving, truth: dict[str, float], rng: random.Random) -> list[str]:
    """Drive a search whose trials measure p50 TTFT with the VMs' noise: a drift shared by the trials
    of a round (x0.8-1.3) and 10% lognormal noise each. Scores are -p50 (the p50 objective).
    Returns the order in which candidates were trialled (keys)."""
    order = []
    while batch := search.next_round():
        drift = rng.uniform(0.8, 1.3)
        for request in batch:
            order.append(request.candidate.key)
            p50 = truth[request.candidate.key] * drift * rng.lognormvariate(0, 0.10)
            search.report(request, -p50)
    return order


P50_RULE = NoiseRule(confirm_pairs=2, min_pairs=3, lower_is_better=True)


def _confirming(
    n: int, *, budget: int, rank: Callable[[int], float] = lambda i: -float(i)
) -> tuple[Candidate, list[Candidate], SuccessiveHalving]:
    """A p50-objective search with the noise rule over `n` candidates, the first the baseline; the
    others predicted `rank(i)` (by default the first predicted best)."""
    base, *others = _candidates(n)
    predicted = {c.key: rank(i) for i, c in enumerate(others)}
    search = SuccessiveHalving(
        baseline=base, predicted=predicted, candidates=[base, *others], budget=budget, noise=P50_RULE
    )
    return base, others, search


@pytest.mark.parametrize("seed", range(20))
def test_a_planted_equal_candidate_is_never_a_winner(seed: int) -> None:
    """Every candidate is the baseline's equal (100 ms): halving picks a leader by noise, the
    confirmation pairs find it inside the noise floor, and the search ends without a winner."""
    rng = random.Random(seed)
    base, others, search = _confirming(9, budget=12)
    truth = {c.key: 100.0 for c in (base, *others)}
    _noisy_run(search, truth, rng)
    assert search.started <= 12
    assert search.decision() is None
    comparison = search.comparison()
    assert comparison is None or comparison.verdict is not Verdict.BETTER


@pytest.mark.parametrize("seed", range(20))
def test_a_planted_twice_as_fast_candidate_wins_after_confirmation(seed: int) -> None:
    rng = random.Random(seed)
    base, others, search = _confirming(9, budget=12)
    fast = others[2]  # the model ranks it third of 8: it gets into the first round, not at its head
    truth = {c.key: 50.0 if c.key == fast.key else 100.0 for c in (base, *others)}
    order = _noisy_run(search, truth, rng)
    found = search.decision()
    assert found is not None and found.candidate.key == fast.key
    assert found.comparison is not None and found.comparison.verdict is Verdict.BETTER
    assert found.comparison.pairs == 3 and found.comparison.ratio == pytest.approx(0.5, abs=0.15)
    # The last four trials are two interleaved (baseline, leader) pairs.
    assert order[-4:] == [base.key, fast.key, base.key, fast.key]
    assert search.started <= 12


def test_confirmation_keeps_its_trials_from_the_budget_and_a_small_budget_skips_it() -> None:
    base, others, search = _confirming(9, budget=8)
    assert search.reserved == 4
    first = search.next_round()
    assert len(first) == 2  # baseline + 1: the halving keeps 4 trials (2 rounds), the confirmation 4
    _, _, small = _confirming(9, budget=3)
    assert small.reserved == 0
    rng = random.Random(0)
    truth = {c.key: 100.0 for c in (base, *others)}
    _noisy_run(small, truth, rng)
    # No confirmation fitted: with fewer than min_pairs pairs nothing can win.
    assert small.started <= 3 and small.decision() is None


def test_must_try_candidates_are_measured_in_the_first_round_whatever_their_prediction() -> None:
    base, *others = _candidates(9)
    predicted = {c.key: float(i) for i, c in enumerate(others)}  # the last is predicted best
    unpriced = others[0].key  # predicted worst
    search = SuccessiveHalving(
        baseline=base, predicted=predicted, candidates=[base, *others], budget=5, must_try=[unpriced]
    )
    first = [r.candidate.key for r in search.next_round()]
    assert first[0] == base.key and unpriced in first and others[-1].key in first


def test_a_first_round_of_one_measures_the_models_best_not_the_unpriced_knob() -> None:
    base, *others = _candidates(9)
    predicted = {c.key: float(i) for i, c in enumerate(others)}
    search = SuccessiveHalving(
        baseline=base, predicted=predicted, candidates=[base, *others], budget=2, must_try=[others[0].key]
    )
    assert [r.candidate.key for r in search.next_round()] == [base.key, others[-1].key]


def test_unpriced_candidates_are_measured_only_through_must_try_never_by_the_ranking() -> None:
    base, *others = _candidates(9)
    twin, *rest = others
    # the model predicts every unpriced candidate as its priced twin: equal figures, and here the
    # unpriced ones would win the tie-break by key
    predicted = {c.key: 1.0 for c in others}
    unpriced = [twin.key, rest[0].key, rest[1].key]
    search = SuccessiveHalving(
        baseline=base,
        predicted=predicted,
        candidates=[base, *others],
        budget=5,
        must_try=[twin.key],
        unpriced=unpriced,
    )
    first = [r.candidate.key for r in search.next_round()]
    assert first[0] == base.key and twin.key in first
    assert not set(first[1:]) & (set(unpriced) - {twin.key})
    assert len(first) == 3


def test_a_leader_that_fails_a_gate_in_a_confirmation_repeat_does_not_win() -> None:
    _, others, search = _confirming(5, budget=8)
    fast = others[0]
    confirmations = 0
    while batch := search.next_round():
        for request in batch:
            p50 = 50.0 if request.candidate.key == fast.key else 100.0
            failed = request.confirming and not request.baseline and confirmations == 1
            confirmations += request.confirming and not request.baseline
            search.report(request, -math.inf if failed else -p50)
    comparison = search.comparison()
    assert comparison is not None and comparison.pairs == 3
    assert search.decision() is None  # one repeat of the leader failed: an infinite latency there


def test_a_leader_that_restores_a_missed_slo_wins_on_the_p50_objective() -> None:
    """The mis-tuned start misses its SLO in every repeat (score -inf); the leader meets it each
    time: better beyond doubt (ratio 0), so it wins after the confirmation pairs."""
    _, _, search = _confirming(4, budget=7)
    while batch := search.next_round():
        for request in batch:
            search.report(request, -math.inf if request.baseline else -80.0)
    found = search.decision()
    assert found is not None and found.comparison is not None and found.comparison.ratio == 0.0
    assert found.comparison.pairs == 3 and search.started == 6


def test_a_pair_where_both_missed_the_slo_still_says_which_was_faster() -> None:
    """`bench search` from fp32 (2026-12-01): fp32 missed the SLO in every trial (p50 ~113 ms),
    bf16 met it but in one repeat, at ~80 ms. On scores alone that pair read "equal" (both -inf)
    and the winner was missed; on the raw p50 every pair shows bf16 1.4x faster."""
    _, others, search = _confirming(4, budget=7)
    lead = others[0]
    leader_trials = 0
    while batch := search.next_round():
        for request in batch:
            if request.baseline:
                search.report(request, -math.inf, metric=113.0)
                continue
            p50 = 80.0 if request.candidate.key == lead.key else 120.0
            missed = request.candidate.key == lead.key and leader_trials == 1
            leader_trials += request.candidate.key == lead.key
            search.report(request, -math.inf if missed else -p50, metric=p50)
    found = search.decision()
    assert found is not None and found.candidate.key == lead.key
    assert found.comparison is not None and found.comparison.ratio == pytest.approx(80 / 113)


def test_forced_candidates_take_the_rounds_room_past_the_halvings_size() -> None:
    """The demo's search: 5 trials, one confirmation pair. The halving alone would measure the
    model's best only; the round's room also holds the first forced candidate (the engine's
    defaults), and the confirmation pair is still kept."""
    base, *others = _candidates(9)
    predicted = {c.key: -float(i) for i, c in enumerate(others)}  # others[0] predicted best
    defaults, twin = others[5], others[6]
    search = SuccessiveHalving(
        baseline=base,
        predicted=predicted,
        candidates=[base, *others],
        budget=5,
        noise=NoiseRule(confirm_pairs=1, min_pairs=2, lower_is_better=True),
        must_try=[defaults.key, twin.key],
    )
    assert search.reserved == 2
    first = [r.candidate.key for r in search.next_round()]
    assert first == [base.key, others[0].key, defaults.key]


def _demo_search(
    *, best_p50: float, defaults_p50: float, budget: int
) -> tuple[list[str], Candidate, Candidate]:
    """Round 0 of a p50 search with one confirmation pair where the model predicts `best_p50` for
    its best candidate and `defaults_p50` for the engine's defaults (forced, like control.py)."""
    base, best, defaults, twin = _candidates(4)
    predicted = {base.key: -300.0, best.key: -best_p50, defaults.key: -defaults_p50, twin.key: -400.0}
    search = SuccessiveHalving(
        baseline=base,
        predicted=predicted,
        candidates=[base, best, defaults, twin],
        budget=budget,
        noise=NoiseRule(confirm_pairs=1, min_pairs=2, lower_is_better=True),
        must_try=[defaults.key],
        defaults_seat=defaults.key,
    )
    return [r.candidate.key for r in search.next_round()], best, defaults


def test_the_engines_defaults_take_the_only_seat_when_the_model_cannot_tell_its_best_from_them() -> None:
    """Budget 4 (the demo's): round 0 has one seat beside the baseline. A predicted 123 vs 126 ms
    is inside the noise floor (10%), so the defaults are measured; 100 vs 126 ms is not."""
    tied, _, defaults = _demo_search(best_p50=123.0, defaults_p50=126.0, budget=4)
    assert tied[1:] == [defaults.key]
    apart, best, _ = _demo_search(best_p50=100.0, defaults_p50=126.0, budget=4)
    assert apart[1:] == [best.key]


def test_with_room_for_both_the_tied_defaults_go_first_and_the_models_best_is_still_measured() -> None:
    tied, best, defaults = _demo_search(best_p50=123.0, defaults_p50=126.0, budget=5)
    assert tied[1:] == [defaults.key, best.key]
    apart, best, defaults = _demo_search(best_p50=100.0, defaults_p50=126.0, budget=5)
    assert apart[1:] == [best.key, defaults.key]


def test_a_defaults_prediction_that_misses_the_slo_never_ties() -> None:
    missed, best, _ = _demo_search(best_p50=123.0, defaults_p50=math.inf, budget=4)
    assert missed[1:] == [best.key]


def test_for_an_fp32_endpoint_the_defaults_twin_in_fp32_takes_the_seat_the_defaults_cannot() -> None:
    """An fp32 endpoint (the faster dtype on an AVX2 CPU): vLLM's defaults run bf16, so their fp32
    twin stands for them (`space.defaults_seat_key`), and predicted within the noise floor of the
    model's best it takes the one seat instead; unpriced (compiled beside an eager endpoint), it
    is weighed by its prediction all the same. Without a seat the model's best keeps it."""
    base, best, defaults, twin = _candidates(4)
    predicted = {base.key: -300.0, best.key: -123.0, defaults.key: -123.0, twin.key: -126.0}

    def first_round(seat: str | None, unpriced: tuple[str, ...] = (defaults.key,)) -> list[str]:
        search = SuccessiveHalving(
            baseline=base,
            predicted=predicted,
            candidates=[base, best, defaults, twin],
            budget=4,
            noise=NoiseRule(confirm_pairs=1, min_pairs=2, lower_is_better=True),
            must_try=[defaults.key],
            unpriced=unpriced,
            defaults_seat=seat,
        )
        return [r.candidate.key for r in search.next_round()][1:]

    assert first_round(twin.key) == [twin.key]
    assert first_round(twin.key, unpriced=(defaults.key, twin.key)) == [twin.key]
    assert first_round(None) == [best.key]
    predicted[twin.key] = -200.0  # predicted well apart: the model's best keeps the seat
    assert first_round(twin.key) == [best.key]


def _cell(dtype: Literal["bfloat16", "float32"], block_size: int) -> Candidate:
    spec = EngineSpec(model="/m", dtype=dtype, block_size=block_size)
    return Candidate(spec=spec, key=config_key(spec), lossy=dtype != "float32", devices=0)


def test_an_unpriced_class_is_measured_with_the_models_best_knobs() -> None:
    """From fp32 with 7 trials (4 kept for confirmation), round 0 holds the baseline, the model's
    best and one trial of bf16: bf16 with the knobs the model predicts best, so a dtype that wins
    its trial wins with them (bf16 with the baseline's 128-token blocks, its representative, is
    what would run otherwise). Without the twin in the space the representative runs, and a forced
    key that is no representative (vLLM's defaults) is measured as it is."""
    base, fp32_32 = _cell("float32", 128), _cell("float32", 32)
    bf16_128, bf16_32 = _cell("bfloat16", 128), _cell("bfloat16", 32)
    unpriced = (bf16_128.key, bf16_32.key)
    predicted = {fp32_32.key: -236.0, bf16_128.key: -374.0, bf16_32.key: -236.0}

    def first_round(space: list[Candidate], representatives: tuple[str, ...] = (bf16_128.key,)) -> list[str]:
        search = SuccessiveHalving(
            baseline=base,
            predicted=predicted,
            candidates=[base, *space],
            budget=7,
            noise=NoiseRule(confirm_pairs=2, min_pairs=3, lower_is_better=True),
            must_try=[bf16_128.key],
            unpriced=unpriced,
            representatives=representatives,
        )
        return [r.candidate.key for r in search.next_round()]

    assert first_round([fp32_32, bf16_128, bf16_32]) == [base.key, fp32_32.key, bf16_32.key]
    assert first_round([fp32_32, bf16_128]) == [base.key, fp32_32.key, bf16_128.key]
    assert first_round([fp32_32, bf16_128, bf16_32], ()) == [base.key, fp32_32.key, bf16_128.key]
