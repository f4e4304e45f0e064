"""Settings of the deployer service (`EVERTUNE_DEPLOYER_*`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class DeployerSettings(BaseSettings):
    """Settings of the deployer service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_DEPLOYER_", extra="ignore")

    #: Address of the EndpointService gRPC server.
    grpc_host: str = "127.0.0.1"
    #: gRPC port; 0 picks a free one.
    grpc_port: int = Field(default=50051, ge=0, le=65535)
