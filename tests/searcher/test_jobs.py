"""Trials on the wire: what a job asks of a runner, and what a report becomes."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime

from evertune.domain.engines import EngineSpec
from evertune.domain.slo import Slo
from evertune.searcher.jobs import JobTemplate, trial_job, trial_result
from evertune.searcher.model import RatePoint, goodput_of
from evertune.searcher.orchestrate import TrialOrder
from evertune.searcher.space import Candidate, config_key
from evertune.searcher.strategy import TrialRequest
from evertune.searcher.summary import knob_changes
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2

SPEC = EngineSpec(model="/models/tiny", max_num_seqs=64, enable_prefix_caching=True)
CANDIDATE = Candidate(spec=SPEC, key=config_key(SPEC), lossy=False, devices=0)
SLO = endpoint_pb2.Slo(ttft_p99_ms=200.0, attainment_target=0.9)
TEMPLATE = JobTemplate(
    search_id="search-1",
    endpoint="voice",
    endpoint_uid="ep-0123456789abcdef01234567",
    profile_id="prof-1",
    trace_uri="file:///traces/prof-1.jsonl",
    trace_sha256="ab" * 32,
    slo=SLO,
    target_rps=4.0,
    ladder=(1.0, 1.5, 2.0),
    duration_s=30.0,
    warmup_s=5.0,
    repeats=1,
    seed=7,
    gates=("correctness", "slo", "stability"),
    agreement_threshold=0.97,
    timeout_s=600.0,
    engine_model="",
)


def _order(*, hardware: str = "cpu", baseline: bool = False, fidelity: int = 2) -> TrialOrder:
    request = TrialRequest(candidate=CANDIDATE, fidelity=fidelity, round=1, baseline=baseline)
    return TrialOrder(
        request=request,
        hardware_class=hardware,
        trial_id="search-1-r1-x",
        job_id="job-search-1-r1-x",
        reference_trial_id="search-1-r0-base",
    )


def test_a_candidate_job_asks_for_the_ladder_the_gates_and_the_baselines_reference() -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    job = trial_job(_order(), TEMPLATE, now=now)
    assert list(job.rates_rps) == [4.0, 6.0, 8.0] and job.target_rate_rps == 4.0
    # fidelity 2: twice the template's repeats of its duration, not one run twice as long
    assert job.duration_per_rate.seconds == 30 and job.warmup.seconds == 5
    assert job.repeats == 2 * TEMPLATE.repeats
    assert [g.name for g in job.gates] == ["correctness", "slo", "stability"]
    assert job.gates[0].reference_uri == "trial:search-1-r0-base" and job.gates[0].threshold == 0.97
    assert job.engine_config.model == "" and job.engine_config.max_num_seqs == 64  # the runner's model
    assert job.deadline.ToDatetime(tzinfo=UTC) == datetime(2026, 11, 30, 0, 20, tzinfo=UTC)
    assert job.job_id == "job-search-1-r1-x" and job.seed == 7 and not job.baseline
    # the endpoint by name and by id: the runner stamps the id on the trial's events
    assert job.endpoint == "voice" and job.endpoint_uid == "ep-0123456789abcdef01234567"


def test_no_correctness_gate_for_the_baseline_or_on_a_model() -> None:
    now = datetime.now(UTC)
    assert [g.name for g in trial_job(_order(baseline=True), TEMPLATE, now=now).gates] == ["slo", "stability"]
    assert [g.name for g in trial_job(_order(hardware="sim-h200"), TEMPLATE, now=now).gates] == [
        "slo",
        "stability",
    ]


def test_a_confirmation_pair_asks_for_no_golden_answers_and_no_correctness_gate() -> None:
    """The halving round checked the leader's answers at the same configuration, and the
    baseline's are the reference already: a repeat re-collects nothing."""
    now = datetime.now(UTC)
    for baseline in (False, True):
        order = _order(baseline=baseline)
        confirming = dataclasses.replace(order, request=dataclasses.replace(order.request, confirming=True))
        job = trial_job(confirming, TEMPLATE, now=now)
        assert job.skip_golden and [g.name for g in job.gates] == ["slo", "stability"]
        assert not trial_job(order, TEMPLATE, now=now).skip_golden


def _report(status: jobs_pb2.TrialStatus = jobs_pb2.TRIAL_STATUS_OK) -> events_pb2.TrialCompleted:
    rates = [
        jobs_pb2.RatePoint(rate_rps=4.0, attainment=0.99, ttft_p50_ms=40, ttft_p99_ms=120),
        jobs_pb2.RatePoint(rate_rps=5.0, attainment=0.97, ttft_p50_ms=50, ttft_p99_ms=150),
        jobs_pb2.RatePoint(rate_rps=6.0, attainment=0.95, ttft_p50_ms=60, ttft_p99_ms=180),
        jobs_pb2.RatePoint(rate_rps=8.0, attainment=0.75, ttft_p50_ms=300, ttft_p99_ms=900),
    ]
    metrics = jobs_pb2.TrialMetrics(ttft_p50_ms=40, goodput_rps=6.0, rates=rates)
    gate = jobs_pb2.GateResult(name="slo", passed=True, value=0.97, threshold=0.9)
    return events_pb2.TrialCompleted(
        trial_id="search-1-r1-x",
        job_id="job-search-1-r1-x",
        status=status,
        metrics=metrics,
        gates=[gate],
        passed=status == jobs_pb2.TRIAL_STATUS_OK,
        hardware_class="cpu",
        error="" if status == jobs_pb2.TRIAL_STATUS_OK else "engine exited with code 1",
    )


def test_a_report_becomes_figures_with_goodput_interpolated_on_the_ladder() -> None:
    result = trial_result(_report(), order=_order(), slo=SLO, gate_rps=5.0)
    assert result.ok and result.passed and result.figures.meets_slo
    # 6 rps meets (0.95), 8 misses (0.75): attainment crosses 0.9 a quarter of the way.
    assert math.isclose(result.figures.goodput_rps, 6.5)
    assert result.figures.attainment == 0.97 and result.figures.ttft_p99_ms == 150
    assert [p.rate_rps for p in result.points] == [4.0, 5.0, 6.0, 8.0] and result.fidelity == 2
    failed = trial_result(_report(jobs_pb2.TRIAL_STATUS_ERROR), order=_order(), slo=SLO, gate_rps=5.0)
    assert not failed.ok and not failed.figures.meets_slo and failed.error == "engine exited with code 1"


def test_goodput_of_a_ladder() -> None:
    slo = Slo(ttft_ms=200, itl_ms=math.inf, share=0.9)

    def ladder(*attainments: float) -> list[RatePoint]:
        return [RatePoint(float(i + 1), a, 10.0, 20.0) for i, a in enumerate(attainments)]

    assert goodput_of(ladder(0.5, 0.4), slo=slo, p50_target_ms=0) == 0.0
    assert goodput_of(ladder(1.0, 0.95, 0.92), slo=slo, p50_target_ms=0) == 3.0  # top: a lower bound
    assert math.isclose(goodput_of(ladder(1.0, 0.95, 0.85), slo=slo, p50_target_ms=0), 2.5)
    # A p50 target fails a rate whose attainment is fine.
    assert goodput_of(ladder(1.0, 0.95), slo=slo, p50_target_ms=5.0) == 0.0


def test_knob_changes_read_as_before_and_after() -> None:
    base = EngineSpec(model="/m", enable_prefix_caching=False)
    spec = EngineSpec(model="/other", enable_prefix_caching=True, max_num_batched_tokens=4096)
    assert knob_changes(base, spec) == [
        "enable_prefix_caching off -> on",
        "max_num_batched_tokens default -> 4096",
    ]
