"""The deployer's TLS credentials for the core `GrpcServer` (which takes interceptors, credentials
and a message-size cap itself)."""

from __future__ import annotations

from pathlib import Path

import grpc

from evertune.errors import SettingsError


def server_credentials(cert_file: Path, key_file: Path) -> grpc.ServerCredentials:
    """TLS credentials from PEM files; a missing or unreadable file is a one-line SettingsError."""
    try:
        cert = cert_file.read_bytes()
        key = key_file.read_bytes()
    except OSError as err:
        raise SettingsError(f"cannot read TLS file {err.filename}: {err.strerror}") from None
    return grpc.ssl_server_credentials([(key, cert)])
