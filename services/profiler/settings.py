"""Settings of the profiler service (`EVERTUNE_PROFILER_*`)."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class ProfilerSettings(BaseSettings):
    """Settings of the profiler service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_PROFILER_", extra="ignore")
