"""The profiler's /metrics, scraped for real after real telemetry went through the sink into chDB
(and a poison message), on the session's nats-server."""

from __future__ import annotations

import uuid

from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import publish
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings
from evertune.infra.store import Store
from evertune.profiler import ProfilerService, ProfilerSettings
from tests.metrics import samples_of, scrape_text, types_of, value
from tests.profiler.helpers import batch
from tests.profiler.test_sink import db

__all__ = ["db"]


async def test_inserts_batches_rows_and_poison_are_scraped(
    nc: Client, js: JetStreamContext, db: Store
) -> None:
    name = uuid.uuid4().hex[:12]
    settings = ProfilerSettings(
        sink_subject=f"evertune.telemetry.t-{name}",
        sink_durable=f"t-{name}",
        sink_flush_ms=50.0,
        # its own drift consumer: other tests' drift.detected events stay in the session's stream
        drift_subject=f"evertune.events.drift.detected.t-{name}",
        drift_durable=f"drift-{name}",
    )
    service = ProfilerService(settings)
    await service.start(ServiceContext(shared=SharedSettings(), nc=nc, js=js, store=db))
    try:
        url = service.metrics_url()
        assert url and not url.endswith(":9401/metrics")  # tests take free ports
        first = batch(0, 25)
        await publish(js, settings.sink_subject, first, msg_id=first.batch_id)
        await eventually(lambda: service.sink is not None and service.sink.stats.rows_inserted == 25)
        second = batch(25, 10)
        await publish(js, settings.sink_subject, second, msg_id=second.batch_id)
        await publish(js, settings.sink_subject, b"\xff\xff not a batch", msg_id=uuid.uuid4().hex)
        await eventually(lambda: service.sink is not None and service.sink.stats.rows_inserted == 35)
        await eventually(lambda: service.sink is not None and service.sink.stats.poisoned == 1)
        text = await scrape_text(url)
    finally:
        await service.stop(5)
    samples = samples_of(text)
    types = types_of(text)
    assert types["evertune_profiler_sink_insert_seconds"] == "histogram"
    assert types["evertune_profiler_sink_batch_rows"] == "histogram"
    assert value(samples, "evertune_profiler_rows_inserted_total") == 35
    inserts = value(samples, "evertune_profiler_sink_insert_seconds_count")
    assert inserts == value(samples, "evertune_profiler_sink_batch_rows_count") >= 2  # a flush per batch
    assert 0 < value(samples, "evertune_profiler_sink_insert_seconds_sum") < 5 * inserts
    assert value(samples, "evertune_profiler_sink_batch_rows_sum") == 35
    assert value(samples, "evertune_profiler_sink_batch_rows_bucket", le="20.0") <= inserts - 1  # the 25
    assert value(samples, "evertune_profiler_sink_batch_rows_bucket", le="50.0") == inserts
    assert value(samples, "evertune_profiler_sink_rows_pending") == 0
    assert value(samples, "evertune_profiler_messages_acked_total", consumer=settings.sink_durable) == 2
    assert value(samples, "evertune_profiler_messages_poisoned_total", consumer=settings.sink_durable) == 1
    assert value(samples, "evertune_profiler_redelivered_rows_skipped_total") == 0
    assert value(samples, "evertune_profiler_failures_total", kind="insert_failed") == 0
    assert value(samples, "evertune_profiler_events_published_total", kind="profile.ready") == 0
    assert ("evertune_profiler_messages_acked_total", (("consumer", settings.drift_durable),)) in samples
