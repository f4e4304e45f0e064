"""Settings of the sla-monitor service (`EVERTUNE_SLA_MONITOR_*`)."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class SlaMonitorSettings(BaseSettings):
    """Settings of the sla-monitor service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_SLA_MONITOR_", extra="ignore")
