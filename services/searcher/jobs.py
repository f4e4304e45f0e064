"""Trials on the wire (pure): a `TrialOrder` becomes a `TrialJob`; a `TrialCompleted` becomes a
`TrialResult`. The one place the searcher converts between its trial types and the protobufs.

A job asks the runner for:
- the rate ladder: the profile's peak x each multiplier (`JobTemplate.ladder`); the runner adds
  the gate rate (peak x its headroom) and skips rates above the first one that misses the SLO;
- each rate replayed the template's repeats x the trial's fidelity (1, 2, 4, ...) times, each
  repeat `duration_per_rate` (the template's duration) of its own text, the figures pooled: a later
  halving round measures its closer candidates with more repeats, not one longer run (in which an
  overloaded configuration's queue, and so its TTFT, grows with the run's length);
- the gates: correctness (against the round-0 baseline trial's golden answers, with the endpoint's
  agreement threshold; a `sim-*` class has no outputs to compare, so it is not asked there), slo,
  stability (which makes the runner replay each rate at least twice);
- one seed per search, so every candidate sees the same traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from google.protobuf.duration_pb2 import Duration

from evertune.domain.gate_result import GateResult
from evertune.domain.slo import Slo
from evertune.searcher.model import RatePoint, goodput_of, meets
from evertune.searcher.orchestrate import TrialOrder, TrialResult
from evertune.searcher.strategy import Figures
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2

#: Gates a search asks for, in order (settings may drop some).
GATES: tuple[str, ...] = ("correctness", "slo", "stability")


@dataclass(frozen=True)
class JobTemplate:
    """What every job of one search shares."""

    search_id: str  #: search id
    endpoint: str  #: endpoint name
    profile_id: str  #: profile the trace comes from
    trace_uri: str  #: trace the runner replays
    trace_sha256: str  #: its SHA-256 ("" = not checked)
    slo: endpoint_pb2.Slo  #: the endpoint's SLO
    target_rps: float  #: the profile's peak rate
    ladder: tuple[float, ...]  #: rate multipliers of the peak, ascending
    duration_s: float  #: seconds each rate is replayed at fidelity 1
    warmup_s: float  #: unmeasured seconds before each rate
    repeats: int  #: replays of each rate
    seed: int  #: replay seed of the search
    gates: tuple[str, ...]  #: gate names to ask for
    agreement_threshold: float  #: the endpoint's correctness threshold for lossy changes (0 = default)
    timeout_s: float  #: seconds a trial of fidelity 1 may take from publication (scaled by fidelity)
    engine_model: str = ""  #: model the jobs name, as the live config does ("" = the runner's own)
    endpoint_uid: str = ""  #: the endpoint's immutable id (the search's; "" for one stored before ids)
    headroom: float = 0.0  #: the gates' rate is target x this (TrialJob.slo_headroom; 0 = runner default)


def _duration(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def deadline_of(order: TrialOrder, template: JobTemplate, *, now: datetime) -> datetime:
    """Latest time the runner may report the trial."""
    return now + timedelta(seconds=template.timeout_s * order.request.fidelity)


def trial_job(order: TrialOrder, template: JobTemplate, *, now: datetime) -> jobs_pb2.TrialJob:
    """The job of one order (see the module doc)."""
    request = order.request
    gates = []
    for name in template.gates:
        if name == "correctness" and (order.hardware_class.startswith("sim-") or request.baseline):
            continue  # nothing to compare on a model; the baseline is the reference itself
        if name == "correctness" and request.confirming:
            continue  # the halving round checked this configuration's answers (skip_golden)
        gate = jobs_pb2.GateSpec(name=name)
        if name == "correctness":
            gate.threshold = template.agreement_threshold
            gate.reference_uri = f"trial:{order.reference_trial_id}"
        gates.append(gate)
    job = jobs_pb2.TrialJob(
        job_id=order.job_id,
        search_id=template.search_id,
        trial_id=order.trial_id,
        endpoint=template.endpoint,
        endpoint_uid=template.endpoint_uid,
        hardware_class=order.hardware_class,
        engine_config=request.candidate.spec.to_proto(),
        trace_uri=template.trace_uri,
        trace_sha256=template.trace_sha256,
        profile_id=template.profile_id,
        rates_rps=sorted({round(template.target_rps * m, 6) for m in template.ladder}),
        target_rate_rps=template.target_rps,
        duration_per_rate=_duration(template.duration_s),
        warmup=_duration(template.warmup_s),
        repeats=template.repeats * request.fidelity,
        seed=template.seed,
        slo=template.slo,
        gates=gates,
        baseline=request.baseline,
        slo_headroom=template.headroom,
        skip_golden=request.confirming,
    )
    job.engine_config.model = template.engine_model
    job.deadline.FromDatetime(deadline_of(order, template, now=now))
    return job


def trial_result(
    completed: events_pb2.TrialCompleted, *, order: TrialOrder, slo: endpoint_pb2.Slo, gate_rps: float
) -> TrialResult:
    """What the search takes from a runner's report."""
    metrics = completed.metrics
    points = tuple(
        RatePoint(
            rate_rps=r.rate_rps,
            attainment=r.attainment,
            ttft_p50_ms=r.ttft_p50_ms,
            ttft_p99_ms=r.ttft_p99_ms,
            errors=r.error_count,
        )
        for r in sorted(metrics.rates, key=lambda r: r.rate_rps)
    )
    rule = Slo.from_proto(slo)
    at_gate = next((p for p in points if math.isclose(p.rate_rps, gate_rps, rel_tol=1e-6)), None)
    gates = tuple(GateResult.from_proto(g) for g in completed.gates)
    slo_gate = next((g for g in gates if g.name == "slo"), None)
    if slo_gate is not None:
        meets_slo = slo_gate.passed
    else:
        meets_slo = at_gate is not None and meets(at_gate, slo=rule, p50_target_ms=slo.ttft_p50_ms)
    ok = completed.status == jobs_pb2.TRIAL_STATUS_OK
    figures = Figures(
        goodput_rps=goodput_of(points, slo=rule, p50_target_ms=slo.ttft_p50_ms) if ok else 0.0,
        ttft_p50_ms=metrics.ttft_p50_ms if ok else math.nan,
        meets_slo=ok and meets_slo,
        gates_passed=completed.passed,
        ttft_p99_ms=at_gate.ttft_p99_ms if at_gate else math.nan,
        attainment=at_gate.attainment if at_gate else math.nan,
    )
    return TrialResult(
        trial_id=order.trial_id,
        candidate_key=order.request.candidate.key,
        ok=ok,
        passed=completed.passed,
        figures=figures,
        points=points if ok else (),
        gates=gates,
        error=completed.error,
        simulated=completed.simulated,
        hardware_class=completed.hardware_class or order.hardware_class,
        fidelity=order.request.fidelity,
        round=order.request.round,
        metrics=metrics if ok else None,
        fingerprint=completed.hardware.id,
    )


def missing_result(order: TrialOrder, error: str) -> TrialResult:
    """The result of a trial no runner reported in time."""
    return TrialResult(
        trial_id=order.trial_id,
        candidate_key=order.request.candidate.key,
        ok=False,
        passed=False,
        figures=Figures(goodput_rps=0.0, ttft_p50_ms=math.nan, meets_slo=False, gates_passed=False),
        error=error,
        hardware_class=order.hardware_class,
        fidelity=order.request.fidelity,
        round=order.request.round,
    )
