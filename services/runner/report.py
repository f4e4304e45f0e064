"""A trial's outcome as the world sees it (pure): the `trial.completed` payload and the `trials` row.

The row carries the payload itself (`completed_pb`), so a redelivered job whose result is already
stored republishes exactly what was stored. Ids that make reporting idempotent:
- the event id of `trial.completed` is derived from the job id (`completed_event_id`), so a repeat
  publish within the EVENTS duplicate window is stored once;
- the row's insert deduplication token is `trial:<trial_id>:job:<job_id>` (`dedup_token`): one row
  per job. A trial run again (after an error, say) is a new job with a new job id, and a new row.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration

from evertune.domain.engines.fingerprint import Fingerprint, fingerprint_proto
from evertune.domain.replay import Summary
from evertune.runner.measure import RateFigures, at_rate, goodput_rps
from evertune.runner.trial_runner import TrialOutcome
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2

STATUS: dict[str, jobs_pb2.TrialStatus] = {
    "ok": jobs_pb2.TRIAL_STATUS_OK,
    "error": jobs_pb2.TRIAL_STATUS_ERROR,
    "timeout": jobs_pb2.TRIAL_STATUS_TIMEOUT,
    "cancelled": jobs_pb2.TRIAL_STATUS_CANCELLED,
}
#: Characters of engine log kept in a row.
LOG_TAIL_CHARS = 16_000

#: Columns of `trials` (infra/clickhouse/0003_trials.sql), in insert order.
COLUMNS: tuple[str, ...] = (
    "trial_id",
    "job_id",
    "search_id",
    "endpoint",
    "profile_id",
    "hardware_class",
    "runner",
    "hardware_fingerprint",
    "hardware_tier",
    "baseline",
    "simulated",
    "status",
    "passed",
    "error",
    "log_tail",
    "started_at",
    "finished_at",
    "duration_s",
    "startup_s",
    "deliveries",
    "engine_config",
    "config_key",
    "trace_uri",
    "trace_sha256",
    "seed",
    "slo_ttft_p50_ms",
    "slo_ttft_p99_ms",
    "slo_itl_p99_ms",
    "slo_attainment",
    "target_rate_rps",
    "gate_rate_rps",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "itl_p99_ms",
    "attainment",
    "goodput_rps",
    "rates",
    "skipped_rates",
    "gates",
    "golden_set",
    "golden_hashes",
    "golden_alternatives",
    "golden_reference",
    "agreement",
    "client_fell_behind",
    "completed_pb",
)


def completed_event_id(job_id: str) -> str:
    """Event id of a job's `trial.completed` (the same for every delivery of the job)."""
    return hashlib.sha256(f"trial.completed:{job_id}".encode()).hexdigest()[:32]


def dedup_token(trial_id: str, job_id: str) -> str:
    """Insert deduplication token of a job's row."""
    return f"trial:{trial_id}:job:{job_id}"


def config_json(config: endpoint_pb2.EngineConfig) -> str:
    """Canonical JSON of an engine config (set fields only, proto names, sorted keys)."""
    return json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True), sort_keys=True)


def _rate_point(figures: RateFigures) -> jobs_pb2.RatePoint:
    p = figures.pooled
    return jobs_pb2.RatePoint(
        rate_rps=figures.rate_rps,
        request_count=p.requests,
        error_count=p.errors,
        ttft_p50_ms=p.ttft_ms.p50,
        ttft_p90_ms=p.ttft_ms.p90,
        ttft_p99_ms=p.ttft_ms.p99,
        itl_p99_ms=p.itl_ms.p99,
        attainment=p.attainment or 0.0,
    )


def trial_metrics(outcome: TrialOutcome) -> jobs_pb2.TrialMetrics:
    """Headline figures at the target rate (NaN where it was not measured) and every rate."""
    metrics = jobs_pb2.TrialMetrics(rates=[_rate_point(r) for r in outcome.rates])
    plan = outcome.plan
    if plan is None:
        return metrics
    target: Summary | None = None
    figures = at_rate(outcome.rates, plan.target_rate_rps)
    if figures is not None:
        target = figures.pooled
    nan = math.nan
    metrics.ttft_p50_ms = target.ttft_ms.p50 if target else nan
    metrics.ttft_p90_ms = target.ttft_ms.p90 if target else nan
    metrics.ttft_p99_ms = target.ttft_ms.p99 if target else nan
    metrics.itl_p99_ms = target.itl_ms.p99 if target else nan
    metrics.attainment = (target.attainment or 0.0) if target else nan
    metrics.goodput_rps = goodput_rps(outcome.rates, slo=plan.slo)
    return metrics


def completed(
    outcome: TrialOutcome, *, runner: str, simulated: bool, hardware: Fingerprint
) -> events_pb2.TrialCompleted:
    """The `trial.completed` payload of an outcome, measured on `hardware`."""
    job = outcome.job
    metrics = trial_metrics(outcome) if outcome.status == "ok" else jobs_pb2.TrialMetrics()
    config = outcome.spec.to_proto() if outcome.spec is not None else job.engine_config
    duration = Duration()
    duration.FromNanoseconds(round(max(outcome.finished_at - outcome.started_at, 0.0) * 1e9))
    error = outcome.error
    if outcome.status != "ok" and outcome.log_tail:
        error = f"{error} | log: {outcome.log_tail[-1].strip()[:300]}"
    return events_pb2.TrialCompleted(
        search_id=job.search_id,
        trial_id=job.trial_id,
        job_id=job.job_id,
        hardware_class=job.hardware_class,
        engine_config=config,
        status=STATUS[outcome.status],
        metrics=metrics,
        ttft_p50_ms=metrics.ttft_p50_ms,
        ttft_p99_ms=metrics.ttft_p99_ms,
        goodput_rps=metrics.goodput_rps,
        gates=[g.to_proto() for g in outcome.gates],
        passed=outcome.passed,
        simulated=simulated,
        baseline=job.baseline,
        duration=duration,
        runner=runner,
        error=error,
        hardware=fingerprint_proto(hardware),
        phases=jobs_pb2.TrialPhases(
            engine_start_s=0.0 if math.isnan(outcome.startup_s) else outcome.startup_s,
            warmup_s=outcome.warmup_s,
            golden_s=outcome.golden_s,
            replay_s=outcome.replay_s,
            engine_stop_s=outcome.stop_s,
        ),
    )


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def row(outcome: TrialOutcome, payload: events_pb2.TrialCompleted, *, deliveries: int) -> list[Any]:
    """The `trials` row (values in `COLUMNS` order)."""
    job = outcome.job
    plan = outcome.plan
    metrics = payload.metrics
    config = config_json(payload.engine_config)
    log_tail = "\n".join(outcome.log_tail)[-LOG_TAIL_CHARS:]
    rates = [
        (
            r.rate_rps,
            r.request_count,
            r.error_count,
            r.ttft_p50_ms,
            r.ttft_p90_ms,
            r.ttft_p99_ms,
            r.itl_p99_ms,
            r.attainment,
        )
        for r in metrics.rates
    ]
    gates = [(g.name, g.passed, g.value, g.threshold, g.detail) for g in payload.gates]
    values: dict[str, Any] = {
        "trial_id": job.trial_id,
        "job_id": job.job_id,
        "search_id": job.search_id,
        "endpoint": job.endpoint,
        "profile_id": job.profile_id,
        "hardware_class": job.hardware_class,
        "runner": payload.runner,
        "hardware_fingerprint": payload.hardware.id,
        "hardware_tier": payload.hardware.tier,
        "baseline": job.baseline,
        "simulated": payload.simulated,
        "status": outcome.status,
        "passed": payload.passed,
        "error": outcome.error,
        "log_tail": log_tail,
        "started_at": _utc(outcome.started_at),
        "finished_at": _utc(outcome.finished_at),
        "duration_s": max(outcome.finished_at - outcome.started_at, 0.0),
        "startup_s": outcome.startup_s,
        "deliveries": deliveries,
        "engine_config": config,
        "config_key": hashlib.sha256(config.encode()).hexdigest()[:16],
        "trace_uri": job.trace_uri,
        "trace_sha256": job.trace_sha256,
        "seed": job.seed,
        "slo_ttft_p50_ms": job.slo.ttft_p50_ms,
        "slo_ttft_p99_ms": job.slo.ttft_p99_ms,
        "slo_itl_p99_ms": job.slo.itl_p99_ms,
        "slo_attainment": plan.slo.share if plan else job.slo.attainment_target,
        "target_rate_rps": plan.target_rate_rps if plan else job.target_rate_rps,
        "gate_rate_rps": plan.gate_rate_rps if plan else 0.0,
        "ttft_p50_ms": metrics.ttft_p50_ms,
        "ttft_p90_ms": metrics.ttft_p90_ms,
        "ttft_p99_ms": metrics.ttft_p99_ms,
        "itl_p99_ms": metrics.itl_p99_ms,
        "attainment": metrics.attainment,
        "goodput_rps": metrics.goodput_rps,
        "rates": rates,
        "skipped_rates": list(outcome.skipped_rates),
        "gates": gates,
        "golden_set": outcome.golden.set_id if outcome.golden and outcome.golden_chains else "",
        "golden_hashes": outcome.golden_chains,
        "golden_alternatives": outcome.golden_alternatives,
        "golden_reference": outcome.reference_trial,
        "agreement": outcome.agreement.share if outcome.agreement else math.nan,
        "client_fell_behind": any(r.client_fell_behind for r in outcome.rates),
        "completed_pb": base64.b64encode(payload.SerializeToString()).decode("ascii"),
    }
    return [values[name] for name in COLUMNS]
