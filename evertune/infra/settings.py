"""Settings shared by every service, and the loader that turns invalid settings into one line.

Each service has its own pydantic-settings class (`EVERTUNE_<SERVICE>_` prefix) in its package;
the shared one here uses the `EVERTUNE_` prefix. Both are loaded once at start with
`load_settings` and passed down explicitly: nothing reads the environment later.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from evertune.errors import InvalidArgument, SettingsError
from evertune.infra.outbound import OutboundPolicy, parse_networks

if TYPE_CHECKING:  # runtime imports this module
    from evertune.infra.runtime.tls import TlsFiles

DEFAULT_DATA_DIR = Path("~/.evertune").expanduser()
#: URL schemes a NATS server address may have.
NATS_SCHEMES = ("nats://", "tls://", "ws://", "wss://")


@dataclasses.dataclass(frozen=True)
class NatsAuth:
    """How one client logs in to NATS: user and password, and TLS (a CA to trust the server by; a
    client certificate and key for mutual TLS). All empty: no credentials, plain TCP."""

    user: str = ""
    password: str = dataclasses.field(default="", repr=False)
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None

    @property
    def tls(self) -> bool:
        return self.tls_ca_file is not None or self.tls_cert_file is not None


class SharedSettings(BaseSettings):
    """Settings every service and the CLI read (`EVERTUNE_*`)."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_", extra="ignore")

    #: Folder for the embedded NATS store, the chDB store, spools and reports.
    data_dir: Path = DEFAULT_DATA_DIR
    #: NATS servers, comma separated (`nats://host:4222,...`). Empty: `evertune up` starts an
    #: embedded nats-server; `evertune run` requires it.
    nats_url: str = ""
    #: `chdb:///<folder>` for the in-process engine or `http(s)://user:pass@host:port/` for a server.
    #: Empty: `chdb:///<data_dir>/clickhouse`.
    clickhouse_url: str = ""
    #: ClickHouse database that holds evertune's tables.
    clickhouse_database: str = "evertune"
    #: `json` lines (services), `console` (people), or `auto`: console when stderr is a terminal.
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: Seconds a stopping service waits for in-flight work before it gives up on it.
    shutdown_timeout_s: float = Field(default=10.0, gt=0, le=300)
    #: JetStream replicas for streams and buckets: 1 on one server, 3 on a cluster.
    nats_replicas: int = Field(default=1, ge=1, le=5)
    #: Seconds to wait for NATS at start before failing.
    connect_timeout_s: float = Field(default=5.0, gt=0, le=120)
    #: Internal networks (comma-separated CIDRs) alert URLs may reach: loopback, link-local (the
    #: cloud's metadata service), private and reserved addresses are refused otherwise. Empty: none,
    #: except loopback for the embedded single-machine setup (no `nats_url`). `evertune.infra.outbound`.
    alert_allowed_networks: str = ""
    #: NATS user and password of this service (docs/security.md, "NATS"); both or neither. Sent in
    #: plain text unless TLS is on, so refused with a NATS URL off loopback without TLS.
    nats_user: str = ""
    nats_password: SecretStr = SecretStr("")
    #: CA (PEM) the NATS server's certificate is checked against; setting it turns TLS on.
    nats_tls_ca_file: Path | None = None
    #: Client certificate and key (PEM) for mutual TLS; both or neither.
    nats_tls_cert_file: Path | None = None
    nats_tls_key_file: Path | None = None
    #: TLS of every service's metrics port (docs/security.md, "TLS"): certificate and key (PEM,
    #: both or neither), and a client CA for mutual TLS (only with them). None: plain HTTP.
    metrics_tls_cert_file: Path | None = None
    metrics_tls_key_file: Path | None = None
    metrics_tls_client_ca_file: Path | None = None

    def metrics_tls(self) -> TlsFiles:
        """The metrics ports' TLS files (`evertune.infra.runtime.tls`)."""
        from evertune.infra.runtime.tls import TlsFiles  # runtime imports this module

        return TlsFiles(
            self.metrics_tls_cert_file, self.metrics_tls_key_file, self.metrics_tls_client_ca_file
        )

    @model_validator(mode="after")
    def _metrics_tls(self) -> Self:
        from evertune.infra.runtime.tls import check_tls_settings  # runtime imports this module

        check_tls_settings(self.metrics_tls(), "EVERTUNE_METRICS_")
        return self

    @field_validator("nats_tls_ca_file", "nats_tls_cert_file", "nats_tls_key_file")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is not None and not value.expanduser().is_file():
            raise ValueError(f"{value} is not a readable file")
        return value.expanduser() if value is not None else None

    @model_validator(mode="after")
    def _nats_credentials(self) -> Self:
        password = self.nats_password.get_secret_value()
        if bool(self.nats_user) != bool(password):
            raise ValueError("set both EVERTUNE_NATS_USER and EVERTUNE_NATS_PASSWORD, or neither")
        if (self.nats_tls_cert_file is None) != (self.nats_tls_key_file is None):
            raise ValueError(
                "set both EVERTUNE_NATS_TLS_CERT_FILE and EVERTUNE_NATS_TLS_KEY_FILE, or neither"
            )
        from evertune.infra.runtime.auth import LOOPBACK_HOSTS  # runtime imports this module

        for server in filter(None, (s.strip() for s in self.nats_url.split(","))):
            split = urlsplit(server)
            if (
                not (self.nats_user or split.password)
                or self.nats_auth().tls
                or split.scheme in ("tls", "wss")
            ):
                continue
            if (split.hostname or "") not in LOOPBACK_HOSTS:
                raise ValueError(
                    f"the NATS password would cross the network in plain text to {split.hostname}:"
                    " set EVERTUNE_NATS_TLS_CA_FILE (or a tls:// URL)"
                )
        return self

    def nats_auth(self) -> NatsAuth:
        """The credentials and TLS files this process connects to NATS with."""
        return NatsAuth(
            user=self.nats_user,
            password=self.nats_password.get_secret_value(),
            tls_ca_file=self.nats_tls_ca_file,
            tls_cert_file=self.nats_tls_cert_file,
            tls_key_file=self.nats_tls_key_file,
        )

    @field_validator("nats_url")
    @classmethod
    def _nats_scheme(cls, value: str) -> str:
        for server in filter(None, (s.strip() for s in value.split(","))):
            if not server.startswith(NATS_SCHEMES):
                raise ValueError(f"{server!r} is not a NATS URL (nats://host:port)")
        return value

    @field_validator("clickhouse_url")
    @classmethod
    def _clickhouse_scheme(cls, value: str) -> str:
        if value and not value.startswith(("chdb://", "http://", "https://")):
            raise ValueError(f"{value!r} must start with chdb://, http:// or https://")
        return value

    @field_validator("alert_allowed_networks")
    @classmethod
    def _networks(cls, value: str) -> str:
        try:
            parse_networks(value)
        except InvalidArgument as err:
            raise ValueError(str(err)) from None
        return value

    def outbound_policy(self) -> OutboundPolicy:
        """Which internal networks alert URLs may reach (`evertune.infra.outbound`)."""
        return OutboundPolicy.from_setting(self.alert_allowed_networks, embedded=not self.nats_url)

    @property
    def store_url(self) -> str:
        """The ClickHouse URL in force: the setting, or the embedded default under the data dir."""
        return self.clickhouse_url or f"chdb://{self.data_dir.expanduser().resolve()}/clickhouse"


SettingsT = TypeVar("SettingsT", bound=BaseSettings)


def load_settings(cls: type[SettingsT], **overrides: Any) -> SettingsT:
    """Build `cls` from the environment (and explicit overrides), or raise a one-line `SettingsError`.

    The message names the first invalid setting by its environment variable.
    """
    try:
        return cls(**overrides)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        if not field:  # a check across settings: its message names them
            raise SettingsError(f"invalid settings: {first['msg']}") from None
        prefix = str(cls.model_config.get("env_prefix", ""))
        nested = str(cls.model_config.get("env_nested_delimiter") or ".")  # rollout.steps: ROLLOUT__STEPS
        variable = nested.join(str(part) for part in first["loc"])
        name = field if field in overrides else f"{prefix}{variable}".upper()
        raise SettingsError(f"invalid setting {name}: {first['msg']}") from None
