"""Settings of the profiler service (`EVERTUNE_PROFILER_*`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from evertune.domain.workloads.prefix_reuse import HORIZON_S


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

    #: Telemetry window a profile covers, seconds back from now (a drift event's current window wins).
    window_s: float = Field(default=3600.0, gt=0, le=30 * 86400)
    #: Seconds between scheduled profiles of every endpoint with telemetry in the window; 0 = never.
    schedule_interval_s: float = Field(default=3600.0, ge=0)
    #: Tokens per block of the gateway's prefix hashes (keep equal to EVERTUNE_GATEWAY_PREFIX_BLOCK_TOKENS).
    prefix_block_tokens: int = Field(default=128, ge=1)
    #: A prompt block counts as reusable when it was sent at most this many seconds before.
    prefix_horizon_s: float = Field(default=HORIZON_S, gt=0)
    #: Most requests (the most recent of the window) the per-request figures and the trace cover.
    max_samples: int = Field(default=200_000, ge=1, le=5_000_000)
    #: Durable consumer name of the drift.detected consumer.
    drift_durable: str = Field(default="profiler-drift", min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    #: Subjects the drift consumer reads (within the EVENTS stream).
    drift_subject: str = Field(default="evertune.events.drift.detected.>", min_length=1)
    #: Request subject of on-demand profiles (core NATS request/reply, JSON).
    request_subject: str = Field(default="evertune.svc.profiler.profile", min_length=1)
    #: Scrape the deployments' vLLM /metrics (upstream_url from the deployments KV) for the report.
    scrape_engines: bool = True
    #: Seconds one /metrics scrape may take.
    scrape_timeout_s: float = Field(default=2.0, gt=0, le=60)
    #: KV bucket of deployments (keys `<endpoint>.<deployment>`, values `Deployment`).
    deployments_bucket: str = Field(default="deployments", min_length=1)
    #: Address the Prometheus `/metrics` server binds (`0.0.0.0` for a scraper on another host).
    metrics_host: str = "127.0.0.1"
    #: Port of the Prometheus `/metrics` server; 0 picks a free one (in the status), -1 = off.
    metrics_port: int = Field(default=9401, ge=-1, le=65535)
