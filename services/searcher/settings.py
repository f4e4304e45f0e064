"""Settings of the searcher service (`EVERTUNE_SEARCHER_*`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SearcherSettings(BaseSettings):
    """Settings of the searcher service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_SEARCHER_", extra="ignore")

    #: Address of the SearchService gRPC server.
    grpc_host: str = "127.0.0.1"
    #: gRPC port; 0 picks a free one.
    grpc_port: int = Field(default=50052, ge=0, le=65535)
