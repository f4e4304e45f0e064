"""`evertune bench monitor`: how fast the sla-monitor sees a TTFT regression, and whether it cries wolf.

An embedded nats-server in a temp dir and the real `SlaMonitorService` on a compressed clock
(`TIME_SCALE` = 1/60: an hour of traffic is a minute of wall time; every window, slot and hold of the
monitor shrinks by the same factor). Synthetic telemetry is published the way the gateway does it
(`RequestRecordBatch` on `evertune.telemetry.<endpoint>`, `batch_id` as the msg id) at `RATE_PER_S`
requests per *simulated* second.

Time: the monitor counts a request at its end time (`start_time + e2e`) and evaluates at wall time,
so every record carries a wall-clock timestamp; requests are spaced `time_scale / RATE_PER_S` wall
seconds apart (5 req/s simulated = 300 records per wall second). Latencies (TTFT, gaps) are real
milliseconds: the clock is compressed, not the requests.

Per endpoint (one in quick mode, `FULL_ENDPOINTS` in parallel in full mode):

1. backfill: the longest rule window of healthy history, published at once with past timestamps,
   so the windows are full when the clock starts (as on a long-running endpoint);
2. stationary: `STATIONARY_S` simulated seconds (30 min) of healthy traffic, live: every breach is
   a false breach;
3. regression: TTFT doubles at a known wall instant; `detection_delay_s` = (first `sla.breach`
   seen on `evertune.events.sla.breach.<endpoint>` - that instant) / time_scale;
4. recovery: TTFT back to healthy; `resolve_delay_s` until the `sla.resolved` (short window clears,
   then `resolve_hold_s`).

Healthy TTFT is lognormal around `HEALTHY_TTFT_MS` (p99 ~ 425 ms against a 500 ms target, ~0.03%
bad); doubled, ~89% of requests miss the target (burn rate 8.9 with a 0.9 attainment target).

The monitor runs its default rules (`DEFAULT_RULES`): the fast-burn rule `page-fast` (2x over 30 s
confirmed by 5 s, at least 5 bad requests) and the SRE workbook's pairs. A rule whose long window is
full of healthy traffic fires once the long window's bad share passes threshold x budget: delay ~
long_window x (threshold x budget - b0) / (b1 - b0) (`predicted_delay_s`): ~7 s for `page-fast`,
~4 h for `page-6h`; the workbook's `page-1h` (14.4x) cannot fire at a 0.9 target. What the benchmark
adds on top of the prediction is what the real service adds: batching, the bus, slot rounding and
the evaluation interval, all measured on the compressed clock (so every wall millisecond of latency
counts as 60 simulated ones: the figure errs on the slow side).

Honesty of the clock: records are published every `PUBLISH_INTERVAL_S` wall (0.6 simulated s, more
than the gateway's 50 ms batches) and the monitor evaluates every `EVALUATE_INTERVAL_S` wall (0.6
simulated s; the service's default is 1 s). The backfill covers the page rules' longest window
(6 h, `BACKFILL_CAP_S`); the 3-day ticket window is not filled (at 1x it cannot fire on healthy
traffic either way). Drift detection is off here: request durations are real milliseconds while
the clock is compressed, so arrival times (start = end - e2e) smear across a compressed rate window;
its false-alarm bound is shown on a long stationary stream by the pure core's tests instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import statistics
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from evertune.apps.benchmarks import Figures
from evertune.apps.benchmarks.scratch import scratch_bus
from evertune.domain.slo import DEFAULT_ATTAINMENT
from evertune.infra.bus import publish
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings
from evertune.sla_monitor import SlaMonitorService, SlaMonitorSettings
from evertune.sla_monitor.burn_rate import DEFAULT_RULES, BurnRateRule
from evertune.v1 import events_pb2, telemetry_pb2

#: 1 wall second = 60 simulated seconds.
TIME_SCALE = 1 / 60
#: Requests per simulated second, per endpoint.
RATE_PER_S = 5.0
#: SLO of every bench endpoint.
TTFT_TARGET_MS = 500.0
ITL_TARGET_MS = 100.0
ATTAINMENT_TARGET = DEFAULT_ATTAINMENT
#: Healthy TTFT: lognormal, median and sigma of its log.
HEALTHY_TTFT_MS = 300.0
TTFT_SIGMA = 0.15
#: The regression multiplies TTFT by this.
REGRESSION_FACTOR = 2.0
#: Simulated seconds of the stationary (healthy) phase: 30 minutes.
STATIONARY_S = 1800.0
#: Wall seconds between two published batches (0.6 simulated seconds at 1/60).
PUBLISH_INTERVAL_S = 0.01
#: Wall seconds between two evaluations of the monitor (0.6 simulated seconds at 1/60).
EVALUATE_INTERVAL_S = 0.01
#: Give up waiting for a breach after this many wall seconds.
DETECTION_TIMEOUT_S = 90.0
#: Give up waiting for the sla.resolved after this many wall seconds.
RECOVERY_TIMEOUT_S = 60.0
#: The issue's goal for detection_delay_s (simulated seconds).
DETECTION_GOAL_S = 15.0
#: Longest rule window backfilled with healthy history, simulated seconds (6 h: the page rules').
BACKFILL_CAP_S = 21600.0
#: Endpoints measured in parallel in full mode (one in quick mode).
FULL_ENDPOINTS = 3
#: Records per backfill message.
BACKFILL_BATCH = 500

#: The service's default rules (windows in simulated seconds; the service scales them).
RULES: tuple[BurnRateRule, ...] = DEFAULT_RULES


@dataclass(frozen=True)
class Plan:
    """What one run does; `run` uses the module's defaults, a test a tiny plan."""

    time_scale: float = TIME_SCALE  #: wall seconds per simulated second
    rules: tuple[BurnRateRule, ...] = RULES  #: rules, windows in simulated seconds
    stationary_s: float = STATIONARY_S  #: simulated seconds of healthy live traffic per endpoint
    endpoints: int = 1  #: endpoints measured in parallel
    evaluate_interval_s: float = EVALUATE_INTERVAL_S  #: wall seconds between evaluations
    detection_timeout_s: float = DETECTION_TIMEOUT_S  #: wall seconds to wait for the breach
    recovery_timeout_s: float = RECOVERY_TIMEOUT_S  #: wall seconds to wait for the resolved

    @property
    def spacing(self) -> float:
        """Wall seconds between two requests' end times."""
        return self.time_scale / RATE_PER_S

    @property
    def history(self) -> float:
        """Wall seconds of backfilled history: the longest long window up to `BACKFILL_CAP_S`."""
        windows = [r.long_window_s for r in self.rules if r.long_window_s <= BACKFILL_CAP_S]
        return max(windows, default=BACKFILL_CAP_S) * self.time_scale


def bad_share(median_ms: float, sigma: float, target_ms: float) -> float:
    """Share of lognormal(median, sigma) TTFTs above `target_ms`."""
    z = math.log(target_ms / median_ms) / sigma
    return 0.5 * math.erfc(z / math.sqrt(2))


def predicted_delay_s(rule: BurnRateRule, *, budget: float, before: float, after: float) -> float:
    """Simulated seconds after a step from bad share `before` to `after` until `rule` fires, with
    both windows full of the `before` traffic; inf when the step cannot make it fire.

    Bad share of a window of length W, d seconds after the step (d < W): before + (after - before)
    d / W; it must exceed threshold x budget in both windows, the long one last."""
    need = rule.burn_rate * budget
    if after <= need:
        return math.inf
    if before > need:
        return 0.0
    return rule.long_window_s * (need - before) / (after - before)


def end_times(first: float, last: float, *, start: float, spacing: float) -> Iterator[float]:
    """Grid times start + k * spacing in (first, last]: the end times of the requests of a tick."""
    k = math.floor((first - start) / spacing) + 1
    while (t := start + k * spacing) <= last:
        yield t
        k += 1


def make_record(
    endpoint: str, end_s: float, rng: random.Random, *, ttft_factor: float = 1.0
) -> telemetry_pb2.RequestRecord:
    """One voice-like streamed request ending at wall time `end_s`."""
    ttft = rng.lognormvariate(math.log(HEALTHY_TTFT_MS), TTFT_SIGMA) * ttft_factor
    gaps = [rng.uniform(10.0, 25.0) for _ in range(11)]
    e2e = ttft + sum(gaps)
    return telemetry_pb2.RequestRecord(
        request_id=uuid.uuid4().hex,
        endpoint=endpoint,
        deployment="d-stable",
        start_time_unix_ns=round((end_s - e2e / 1e3) * 1e9),
        api=telemetry_pb2.API_CHAT,
        model="evertune-tiny",
        stream=True,
        status_code=200,
        ttft_ms=ttft,
        e2e_ms=e2e,
        itl_ms=gaps,
        completion_tokens=len(gaps) + 1,
    )


def _batch(records: list[telemetry_pb2.RequestRecord]) -> telemetry_pb2.RequestRecordBatch:
    return telemetry_pb2.RequestRecordBatch(
        records=records, batch_id=uuid.uuid4().hex, source="bench-monitor"
    )


@dataclass
class Trial:
    """One endpoint's run. Times are wall times (time.time())."""

    endpoint: str
    seed: int
    records: int = 0  #: records published
    change_at: float | None = None  #: TTFT doubled
    revert_at: float | None = None  #: TTFT back to healthy (after the first breach)
    breaches: list[tuple[float, str]] = field(default_factory=list)  #: (seen at, rule)
    resolutions: list[float] = field(default_factory=list)  #: sla.resolved seen at
    breached: asyncio.Event = field(default_factory=asyncio.Event)
    resolved: asyncio.Event = field(default_factory=asyncio.Event)

    def on_breach(self, seen_at: float, rule: str) -> None:
        self.breaches.append((seen_at, rule))
        if self.change_at is not None and seen_at >= self.change_at:
            self.breached.set()

    def on_resolved(self, seen_at: float) -> None:
        self.resolutions.append(seen_at)
        if self.revert_at is not None and seen_at >= self.revert_at:
            self.resolved.set()

    @property
    def false_breaches(self) -> int:
        """Breaches seen before the regression."""
        return sum(1 for t, _ in self.breaches if self.change_at is None or t < self.change_at)

    @property
    def detection(self) -> tuple[float, str] | None:
        """(wall seconds from the change to the first breach after it, its rule)."""
        if self.change_at is None:
            return None
        after = [(t - self.change_at, rule) for t, rule in self.breaches if t >= self.change_at]
        return min(after) if after else None

    @property
    def recovery(self) -> float | None:
        """Wall seconds from the revert to the first sla.resolved after it."""
        if self.revert_at is None:
            return None
        after = [t - self.revert_at for t in self.resolutions if t >= self.revert_at]
        return min(after) if after else None


async def _drive(js: JetStreamContext, trial: Trial, plan: Plan) -> None:
    """Backfill, stationary phase, then the regression until a breach (or the timeout)."""
    rng = random.Random(trial.seed)
    subject = f"evertune.telemetry.{trial.endpoint}"
    history, spacing = plan.history, plan.spacing
    start = time.time()
    # 1. backfill: the longest window of healthy history, with past timestamps
    pending: list[telemetry_pb2.RequestRecord] = []
    for t in end_times(start - history, start, start=start, spacing=spacing):
        pending.append(make_record(trial.endpoint, t, rng))
        if len(pending) == BACKFILL_BATCH:
            batch = _batch(pending)
            await publish(js, subject, batch, msg_id=batch.batch_id)
            trial.records += len(pending)
            pending = []
            await asyncio.sleep(0)
    last = start
    stationary_end = time.time() + plan.stationary_s * plan.time_scale
    # 2. stationary, 3. regression until a breach, 4. healthy again until it resolves; each tick
    # publishes the requests that ended since the last one
    deadline = math.inf
    while not trial.resolved.is_set():
        now = time.time()
        if trial.change_at is None and now >= stationary_end:
            trial.change_at, deadline = now, now + plan.detection_timeout_s
        if trial.revert_at is None and trial.breached.is_set():
            trial.revert_at, deadline = now, now + plan.recovery_timeout_s
        if now > deadline:
            break
        change = trial.change_at if trial.change_at is not None else math.inf
        revert = trial.revert_at if trial.revert_at is not None else math.inf
        pending += [
            make_record(
                trial.endpoint, t, rng, ttft_factor=REGRESSION_FACTOR if change < t <= revert else 1.0
            )
            for t in end_times(last, now, start=start, spacing=spacing)
        ]
        last = now
        if pending:
            batch = _batch(pending)
            await publish(js, subject, batch, msg_id=batch.batch_id)
            trial.records += len(pending)
            pending = []
        await asyncio.sleep(PUBLISH_INTERVAL_S)


async def measure(nc: Client, js: JetStreamContext, plan: Plan, data_dir: Path) -> Figures:
    """Run `plan` on the service against `nc` / `js` (TELEMETRY and EVENTS declared)."""
    run_id = uuid.uuid4().hex[:8]
    trials = [Trial(endpoint=f"bench-{run_id}-{i}", seed=11 + i) for i in range(plan.endpoints)]
    # One endpoint: watch only its subject, so a shared NATS's other telemetry is not counted.
    subject = f"evertune.telemetry.{trials[0].endpoint}" if len(trials) == 1 else "evertune.telemetry.>"
    settings = SlaMonitorSettings(
        durable=f"bench-{run_id}",
        subject=subject,
        evaluate_interval_s=plan.evaluate_interval_s,
        time_scale=plan.time_scale,
        rules=list(plan.rules),
        ttft_p99_ms=TTFT_TARGET_MS,
        itl_p99_ms=ITL_TARGET_MS,
        attainment_target=ATTAINMENT_TARGET,
        endpoints_bucket="",  # the bench endpoints are not registered: the SLO above applies
        metrics_port=-1,
        drift=False,  # see the module docstring
    )
    service = SlaMonitorService(settings)
    by_endpoint = {t.endpoint: t for t in trials}

    async def on_event(msg: Msg) -> None:
        seen_at = time.time()
        event = events_pb2.Event.FromString(msg.data)
        trial = by_endpoint.get(event.endpoint)
        if trial is not None and event.kind == "sla.resolved":
            trial.on_resolved(seen_at)
        elif trial is not None and event.kind == "sla.breach":
            rule = next(
                (
                    r.name
                    for r in plan.rules
                    if _same_window(r, plan, event.sla_breach.window.ToMilliseconds())
                ),
                "?",
            )
            trial.on_breach(seen_at, rule)

    sub = await nc.subscribe("evertune.events.sla.*.*", cb=on_event)
    await service.start(ServiceContext(shared=SharedSettings(data_dir=data_dir), nc=nc, js=js, store=None))
    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(_drive(js, t, plan) for t in trials))
        await asyncio.sleep(0.5)  # let late events arrive
    finally:
        wall_s = time.perf_counter() - t0
        await service.stop(5.0)
        await sub.unsubscribe()
        with contextlib.suppress(NatsError):  # the benchmark's own consumer: gone already is fine
            await js.delete_consumer("TELEMETRY", settings.durable)
    status = service.status()
    budget = 1 - ATTAINMENT_TARGET
    b0 = bad_share(HEALTHY_TTFT_MS, TTFT_SIGMA, TTFT_TARGET_MS)
    b1 = bad_share(HEALTHY_TTFT_MS * REGRESSION_FACTOR, TTFT_SIGMA, TTFT_TARGET_MS)
    detections = [d for t in trials if (d := t.detection) is not None]
    delays_wall = [d for d, _ in detections]
    delay_wall = statistics.median(delays_wall) if delays_wall else math.inf
    recoveries = [r for t in trials if (r := t.recovery) is not None]
    recovery_wall = statistics.median(recoveries) if recoveries else math.inf
    fired = sorted({rule for _, rule in detections})
    return {
        "benchmark": "monitor",
        "detection_delay_s": round(delay_wall / plan.time_scale, 1),
        "detection_delay_max_s": round(max(delays_wall, default=math.inf) / plan.time_scale, 1),
        "detection_delay_wall_s": round(delay_wall, 3),
        "detection_goal_s": DETECTION_GOAL_S,
        "detection_goal_met": int(delay_wall / plan.time_scale <= DETECTION_GOAL_S),
        "detection_delay_min": round(delay_wall / plan.time_scale / 60, 2),
        "detections": f"{len(detections)}/{len(trials)}",
        "detection_delays_s": ",".join(f"{d / plan.time_scale:.0f}" for d in delays_wall),
        "detected_by": ",".join(fired),
        "resolve_delay_s": round(recovery_wall / plan.time_scale, 1),
        "resolve_delay_wall_s": round(recovery_wall, 3),
        "resolve_hold_s": settings.resolve_hold_s,
        "predicted_delay_s": ",".join(
            f"{r.name}={predicted_delay_s(r, budget=budget, before=b0, after=b1):.0f}" for r in plan.rules
        ),
        "false_breaches": sum(t.false_breaches for t in trials),
        "stationary_minutes_equivalent": round(plan.stationary_s / 60 * len(trials), 1),
        "endpoints": len(trials),
        "rules": ";".join(
            f"{r.name}:{r.long_window_s:g}s/{r.short_window_s:g}s>{r.burn_rate:g}x"
            + (f"+{r.min_bad}bad" if r.min_bad else "")
            for r in plan.rules
        ),
        "time_scale": round(plan.time_scale, 6),
        "rate_per_s": RATE_PER_S,
        "backfill_s": round(plan.history / plan.time_scale),
        "records": sum(t.records for t in trials),
        "records_seen": status["records_seen"],
        "records_dropped": status["records_dropped"],
        "healthy_bad_share": round(b0, 5),
        "regressed_bad_share": round(b1, 4),
        "ttft_target_ms": TTFT_TARGET_MS,
        "attainment_target": ATTAINMENT_TARGET,
        "wall_s": round(wall_s, 1),
    }


def _same_window(rule: BurnRateRule, plan: Plan, window_ms: int) -> bool:
    return abs(rule.long_window_s * plan.time_scale * 1000 - window_ms) < 1


async def run(quick: bool) -> Figures:
    async with scratch_bus("evertune-bench-monitor") as bus:
        plan = Plan(endpoints=1 if quick else FULL_ENDPOINTS)
        return await measure(bus.nc, bus.js, plan, bus.folder)
