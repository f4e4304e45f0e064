"""A whole search in process: the model ranks, a stand-in for the hardware answers the trials (a
second model, slower than the searcher believes), the search re-calibrates and finds the best."""

from __future__ import annotations

import math
from dataclasses import fields, replace
from pathlib import Path

import pytest

from evertune.domain.gate_result import GateResult
from evertune.domain.perfmodel import PromptTokens, SimInput, prepare
from evertune.domain.perfmodel.steptime import Efficiency
from evertune.domain.slo import Slo
from evertune.domain.workloads import DailyCurve, VoiceWorkload, plan_voice
from evertune.domain.workloads.source import CorpusText
from evertune.searcher.model import Measured, Prediction, SearchModel, ThreadedModel, scaled
from evertune.searcher.noise import Verdict
from evertune.searcher.orchestrate import (
    Outcome,
    SearchPlan,
    TrialResult,
    predicted_scores,
    run_search,
    slo_waived,
    trial_score,
)
from evertune.searcher.space import (
    Candidate,
    UnpricedClass,
    candidate_space,
    defaults_key,
    unpriced_class,
    unpriced_keys,
    unpriced_representatives,
)
from evertune.searcher.strategy import Figures, NoiseRule, Objective, score
from evertune.searcher.summary import Context, explain

from .helpers import CPU, CPU_TRUTH, LIMITS, TruthExecutor, base_spec, prior, search_model, space

SLO = Slo(ttft_ms=150, itl_ms=100)
PEAK = 4.0


def _plan(model_dir: Path, *, budget: int = 8, objective: Objective = Objective.GOODPUT) -> SearchPlan:
    cands = space(model_dir)
    return SearchPlan(
        search_id="s-test",
        baseline=cands[0],
        baseline_class="cpu",
        candidates=[(c, "cpu") for c in cands],
        budget=budget,
        objective=objective,
    )


def _context(plan: SearchPlan, slo: Slo = SLO) -> Context:
    return Context(
        base=plan.baseline.spec,
        slo=slo,
        p50_target_ms=0.0,
        target_rps=PEAK,
        headroom=1.25,
        objective=plan.objective,
        min_gain=plan.min_gain,
        budget=plan.budget,
    )


async def test_search_recalibrates_and_finds_the_true_best_within_budget(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    truth = search_model(searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK)
    plan = _plan(searcher_model_dir)
    executor = TruthExecutor(truth)
    seen = []

    async def progress(state) -> None:  # type: ignore[no-untyped-def]
        seen.append((state.phase, len(state.trials)))

    # The searcher's factors say the hardware is 3x faster than it is.
    result = await run_search(plan, model=prior(truth, 3.0), execute=executor, progress=progress)

    assert result.outcome is Outcome.WINNER and result.winner is not None
    trials = [o for batch in executor.batches for o in batch]
    assert len(trials) == result.progress.trials_started <= plan.budget
    # The baseline runs alone first; every later trial compares its outputs with it.
    [first] = executor.batches[0]
    assert first.request.baseline and first.reference_trial_id == ""
    assert all(o.reference_trial_id == first.trial_id for o in trials[1:] if not o.request.baseline)
    assert all(batch[0].request.baseline for batch in executor.batches[2:])
    # One speed factor pins the stale calibration: close to 1/3.
    [fit, *_] = result.progress.recalibrations
    assert math.isclose(fit.speed, 1 / 3, rel_tol=0.1) and fit.error_after < fit.error_before
    # The winner is the best of the whole space by the truth's own exhaustive ranking.
    truth_scores = {
        c.key: score(truth.predict(c, "cpu").figures, objective=Objective.GOODPUT, devices=0)
        for c, _ in plan.candidates
    }
    assert truth_scores[result.winner.key] >= max(truth_scores.values()) * 0.98
    assert result.winner_score > result.baseline_score * 1.05
    assert result.baseline_trial is not None and result.winner_trial is not None
    assert result.baseline_trial.fidelity == result.winner_trial.fidelity == 2
    text = explain(result, _context(plan), spec_of={c.key: c.spec for c, _ in plan.candidates})
    assert text.startswith("Winner on cpu: ") and "enable_prefix_caching off -> on" in text
    assert "goodput" in text and "rps (+" in text and "Gates: slo passed" in text
    assert seen[0] == ("trials", 0) and seen[-1][1] == len(trials)


async def test_a_fixed_reference_judges_every_candidate_and_the_baseline_still_runs_first(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    truth = search_model(searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK)
    plan = replace(_plan(searcher_model_dir), reference_trial_id="fp32-reference")
    executor = TruthExecutor(truth)
    result = await run_search(plan, model=prior(truth, 1.0), execute=executor)
    assert result.outcome is Outcome.WINNER
    [first], *later = executor.batches
    assert first.request.baseline and first.reference_trial_id == ""
    orders = [o for batch in later for o in batch if not o.request.baseline]
    assert orders and all(o.reference_trial_id == "fp32-reference" for o in orders)


async def test_an_slo_nothing_meets_ends_infeasible_naming_the_closest(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    slo = Slo(ttft_ms=4, itl_ms=100)  # 4 ms to first token: no CPU configuration gets there
    truth = search_model(searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=slo, target_rps=PEAK)
    plan = _plan(searcher_model_dir, budget=4)
    result = await run_search(plan, model=prior(truth, 1.0), execute=TruthExecutor(truth))
    assert result.outcome is Outcome.INFEASIBLE and result.winner is None
    assert result.closest is not None and result.closest_figures is not None
    assert 0 < len(result.progress.trials) <= 4  # tried anyway: the model might be wrong
    text = explain(result, _context(plan, slo), spec_of={})
    assert text.startswith("Infeasible: no configuration tried meets the SLO")
    assert "Closest: " in text and "(needs 90%)" in text and "(target 4 ms)" in text


def _missing_slo(key: str, p50: float, *, correct: bool = True) -> TrialResult:
    """A trial that ran and missed the SLO gate (and the correctness gate unless `correct`)."""
    gates = (
        GateResult("correctness", correct, 1.0 if correct else 0.5, 1.0),
        GateResult("slo", False, 0.7, 0.9),
    )
    return TrialResult(
        trial_id=f"t-{key}",
        candidate_key=key,
        ok=True,
        passed=False,
        figures=Figures(goodput_rps=0.0, ttft_p50_ms=p50, meets_slo=False, gates_passed=False),
        gates=gates,
    )


def test_a_p50_search_whose_live_configuration_misses_the_slo_ranks_what_misses_only_that(
    searcher_model_dir: Path,
) -> None:
    """The live configuration misses the SLO gate (1,340 ms in a demo search on an EPYC Zen 3):
    a p50 search scores trials that miss only that gate on p50, so the faster one can lead; a
    trial that also fails correctness stays out, and a goodput search waives nothing."""
    p50_plan = _plan(searcher_model_dir, budget=4, objective=Objective.P50_TTFT)
    base = _missing_slo(p50_plan.baseline.key, 1340.0)
    assert slo_waived(base, p50_plan)
    assert not slo_waived(base, _plan(searcher_model_dir, budget=4))  # goodput
    passing_base = replace(
        base, passed=True, figures=replace(base.figures, meets_slo=True, gates_passed=True)
    )
    assert not slo_waived(passing_base, p50_plan)  # nothing to waive
    faster = _missing_slo("c1", 375.0)
    assert trial_score(faster, p50_plan, slo_waived=True) == -375.0
    assert trial_score(faster, p50_plan, slo_waived=False) == -math.inf
    assert trial_score(_missing_slo("c2", 200.0, correct=False), p50_plan, slo_waived=True) == -math.inf


def test_with_nothing_predicted_feasible_a_p50_search_ranks_by_predicted_p50(
    searcher_model_dir: Path,
) -> None:
    """An uncalibrated prior predicted every cell of the real model's grid past the p50 target
    (1,009-1,131 ms against 550; measured 161-248): ranking them by attainment (all alike) let the
    first round skip the fastest; by p50 it comes first. A goodput search keeps nearness to the SLO."""
    cands = space(searcher_model_dir)[:3]
    by_key = {c.key: c for c in cands}

    def missing(p50: float, attainment: float) -> Prediction:
        return Prediction(
            figures=Figures(goodput_rps=0.0, ttft_p50_ms=p50, meets_slo=False, attainment=attainment),
            points=(),
        )

    predictions = {cands[0].key: missing(1131.0, 0.95), cands[1].key: missing(1009.0, 0.95)}
    predictions[cands[2].key] = missing(1500.0, 0.97)
    p50 = predicted_scores(predictions, by_key, Objective.P50_TTFT)
    assert max(p50, key=lambda k: p50[k]) == cands[1].key and p50[cands[1].key] == -1009.0
    goodput = predicted_scores(predictions, by_key, Objective.GOODPUT)
    assert max(goodput, key=lambda k: goodput[k]) == cands[2].key  # the nearest to the SLO's share
    feasible = {**predictions, cands[0].key: replace(predictions[cands[0].key], figures=Figures(
        goodput_rps=4.0, ttft_p50_ms=1131.0, meets_slo=True))}  # fmt: skip
    scored = predicted_scores(feasible, by_key, Objective.P50_TTFT)
    assert scored[cands[0].key] == -1131.0 and scored[cands[1].key] == -math.inf  # the SLO rules again


async def test_a_baseline_that_cannot_run_fails_the_search_at_once(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    truth = search_model(searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK)
    plan = _plan(searcher_model_dir)
    executor = TruthExecutor(truth, fail={plan.baseline.key})
    result = await run_search(plan, model=prior(truth, 1.0), execute=executor)
    assert result.outcome is Outcome.FAILED and len(executor.batches) == 1
    assert "baseline trial s-test-r0-" in result.error and "engine exited with code 1" in result.error


async def test_no_winner_when_the_live_configuration_is_already_the_best(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    truth = search_model(
        searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK, goodput=False
    )
    cands = space(searcher_model_dir)
    predictions, _ = truth.rank([(c, "cpu") for c in cands])
    best = min(cands, key=lambda c: predictions[c.key].figures.ttft_p50_ms)
    plan = SearchPlan(
        search_id="s-best",
        baseline=best,
        baseline_class="cpu",
        candidates=[(c, "cpu") for c in cands],
        budget=6,
        objective=Objective.P50_TTFT,
    )
    result = await run_search(plan, model=prior(truth, 1.0), execute=TruthExecutor(truth))
    assert result.outcome is Outcome.NO_IMPROVEMENT and result.winner is None
    assert result.baseline_trial is not None and result.baseline_trial.candidate_key == best.key
    text = explain(result, _context(plan), spec_of={c.key: c.spec for c in cands})
    assert text.startswith("No improvement: no candidate beat the live configuration by 5% on p50_ttft")


def test_scaled_efficiency_scales_every_overhead() -> None:
    base = Efficiency(
        compute=0.4,
        bandwidth=0.5,
        attention=0.2,
        step_overhead_s=0.01,
        seq_overhead_s=0.002,
        request_overhead_s=0.02,
        request_overhead_per_token_s=2e-5,
    )
    faster = scaled(base, 2.0)
    for f in fields(Efficiency):
        before, after = getattr(base, f.name), getattr(faster, f.name)
        if f.name.endswith("_s"):
            assert after == pytest.approx(before / 2), f.name  # overheads shrink
        else:
            assert after == pytest.approx(before * 2), f.name  # efficiencies grow


async def test_a_trial_on_other_hardware_is_never_compared(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    """The best candidate's trials report another fingerprint (a runner moved to other silicon):
    they count as failed, so it cannot win on figures from another machine."""
    truth = search_model(searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK)
    plan = _plan(searcher_model_dir)
    first = await run_search(plan, model=prior(truth, 1.0), execute=TruthExecutor(truth))
    assert first.outcome is Outcome.WINNER and first.winner is not None
    moved = TruthExecutor(truth, fingerprints={first.winner.key: "hw-b"})
    result = await run_search(plan, model=prior(truth, 1.0), execute=moved)
    assert result.winner is None or result.winner.key != first.winner.key
    [other] = [t for t in result.progress.trials if t.candidate_key == first.winner.key]
    assert not other.ok and "ran on hardware hw-b, the search's cpu trials on hw-a" in other.error


async def test_with_the_noise_rule_the_winner_is_confirmed_by_interleaved_pairs(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    truth = search_model(searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK)
    plan = replace(_plan(searcher_model_dir, budget=10), noise=NoiseRule(confirm_pairs=2, min_pairs=3))
    executor = TruthExecutor(truth)
    result = await run_search(plan, model=prior(truth, 1.0), execute=executor)
    assert result.outcome is Outcome.WINNER and result.winner is not None
    assert result.comparison is not None and result.comparison.verdict is Verdict.BETTER
    assert result.comparison.pairs == 3 and result.comparison.ratio < 1 / 1.1
    # The last two batches are the confirmation pairs: the baseline, then the winner, each time.
    tail = [[o.request.candidate.key for o in batch] for batch in executor.batches[-2:]]
    assert tail == [[plan.baseline.key, result.winner.key]] * 2
    assert len(result.progress.trials) <= 10
    text = explain(result, _context(plan), spec_of={})
    assert "Noise rule: better: ratio" in text and "over 3 interleaved pairs" in text


async def test_the_engines_defaults_are_measured_and_reported_beside_the_live_configuration(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    truth = search_model(searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK)
    cands = space(searcher_model_dir)
    defaults = defaults_key(cands, base=cands[0], hardware=CPU)
    assert defaults is not None  # the live configuration has prefix caching off by hand
    plan = replace(_plan(searcher_model_dir, budget=4), must_try=(defaults,))
    executor = TruthExecutor(truth)
    result = await run_search(plan, model=prior(truth, 1.0), execute=executor)
    first = [o.request.candidate.key for o in executor.batches[0] + executor.batches[1]][:3]
    assert defaults in first
    text = explain(
        result,
        replace(_context(plan), defaults_key=defaults),
        spec_of={c.key: c.spec for c, _ in plan.candidates},
    )
    d = next(t for t in result.progress.trials if t.candidate_key == defaults)
    assert f"vLLM's defaults, measured in the same round: p50 TTFT {d.figures.ttft_p50_ms:.0f} vs " in text
    # without a defaults key there is nothing to say about them
    assert "vLLM's defaults" not in explain(result, _context(plan), spec_of={})


#: vLLM in fp32 (the base's execution mode): the class the helpers' fp32 candidates are in.
FP32_CLASS = UnpricedClass(engine="vllm", weights=None, dtype="float32", eager=False)


def _dtype_space(model_dir: Path) -> list[Candidate]:
    """The helpers' space in bf16 and fp32, eager only (two classes of dtype and mode)."""
    limits = LIMITS.model_copy(update={"cpu_dtypes": ("bfloat16", "float32"), "cpu_enforce_eager": ()})
    return candidate_space(base=base_spec(model_dir), hardware=CPU, limits=limits, max_replicas=1)


def _fp32_faster(model_dir: Path, voice: list[SimInput], live: UnpricedClass, speed: float) -> SearchModel:
    """Hardware on which fp32 runs `speed` times faster than the live dtype (an AVX2-only CPU)."""
    model = search_model(model_dir, voice, efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK, goodput=False)
    return replace(model, live_class=live, class_speed={("cpu", FP32_CLASS): speed})


def test_one_measured_trial_of_a_dtype_prices_every_candidate_of_it(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    cands = _dtype_space(searcher_model_dir)
    base = cands[0]
    live = unpriced_class(base.spec)
    truth = _fp32_faster(searcher_model_dir, voice, live, 3.0)
    model = replace(
        search_model(
            searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK, goodput=False
        ),
        live_class=live,
    )
    [twin] = [c for c in cands if c.spec == base.spec.model_copy(update={"dtype": "float32"})]
    other = next(c for c in cands if c.spec.dtype == "float32" and c.spec.enable_prefix_caching)
    other_live = next(c for c in cands if c.spec == other.spec.model_copy(update={"dtype": base.spec.dtype}))
    # Before a trial of fp32 the model has no figure for it: its twin's figures, marked unpriced.
    before = model.predict(other, "cpu")
    assert before.unpriced is True and model.predict(other_live, "cpu").unpriced is False
    assert before.figures == model.predict(other_live, "cpu").figures

    measured = [
        Measured(candidate=c, hardware_class="cpu", points=truth.predict(c, "cpu").points)
        for c in (base, twin)
    ]
    fits = model.recalibrate(measured)

    # The hardware's own factor is fitted on the live dtype alone (the fp32 trial does not drag
    # it), and fp32 gets a factor of its own from its one trial.
    [hardware_fit] = [f for f in fits if f.knob_class is None]
    [dtype_fit] = [f for f in fits if f.knob_class is not None]
    assert hardware_fit.speed == pytest.approx(1.0, rel=0.02)
    assert dtype_fit.knob_class == FP32_CLASS and dtype_fit.speed == pytest.approx(3.0, rel=0.05)
    after = model.predict(other, "cpu")
    assert after.unpriced is False
    assert after.figures.ttft_p50_ms == pytest.approx(
        truth.predict(other, "cpu").figures.ttft_p50_ms, rel=0.05
    )
    # A model not told the live class fits one factor over both dtypes and marks nothing.
    blind = search_model(
        searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK, goodput=False
    )
    [blind_fit] = blind.recalibrate(measured)
    assert blind_fit.knob_class is None and blind_fit.speed > 1.1
    assert blind.predict(other, "cpu").unpriced is None


async def test_a_dtype_measured_faster_in_round_0_is_searched_for_its_best_knobs(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    """fp32 3x faster than the live bf16 (as on an AVX2-only CPU): round 0 measures the fp32 twin
    of the live configuration (poor knobs: caching off, 256-token steps); once priced, the fp32
    candidates are ranked, and the winner is the best of the whole space, not that twin."""
    cands = _dtype_space(searcher_model_dir)
    live = unpriced_class(cands[0].spec)
    truth = _fp32_faster(searcher_model_dir, voice, live, 3.0)
    model = replace(
        search_model(
            searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK, goodput=False
        ),
        live_class=live,
    )
    plan = SearchPlan(
        search_id="s-dtype",
        baseline=cands[0],
        baseline_class="cpu",
        candidates=[(c, "cpu") for c in cands],
        budget=8,
        objective=Objective.P50_TTFT,
        must_try=tuple(unpriced_representatives(cands, base=cands[0])),
        unpriced=tuple(unpriced_keys(cands, base=cands[0])),
    )
    result = await run_search(plan, model=ThreadedModel(model), execute=TruthExecutor(truth))

    assert result.outcome is Outcome.WINNER and result.winner is not None
    truth_scores = {
        c.key: score(truth.predict(c, "cpu").figures, objective=Objective.P50_TTFT, devices=0) for c in cands
    }
    twin = plan.must_try[0]
    assert result.winner.spec.dtype == "float32" and result.winner.key != twin
    assert truth_scores[result.winner.key] >= max(truth_scores.values()) * 1.02  # p50 scores are negative
    assert len(result.progress.trials) <= plan.budget


def test_a_smaller_kv_block_is_priced_on_the_trace_hashed_at_its_size(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    """Prefix caching reuses whole blocks: hashed in blocks of 32 tokens, a voice conversation's
    resent history is found in the cache to within 31 tokens instead of 127, so the model predicts a
    lower TTFT (on the AVX512-BF16 EPYC of 2026-12-04, 32-token blocks measured 0.67x the p50 TTFT
    of vLLM's 128). A size the trace was not prepared at is refused, not simulated on wrong hashes."""
    plan = plan_voice(
        VoiceWorkload(duration_s=120, peak_calls_per_s=1.0, seed=3, curve=DailyCurve(shape="flat")),
        text=CorpusText(),
    )
    tokens = PromptTokens.of_folder(searcher_model_dir)
    by_size = {size: prepare(plan, tokens, block_size=size) for size in (32, 128)}
    model = replace(
        search_model(
            searcher_model_dir, by_size[128], efficiency=CPU_TRUTH, slo=SLO, target_rps=PEAK, goodput=False
        ),
        inputs_by_block_size=by_size,
    )
    cands = candidate_space(
        base=base_spec(searcher_model_dir).model_copy(update={"enable_prefix_caching": True}),
        hardware=CPU,
        limits=LIMITS.model_copy(update={"cpu_dtypes": (), "cpu_enforce_eager": ()}),
        max_replicas=1,
    )
    base = cands[0]
    [small] = [c for c in cands if c.spec == base.spec.model_copy(update={"block_size": 32})]
    assert (
        model.predict(small, "cpu").figures.ttft_p50_ms < 0.9 * model.predict(base, "cpu").figures.ttft_p50_ms
    )
    odd = Candidate(spec=base.spec.model_copy(update={"block_size": 64}), key="odd", lossy=False, devices=0)
    with pytest.raises(ValueError, match="not prepared for KV blocks of 64 tokens"):
        model.predict(odd, "cpu")
