"""`evertune status`: the running services and their state, from the NATS micro-service API."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from evertune.apps.cli.common import Commands, add_data_dir_flag, nats_url_for, shared_settings
from evertune.apps.cli.console import out_console, table
from evertune.apps.services import SERVICE_NAMES
from evertune.errors import Unavailable
from evertune.infra.bus import connect
from evertune.infra.bus.connection import redact
from evertune.infra.runtime.micro import InstanceStatus, discover
from evertune.infra.settings import NatsAuth


def add_commands(commands: Commands) -> None:
    """`evertune status`."""
    parser = commands.add_parser("status", help="list running services and their state")
    add_data_dir_flag(parser)
    parser.add_argument("--nats-url", default=None, help="ask this NATS instead of the data dir's")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--wait", type=float, default=1.0, help="seconds to wait for answers (default 1)")
    parser.set_defaults(func=status_command)


def status_command(args: argparse.Namespace) -> int:
    return status(data_dir=args.data_dir, nats_url=args.nats_url, as_json=args.json, wait_s=args.wait)


def status(*, data_dir: Path | None, nats_url: str | None, as_json: bool, wait_s: float) -> int:
    shared = shared_settings(data_dir, log_format="console")
    url = nats_url_for(shared, nats_url)
    found = asyncio.run(_discover(url, shared.connect_timeout_s, wait_s, shared.nats_auth()))
    if as_json:
        print(json.dumps({"nats_url": redact(url), "services": [asdict(s) for s in found]}))
    else:
        out_console().print(status_table(found))
    if not found:
        raise Unavailable(f"no evertune service answered on {redact(url)} within {wait_s:g} s")
    return 0


async def _discover(
    url: str, connect_timeout_s: float, wait_s: float, auth: NatsAuth | None = None
) -> list[InstanceStatus]:
    nc = await connect(url, name="evertune-status", connect_timeout_s=connect_timeout_s, auth=auth)
    try:
        return await discover(nc, wait_s=wait_s)
    finally:
        await nc.close()


def status_rows(found: list[InstanceStatus]) -> list[tuple[str, str, str, str, str]]:
    """(service, state, pid, started, details) a service instance, in the loop's order."""
    rank = {name: i for i, name in enumerate(SERVICE_NAMES)}
    return [
        (
            s.name,
            s.state,
            s.pid,
            s.started,
            " ".join(f"{k}={v}" for k, v in s.details.items() if v not in ({}, "", None)),
        )
        for s in sorted(found, key=lambda s: (rank.get(s.name, 99), s.id))
    ]


def status_table(found: list[InstanceStatus]) -> Table:
    """The running services as a table."""
    grid = table("SERVICE", "STATE", "PID", "STARTED (UTC)", "DETAILS")
    for row in status_rows(found):
        grid.add_row(*row)
    return grid
