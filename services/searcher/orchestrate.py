"""One search, start to end, over injected model and trial executor (no I/O of its own).

`run_search(plan, model=, execute=, progress=)`:

1. ranks every candidate of the space with the model (`ModelPort.rank`) and times it;
2. drives `SuccessiveHalving` over the predicted scores: each round's `TrialOrder`s go to `execute`
   (the service publishes them as jobs and collects `trial.completed`; tests pass a function). In
   round 0 the baseline runs alone first: its golden answers are the correctness reference of
   every later trial (`reference_trial_id`), unless the plan names a fixed reference
   (`SearchPlan.reference_trial_id`: a trial of the model's reference configuration, so that a
   search across engines and weight formats judges every candidate by the same answers, never by
   the live configuration of the day);
3. scores each result per the objective (a failed gate or a missed SLO is -inf), and between
   rounds re-calibrates the model from every measured trial and re-ranks the untried candidates;
4. ends with a `SearchResult`: the winner (the strategy's verified best, measured against the
   baseline at the same fidelity), or no improvement, or infeasible (no trial met the SLO, the
   closest named), or failed (the baseline could not run, or no trial ran at all).

When the model predicts no candidate feasible, the candidates closest to the SLO (highest
predicted attainment at the gate rate) are tried anyway: the model may be wrong, and an infeasible
verdict should rest on measurements.

Cancelling the task running `run_search` cancels the round in flight (the service records the
search as cancelled with the trials reported so far through `progress`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from evertune.domain.gate_result import GateResult
from evertune.searcher.model import Measured, Prediction, RatePoint, Recalibration
from evertune.searcher.noise import Comparison
from evertune.searcher.space import Candidate
from evertune.searcher.strategy import (
    DEFAULT_ETA,
    DEFAULT_MIN_GAIN,
    NO_CONFIRMATION,
    Figures,
    NoiseRule,
    Objective,
    SuccessiveHalving,
    TrialRequest,
    score,
)
from evertune.v1 import jobs_pb2


class Outcome(Enum):
    """How a search ended."""

    WINNER = "winner"  #: a candidate beat the baseline and passed every gate
    NO_IMPROVEMENT = "no_improvement"  #: nothing beat the baseline by the margin
    INFEASIBLE = "infeasible"  #: no trial (baseline included) met the SLO
    FAILED = "failed"  #: the search could not run (baseline trial failed, no trial ran)
    CANCELLED = "cancelled"  #: cancelled through the API


@dataclass(frozen=True)
class TrialResult:
    """What one real trial measured, as the search uses it."""

    trial_id: str  #: trial id
    candidate_key: str  #: candidate measured
    ok: bool  #: the run ended normally (status OK)
    passed: bool  #: ok and every gate passed
    figures: Figures  #: headline figures (goodput interpolated on the ladder, see model.goodput_of)
    points: tuple[RatePoint, ...] = ()  #: every measured rate, ascending
    gates: tuple[GateResult, ...] = ()  #: gate outcomes in the job's order
    error: str = ""  #: one line when not ok
    simulated: bool = False  #: figures from the performance model (sim-* runner)
    hardware_class: str = ""  #: where it ran
    fidelity: int = 1  #: trial length multiplier it ran at
    round: int = 0  #: round of the search it ran in, from 0 (TrialRequest.round)
    metrics: jobs_pb2.TrialMetrics | None = None  #: the runner's figures as reported (evidence)
    fingerprint: str = ""  #: id of the hardware it ran on ("" = not reported, e.g. an older runner)


@dataclass(frozen=True)
class TrialOrder:
    """One trial the executor must run."""

    request: TrialRequest  #: candidate, fidelity, round, baseline flag
    hardware_class: str  #: class it must run on
    trial_id: str  #: trial id (stable: search, round, candidate)
    job_id: str  #: job id (its Nats-Msg-Id)
    reference_trial_id: str  #: trial whose golden answers are the correctness reference ("" = none)


class ModelPort(Protocol):
    """What a search needs of the performance model (`SearchModel` in a worker thread; fakes in tests)."""

    async def rank(self, candidates: Sequence[tuple[Candidate, str]]) -> tuple[dict[str, Prediction], float]:
        """Predictions by candidate key, and the seconds ranking took."""
        ...

    async def recalibrate(self, measured: Sequence[Measured]) -> list[Recalibration]:
        """Fit the model to the measured trials; what changed."""
        ...


#: Runs a batch of trials and returns their results (any order, one per order).
TrialExecutor = Callable[[Sequence[TrialOrder]], Awaitable[list[TrialResult]]]


@dataclass(frozen=True)
class SearchPlan:
    """What to search."""

    search_id: str  #: search id (trial ids derive from it)
    baseline: Candidate  #: the live configuration
    baseline_class: str  #: hardware class the baseline is measured on
    candidates: Sequence[tuple[Candidate, str]]  #: the space with each candidate's class, baseline included
    budget: int  #: most real trials
    objective: Objective = Objective.GOODPUT  #: what "best" means
    eta: int = DEFAULT_ETA  #: successive halving's reduction factor
    min_gain: float = DEFAULT_MIN_GAIN  #: a winner beats the baseline's score by this share (no confirmation)
    noise: NoiseRule = NO_CONFIRMATION  #: how a leader is confirmed against the noise
    must_try: tuple[str, ...] = ()  #: candidate keys round 0 measures whatever the model predicts
    #: candidate keys the model cannot price (another dtype or execution mode): not ranked by it,
    #: only measured through `must_try`, until a measured trial of their class prices them
    #: (`Prediction.unpriced` False after a re-calibration)
    unpriced: tuple[str, ...] = ()
    #: the `must_try` keys that stand for a class the model cannot price; round 0 measures each
    #: class through its twin with the model's best knobs (`SuccessiveHalving`)
    representatives: tuple[str, ...] = ()
    #: key of the candidate that stands for the engine's defaults (`space.defaults_seat_key`; None:
    #: not in the space); round 0 measures it first when the model cannot tell its best from it
    #: (`SuccessiveHalving`)
    defaults_seat: str | None = None
    #: a trial whose golden answers judge every candidate's correctness (a run of the model's
    #: reference configuration, e.g. vLLM serving its fp32 weights); "" = the baseline's own
    reference_trial_id: str = ""


@dataclass
class SearchProgress:
    """Where a search is; handed to the `progress` hook after each step."""

    phase: str = "ranking"  #: "ranking", "trials" or "done"
    modeled: int = 0  #: candidates the model evaluated
    feasible_predicted: int = 0  #: of those, predicted to meet the SLO
    ranking_s: float = 0.0  #: seconds ranking the whole space took
    trials_started: int = 0  #: real trials handed out
    trials: list[TrialResult] = field(default_factory=list)  #: results so far, in arrival order
    best: TrialResult | None = None  #: best passing non-baseline trial so far (by score)
    best_score: float = -math.inf  #: its score
    baseline: TrialResult | None = None  #: the latest baseline trial
    recalibrations: list[Recalibration] = field(default_factory=list)  #: model fits so far
    #: the live configuration missed the SLO gate in round 0 (and passed the others): trials that
    #: miss only the SLO gate too are ranked on the p50 objective alone (`slo_waived`)
    slo_waived: bool = False


#: Called after ranking, each batch of results and the end.
ProgressHook = Callable[[SearchProgress], Awaitable[None]]


@dataclass(frozen=True)
class SearchResult:
    """How a search ended, with its evidence."""

    outcome: Outcome  #: see `Outcome`
    winner: Candidate | None  #: the winner (outcome WINNER)
    winner_class: str  #: its hardware class ("" = none)
    winner_trial: TrialResult | None  #: the trial that measured it at the deciding fidelity
    baseline_trial: TrialResult | None  #: the baseline at the same fidelity (or the latest)
    winner_score: float  #: its score (objective's unit)
    baseline_score: float  #: the baseline's score
    closest: Candidate | None  #: outcome INFEASIBLE: the candidate nearest to meeting the SLO
    closest_figures: Figures | None  #: its measured (or, with no measurement, predicted) figures
    predictions: dict[str, Prediction]  #: the model's last prediction of every candidate
    progress: SearchProgress  #: trials, ranking time, calibrations
    error: str = ""  #: one line when FAILED
    comparison: Comparison | None = None  #: the noise rule's judgement of the confirmed leader


def trial_id_of(search_id: str, request: TrialRequest) -> str:
    """Trial id of a request: stable, so a repeated publish is the same trial."""
    return f"{search_id}-r{request.round}-{request.candidate.key.replace(':', '-')}"


async def run_search(
    plan: SearchPlan,
    *,
    model: ModelPort,
    execute: TrialExecutor,
    progress: ProgressHook | None = None,
) -> SearchResult:
    """Run one search to its result (see the module doc)."""
    state = SearchProgress()

    async def tell() -> None:
        if progress is not None:
            await progress(state)

    classes = {c.key: hw for c, hw in plan.candidates}
    by_key = {c.key: c for c, _ in plan.candidates}
    by_key.setdefault(plan.baseline.key, plan.baseline)
    classes.setdefault(plan.baseline.key, plan.baseline_class)
    predictions, state.ranking_s = await model.rank(plan.candidates)
    state.modeled = len(predictions)
    state.feasible_predicted = sum(1 for p in predictions.values() if p.figures.meets_slo)
    state.phase = "trials"
    await tell()

    search = SuccessiveHalving(
        baseline=plan.baseline,
        predicted=predicted_scores(predictions, by_key, plan.objective),
        candidates=list(by_key.values()),
        budget=plan.budget,
        eta=plan.eta,
        min_gain=plan.min_gain,
        noise=plan.noise,
        must_try=plan.must_try,
        unpriced=plan.unpriced,
        representatives=plan.representatives,
        defaults_seat=plan.defaults_seat,
    )
    reference = plan.reference_trial_id
    baseline_measured = False
    measured_by_trial: dict[tuple[str, int], TrialResult] = {}
    while True:
        batch = search.next_round()
        if not batch:
            break
        orders = [
            TrialOrder(
                request=r,
                hardware_class=classes[r.candidate.key],
                trial_id=trial_id_of(plan.search_id, r),
                job_id=f"job-{trial_id_of(plan.search_id, r)}",
                reference_trial_id="" if r.baseline else reference,
            )
            for r in batch
        ]
        state.trials_started = search.started
        await tell()
        if not baseline_measured:  # round 0: the baseline alone first, then the rest against it
            base_order = orders[0]
            [base_result] = await _run(execute, [base_order])
            state.slo_waived = slo_waived(base_result, plan)
            _record(state, search, plan, base_order, base_result, measured_by_trial)
            await tell()
            if not base_result.ok:
                return _end(
                    state,
                    plan,
                    predictions,
                    by_key,
                    Outcome.FAILED,
                    error=f"the baseline trial {base_order.trial_id} failed: {base_result.error}",
                )
            baseline_measured = True
            reference = reference or base_order.trial_id
            orders = [
                TrialOrder(
                    request=o.request,
                    hardware_class=o.hardware_class,
                    trial_id=o.trial_id,
                    job_id=o.job_id,
                    reference_trial_id=reference,
                )
                for o in orders[1:]
            ]
        if orders:
            results = await _run(execute, orders)
            for order, result in zip(orders, results, strict=True):
                _record(state, search, plan, order, result, measured_by_trial)
            await tell()
        if search.done:
            break
        measured = [
            Measured(candidate=by_key[r.candidate_key], hardware_class=r.hardware_class, points=r.points)
            for r in state.trials
            if r.ok and r.points
        ]
        if measured:
            state.recalibrations.extend(await model.recalibrate(measured))
            tried = {r.candidate_key for r in state.trials}
            untried = [(c, hw) for c, hw in plan.candidates if c.key not in tried]
            if untried:
                fresh, _ = await model.rank(untried)
                predictions.update(fresh)
                priced = [key for key, p in fresh.items() if p.unpriced is False]
                search.rerank(predicted_scores(fresh, by_key, plan.objective), priced=priced)
            await tell()

    state.trials_started = search.started
    return _conclude(state, search, plan, predictions, by_key, measured_by_trial)


async def _run(execute: TrialExecutor, orders: Sequence[TrialOrder]) -> list[TrialResult]:
    """Results in the orders' order (the executor may answer in any)."""
    results = {r.trial_id: r for r in await execute(orders)}
    missing = [o.trial_id for o in orders if o.trial_id not in results]
    if missing:
        raise RuntimeError(f"the trial executor returned no result for {', '.join(missing)}")
    return [results[o.trial_id] for o in orders]


def predicted_scores(
    predictions: dict[str, Prediction], by_key: dict[str, Candidate], objective: Objective
) -> dict[str, float]:
    """Scores for the strategy. With nothing predicted feasible (the SLO out of reach, or a model
    not yet calibrated to this machine and model: on the real model an uncalibrated prior predicted
    p50 1,131 ms for a configuration measured at 248), a p50-TTFT search ranks by the predicted p50
    alone, SLO aside, as `slo_waived` ranks measured trials; other objectives by nearness to the
    SLO (the predicted attainment), since their score is the SLO's own figure."""
    scores = {
        key: score(p.figures, objective=objective, devices=by_key[key].devices)
        for key, p in predictions.items()
        if key in by_key
    }
    if any(s > -math.inf for s in scores.values()):
        return scores
    if objective is Objective.P50_TTFT:
        return {
            key: -p.figures.ttft_p50_ms if math.isfinite(p.figures.ttft_p50_ms) else -math.inf
            for key, p in predictions.items()
            if key in by_key
        }
    return {
        key: p.figures.attainment if math.isfinite(p.figures.attainment) else -1.0
        for key, p in predictions.items()
        if key in by_key
    }


def _record(
    state: SearchProgress,
    search: SuccessiveHalving,
    plan: SearchPlan,
    order: TrialOrder,
    result: TrialResult,
    measured: dict[tuple[str, int], TrialResult],
) -> None:
    request = order.request
    result = _same_hardware(result, state.trials)
    result_score = trial_score(result, plan, slo_waived=state.slo_waived)
    search.report(request, result_score, metric=_metric(result, plan))
    state.trials.append(result)
    measured[(request.candidate.key, request.fidelity)] = result
    if request.baseline:
        state.baseline = result
    elif result_score > state.best_score:
        state.best, state.best_score = result, result_score


def _same_hardware(result: TrialResult, earlier: Sequence[TrialResult]) -> TrialResult:
    """`result`, or a failed copy of it when it ran on other hardware than the search's first
    fingerprinted trial (the baseline's, normally) of its class: figures from two fingerprints are
    never compared."""
    first = next(
        (r.fingerprint for r in earlier if r.fingerprint and r.hardware_class == result.hardware_class), ""
    )
    if not first or not result.fingerprint or result.fingerprint == first:
        return result
    return dataclasses.replace(
        result,
        ok=False,
        passed=False,
        error=f"ran on hardware {result.fingerprint}, the search's {result.hardware_class} trials on {first}",
    )


def _metric(result: TrialResult, plan: SearchPlan) -> float | None:
    """The objective's raw figure of a trial that ran (p50 TTFT ms, or goodput), SLO met or not."""
    if not result.ok:
        return None
    if plan.objective is Objective.P50_TTFT:
        return result.figures.ttft_p50_ms
    return result.figures.goodput_rps


def _misses_only_the_slo(result: TrialResult) -> bool:
    """The trial ran and passed every gate but the SLO gate, which it missed."""
    return (
        result.ok and not result.figures.meets_slo and all(g.passed for g in result.gates if g.name != "slo")
    )


def slo_waived(baseline: TrialResult, plan: SearchPlan) -> bool:
    """Whether a p50-TTFT search ranks trials that miss the SLO gate: when the live configuration
    misses it itself. The gate keeps a search from trading the SLO for speed; with the live
    configuration already missing it at the gate rate there is no SLO left to trade, and refusing
    every candidate that misses it too would keep the worst one live. (In a demo run on an EPYC
    Zen 3 a search measured p50 1,340 ms for the live configuration and 375 ms for prefix caching
    on, both missing the gate at 1.25x the peak, and ended "infeasible".) The other gates still
    disqualify, and the noise rule still judges the leader on raw p50."""
    return plan.objective is Objective.P50_TTFT and _misses_only_the_slo(baseline)


def trial_score(result: TrialResult, plan: SearchPlan, *, slo_waived: bool = False) -> float:
    """A trial's score for the strategy (-inf: it did not run, or failed a gate or the SLO, unless
    `slo_waived` and the SLO gate is all it missed)."""
    if not result.ok:
        return -math.inf
    waived = slo_waived and _misses_only_the_slo(result)
    devices = 0
    for candidate, _ in plan.candidates:
        if candidate.key == result.candidate_key:
            devices = candidate.devices
            break
    figures = Figures(
        goodput_rps=result.figures.goodput_rps,
        ttft_p50_ms=result.figures.ttft_p50_ms,
        meets_slo=result.figures.meets_slo or waived,
        gates_passed=result.passed or waived,
    )
    return score(figures, objective=plan.objective, devices=devices)


def _conclude(
    state: SearchProgress,
    search: SuccessiveHalving,
    plan: SearchPlan,
    predictions: dict[str, Prediction],
    by_key: dict[str, Candidate],
    measured: dict[tuple[str, int], TrialResult],
) -> SearchResult:
    if not state.trials:
        return _end(state, plan, predictions, by_key, Outcome.FAILED, error="no real trial could be planned")
    if not any(r.ok for r in state.trials):
        return _end(
            state, plan, predictions, by_key, Outcome.FAILED, error=f"no trial ran: {state.trials[0].error}"
        )
    found = search.decision()
    if found is not None:
        winner, winner_score, base_score, fidelity = (
            found.candidate,
            found.score,
            found.baseline_score,
            found.fidelity,
        )
        winner_trial = measured[(winner.key, fidelity)]
        return SearchResult(
            outcome=Outcome.WINNER,
            winner=winner,
            winner_class=winner_trial.hardware_class,
            winner_trial=winner_trial,
            baseline_trial=measured.get((plan.baseline.key, fidelity)),
            winner_score=winner_score,
            baseline_score=base_score,
            closest=None,
            closest_figures=None,
            predictions=predictions,
            progress=_done(state),
            comparison=found.comparison,
        )
    if not any(r.ok and r.figures.meets_slo for r in state.trials):
        return _end(state, plan, predictions, by_key, Outcome.INFEASIBLE, comparison=search.comparison())
    return _end(state, plan, predictions, by_key, Outcome.NO_IMPROVEMENT, comparison=search.comparison())


def _done(state: SearchProgress) -> SearchProgress:
    state.phase = "done"
    return state


def _end(
    state: SearchProgress,
    plan: SearchPlan,
    predictions: dict[str, Prediction],
    by_key: dict[str, Candidate],
    outcome: Outcome,
    *,
    error: str = "",
    comparison: Comparison | None = None,
) -> SearchResult:
    """A result without a winner: the best measured candidate as evidence, the closest if infeasible."""
    closest: Candidate | None = None
    closest_figures: Figures | None = None
    if outcome is Outcome.INFEASIBLE:
        tried = [r for r in state.trials if r.ok]
        if tried:
            near = max(tried, key=lambda r: _nearness(r.figures))
            closest, closest_figures = by_key.get(near.candidate_key), near.figures
        elif predictions:
            key = max(predictions, key=lambda k: _nearness(predictions[k].figures))
            closest, closest_figures = by_key.get(key), predictions[key].figures
    best = state.best
    return SearchResult(
        outcome=outcome,
        winner=None,
        winner_class="",
        winner_trial=best,
        baseline_trial=state.baseline,
        winner_score=state.best_score,
        baseline_score=trial_score(state.baseline, plan) if state.baseline else -math.inf,
        closest=closest,
        closest_figures=closest_figures,
        predictions=predictions,
        progress=_done(state),
        error=error,
        comparison=comparison,
    )


def _nearness(figures: Figures) -> tuple[float, float]:
    """Order of "closest to the SLO": highest attainment at the gate rate, then lowest p99 TTFT."""
    attainment = figures.attainment if math.isfinite(figures.attainment) else -1.0
    p99 = figures.ttft_p99_ms if math.isfinite(figures.ttft_p99_ms) else math.inf
    return attainment, -p99
