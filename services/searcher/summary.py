"""Why a search ended as it did, in plain language with the numbers (pure).

`knob_changes(base, spec)` lists the knobs a candidate changes ("max_num_batched_tokens 2048 ->
8192"); `explain(result, ...)` writes the one-paragraph summary of `search.completed`:

- winner: which knobs changed, and what they bought at the same fidelity as the baseline (goodput,
  p50 and p99 TTFT at the peak, in numbers and relative), the gates it passed, and how the search
  got there (candidates ranked by the model and how long that took, real trials spent);
- no improvement: the best candidate measured and by how much it fell short of the margin;
- infeasible: the SLO no trial met, the closest candidate and what it misses by;
- failed / cancelled: the reason.

`evidence(result, ctx)` is the same ending as JSON, stored on the search's record: the winner's and
the baseline's figures, every trial's, the knobs changed, the re-calibrations and the noise rule's
judgement.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from evertune.domain.engines import EngineSpec
from evertune.domain.slo import Slo
from evertune.searcher.noise import Comparison
from evertune.searcher.orchestrate import Outcome, SearchResult, TrialResult
from evertune.searcher.strategy import Objective


@dataclass(frozen=True)
class Context:
    """What the summary needs besides the result."""

    base: EngineSpec  #: the live configuration
    slo: Slo  #: the endpoint's SLO (ttft = p99 target)
    p50_target_ms: float  #: median TTFT target (0 = none)
    target_rps: float  #: the profile's peak rate
    headroom: float  #: gate rate = target x headroom
    objective: Objective  #: what "best" meant
    min_gain: float  #: margin a winner needed
    budget: int  #: real-trial budget
    #: candidate key of the engine's defaults when they differ from the live configuration
    defaults_key: str | None = None


def _value(value: object) -> str:
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()) if v is not None) or "default"
    return str(value)


def knob_changes(base: EngineSpec, spec: EngineSpec) -> list[str]:
    """ "knob before -> after" for every knob that differs (engine kind and model ignored)."""
    before = base.model_dump(mode="json")
    after = spec.model_dump(mode="json")
    out = []
    for name in sorted(after):
        if name in ("kind", "model") or before.get(name) == after[name]:
            continue
        out.append(f"{name} {_value(before.get(name))} -> {_value(after[name])}")
    return out


def _pct(new: float, old: float) -> str:
    if not (math.isfinite(new) and math.isfinite(old)) or old == 0:
        return "n/a"
    return f"{(new / old - 1) * 100:+.0f}%"


def _gates(trial: TrialResult) -> str:
    if not trial.gates:
        return "no gates run"
    parts = []
    for g in trial.gates:
        verdict = "passed" if g.passed else "FAILED"
        value = f" ({g.value:.2f} vs {g.threshold:.2f})" if math.isfinite(g.value) else ""
        parts.append(f"{g.name} {verdict}{value}")
    return ", ".join(parts)


def _slo_text(ctx: Context) -> str:
    itl = "" if math.isinf(ctx.slo.itl_ms) else f", gaps <= {ctx.slo.itl_ms:g} ms"
    p50 = f", p50 TTFT <= {ctx.p50_target_ms:g} ms" if ctx.p50_target_ms > 0 else ""
    return f"{ctx.slo.share:.0%} of requests with TTFT <= {ctx.slo.ttft_ms:g} ms{itl}{p50}"


def _how(result: SearchResult, ctx: Context) -> str:
    p = result.progress
    return (
        f"{p.modeled} candidates ranked by the performance model in {p.ranking_s:.1f} s "
        f"({p.feasible_predicted} predicted to meet the SLO); "
        f"{len(p.trials)} of {ctx.budget} real trials spent."
    )


def _defaults_text(result: SearchResult, ctx: Context) -> str:
    """What vLLM's defaults measured beside the live configuration in the same round ("" when they
    were not measured)."""
    trials = result.progress.trials
    key = ctx.defaults_key
    measured = [t for t in trials if t.candidate_key == key and t.ok]
    if key is None or not measured:
        return ""
    d = measured[0]
    base_key = result.baseline_trial.candidate_key if result.baseline_trial is not None else ""
    base = next((t for t in trials if t.ok and t.candidate_key == base_key and t.round == d.round), None)
    if base is None:
        return ""
    return (
        f" vLLM's defaults, measured in the same round: p50 TTFT {d.figures.ttft_p50_ms:.0f} vs "
        f"{base.figures.ttft_p50_ms:.0f} ms for the live configuration "
        f"({_pct(d.figures.ttft_p50_ms, base.figures.ttft_p50_ms)})."
    )


def explain(result: SearchResult, ctx: Context, *, spec_of: dict[str, EngineSpec]) -> str:
    """The summary (see the module doc). `spec_of` maps candidate keys to their configurations."""
    return _explain(result, ctx, spec_of=spec_of) + _defaults_text(result, ctx)


def _explain(result: SearchResult, ctx: Context, *, spec_of: dict[str, EngineSpec]) -> str:
    gate_rps = ctx.target_rps * ctx.headroom
    if result.outcome is Outcome.WINNER and result.winner and result.winner_trial:
        w, b = result.winner_trial, result.baseline_trial
        changes = knob_changes(ctx.base, result.winner.spec) or ["no knob (same configuration)"]
        where = f" on {result.winner_class}" if result.winner_class else ""
        text = f"Winner{where}: {'; '.join(changes)}."
        if b is not None:
            wf, bf = w.figures, b.figures
            change = _pct(wf.goodput_rps, bf.goodput_rps)
            goodput = f"goodput {bf.goodput_rps:.2f} -> {wf.goodput_rps:.2f} rps ({change})"
            p50 = (
                f"p50 TTFT at the peak {ctx.target_rps:.2f} rps {bf.ttft_p50_ms:.0f} -> "
                f"{wf.ttft_p50_ms:.0f} ms ({_pct(wf.ttft_p50_ms, bf.ttft_p50_ms)})"
            )
            p99 = f"p99 TTFT at {gate_rps:.2f} rps {bf.ttft_p99_ms:.0f} -> {wf.ttft_p99_ms:.0f} ms"
            first = [p50, goodput] if ctx.objective is Objective.P50_TTFT else [goodput, p50]
            text += (
                f" Measured against the live configuration at the same fidelity ({w.fidelity}x): "
                f"{'; '.join([*first, p99])}."
            )
        text += f" Gates: {_gates(w)}."
        if result.progress.slo_waived:
            verdict = "the winner meets it" if w.figures.meets_slo else "the SLO is not met yet"
            text += (
                f" The live configuration missed the SLO gate at {gate_rps:.2f} rps, so trials that "
                f"missed only that gate were ranked on p50 TTFT too ({verdict})."
            )
        if result.comparison is not None:
            text += f" Noise rule: {result.comparison.describe()}."
        if w.simulated:
            text += " Figures from the performance model (sim runner): not verified on real hardware."
        return f"{text} {_how(result, ctx)}"
    if result.outcome is Outcome.INFEASIBLE:
        text = (
            f"Infeasible: no configuration tried meets the SLO ({_slo_text(ctx)}) "
            f"at {gate_rps:.2f} rps (peak x {ctx.headroom:g})."
        )
        if result.closest is not None and result.closest_figures is not None:
            f = result.closest_figures
            changes = knob_changes(ctx.base, result.closest.spec) or ["the live configuration"]
            misses = []
            if math.isfinite(f.attainment):
                misses.append(f"attainment {f.attainment:.1%} (needs {ctx.slo.share:.0%})")
            if math.isfinite(f.ttft_p99_ms):
                misses.append(f"p99 TTFT {f.ttft_p99_ms:.0f} ms (target {ctx.slo.ttft_ms:g} ms)")
            text += f" Closest: {'; '.join(changes)}, with {', '.join(misses) or 'no figures'}."
        return f"{text} {_how(result, ctx)}"
    if result.outcome is Outcome.NO_IMPROVEMENT:
        if result.comparison is not None:
            text = (
                f"No improvement beyond the noise on {ctx.objective.value}: the leader was not "
                f"confirmed ({result.comparison.describe()})."
            )
        else:
            text = (
                f"No improvement: no candidate beat the live configuration by {ctx.min_gain:.0%} "
                f"on {ctx.objective.value}."
            )
        best, base = result.winner_trial, result.baseline_trial
        if best is not None and best.candidate_key in spec_of and base is not None:
            changes = knob_changes(ctx.base, spec_of[best.candidate_key]) or ["the live configuration"]
            text += (
                f" Best tried: {'; '.join(changes)}: goodput {best.figures.goodput_rps:.2f} vs "
                f"{base.figures.goodput_rps:.2f} rps, p50 TTFT {best.figures.ttft_p50_ms:.0f} vs "
                f"{base.figures.ttft_p50_ms:.0f} ms."
            )
        return f"{text} {_how(result, ctx)}"
    if result.outcome is Outcome.CANCELLED:
        return f"Cancelled: {result.error or 'by request'}."
    return f"Failed: {result.error}."


def _figures(trial: TrialResult | None) -> dict[str, Any] | None:
    if trial is None:
        return None

    def num(x: float) -> float | None:
        return round(x, 4) if math.isfinite(x) else None

    f = trial.figures
    return {
        "trial_id": trial.trial_id,
        "candidate": trial.candidate_key,
        "hardware_class": trial.hardware_class,
        "fidelity": trial.fidelity,
        "ok": trial.ok,
        "passed": trial.passed,
        "simulated": trial.simulated,
        "goodput_rps": num(f.goodput_rps),
        "ttft_p50_ms": num(f.ttft_p50_ms),
        "ttft_p99_ms_at_gate": num(f.ttft_p99_ms),
        "attainment_at_gate": num(f.attainment),
        "meets_slo": f.meets_slo,
        "gates": [dataclasses.asdict(g) for g in trial.gates],
        "error": trial.error,
    }


def _comparison(found: Comparison | None) -> dict[str, Any] | None:
    """The noise rule's judgement as JSON (None: the search had no confirmation)."""
    if found is None:
        return None
    return {**dataclasses.asdict(found), "verdict": found.verdict.value, "line": found.describe()}


def evidence(result: SearchResult, ctx: Context) -> dict[str, Any]:
    """What the search measured and decided, as JSON (see the module doc)."""
    p = result.progress
    winner = result.winner
    return {
        "outcome": result.outcome.value,
        "objective": ctx.objective.value,
        "winner": _figures(result.winner_trial),
        "baseline": _figures(result.baseline_trial),
        "knobs_changed": knob_changes(ctx.base, winner.spec) if winner else [],
        "closest": knob_changes(ctx.base, result.closest.spec) if result.closest else None,
        "ranking_s": round(p.ranking_s, 3),
        "modeled_candidates": p.modeled,
        "feasible_predicted": p.feasible_predicted,
        "recalibrations": [dataclasses.asdict(r) for r in p.recalibrations],
        "trials": [_figures(t) for t in p.trials],
        "target_rps": ctx.target_rps,
        "gate_rps": ctx.target_rps * ctx.headroom,
        "noise_rule": _comparison(result.comparison),
    }
