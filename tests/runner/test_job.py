"""Turning a wire TrialJob into a plan (pure)."""

from __future__ import annotations

import pytest

from evertune.infra.bus import PoisonMessage
from evertune.runner.job import InvalidJob, decode_job, effective_rates, gate_rate, plan_trial
from evertune.v1 import jobs_pb2

from .helpers import job


def test_target_and_gate_rates_are_added_once_and_sorted() -> None:
    plan = plan_trial(job(hardware="cpu", rates=(10.0, 2.0, 8.0), target=8.0), slo_headroom=1.25)
    assert plan.rates_rps == (2.0, 8.0, 10.0)
    assert plan.target_rate_rps == 8.0 and plan.gate_rate_rps == 10.0
    assert effective_rates([1.0, 1.0000000001], extra=[2.0]) == (1.0, 2.0)


def test_the_jobs_slo_headroom_sets_the_gate_rate_and_zero_means_the_runners_default() -> None:
    asked = job(hardware="cpu", rates=(4.0, 8.0), target=8.0)
    asked.slo_headroom = 1.5
    plan = plan_trial(asked, slo_headroom=1.25)
    assert plan.gate_rate_rps == 12.0 and plan.slo_headroom == 1.5
    assert plan.rates_rps == (4.0, 8.0, 12.0)
    default = plan_trial(job(hardware="cpu", rates=(4.0,), target=8.0), slo_headroom=1.25)
    assert default.gate_rate_rps == 10.0 and default.slo_headroom == 1.25
    highest = gate_rate(target_rps=0.0, rates_rps=[3.0, 6.0], job_headroom=2.0, default_headroom=1.25)
    assert highest == (6.0, 1.0)  # no target: the highest rate, no headroom
    assert gate_rate(target_rps=4.0, rates_rps=[], job_headroom=1.0, default_headroom=1.25) == (4.0, 1.0)
    for bad in (0.5, 11.0, float("nan"), -1.0):
        with pytest.raises(InvalidJob, match="slo_headroom must be 0"):
            gate_rate(target_rps=4.0, rates_rps=[], job_headroom=bad, default_headroom=1.25)


def test_stability_needs_two_repeats_and_a_zero_target_means_the_highest_rate() -> None:
    one = job(hardware="cpu", rates=(3.0, 6.0), target=0.0, gates=("stability",))
    one.repeats = 1
    plan = plan_trial(one, slo_headroom=1.25)
    assert plan.repeats == 2 and plan.target_rate_rps == 6.0 and plan.gate_rate_rps == 6.0
    assert plan.rates_rps == (3.0, 6.0)
    alias = job(hardware="cpu", gates=())
    alias.gates.add(name="reliability")
    assert plan_trial(alias, slo_headroom=1.25).gates[0].name == "stability"


def test_slo_defaults_no_itl_target_is_unbounded_and_attainment_defaults_to_090() -> None:
    j = job(hardware="cpu")
    j.slo.itl_p99_ms = 0
    j.slo.attainment_target = 0
    plan = plan_trial(j, slo_headroom=1.25)
    assert plan.slo.itl_ms == float("inf") and plan.slo.share == 0.9 and plan.slo.ttft_ms == 200.0


#: A job that asks to skip the golden answers and to gate on them.
_SKIP_GOLDEN_WITH_CORRECTNESS = jobs_pb2.TrialJob(
    skip_golden=True, gates=[jobs_pb2.GateSpec(name="correctness")]
)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda j: (j.ClearField("rates_rps"), j.ClearField("target_rate_rps")), "names no rate"),
        (lambda j: j.rates_rps.append(-1.0), "positive number"),
        (lambda j: j.gates.add(name="vibes"), "unknown gate 'vibes'"),
        (lambda j: setattr(j.slo, "ttft_p99_ms", 0.0), "ttft_p99_ms must be > 0"),
        (lambda j: setattr(j, "trace_uri", ""), "names no trace"),
        (lambda j: setattr(j, "slo_headroom", 0.9), "slo_headroom must be 0"),
        (lambda j: j.MergeFrom(_SKIP_GOLDEN_WITH_CORRECTNESS), "skip_golden with a correctness gate"),
    ],
)
def test_a_job_that_cannot_run_says_why_in_one_line(change, message: str) -> None:  # type: ignore[no-untyped-def]
    j = job(hardware="cpu")
    change(j)
    with pytest.raises(InvalidJob, match=message):
        plan_trial(j, slo_headroom=1.25)


def test_undecodable_or_anonymous_jobs_are_poison() -> None:
    with pytest.raises(PoisonMessage, match="undecodable"):
        decode_job(b"\xff\xff\xff")
    with pytest.raises(PoisonMessage, match="job_id"):
        decode_job(jobs_pb2.TrialJob(trial_id="t").SerializeToString())
    with pytest.raises(PoisonMessage, match="no endpoint"):
        decode_job(jobs_pb2.TrialJob(job_id="j", trial_id="t").SerializeToString())
    good = job(hardware="cpu")
    assert decode_job(good.SerializeToString()) == good


def test_a_confirmation_repeat_collects_no_golden_answers_even_as_the_baseline() -> None:
    base = job(hardware="cpu", baseline=True)
    assert plan_trial(base, slo_headroom=1.25).needs_golden
    base.skip_golden = True
    assert not plan_trial(base, slo_headroom=1.25).needs_golden
