"""Settings of the profiler service (`EVERTUNE_PROFILER_*`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ProfilerSettings(BaseSettings):
    """Settings of the profiler service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_PROFILER_", extra="ignore")

    #: Rows that make the telemetry sink insert a group at once.
    sink_batch_rows: int = Field(default=5000, ge=1, le=1_000_000)
    #: Longest wait, ms, between a group's first message and its insert.
    sink_flush_ms: float = Field(default=200.0, gt=0, le=60_000)
    #: Subjects the sink reads (within the TELEMETRY stream).
    sink_subject: str = Field(default="evertune.telemetry.>", min_length=1)
    #: Durable consumer name of the sink; profiler instances sharing it share the work.
    sink_durable: str = Field(default="profiler-sink", min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    #: Seconds before a telemetry message taken but not acked is redelivered.
    sink_ack_wait_s: float = Field(default=30.0, gt=0)
