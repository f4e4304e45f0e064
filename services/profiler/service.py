"""The profiler service: telemetry sink into ClickHouse, workload profiles, bottleneck reports.

It owns the store: the host opens and migrates it before the profiler starts, and its status
reports how many telemetry rows the store holds. The sink and the profiles arrive with the
record/watch and profile work (see docs/services/profiler.md).
"""

from __future__ import annotations

from typing import Any, ClassVar

from evertune.profiler.settings import ProfilerSettings

from evertune.runtime import Service, ServiceContext
from evertune.store import Store


class ProfilerService(Service):
    name: ClassVar[str] = "profiler"
    description: ClassVar[str] = "Telemetry sink into ClickHouse; workload profiles; bottleneck reports"
    needs_store: ClassVar[bool] = True

    def __init__(self, settings: ProfilerSettings) -> None:
        super().__init__()
        self.settings = settings
        self._store: Store | None = None
        self._store_url = ""

    async def on_start(self, ctx: ServiceContext) -> None:
        assert ctx.store is not None, "the host opens the store for services with needs_store"
        self._store = ctx.store
        self._store_url = ctx.shared.store_url

    def details(self) -> dict[str, Any]:
        return {"store": self._store_url}
