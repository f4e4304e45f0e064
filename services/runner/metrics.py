"""The runner's Prometheus metrics, read from its `RunnerStats` at scrape time (one source of truth).

Served on `EVERTUNE_RUNNER_METRICS_PORT` (9404; 0 a free port, -1 off). The table with every
metric's type, labels and meaning is in docs/services/runner.md:

- `evertune_runner_trials_total{outcome}`: passed, failed_gates, error, timeout, cancelled;
- `evertune_runner_trial_duration_seconds`, `evertune_runner_trial_phase_seconds{phase}`
  (histograms; phases engine_start, warmup, golden, replay, engine_stop);
- `evertune_runner_trial_running`, `evertune_runner_jobs_republished_total`,
  `evertune_runner_events_published_total{kind}`, `evertune_runner_failures_total{kind}`;
- `evertune_runner_messages_*{consumer}`: the jobs consumer (`consumer_metrics`).

A phase the trial never reached is not observed (an engine that never got ready has no
`engine_start` observation; its trial counts as `error`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from evertune.infra.runtime.metrics import (
    SLOW_BUCKETS,
    Distribution,
    by_label,
    consumer_metrics,
    counter,
    gauge,
    histogram,
)

if TYPE_CHECKING:
    from evertune.runner.service import RunnerService
    from evertune.runner.trial import TrialOutcome

#: Phases timed in a trial, as the `phase` label names them.
PHASES = ("engine_start", "warmup", "golden", "replay", "engine_stop")
#: Label values exported at 0 before they are first counted (so a rate sees the first one, and
#: dashboards and alerts find the series): outcomes, events, failures.
OUTCOMES = ("passed", "failed_gates", "error", "timeout", "cancelled")
EVENT_KINDS = ("trial.progress", "trial.completed")
FAILURE_KINDS = ("trial_error", "trial_timeout", "progress_unpublished")
#: Buckets (s) of one phase: from a sim engine's ~0.1 s start to a long replay.
PHASE_BUCKETS = (0.1, 0.5, *SLOW_BUCKETS)


def _slow() -> Distribution:
    return Distribution(SLOW_BUCKETS)


@dataclass
class RunnerStats:
    """What the runner counts, kept as plain data (exported by `RunnerCollector`)."""

    trials: dict[str, int] = field(default_factory=dict)  #: trials run to an end, by outcome
    trial_seconds: Distribution = field(default_factory=_slow)  #: a trial, taken to reported
    #: seconds of each phase of a trial, by phase (`PHASES`)
    phase_seconds: dict[str, Distribution] = field(default_factory=dict)
    republished: int = 0  #: redelivered jobs answered from the store
    events: dict[str, int] = field(default_factory=dict)  #: events published, by kind
    failures: dict[str, int] = field(default_factory=dict)  #: failures, by kind

    def trial(self, outcome: TrialOutcome) -> None:
        """Count one trial that ran to an outcome, with its phases' durations."""
        label = "passed" if outcome.passed else "failed_gates" if outcome.status == "ok" else outcome.status
        self.trials[label] = self.trials.get(label, 0) + 1
        if outcome.status in ("error", "timeout"):
            self.failure(f"trial_{outcome.status}")
        if outcome.finished_at > 0:
            self.trial_seconds.observe(max(0.0, outcome.finished_at - outcome.started_at))
        phases = {
            "engine_start": outcome.startup_s,
            "warmup": outcome.warmup_s,
            "golden": outcome.golden_s,
            "replay": outcome.replay_s,
            "engine_stop": outcome.stop_s,
        }
        for phase, seconds in phases.items():
            if math.isnan(seconds) or (seconds <= 0 and phase != "engine_start"):
                continue  # a phase the trial did not reach
            self.phase_seconds.setdefault(phase, Distribution(PHASE_BUCKETS)).observe(seconds)

    def event(self, kind: str) -> None:
        """Count one event published."""
        self.events[kind] = self.events.get(kind, 0) + 1

    def failure(self, kind: str) -> None:
        """Count one failure of `kind`."""
        self.failures[kind] = self.failures.get(kind, 0) + 1


def runner_metrics(service: RunnerService) -> Iterator[Metric]:
    """The families of a runner (see the module doc)."""
    stats = service.stats
    yield counter(
        "evertune_runner_trials_total",
        "Trials run to an end, by outcome",
        by_label(stats.trials, OUTCOMES, 0),
        ["outcome"],
    )
    yield histogram(
        "evertune_runner_trial_duration_seconds", "A trial, from taken to reported", stats.trial_seconds
    )
    yield histogram(
        "evertune_runner_trial_phase_seconds",
        "Seconds of each phase of a trial",
        by_label(stats.phase_seconds, PHASES, Distribution(PHASE_BUCKETS)),
        ["phase"],
    )
    yield gauge(
        "evertune_runner_trial_running", "1 while a trial runs", 1.0 if service.current_trial else 0.0
    )
    yield counter(
        "evertune_runner_jobs_republished_total",
        "Redelivered jobs answered from the store",
        stats.republished,
    )
    yield counter(
        "evertune_runner_events_published_total",
        "Events published, by kind",
        by_label(stats.events, EVENT_KINDS, 0),
        ["kind"],
    )
    yield counter(
        "evertune_runner_failures_total",
        "Failures, by kind",
        by_label(stats.failures, FAILURE_KINDS, 0),
        ["kind"],
    )
    if service.jobs_pending is not None:
        yield gauge(
            "evertune_runner_jobs_pending",
            "Jobs of this hardware class waiting in JOBS, not yet delivered (read at each scrape)",
            {(service.settings.hardware,): service.jobs_pending},
            ["hardware"],
        )
    jobs = service.jobs_consumer
    yield from consumer_metrics("evertune_runner", {jobs[0]: jobs[1]} if jobs else {})
