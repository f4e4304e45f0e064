"""The sla-monitor service. `create` builds it from its settings (`EVERTUNE_SLA_MONITOR_*`)."""

from evertune.infra.settings import load_settings
from evertune.sla_monitor.service import SlaMonitorService
from evertune.sla_monitor.settings import SlaMonitorSettings


def create() -> SlaMonitorService:
    """Build the service from the environment; invalid settings raise a one-line SettingsError."""
    return SlaMonitorService(load_settings(SlaMonitorSettings))


__all__ = ["SlaMonitorService", "SlaMonitorSettings", "create"]
