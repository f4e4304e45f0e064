"""The profiler's stats (pure): one dataclass behind both `details()` and `/metrics`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from evertune.infra.bus import ConsumerStats
from evertune.infra.runtime.metrics import FunctionCollector
from evertune.profiler.metrics import profiler_metrics
from evertune.profiler.sink import SinkStats
from evertune.profiler.stats import ProfilerStats
from tests.metrics import Samples, samples_of, value


def _samples(stats: ProfilerStats) -> Samples:
    registry = CollectorRegistry()
    registry.register(FunctionCollector(lambda: profiler_metrics(stats)))
    return samples_of(generate_latest(registry).decode())


def test_a_profiler_not_started_shows_zeros() -> None:
    stats = ProfilerStats(sink_durable="sink", drift_durable="drift")
    assert stats.details() == {
        "store": "",
        "sink": {},
        "profiles": {"built": 0, "published": 0, "last_error": ""},
    }
    samples = _samples(stats)
    assert value(samples, "evertune_profiler_rows_inserted_total") == 0
    assert value(samples, "evertune_profiler_sink_insert_seconds_count") == 0
    assert value(samples, "evertune_profiler_failures_total", kind="insert_failed") == 0
    assert not any(name.startswith("evertune_profiler_messages_") for name, _ in samples)


def test_details_and_metrics_show_the_same_figures() -> None:
    stats = ProfilerStats(sink_durable="sink", drift_durable="drift", store="chdb:///x")
    stats.sink = SinkStats(
        rows_inserted=25, batches=1, messages_acked=3, retried=1, failed_inserts=2, poisoned=1
    )
    stats.drift = ConsumerStats(acked=4)
    stats.built, stats.failed, stats.published = 2, 1, 2
    stats.build_seconds.observe(0.2)
    stats.sink_pending = 7
    details = stats.details()
    assert details["store"] == "chdb:///x"
    assert details["sink"]["rows_inserted"] == 25 and details["sink"]["batches"] == 1
    assert details["profiles"] == {"built": 2, "published": 2, "last_error": ""}
    samples = _samples(stats)
    assert value(samples, "evertune_profiler_rows_inserted_total") == 25
    assert value(samples, "evertune_profiler_profiles_built_total") == 2
    assert value(samples, "evertune_profiler_profile_build_seconds_count") == 1
    assert value(samples, "evertune_profiler_events_published_total", kind="profile.ready") == 2
    assert value(samples, "evertune_profiler_failures_total", kind="insert_failed") == 2
    assert value(samples, "evertune_profiler_failures_total", kind="profile_failed") == 1
    assert value(samples, "evertune_profiler_sink_consumer_pending", consumer="sink") == 7
    assert value(samples, "evertune_profiler_messages_acked_total", consumer="sink") == 3
    assert value(samples, "evertune_profiler_messages_retried_total", consumer="sink") == 1
    assert value(samples, "evertune_profiler_messages_poisoned_total", consumer="sink") == 1
    assert value(samples, "evertune_profiler_messages_acked_total", consumer="drift") == 4
