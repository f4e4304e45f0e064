"""What several commands share: settings with CLI overrides, signal handling, finding the stack."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Literal

from evertune.data_dir import read_runtime
from evertune.logging import configure_logging
from evertune.settings import SharedSettings, load_settings


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


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGINT and SIGTERM set `stop`; a second signal is ignored while shutdown runs."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


def nats_url_for(shared: SharedSettings, nats_url: str | None) -> str:
    """`--nats-url`, else `EVERTUNE_NATS_URL`, else the NATS of the `evertune up` on the data dir."""
    if nats_url:
        return nats_url
    if shared.nats_url:
        return shared.nats_url
    return read_runtime(shared.data_dir.expanduser()).nats_url
