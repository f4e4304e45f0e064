"""The runner's Prometheus metrics, rendered from its `RunnerStats` (stats.py) at scrape time.

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

from collections.abc import Iterator

from prometheus_client.core import Metric

from evertune.infra.runtime.metrics import Distribution, by_label, consumer_metrics, counter, gauge, histogram
from evertune.runner.stats import PHASE_BUCKETS, PHASES, RunnerStats

#: Label values exported at 0 before they are first counted (so a rate sees the first one, and
#: dashboards and alerts find the series): outcomes, events, failures.
OUTCOMES = ("passed", "failed_gates", "error", "timeout", "cancelled")
EVENT_KINDS = ("trial.progress", "trial.completed")
FAILURE_KINDS = ("trial_error", "trial_timeout", "progress_unpublished")


def runner_metrics(stats: RunnerStats) -> Iterator[Metric]:
    """The families of a runner's stats (see the module doc)."""
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
    yield gauge("evertune_runner_trial_running", "1 while a trial runs", 1.0 if stats.current_trial else 0.0)
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
    if stats.jobs_pending is not None:
        yield gauge(
            "evertune_runner_jobs_pending",
            "Jobs of this hardware class waiting in JOBS, not yet delivered (read at each scrape)",
            {(stats.hardware,): stats.jobs_pending},
            ["hardware"],
        )
    yield from consumer_metrics("evertune_runner", {stats.durable: stats.jobs} if stats.jobs else {})
