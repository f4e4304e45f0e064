"""What the searcher is doing and what it counted, as plain data: one `SearcherStats` per searcher.

`SearchSupervisor` counts the searches it ends and the events it publishes (`search_ended`,
`event`); what other parts keep (searches running and queued, the trial bus's jobs and reports, the
profile.ready consumer's results, the consumers' stats) is read into it before it is shown
(`SearcherService.read_stats`). Two readers render it, neither keeps figures of its own:
`details()` is the searcher's state as `evertune status` shows it, and `metrics.searcher_metrics`
its Prometheus families.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evertune.infra.bus import ConsumerStats
from evertune.infra.runtime.metrics import COUNT_BUCKETS, SLOW_BUCKETS, Distribution

#: Results of a profile.ready event (`SearcherStats.profiles`).
PROFILE_RESULTS = ("started", "queued", "skipped")


@dataclass
class SearcherStats:
    """The searcher's state and counts (see the module doc)."""

    searches: dict[str, int] = field(default_factory=dict)  #: searches ended, by outcome
    #: seconds from start to end, by outcome
    search_seconds: dict[str, Distribution] = field(default_factory=dict)
    #: real trials each ended search completed
    search_trials: Distribution = field(default_factory=lambda: Distribution(COUNT_BUCKETS))
    events: dict[str, int] = field(default_factory=dict)  #: events published, by kind
    failures: dict[str, int] = field(default_factory=dict)  #: failures, by kind
    # read in before shown (`SearcherService.read_stats`):
    running: int = 0  #: searches running now in this instance
    queued: int = 0  #: search requests waiting for their endpoint's running search or rollout
    completed: int = 0  #: searches this instance finished
    jobs_published: int = 0  #: trial jobs published
    trial_reports: int = 0  #: trial.completed reports handed to their search
    trials_waiting: int = 0  #: published jobs whose report is awaited now
    trials_missing: int = 0  #: jobs without a report by their deadline (nor one stored)
    #: profile.ready events by what they led to (`PROFILE_RESULTS`)
    profiles: dict[str, int] = field(default_factory=dict)
    consumers: dict[str, ConsumerStats] = field(default_factory=dict)  #: durable name -> its stats

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

    def all_failures(self) -> dict[str, int]:
        """Failures by kind, the trials missing their report included ("trial_missing")."""
        failures = dict(self.failures)
        if self.trials_missing:
            failures["trial_missing"] = self.trials_missing
        return failures

    def details(self) -> dict[str, Any]:
        """The searcher's state as `evertune status` shows it."""
        return {
            "searches_running": self.running,
            "searches_completed": self.completed,
            "jobs_published": self.jobs_published,
            "trial_reports": self.trial_reports,
            "profiles_skipped": self.profiles.get("skipped", 0),
            "profiles_queued": self.profiles.get("queued", 0),
        }
