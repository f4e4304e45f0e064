"""The profiler's Prometheus metrics, rendered from its `ProfilerStats` (stats.py) at scrape time.

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

from prometheus_client.core import Metric

from evertune.infra.runtime.metrics import consumer_metrics, counter, gauge, histogram
from evertune.profiler.stats import ProfilerStats


def profiler_metrics(stats: ProfilerStats) -> Iterator[Metric]:
    """The families of a profiler's stats (see the module doc)."""
    sink = stats.sink
    yield histogram(
        "evertune_profiler_sink_insert_seconds",
        "Seconds of one telemetry insert into the store",
        stats.insert_seconds,
    )
    yield histogram("evertune_profiler_sink_batch_rows", "Rows of one telemetry insert", stats.batch_rows)
    yield counter(
        "evertune_profiler_rows_inserted_total", "Telemetry rows written", sink.rows_inserted if sink else 0
    )
    yield counter(
        "evertune_profiler_redelivered_rows_skipped_total",
        "Rows of redelivered messages found in the table already",
        sink.redelivered_rows_skipped if sink else 0,
    )
    yield counter(
        "evertune_profiler_redelivered_messages_skipped_total",
        "Messages delivered again after this sink had inserted them",
        sink.known_messages_skipped if sink else 0,
    )
    yield counter(
        "evertune_profiler_records_set_aside_total",
        "Records the table cannot hold (logged, not stored)",
        sink.records_set_aside if sink else 0,
    )
    yield gauge(
        "evertune_profiler_sink_rows_pending",
        "Rows taken from the bus, not yet inserted",
        sink.rows_pending if sink else 0,
    )
    if stats.sink_pending is not None and sink is not None:
        yield gauge(
            "evertune_profiler_sink_consumer_pending",
            "TELEMETRY messages not yet delivered to the sink's durable consumer (read at each scrape)",
            {(stats.sink_durable,): stats.sink_pending},
            ["consumer"],
        )
    yield counter("evertune_profiler_profiles_built_total", "Profiles built and stored", stats.built)
    yield histogram(
        "evertune_profiler_profile_build_seconds",
        "Seconds to build and store one profile",
        stats.build_seconds,
    )
    yield counter(
        "evertune_profiler_events_published_total",
        "Events published, by kind",
        {("profile.ready",): stats.published},
        ["kind"],
    )
    yield counter(
        "evertune_profiler_failures_total",
        "Failures, by kind",
        {("insert_failed",): sink.failed_inserts if sink else 0, ("profile_failed",): stats.failed},
        ["kind"],
    )
    yield from consumer_metrics("evertune_profiler", stats.consumers())
