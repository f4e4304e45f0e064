"""TLS of evertune's listeners, one way for all of them (the deployer's and the searcher's gRPC, the
gateway's HTTP, every service's metrics port).

Each service has three settings: `TLS_CERT_FILE` and `TLS_KEY_FILE` (PEM, both or neither) make its
port speak TLS only; `TLS_CLIENT_CA_FILE` (PEM, only with them) makes it mutual: a client must
present a certificate that CA signed, or the handshake fails. `ServerTls.of` reads them into gRPC
server credentials or an `ssl.SSLContext` (aiohttp); a missing, unreadable or invalid file is a
one-line `SettingsError` naming the setting. `check_exposure` is the rule for a listener off
loopback: it takes credentials (tokens, API keys), unless told to run open, and they never cross
the network in plaintext: without TLS it refuses to start, unless told that TLS is terminated in
front of it. The metrics ports
share one set, `EVERTUNE_METRICS_TLS_*` (`SharedSettings.metrics_tls`).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from evertune.errors import SettingsError
from evertune.infra.runtime.auth import LOOPBACK_HOSTS


class TlsSettings(Protocol):
    """The three TLS fields every listening service's settings have."""

    @property
    def tls_cert_file(self) -> Path | None: ...
    @property
    def tls_key_file(self) -> Path | None: ...
    @property
    def tls_client_ca_file(self) -> Path | None: ...


@dataclass(frozen=True)
class TlsFiles:
    """The three TLS settings of a listener, whatever the settings class names them."""

    tls_cert_file: Path | None
    tls_key_file: Path | None
    tls_client_ca_file: Path | None


def check_tls_settings(settings: TlsSettings, prefix: str) -> None:
    """Raise ValueError (for a settings validator) unless the cert and key are set together and the
    client CA only with them; `prefix` is the settings' env prefix (`EVERTUNE_SEARCHER_`)."""
    if (settings.tls_cert_file is None) != (settings.tls_key_file is None):
        raise ValueError(f"set both {prefix}TLS_CERT_FILE and {prefix}TLS_KEY_FILE, or neither")
    if settings.tls_client_ca_file is not None and settings.tls_cert_file is None:
        raise ValueError(
            f"{prefix}TLS_CLIENT_CA_FILE (mutual TLS) needs {prefix}TLS_CERT_FILE and _TLS_KEY_FILE"
        )


@dataclass(frozen=True)
class ServerTls:
    """A listener's TLS files; `client_ca_file` set: mutual TLS."""

    prefix: str  #: env prefix of the settings, to name them in errors
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    @classmethod
    def of(cls, settings: TlsSettings, prefix: str) -> ServerTls | None:
        """The settings' TLS, checked (every file read and parsed); None: plaintext."""
        if settings.tls_cert_file is None or settings.tls_key_file is None:
            return None
        tls = cls(prefix, settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
        tls.ssl_context()  # a bad file fails here, at start, in one line
        return tls

    @property
    def mutual(self) -> bool:
        return self.client_ca_file is not None

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """gRPC server credentials; with a client CA, client certificates are required."""
        return grpc.ssl_server_credentials(
            [(self._read(self.key_file, "TLS_KEY_FILE"), self._read(self.cert_file, "TLS_CERT_FILE"))],
            root_certificates=(
                self._read(self.client_ca_file, "TLS_CLIENT_CA_FILE") if self.client_ca_file else None
            ),
            require_client_auth=self.mutual,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """A server-side context (TLS 1.2+); with a client CA, client certificates are required."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as err:
            raise self._error("TLS_CERT_FILE", f"{self.cert_file} with key {self.key_file}", err) from None
        if self.client_ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.client_ca_file)
            except (OSError, ssl.SSLError) as err:
                raise self._error("TLS_CLIENT_CA_FILE", str(self.client_ca_file), err) from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def _read(self, path: Path, setting: str) -> bytes:
        try:
            return path.read_bytes()
        except OSError as err:
            raise self._error(setting, str(path), err) from None

    def _error(self, setting: str, what: str, err: Exception) -> SettingsError:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        return SettingsError(f"invalid setting {self.prefix}{setting}: cannot use {what}: {reason}")


def tls_mode(tls: ServerTls | None) -> str:
    """How a listener speaks, for logs: "off", "on" or "mutual"."""
    return "off" if tls is None else "mutual" if tls.mutual else "on"


@dataclass(frozen=True)
class Listener:
    """How a listener that takes credentials names its settings, for the one-line refusals."""

    prefix: str  #: the settings' env prefix, e.g. "EVERTUNE_SEARCHER_"
    host_setting: str  #: the address setting, e.g. "GRPC_HOST"
    credentials: str  #: what callers present, e.g. "tokens", "API keys"
    credentials_setting: str  #: where they are configured, e.g. "TOKEN_FILE"
    plaintext_setting: str  #: TLS is terminated in front, e.g. "ALLOW_PLAINTEXT_TOKENS"


def check_exposure(
    listener: Listener,
    *,
    host: str,
    has_credentials: bool,
    tls: bool,
    allow_unauthenticated: bool,
    allow_plaintext: bool,
) -> None:
    """Refuse to start (one line naming the settings) a listener off loopback that would take
    calls without credentials (unless `allow_unauthenticated`) or credentials in plaintext: no TLS,
    unless `allow_plaintext` says TLS is terminated in front (a mesh, a proxy)."""
    if host in LOOPBACK_HOSTS:
        return
    p = listener.prefix
    where = f"{p}{listener.host_setting}={host}"
    if not has_credentials and not allow_unauthenticated:
        raise SettingsError(
            f"invalid setting {p}{listener.credentials_setting}: no {listener.credentials} configured "
            f"while {where} is not loopback (set {listener.credentials}, bind 127.0.0.1, or "
            f"{p}ALLOW_UNAUTHENTICATED=true)"
        )
    if has_credentials and not tls and not allow_plaintext:
        raise SettingsError(
            f"invalid setting {p}TLS_CERT_FILE: {listener.credentials} would cross the network in "
            f"plaintext on {where} (set the TLS files, bind 127.0.0.1, or "
            f"{p}{listener.plaintext_setting}=true behind a TLS proxy)"
        )
