"""The profiler service: telemetry sink into ClickHouse, workload profiles, bottleneck reports.

It owns the store: the host opens and migrates it before the profiler starts. `on_start` spawns the
telemetry sink (`evertune.profiler.sink`), a batching durable consumer of the TELEMETRY stream;
its status shows the rows and batches inserted and the last error. The profiles arrive with the
profile work (see docs/services/profiler.md).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar

from evertune.profiler.settings import ProfilerSettings
from evertune.profiler.sink import SinkConfig, TelemetrySink

from evertune.runtime import Service, ServiceContext
from evertune.store import Store


def sink_config(settings: ProfilerSettings, *, source: str = "profiler") -> SinkConfig:
    """The sink's configuration from the service's settings."""
    return SinkConfig(
        durable=settings.sink_durable,
        filter_subject=settings.sink_subject,
        batch_rows=settings.sink_batch_rows,
        flush_ms=settings.sink_flush_ms,
        ack_wait_s=settings.sink_ack_wait_s,
        source=source,
    )


class ProfilerService(Service):
    name: ClassVar[str] = "profiler"
    description: ClassVar[str] = "Telemetry sink into ClickHouse; workload profiles; bottleneck reports"
    needs_store: ClassVar[bool] = True

    def __init__(self, settings: ProfilerSettings) -> None:
        super().__init__()
        self.settings = settings
        self._store: Store | None = None
        self._store_url = ""
        self.sink: TelemetrySink | None = None

    async def on_start(self, ctx: ServiceContext) -> None:
        assert ctx.store is not None, "the host opens the store for services with needs_store"
        self._store = ctx.store
        self._store_url = ctx.shared.store_url
        self.sink = TelemetrySink(ctx.js, ctx.store, sink_config(self.settings, source=self.name))
        self.spawn(self.sink.run(self.stopping), name="telemetry-sink")

    def details(self) -> dict[str, Any]:
        sink = asdict(self.sink.stats) if self.sink else {}
        return {"store": self._store_url, "sink": sink}
