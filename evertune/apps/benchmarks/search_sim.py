"""`evertune bench search-sim`: a whole search on a `sim-cpu` class against a known space.

The hardware is the performance model with the CPU's calibrated factors (the stored calibration
of "cpu" when there is one, else the factors fitted on the development machine, docs/perfmodel.md):
that is what a `sim-cpu` runner serves. Trials are answered in process by that model (what a sim
runner measures, without replaying in real time), with 5% log-normal measurement noise on the
headline figures, shrinking with the trial's fidelity. The searcher's own model starts from
factors 3x too fast (a stale calibration), so ranking is off at first and re-calibration has to
find the hardware's speed from the trials.

Known space: vLLM-CPU's knobs around vLLM's defaults (`SpaceLimits()` on this machine's CPU
profile, one replica, 2 GiB KV cache), the local tiny model, voice traffic (flat, peak 1.5
calls/s), SLO: 90% of requests with TTFT <= 150 ms and gaps <= 100 ms, objective goodput.

Figures: `real_trials` (of `budget`), `candidates`, `ranking_s` (the searcher's model over the
whole space), `winner_gain` (the winner's true goodput / the baseline's), `winner_rank` (where
the winner stands in the hardware model's exhaustive ranking of every candidate; 1 = found the
best; ties share a rank), `gap_to_best` (1 - winner / best true goodput), the fitted speed factor
(`fitted_speed`, truth: 1/3), and how the stale model ranked the true best (`prior_rank_of_best`).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from evertune.apps.benchmarks import Figures, step
from evertune.domain.engines import EngineSpec, detect_local
from evertune.domain.gate_result import GateResult
from evertune.domain.model import ensure_model
from evertune.domain.perfmodel import Efficiency, PromptTokens, load_arch, load_efficiency, prepare
from evertune.domain.perfmodel.calibration import FITTED_CPU, default_data_dir
from evertune.domain.perfmodel.simulate import workload_rps
from evertune.domain.slo import Slo
from evertune.domain.workloads import DailyCurve, VoiceWorkload, plan_voice
from evertune.domain.workloads.source import CorpusText
from evertune.searcher.model import SearchModel, ThreadedModel, scaled
from evertune.searcher.orchestrate import (
    Outcome,
    ProgressHook,
    SearchPlan,
    SearchProgress,
    TrialOrder,
    TrialResult,
    run_search,
)
from evertune.searcher.space import SpaceLimits, candidate_space
from evertune.searcher.strategy import Figures as TrialFigures
from evertune.searcher.strategy import Objective, score
from evertune.searcher.summary import knob_changes

#: How much faster than the hardware the searcher's model starts.
PRIOR_SPEED = 3.0
#: Measurement noise of a fidelity-1 trial (log-normal sigma on goodput and TTFT).
NOISE = 0.05
HARDWARE_CLASS = "sim-cpu"


#: Rates a trial replays, as multiples of the peak: wide enough that no candidate tops it out.
LADDER = (1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)


async def run(quick: bool) -> Figures:
    data_dir = default_data_dir()
    model_dir = await asyncio.to_thread(ensure_model, data_dir)
    stored = load_efficiency(data_dir, "cpu")
    figures: Figures = {}
    # From vLLM's defaults (the reference point), and from a poor live configuration
    # (prefix caching off, a 512-token step budget: a voice workload resends its prompts).
    poor: dict[str, object] = {"enable_prefix_caching": False, "max_num_batched_tokens": 512}
    for name, knobs in (("defaults", {}), ("poor", poor)):
        result = await _search(quick, model_dir, stored, knobs)
        figures.update(
            {f"{name}_{key}" if name != "defaults" else key: value for key, value in result.items()}
        )
    return figures


async def _search(
    quick: bool, model_dir: Path, stored: Efficiency | None, live: dict[str, object]
) -> Figures:
    budget = 8 if quick else 12
    duration_s = 120.0 if quick else 300.0
    plan = plan_voice(
        VoiceWorkload(duration_s=duration_s, peak_calls_per_s=1.5, seed=0, curve=DailyCurve(shape="flat")),
        text=CorpusText(),
    )
    inputs = await asyncio.to_thread(prepare, plan, PromptTokens.of_folder(model_dir), block_size=128)
    hardware = detect_local()
    truth_eff = stored or FITTED_CPU
    truth = SearchModel(
        inputs=inputs,
        arch=load_arch(model_dir),
        hardware={HARDWARE_CLASS: hardware},
        efficiency={HARDWARE_CLASS: truth_eff},
        slo=Slo(ttft_ms=150.0, itl_ms=100.0),
        p50_target_ms=0.0,
        target_rps=round(workload_rps(inputs), 2),
        ladder=LADDER,
        headroom=1.25,
        horizon_s=45.0 if quick else 120.0,
    )
    prior = replace(
        truth, efficiency={HARDWARE_CLASS: scaled(truth_eff, PRIOR_SPEED)}, speed={}, simulations=0
    )
    base = EngineSpec(model=str(model_dir), kv_cache_space_gib=2).model_copy(update=live)
    # the model prices no execution mode: the live one only
    limits = SpaceLimits(cpu_enforce_eager=())
    space = candidate_space(base=base, hardware=hardware, limits=limits, max_replicas=1)
    pairs = [(c, HARDWARE_CLASS) for c in space]
    search_plan = SearchPlan(
        search_id="bench",
        baseline=space[0],
        baseline_class=HARDWARE_CLASS,
        candidates=pairs,
        budget=budget,
        objective=Objective.GOODPUT,
    )
    # How the stale model ranks the space (before the search re-calibrates it).
    prior_predictions, _ = await asyncio.to_thread(
        replace(prior, efficiency=dict(prior.efficiency)).rank, pairs
    )
    prior_score = {
        key: score(p.figures, objective=Objective.GOODPUT, devices=0) for key, p in prior_predictions.items()
    }
    executor = _NoisyTruth(truth, random.Random(7))
    started = time.perf_counter()
    result = await run_search(
        search_plan, model=ThreadedModel(prior), execute=executor, progress=_steps(budget)
    )
    search_s = time.perf_counter() - started

    truth_predictions, truth_s = await asyncio.to_thread(truth.rank, pairs)
    true_score = {
        key: score(p.figures, objective=Objective.GOODPUT, devices=0) for key, p in truth_predictions.items()
    }
    best_key = max(true_score, key=lambda k: true_score[k])
    best = true_score[best_key]
    baseline = true_score[space[0].key]
    chosen = result.winner.key if result.winner is not None else space[0].key
    chosen_score = true_score[chosen]
    fitted = 1.0
    for fit in result.progress.recalibrations:
        fitted *= fit.speed
    return {
        "space": f"vLLM-CPU knobs, {hardware.cores} cores, tiny model, voice {duration_s:g} s",
        "live": ", ".join(f"{k}={v}" for k, v in live.items()) or "vLLM defaults",
        "outcome": result.outcome.value,
        "budget": budget,
        "real_trials": len(result.progress.trials),
        "candidates": result.progress.modeled,
        "feasible_predicted": result.progress.feasible_predicted,
        "ranking_s": round(result.progress.ranking_s, 3),
        "search_s": round(search_s, 3),
        "exhaustive_truth_s": round(truth_s, 3),
        "target_rps": truth.target_rps,
        "baseline_goodput_rps": _r(baseline),
        "winner_goodput_rps": _r(chosen_score),
        "best_goodput_rps": _r(best),
        "winner_gain": _r(chosen_score / baseline if baseline > 0 else math.inf),
        "winner_rank": 1 + sum(1 for s in true_score.values() if s > chosen_score + 1e-9),
        "gap_to_best": _r(1 - chosen_score / best if best > 0 else 0.0),
        "winner_knobs": "; ".join(knob_changes(base, result.winner.spec)) if result.winner else "",
        "prior_rank_of_best": 1 + sum(1 for s in prior_score.values() if s > prior_score[best_key] + 1e-9),
        "fitted_speed": _r(fitted),
        "true_speed": _r(1 / PRIOR_SPEED),
        "calibration": "stored" if stored is not None else "docs/perfmodel.md fit",
        "found_a_winner": result.outcome is Outcome.WINNER,
    }


def _r(x: float) -> float:
    return round(x, 4) if math.isfinite(x) else x


class _NoisyTruth:
    """Answers trials with the hardware's model, plus measurement noise (see the module doc)."""

    def __init__(self, truth: SearchModel, rng: random.Random) -> None:
        self.truth = truth
        self.rng = rng

    async def __call__(self, orders: Sequence[TrialOrder]) -> list[TrialResult]:
        return await asyncio.to_thread(self._run, orders)

    def _run(self, orders: Sequence[TrialOrder]) -> list[TrialResult]:
        out = []
        for order in orders:
            p = self.truth.predict(order.request.candidate, order.hardware_class)
            sigma = NOISE / math.sqrt(order.request.fidelity)
            f = p.figures
            noisy = TrialFigures(
                goodput_rps=f.goodput_rps * math.exp(self.rng.gauss(0, sigma)),
                ttft_p50_ms=f.ttft_p50_ms * math.exp(self.rng.gauss(0, sigma)),
                meets_slo=f.meets_slo,
                ttft_p99_ms=f.ttft_p99_ms * math.exp(self.rng.gauss(0, sigma)),
                attainment=f.attainment,
            )
            gate = GateResult("slo", f.meets_slo, f.attainment, self.truth.slo.share)
            out.append(
                TrialResult(
                    trial_id=order.trial_id,
                    candidate_key=order.request.candidate.key,
                    ok=True,
                    passed=f.meets_slo,
                    figures=noisy,
                    points=p.points,
                    gates=(gate,),
                    simulated=True,
                    hardware_class=order.hardware_class,
                    fidelity=order.request.fidelity,
                    round=order.request.round,
                )
            )
        return out


def _steps(budget: int) -> ProgressHook:
    """The search's progress as the benchmark's step: its phase, trials done of the budget (shown on a
    terminal; never in the figures)."""

    async def progress(state: SearchProgress) -> None:
        step(f"search: {state.phase}, trials", len(state.trials), budget)

    return progress
