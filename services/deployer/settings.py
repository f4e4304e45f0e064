"""Settings of the deployer service (`EVERTUNE_DEPLOYER_*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


class DeployerSettings(BaseSettings):
    """Settings of the deployer service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_DEPLOYER_", extra="ignore")

    #: Address of the EndpointService gRPC server.
    grpc_host: str = "127.0.0.1"
    #: gRPC port; 0 picks a free one.
    grpc_port: int = Field(default=50051, ge=0, le=65535)
    #: Largest request or response message, in bytes.
    max_message_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024, le=64 * 1024 * 1024)
    #: Token file: one `<token> <tenant>` per line (`*` = every tenant); see docs/services/deployer.md.
    token_file: Path | None = None
    #: Tokens in the same format, entries separated by commas (added to the file's).
    tokens: SecretStr = SecretStr("")
    #: Serve without tokens on a non-loopback address (never do this outside a closed network).
    allow_unauthenticated: bool = False
    #: TLS certificate chain (PEM); with `tls_key_file` the server speaks TLS only.
    tls_cert_file: Path | None = None
    #: TLS private key (PEM).
    tls_key_file: Path | None = Field(default=None, validate_default=True)
    #: Serving backend: "local" (engine processes on this machine).
    backend: Literal["local"] = "local"
    #: Hardware classes the local backend serves (an engine of kind "sim" also serves "sim-*").
    local_hardware_classes: list[str] = Field(default_factory=lambda: ["cpu"])
    #: Engine logs of the local backend; empty: `<data-dir>/deployer/engines`.
    engine_log_dir: Path | None = None
    #: Seconds a new deployment has to become ready before it is FAILED.
    ready_timeout_s: float = Field(default=600.0, gt=0)
    #: Seconds a replaced deployment gets to finish its in-flight requests before it is stopped.
    drain_timeout_s: float = Field(default=30.0, ge=0)
    #: Seconds between liveness checks of a running engine.
    health_interval_s: float = Field(default=2.0, gt=0)
    #: Restarts of one engine within `restart_window_s` before the deployment is FAILED.
    max_restarts: int = Field(default=3, ge=0)
    #: Window of `max_restarts`, in seconds.
    restart_window_s: float = Field(default=600.0, gt=0)

    @field_validator("tls_key_file")
    @classmethod
    def _tls_pair(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if (info.data.get("tls_cert_file") is None) != (value is None):
            raise ValueError(
                "set both EVERTUNE_DEPLOYER_TLS_CERT_FILE and EVERTUNE_DEPLOYER_TLS_KEY_FILE, or neither"
            )
        return value

    @property
    def loopback_only(self) -> bool:
        """Whether the gRPC server binds a loopback address only."""
        return self.grpc_host in LOOPBACK_HOSTS
