"""What the profiler is doing and what it counted, as plain data: one `ProfilerStats` per profiler.

The service counts its profiles as it builds and announces them (`built`, `failed`, `published`);
what other parts keep (the telemetry sink's counts and its inserts' distributions, the drift
consumer's counts) is read into it before it is shown (`ProfilerService.read_stats`). Two readers
render it, neither keeps figures of its own: `details()` is the profiler's state as `evertune
status` shows it, and `metrics.profiler_metrics` its Prometheus families.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from evertune.infra.bus import ConsumerStats
from evertune.infra.runtime.metrics import COUNT_BUCKETS, FAST_BUCKETS, Distribution
from evertune.profiler.sink import SinkStats


def _fast() -> Distribution:
    return Distribution(FAST_BUCKETS)


@dataclass
class ProfilerStats:
    """The profiler's state and counts (see the module doc)."""

    sink_durable: str  #: the telemetry sink's durable consumer
    drift_durable: str  #: the drift.detected consumer's durable
    store: str = ""  #: the store's URL (empty before start)
    built: int = 0  #: profiles built and stored
    failed: int = 0  #: profile builds that failed
    build_seconds: Distribution = field(default_factory=_fast)  #: seconds to build and store one
    published: int = 0  #: profile.ready events published
    last_error: str = ""  #: the most recent build or publish error
    sink: SinkStats | None = None  #: the telemetry sink's counts (None: not started)
    #: seconds of each successful telemetry insert (kept by the sink)
    insert_seconds: Distribution = field(default_factory=_fast)
    #: rows of each successful telemetry insert (kept by the sink)
    batch_rows: Distribution = field(default_factory=lambda: Distribution(COUNT_BUCKETS))
    #: TELEMETRY messages not yet delivered to the sink's durable, as of the last scrape (None:
    #: unknown, or no sink yet)
    sink_pending: int | None = None
    drift: ConsumerStats | None = None  #: the drift.detected consumer's counts (None: not started)

    def consumers(self) -> dict[str, ConsumerStats]:
        """The counts of the profiler's consumers by durable name (those started)."""
        consumers: dict[str, ConsumerStats] = {}
        if self.sink is not None:
            consumers[self.sink_durable] = ConsumerStats(
                acked=self.sink.messages_acked, retried=self.sink.retried, poisoned=self.sink.poisoned
            )
        if self.drift is not None:
            consumers[self.drift_durable] = self.drift
        return consumers

    def details(self) -> dict[str, Any]:
        """The profiler's state as `evertune status` shows it."""
        return {
            "store": self.store,
            "sink": asdict(self.sink) if self.sink is not None else {},
            "profiles": {"built": self.built, "published": self.published, "last_error": self.last_error},
        }
