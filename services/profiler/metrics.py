"""The profiler's Prometheus metrics, read from the sink's and the service's stats at scrape time.

Served on `EVERTUNE_PROFILER_METRICS_PORT` (9401; 0 a free port, -1 off). The table with every
metric's type, labels and meaning is in docs/services/profiler.md:

- the telemetry sink: histograms `evertune_profiler_sink_insert_seconds` and
  `evertune_profiler_sink_batch_rows`; counters `_rows_inserted_total`,
  `_redelivered_rows_skipped_total`, `_redelivered_messages_skipped_total`,
  `_records_set_aside_total`; gauge `_sink_rows_pending`;
- profiles: `evertune_profiler_profiles_built_total`, `_profile_build_seconds` (histogram),
  `_events_published_total{kind}`;
- `evertune_profiler_failures_total{kind}`: `insert_failed`, `profile_failed`;
- `evertune_profiler_messages_*{consumer}`: the sink's consumer (poison messages among them) and
  the drift.detected consumer (`consumer_metrics`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from evertune.infra.bus import ConsumerStats
from evertune.infra.runtime.metrics import (
    COUNT_BUCKETS,
    FAST_BUCKETS,
    Distribution,
    consumer_metrics,
    counter,
    gauge,
    histogram,
)

if TYPE_CHECKING:
    from evertune.profiler.service import ProfilerService


def profiler_metrics(service: ProfilerService) -> Iterator[Metric]:
    """The families of a profiler (see the module doc)."""
    sink = service.sink
    stats = sink.stats if sink is not None else None
    yield histogram(
        "evertune_profiler_sink_insert_seconds",
        "Seconds of one telemetry insert into the store",
        sink.insert_seconds if sink is not None else Distribution(FAST_BUCKETS),
    )
    yield histogram(
        "evertune_profiler_sink_batch_rows",
        "Rows of one telemetry insert",
        sink.batch_rows if sink is not None else Distribution(COUNT_BUCKETS),
    )
    yield counter(
        "evertune_profiler_rows_inserted_total", "Telemetry rows written", stats.rows_inserted if stats else 0
    )
    yield counter(
        "evertune_profiler_redelivered_rows_skipped_total",
        "Rows of redelivered messages found in the table already",
        stats.redelivered_rows_skipped if stats else 0,
    )
    yield counter(
        "evertune_profiler_redelivered_messages_skipped_total",
        "Messages delivered again after this sink had inserted them",
        stats.known_messages_skipped if stats else 0,
    )
    yield counter(
        "evertune_profiler_records_set_aside_total",
        "Records the table cannot hold (logged, not stored)",
        stats.records_set_aside if stats else 0,
    )
    yield gauge(
        "evertune_profiler_sink_rows_pending",
        "Rows taken from the bus, not yet inserted",
        stats.rows_pending if stats else 0,
    )
    if service.sink_pending is not None and sink is not None:
        yield gauge(
            "evertune_profiler_sink_consumer_pending",
            "TELEMETRY messages not yet delivered to the sink's durable consumer (read at each scrape)",
            {(sink.config.durable,): service.sink_pending},
            ["consumer"],
        )
    yield counter("evertune_profiler_profiles_built_total", "Profiles built and stored", service.built)
    yield histogram(
        "evertune_profiler_profile_build_seconds",
        "Seconds to build and store one profile",
        service.build_seconds,
    )
    yield counter(
        "evertune_profiler_events_published_total",
        "Events published, by kind",
        {("profile.ready",): service.published},
        ["kind"],
    )
    yield counter(
        "evertune_profiler_failures_total",
        "Failures, by kind",
        {("insert_failed",): stats.failed_inserts if stats else 0, ("profile_failed",): service.failed},
        ["kind"],
    )
    consumers: dict[str, ConsumerStats] = {}
    if stats is not None:
        consumers[service.settings.sink_durable] = ConsumerStats(
            acked=stats.messages_acked, retried=stats.retried, poisoned=stats.poisoned
        )
    if service.drift is not None:
        consumers[service.settings.drift_durable] = service.drift.stats
    yield from consumer_metrics("evertune_profiler", consumers)
