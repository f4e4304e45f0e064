"""The sla-monitor service: live percentiles, burn-rate SLO alerts and workload drift.

Today it runs the shared lifecycle and answers the micro-service API; the monitors arrive with the
record/watch work (see docs/services/sla-monitor.md).
"""

from __future__ import annotations

from typing import ClassVar

from evertune.sla_monitor.settings import SlaMonitorSettings

from evertune.runtime import Service


class SlaMonitorService(Service):
    name: ClassVar[str] = "sla-monitor"
    description: ClassVar[str] = "Live TTFT percentiles, burn-rate SLO alerts, workload drift"

    def __init__(self, settings: SlaMonitorSettings) -> None:
        super().__init__()
        self.settings = settings
