"""The runner's stats (pure): one dataclass behind both `details()` and `/metrics`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from evertune.domain.gate_result import GateResult
from evertune.infra.bus import ConsumerStats
from evertune.infra.runtime.metrics import FunctionCollector
from evertune.runner.metrics import runner_metrics
from evertune.runner.stats import RunnerStats
from evertune.runner.trial_runner import TrialOutcome
from evertune.v1 import jobs_pb2
from tests.metrics import samples_of, value


def _stats() -> RunnerStats:
    return RunnerStats(
        hardware="cpu", jobs_subject="evertune.jobs.cpu", durable="runner-cpu", instance="h:1:ab"
    )


def _ended(status: str, *, gates_pass: bool = True) -> TrialOutcome:
    outcome = TrialOutcome(job=jobs_pb2.TrialJob(trial_id="t"), started_at=100.0, finished_at=130.0)
    outcome.startup_s, outcome.replay_s = 5.0, 20.0
    if status != "ok":
        outcome.fail(status, "went wrong")  # type: ignore[arg-type]
    elif not gates_pass:
        outcome.gates = [GateResult(name="slo", passed=False, value=0.5, threshold=0.9, detail="")]
    return outcome


def _samples(stats: RunnerStats) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(FunctionCollector(lambda: runner_metrics(stats)))
    return samples_of(generate_latest(registry).decode())


def test_details_and_metrics_read_the_same_counts() -> None:
    stats = _stats()
    for status in ("ok", "error", "timeout", "cancelled"):
        stats.trial_ended(_ended(status))
    stats.trial_ended(_ended("ok", gates_pass=False))
    stats.republished += 1
    stats.jobs = ConsumerStats(acked=4, retried=2, poisoned=1, abandoned=1)
    stats.current_trial, stats.phase = "t-9", "TRIAL_PHASE_REPLAYING"
    details = stats.details()
    assert details == {
        "hardware": "cpu",
        "fingerprint": "",
        "tier": "",
        "jobs_subject": "evertune.jobs.cpu",
        "instance": "h:1:ab",
        "trial": "t-9",
        "phase": "TRIAL_PHASE_REPLAYING",
        "trials_run": 5,
        "trials_failed": 3,
        "republished": 1,
        "retried": 2,
        "abandoned": 1,
        "poisoned": 1,
        "cancelled": 1,
    }
    samples = _samples(stats)
    outcomes = ("passed", "failed_gates", "error", "timeout", "cancelled")
    assert [value(samples, "evertune_runner_trials_total", outcome=o) for o in outcomes] == [1] * 5
    trials = sum(value(samples, "evertune_runner_trials_total", outcome=o) for o in outcomes)
    assert trials == details["trials_run"]
    assert value(samples, "evertune_runner_jobs_republished_total") == details["republished"]
    retried = value(samples, "evertune_runner_messages_retried_total", consumer="runner-cpu")
    assert retried == details["retried"]
    assert value(samples, "evertune_runner_trial_running") == 1
    assert value(samples, "evertune_runner_failures_total", kind="trial_error") == 1
    assert value(samples, "evertune_runner_trial_phase_seconds_count", phase="engine_start") == 5
    assert value(samples, "evertune_runner_trial_phase_seconds_count", phase="warmup") == 0  # not reached
    assert not any(name == "evertune_runner_jobs_pending" for name, _ in samples)  # unknown: left out


def test_a_runner_before_its_first_trial() -> None:
    stats = _stats()
    details = stats.details()
    assert details["trials_run"] == details["trials_failed"] == details["cancelled"] == 0
    assert details["retried"] == details["abandoned"] == details["poisoned"] == 0
    samples = _samples(stats)
    assert value(samples, "evertune_runner_trials_total", outcome="passed") == 0
    assert value(samples, "evertune_runner_trial_running") == 0
    assert not any(name.startswith("evertune_runner_messages_") for name, _ in samples)
    stats.jobs_pending = 3
    assert value(_samples(stats), "evertune_runner_jobs_pending", hardware="cpu") == 3
