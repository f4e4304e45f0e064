"""Settings of the gateway service (`EVERTUNE_GATEWAY_*`)."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class GatewaySettings(BaseSettings):
    """Settings of the gateway service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_GATEWAY_", extra="ignore")
