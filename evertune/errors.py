"""Errors of the core package, and the one place that maps errors to gRPC statuses and HTTP codes.

Every error evertune raises on purpose derives from `EvertuneError` and carries a one-line message
meant for a person: the CLI prints it as it is, gRPC servers send it as the status detail.
"""

from __future__ import annotations

import grpc


class EvertuneError(Exception):
    """Base of every error evertune raises on purpose. `str(err)` is one line for a person."""

    #: gRPC status code a server answers with when this error escapes a handler.
    grpc_status: grpc.StatusCode = grpc.StatusCode.INTERNAL
    #: HTTP status code the gateway answers with.
    http_status: int = 500
    #: Process exit code of the CLI.
    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class SettingsError(EvertuneError):
    """A setting is missing or invalid; the message names it by its environment variable."""

    exit_code = 2


class InvalidArgument(EvertuneError):
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT
    http_status = 400


class NotFound(EvertuneError):
    grpc_status = grpc.StatusCode.NOT_FOUND
    http_status = 404


class AlreadyExists(EvertuneError):
    grpc_status = grpc.StatusCode.ALREADY_EXISTS
    http_status = 409


class FailedPrecondition(EvertuneError):
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION
    http_status = 409


class Unauthenticated(EvertuneError):
    grpc_status = grpc.StatusCode.UNAUTHENTICATED
    http_status = 401


class PermissionDenied(EvertuneError):
    """The caller is known but may not do this (e.g. act for another tenant)."""

    grpc_status = grpc.StatusCode.PERMISSION_DENIED
    http_status = 403


class DeadlineExceeded(EvertuneError):
    """The caller's deadline ran out before the work was done."""

    grpc_status = grpc.StatusCode.DEADLINE_EXCEEDED
    http_status = 504


class Unavailable(EvertuneError):
    """A dependency (NATS, the store, an engine) cannot be reached."""

    grpc_status = grpc.StatusCode.UNAVAILABLE
    http_status = 503


class BusUnavailable(Unavailable):
    """NATS cannot be reached or JetStream is not enabled."""


class StoreUnavailable(Unavailable):
    """The ClickHouse store cannot be opened or reached."""


class DataDirInUse(FailedPrecondition):
    """Another `evertune up` (or another process) holds the data directory."""


class ConflictError(FailedPrecondition):
    """A compare-and-set lost: the value changed since it was read."""
