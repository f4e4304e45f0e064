"""The searcher's Prometheus metrics, rendered from its `SearcherStats` (stats.py) at scrape time.

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
from evertune.searcher.stats import PROFILE_RESULTS, SearcherStats

#: Label values exported at 0 before they are first counted (so a rate sees the first one, and
#: dashboards find the series): outcomes (`orchestrate.Outcome`), events, failures.
OUTCOMES = ("winner", "no_improvement", "infeasible", "failed", "cancelled")
EVENT_KINDS = ("search.started", "search.completed")
FAILURE_KINDS = ("search_failed", "trial_missing")


def searcher_metrics(stats: SearcherStats) -> Iterator[Metric]:
    """The families of a searcher's stats (see the module doc)."""
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
    yield gauge("evertune_searcher_searches_running", "Searches running now", stats.running)
    yield gauge(
        "evertune_searcher_searches_queued",
        "Search requests waiting for their endpoint's running search or rollout",
        stats.queued,
    )
    yield gauge(
        "evertune_searcher_trials_waiting", "Published jobs whose report is awaited", stats.trials_waiting
    )
    yield counter("evertune_searcher_jobs_published_total", "Trial jobs published", stats.jobs_published)
    yield counter(
        "evertune_searcher_trial_reports_total",
        "trial.completed reports handed to their search",
        stats.trial_reports,
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
        {(result,): stats.profiles.get(result, 0) for result in PROFILE_RESULTS},
        ["result"],
    )
    yield counter(
        "evertune_searcher_failures_total",
        "Failures, by kind",
        by_label(stats.all_failures(), FAILURE_KINDS, 0),
        ["kind"],
    )
    yield from consumer_metrics("evertune_searcher", stats.consumers)
