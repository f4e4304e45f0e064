"""What several commands share: settings with CLI overrides, signal handling, finding the stack."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeAlias, cast

from evertune.client import Connection
from evertune.errors import EvertuneError, SettingsError
from evertune.infra.data_dir import read_runtime
from evertune.infra.logging import configure_logging
from evertune.infra.settings import DEFAULT_DATA_DIR, SharedSettings, load_settings
from evertune.v1 import endpoint_pb2

#: Search objectives by their CLI name ("goodput", "p50_ttft", "cost"), from the wire enum.
OBJECTIVES: dict[str, endpoint_pb2.SearchObjective] = {
    name.removeprefix("SEARCH_OBJECTIVE_").lower(): cast(endpoint_pb2.SearchObjective, number)
    for name, number in endpoint_pb2.SearchObjective.items()
    if number != endpoint_pb2.SEARCH_OBJECTIVE_UNSPECIFIED
}

#: The `evertune` parser's sub-commands: each command module adds its own with `add_commands`.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_data_dir_flag(parser: argparse.ArgumentParser) -> None:
    """`--data-dir`: the data directory of the stack the command talks to."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data directory (default: $EVERTUNE_DATA_DIR or ~/.evertune)",
    )


def shared_settings(
    data_dir: Path | None, *, log_format: Literal["auto", "json", "console"] | None = None
) -> SharedSettings:
    """Shared settings from the environment, `--data-dir` taking precedence; logging configured."""
    overrides: dict[str, object] = {}
    if data_dir is not None:
        overrides["data_dir"] = data_dir.expanduser().resolve()
    shared = load_settings(SharedSettings, **overrides)
    configure_logging(log_format or shared.log_format, shared.log_level)
    return shared


def stop_on_signals(stop: asyncio.Event, *, on_signal: Callable[[], None] | None = None) -> None:
    """SIGINT and SIGTERM set `stop` (after calling `on_signal`, when given); a second signal is
    ignored while shutdown runs.

    Signals reach the main thread only: a command run on another thread (called in-process, as
    the tests call it) installs nothing and stops by its own end (asyncio refuses a signal handler
    there)."""
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()

    def handle() -> None:
        if on_signal is not None:
            on_signal()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, handle)


def nats_url_for(shared: SharedSettings, nats_url: str | None) -> str:
    """`--nats-url`, else `EVERTUNE_NATS_URL`, else the NATS of the `evertune up` on the data dir."""
    if nats_url:
        return nats_url
    if shared.nats_url:
        return shared.nats_url
    return read_runtime(shared.data_dir.expanduser()).nats_url


def grpc_address(*, service: str, given: str | None, data_dir: Path | None, default: str) -> str:
    """Where `service`'s gRPC server listens: `given` (--address), else
    `EVERTUNE_<SERVICE>_ADDRESS`, else what a local `evertune up` on the data dir wrote in its
    runtime.json, else `default`."""
    if given:
        return given
    env = os.environ.get(f"EVERTUNE_{service.upper().replace('-', '_')}_ADDRESS", "")
    if env:
        return env
    folder = (data_dir or Path(os.environ.get("EVERTUNE_DATA_DIR", "") or DEFAULT_DATA_DIR)).expanduser()
    try:
        listen = read_runtime(folder).listen
    except EvertuneError:
        return default
    for part in listen.get(service, "").split(", "):  # e.g. "grpc 127.0.0.1:50051"
        kind, _, where = part.partition(" ")
        if kind == "grpc" and where:
            return where
    return default


#: The TLS flags of the gRPC commands, and the variables they fall back to (as `--token` does to
#: EVERTUNE_TOKEN).
TLS_FLAGS: dict[str, str] = {
    "tls_ca": "EVERTUNE_TLS_CA_FILE",
    "tls_cert": "EVERTUNE_TLS_CERT_FILE",
    "tls_key": "EVERTUNE_TLS_KEY_FILE",
}


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    """`--tls-ca`, `--tls-cert`, `--tls-key` (see `grpc_connection`)."""
    helps = {
        "tls_ca": "speak TLS, trusting this CA's PEM",
        "tls_cert": "client certificate (PEM) for mutual TLS",
        "tls_key": "its private key (PEM)",
    }
    for dest, variable in TLS_FLAGS.items():
        flag = "--" + dest.replace("_", "-")
        parser.add_argument(flag, type=Path, default=None, help=f"{helps[dest]} (default ${variable})")


def grpc_connection(args: argparse.Namespace, address: str) -> Connection:
    """The client connection the gRPC commands use: `address`, the bearer token (`--token`, else
    $EVERTUNE_TOKEN; none: no credentials), and TLS when a CA or a client certificate is given (each
    flag, else its variable: `TLS_FLAGS`; TLS without a CA trusts the system's roots). A client
    certificate and key come together; an unreadable file is a one-line error naming its flag."""
    files: dict[str, Path | None] = {}
    for dest, variable in TLS_FLAGS.items():
        given = getattr(args, dest, None) or os.environ.get(variable, "")
        files[dest] = Path(given).expanduser() if given else None
    if (files["tls_cert"] is None) != (files["tls_key"] is None):
        raise SettingsError("set both --tls-cert and --tls-key (or $EVERTUNE_TLS_CERT_FILE and _KEY_FILE)")
    for dest, path in files.items():
        if path is not None:  # said here, by the flag's name, rather than when the channel opens
            try:
                path.read_bytes()
            except OSError as err:
                raise SettingsError(
                    f"cannot read --{dest.replace('_', '-')} {path}: {err.strerror}"
                ) from None
    return Connection(
        address=address,
        token=getattr(args, "token", None) or os.environ.get("EVERTUNE_TOKEN", ""),
        tls_ca=files["tls_ca"],
        tls_cert=files["tls_cert"],
        tls_key=files["tls_key"],
    )
