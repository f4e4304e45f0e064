"""Settings of the runner service (`EVERTUNE_RUNNER_*`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class RunnerSettings(BaseSettings):
    """Settings of the runner service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_RUNNER_", extra="ignore")

    #: Hardware class this runner takes trial jobs for (`evertune.jobs.<hardware>`).
    hardware: str = Field(default="cpu", pattern=r"^[a-z0-9][a-z0-9_-]*$")
