"""The searcher's Prometheus metrics, read from its stats at scrape time (one source of truth).

Served on `EVERTUNE_SEARCHER_METRICS_PORT` (9403; 0 a free port, -1 off). The table with every
metric's type, labels and meaning is in docs/services/searcher.md:

- `evertune_searcher_searches_total{outcome}`, `evertune_searcher_search_duration_seconds{outcome}`
  and `evertune_searcher_search_trials` (histograms): searches ended, how long, how many trials;
- gauges `evertune_searcher_searches_running`, `_searches_queued`, `_trials_waiting`;
- counters `evertune_searcher_jobs_published_total`, `_trial_reports_total`,
  `_events_published_total{kind}`, `_profiles_total{result}`, `_failures_total{kind}`;
- `evertune_searcher_messages_*{consumer}`: its three consumers (`consumer_metrics`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from evertune.infra.runtime.metrics import (
    COUNT_BUCKETS,
    SLOW_BUCKETS,
    Distribution,
    by_label,
    consumer_metrics,
    counter,
    gauge,
    histogram,
)

if TYPE_CHECKING:
    from evertune.searcher.service import SearcherService


#: Label values exported at 0 before they are first counted (so a rate sees the first one, and
#: dashboards find the series): outcomes (`orchestrate.Outcome`), events, failures.
OUTCOMES = ("winner", "no_improvement", "infeasible", "failed", "cancelled")
EVENT_KINDS = ("search.started", "search.completed")
FAILURE_KINDS = ("search_failed", "trial_missing")


@dataclass
class SearcherStats:
    """What the searcher counts, kept as plain data (exported by `searcher_metrics`)."""

    searches: dict[str, int] = field(default_factory=dict)  #: searches ended, by outcome
    #: seconds from start to end, by outcome
    search_seconds: dict[str, Distribution] = field(default_factory=dict)
    #: real trials each ended search completed
    search_trials: Distribution = field(default_factory=lambda: Distribution(COUNT_BUCKETS))
    events: dict[str, int] = field(default_factory=dict)  #: events published, by kind
    failures: dict[str, int] = field(default_factory=dict)  #: failures, by kind

    def search_ended(self, outcome: str, *, seconds: float, trials: int) -> None:
        """Count one ended search."""
        self.searches[outcome] = self.searches.get(outcome, 0) + 1
        self.search_seconds.setdefault(outcome, Distribution(SLOW_BUCKETS)).observe(max(0.0, seconds))
        self.search_trials.observe(trials)
        if outcome == "failed":
            self.failure("search_failed")

    def event(self, kind: str) -> None:
        """Count one event published."""
        self.events[kind] = self.events.get(kind, 0) + 1

    def failure(self, kind: str, n: int = 1) -> None:
        """Count `n` failures of `kind`."""
        if n:
            self.failures[kind] = self.failures.get(kind, 0) + n


def searcher_metrics(service: SearcherService) -> Iterator[Metric]:
    """The families of a searcher (see the module doc)."""
    searches, trials = service.searches, service.trials
    stats = searches.stats if searches is not None else SearcherStats()
    yield counter(
        "evertune_searcher_searches_total",
        "Searches ended, by outcome",
        by_label(stats.searches, OUTCOMES, 0),
        ["outcome"],
    )
    yield histogram(
        "evertune_searcher_search_duration_seconds",
        "A search, from start to end",
        by_label(stats.search_seconds, OUTCOMES, Distribution(SLOW_BUCKETS)),
        ["outcome"],
    )
    yield histogram(
        "evertune_searcher_search_trials", "Real trials an ended search completed", stats.search_trials
    )
    yield gauge(
        "evertune_searcher_searches_running", "Searches running now", searches.running if searches else 0
    )
    yield gauge(
        "evertune_searcher_searches_queued",
        "Search requests waiting for their endpoint's running search or rollout",
        searches.queued_count if searches else 0,
    )
    yield gauge(
        "evertune_searcher_trials_waiting",
        "Published jobs whose report is awaited",
        trials.waiting if trials else 0,
    )
    yield counter(
        "evertune_searcher_jobs_published_total", "Trial jobs published", trials.published if trials else 0
    )
    yield counter(
        "evertune_searcher_trial_reports_total",
        "trial.completed reports handed to their search",
        trials.reports if trials else 0,
    )
    yield counter(
        "evertune_searcher_events_published_total",
        "Events published, by kind",
        by_label(stats.events, EVENT_KINDS, 0),
        ["kind"],
    )
    yield counter(
        "evertune_searcher_profiles_total",
        "profile.ready events, by what they led to",
        {
            ("started",): service.profiles_started,
            ("queued",): service.profiles_queued,
            ("skipped",): service.profiles_skipped,
        },
        ["result"],
    )
    failures = dict(stats.failures)
    if trials is not None and trials.missing:
        failures["trial_missing"] = trials.missing
    yield counter(
        "evertune_searcher_failures_total",
        "Failures, by kind",
        by_label(failures, FAILURE_KINDS, 0),
        ["kind"],
    )
    yield from consumer_metrics("evertune_searcher", {name: c.stats for name, c in service.consumers.items()})
